//! Task queue operations, each inside one transaction opened by the caller
//! — or, for a claim, a heartbeat and a completion, as one statement that
//! commits on its own (`PostgresBackend::single`: one round trip).
//!
//! The same rules as the SQLite store (`leasehold-sqlite/src/task.rs`),
//! with PostgreSQL's concurrency:
//!
//! - A claim is one statement ([`CLAIM_SQL`]): it returns the queue's
//!   expired claims to pending (or dead), each re-checked on the row it
//!   changes (still running, lease ended: no read-then-write gap; rows
//!   another session holds are skipped, not waited for), and claims the
//!   first task in claim order among the pending ones — chosen through the
//!   partial index `task_claim` with `FOR UPDATE SKIP LOCKED`, so
//!   concurrent claimers take different tasks and never wait for each
//!   other — and those it just returned.
//! - Heartbeat, complete and release are one token-scoped `UPDATE` each
//!   (the current token, still running, lease not ended on the server's
//!   clock); only when it matches nothing is the task read, to say why.
//! - When a task becomes claimable (added now or after a delay, retried
//!   after a failure) is computed from the server's clock, read in the
//!   transaction, as claims compare it — never from the client's.
//! - What makes a task claimable (added, handed back, failed with a retry,
//!   revived, reaped) also notifies the queue's waiters on commit.

use std::time::{Duration, SystemTime};

use leasehold_backend::task::{add_each, queue_stats};
use leasehold_backend::{
    Claim, LeaseName, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskClaimParams, TaskFail, TaskId,
    TaskListParams, TaskLost, TaskPage, TaskRef, TaskRetry, TaskState, TaskUpdate, Token, Watched, duration_millis,
    signed, stored_millis,
};
use postgres::Row;
use postgres::types::ToSql;

use crate::clock::{NOW, micros, plus, until};
use crate::db::{Db, Error, Result};
use crate::notify;

fn json_text(v: &serde_json::Value) -> String {
    serde_json::to_string(v).expect("a JSON value always serializes")
}

fn parse_json(what: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::BadRow(format!("unreadable {what} in the task table: {e}")))
}

fn name(what: &str, s: &str) -> Result<LeaseName> {
    LeaseName::stored(s).map_err(|_| Error::BadRow(format!("invalid {what} {s:?} in the task table")))
}

const TASK_COLUMNS: &str = "queue, id, payload::text, priority, state, attempts, max_attempts, token, owner, \
     available_at, lease_until, expirations, failures, last_error, result::text, created_at, updated_at, ttl_ms";

fn read_task(r: &Row, now: SystemTime) -> Result<Task> {
    let queue = name("queue name", r.get::<_, &str>(0))?;
    let id = name("task id", r.get::<_, &str>(1))?;
    let state: String = r.get(4);
    let state =
        TaskState::parse(&state).ok_or_else(|| Error::BadRow(format!("task {id} has an unknown state {state:?}")))?;
    let payload = parse_json("payload", r.get(2))?;
    let result = r
        .get::<_, Option<&str>>(14)
        .map(|t| parse_json("result", t))
        .transpose()?;
    let lease_remaining = match (state, r.get::<_, Option<SystemTime>>(10)) {
        (TaskState::Running, Some(u)) => Some(until(u, now)),
        (TaskState::Running, None) => Some(Duration::ZERO),
        _ => None,
    };
    Ok(Task {
        queue,
        id,
        payload,
        priority: r.get(3),
        state,
        attempts: r.get::<_, i32>(5) as u32,
        max_attempts: r.get::<_, i32>(6) as u32,
        token: Token(r.get::<_, i64>(7) as u64),
        owner: r.get(8),
        available_at: r.get(9),
        lease_remaining,
        expirations: r.get::<_, i32>(11) as u32,
        failures: r.get::<_, i32>(12) as u32,
        last_error: r.get(13),
        result,
        created_at: r.get(15),
        updated_at: r.get(16),
        claim_ttl: r.get::<_, Option<i64>>(17).map(stored_millis),
    })
}

pub(crate) fn get(db: &mut Db<'_>, queue: &QueueName, id: &TaskId) -> Result<Option<Task>> {
    let now = db.now()?;
    get_at(db, now, queue, id)
}

fn get_at(db: &mut Db<'_>, now: SystemTime, queue: &QueueName, id: &TaskId) -> Result<Option<Task>> {
    db.query_opt(
        &format!("SELECT {TASK_COLUMNS} FROM task WHERE queue = $1 AND id = $2"),
        &[&queue.as_str(), &id.as_str()],
    )?
    .map(|r| read_task(&r, now))
    .transpose()
}

/// Add tasks; returns the outcomes and whether to commit (no conflict).
pub(crate) fn add(db: &mut Db<'_>, tasks: &[TaskAddParams]) -> Result<(Vec<TaskAdd>, bool)> {
    let now = db.now()?;
    add_each(tasks, |t| {
        let inserted = db.execute(
            "INSERT INTO task (queue, id, payload, priority, state, max_attempts, available_at, created_at, updated_at) \
             VALUES ($1, $2, $3::text::jsonb, $4, 'pending', $5, $6, $7, $7) ON CONFLICT (queue, id) DO NOTHING",
            &[
                &t.queue.as_str(),
                &t.id.as_str(),
                &json_text(&t.payload),
                &t.priority,
                &(t.max_attempts.min(i32::MAX as u32) as i32),
                &t.available.at(now),
                &now,
            ],
        )?;
        if inserted == 1 {
            db.notify(&Watched::Queue(t.queue.clone()))?;
            return Ok(None);
        }
        get_at(db, now, &t.queue, &t.id)?
            .map(Some)
            .ok_or_else(|| Error::BadRow("conflicting task vanished".into()))
    })
}

/// A claim, in one statement: return the expired claims of `$1` to
/// pending (or to dead when their attempts are used up) and claim the
/// first claimable task in claim order — among the pending ones and those
/// just returned — for owner `$2`, lease `$3` µs, TTL `$4` ms; notify the
/// queue's waiters (channel `$5`, payload `$6`) when any claim expired.
///
/// The same as returning the expired claims first and then claiming in the
/// same transaction (which is what it was, in two statements and a
/// transaction: four round trips where this is one): an expired claim
/// that goes back to pending competes in claim order with the pending
/// tasks, and is claimed directly when it comes first. Expired claims are
/// locked `SKIP LOCKED` and re-checked on their newest version, so a
/// heartbeat that just extended one keeps it; the pending candidate is the
/// first one no other session holds.
const CLAIM_SQL: &str = "\
WITH n AS MATERIALIZED (SELECT {NOW} AS now), \
expired AS ( \
    SELECT t.seq, t.priority, t.available_at, t.attempts < t.max_attempts AS back \
    FROM task t, n WHERE t.queue = $1 AND t.state = 'running' AND t.lease_until <= n.now \
    FOR UPDATE OF t SKIP LOCKED), \
pending AS ( \
    SELECT t.seq, t.priority, t.available_at FROM task t, n \
    WHERE t.queue = $1 AND t.state = 'pending' AND t.available_at <= n.now \
    ORDER BY t.priority DESC, t.available_at, t.seq LIMIT 1 \
    FOR UPDATE OF t SKIP LOCKED), \
pick AS ( \
    SELECT c.seq FROM ( \
        SELECT seq, priority, available_at FROM pending \
        UNION ALL SELECT e.seq, e.priority, e.available_at FROM expired e, n WHERE e.back AND e.available_at <= n.now \
    ) c ORDER BY c.priority DESC, c.available_at, c.seq LIMIT 1), \
changed AS ( \
    UPDATE task SET \
        state = CASE WHEN c.claimed THEN 'running' WHEN task.attempts >= task.max_attempts THEN 'dead' ELSE 'pending' END, \
        attempts = task.attempts + CASE WHEN c.claimed THEN 1 ELSE 0 END, \
        token = task.token + CASE WHEN c.claimed THEN 1 ELSE 0 END, \
        owner = CASE WHEN c.claimed THEN $2 ELSE task.owner END, \
        lease_until = CASE WHEN c.claimed THEN n.now + $3::bigint * interval '1 microsecond' END, \
        ttl_ms = CASE WHEN c.claimed THEN $4 ELSE task.ttl_ms END, \
        updated_at = n.now, \
        expirations = task.expirations + CASE WHEN c.expired THEN 1 ELSE 0 END, \
        last_error = CASE WHEN c.expired THEN 'claim expired: the worker ' || coalesce(task.owner, '?') \
            || ' stopped heartbeating (attempt ' || task.attempts || ' of ' || task.max_attempts || ')' \
            ELSE task.last_error END \
    FROM n, ( \
        SELECT u.seq, bool_or(u.claimed) AS claimed, bool_or(u.expired) AS expired FROM ( \
            SELECT seq, false AS claimed, true AS expired FROM expired \
            UNION ALL SELECT seq, true, false FROM pick) u \
        GROUP BY u.seq) c \
    WHERE task.seq = c.seq \
    RETURNING c.claimed, c.expired, task.id, task.payload::text, task.attempts, task.max_attempts, task.token), \
woken AS ( \
    SELECT pg_notify($5, $6) FROM (SELECT 1 FROM changed WHERE expired LIMIT 1) x) \
SELECT id, payload, attempts, max_attempts, token, (SELECT count(*) FROM woken) \
FROM (SELECT 1) AS one LEFT JOIN changed ON changed.claimed";

/// [`CLAIM_SQL`] with the store's now spelled out.
fn claim_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| CLAIM_SQL.replace("{NOW}", NOW))
}

pub(crate) fn claim(db: &mut Db<'_>, p: &TaskClaimParams) -> Result<Option<Claim>> {
    let channel = db.channel().to_owned();
    let row = db.query_one(
        claim_sql(),
        &[
            &p.queue.as_str(),
            &p.owner,
            &micros(p.ttl),
            &signed(duration_millis(p.ttl)),
            &channel,
            &notify::payload(&Watched::Queue(p.queue.clone())),
        ],
    )?;
    let Some(id) = row.get::<_, Option<&str>>(0) else {
        return Ok(None);
    };
    Ok(Some(Claim {
        queue: p.queue.clone(),
        id: name("task id", id)?,
        payload: parse_json("payload", row.get(1))?,
        attempt: row.get::<_, i32>(2) as u32,
        max_attempts: row.get::<_, i32>(3) as u32,
        token: Token(row.get::<_, i64>(4) as u64),
        ttl: p.ttl,
    }))
}

/// The condition naming a live claim: `$1` queue, `$2` id, `$3` token.
const LIVE_CLAIM: &str = "queue = $1 AND id = $2 AND token = $3 AND state = 'running' AND lease_until > n.now";

/// Why a token-scoped update matched nothing.
fn lost(db: &mut Db<'_>, task: &TaskRef) -> Result<TaskLost> {
    let found = db
        .query_opt(
            "SELECT 1 FROM task WHERE queue = $1 AND id = $2",
            &[&task.queue.as_str(), &task.id.as_str()],
        )?
        .is_some();
    Ok(if found { TaskLost::Stale } else { TaskLost::NotFound })
}

fn key(task: &TaskRef) -> (&str, &str, i64) {
    (task.queue.as_str(), task.id.as_str(), task.token.0 as i64)
}

fn update_live_sql(set: &str) -> String {
    format!("UPDATE task SET {set} FROM (SELECT {NOW} AS now) AS n WHERE {LIVE_CLAIM}")
}

/// What `complete` sets.
const COMPLETE_SET: &str = "state = 'done', result = $4::text::jsonb, lease_until = NULL, updated_at = n.now";

/// Run a token-scoped `UPDATE task SET {set} ... WHERE {LIVE_CLAIM}` whose
/// extra parameters start at `$4`.
fn update_live(
    db: &mut Db<'_>,
    task: &TaskRef,
    set: &str,
    extra: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<TaskUpdate> {
    let (queue, id, token) = key(task);
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&queue, &id, &token];
    params.extend_from_slice(extra);
    let n = db.execute(&update_live_sql(set), &params)?;
    if n == 1 {
        Ok(TaskUpdate::Applied)
    } else {
        Ok(TaskUpdate::Lost(lost(db, task)?))
    }
}

pub(crate) fn heartbeat(db: &mut Db<'_>, task: &TaskRef, ttl: Duration) -> Result<TaskUpdate> {
    // Not `updated_at`: a heartbeat extends the claim without changing the
    // task, so a running task's `updated_at` stays the time of its claim
    // (`Task::claimed_at`).
    update_live(
        db,
        task,
        "lease_until = n.now + $4::bigint * interval '1 microsecond'",
        &[&micros(ttl)],
    )
}

pub(crate) fn complete(db: &mut Db<'_>, task: &TaskRef, result: Option<&serde_json::Value>) -> Result<TaskUpdate> {
    update_live(db, task, COMPLETE_SET, &[&result.map(json_text)])
}

/// Whether `task` is done by the claim of exactly this token: the re-check
/// after a commit whose outcome is unknown.
pub(crate) fn completed_by(db: &mut Db<'_>, task: &TaskRef) -> Result<bool> {
    let (queue, id, token) = key(task);
    Ok(db
        .query_opt(
            "SELECT 1 FROM task WHERE queue = $1 AND id = $2 AND token = $3 AND state = 'done'",
            &[&queue, &id, &token],
        )?
        .is_some())
}

pub(crate) fn fail(db: &mut Db<'_>, task: &TaskRef, error: &str, retry: Retry) -> Result<TaskFail> {
    let (queue, id, token) = key(task);
    // Lock the live claim's row: the backoff depends on its attempts.
    let row = db.query_opt(
        &format!(
            "SELECT seq, attempts, max_attempts, n.now FROM task, (SELECT {NOW} AS now) AS n \
             WHERE {LIVE_CLAIM} FOR UPDATE OF task"
        ),
        &[&queue, &id, &token],
    )?;
    let Some(row) = row else {
        return Ok(TaskFail::Lost(lost(db, task)?));
    };
    let (seq, attempts, max_attempts, now): (i64, i32, i32, SystemTime) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let entropy = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos().into())
        ^ seq as u64;
    let (state, available_at) = match retry.delay(attempts as u32, max_attempts as u32, entropy) {
        None => ("dead", None),
        Some(d) => ("pending", Some(plus(now, d))),
    };
    db.execute(
        "UPDATE task SET state = $2, failures = failures + 1, last_error = $3, \
         available_at = coalesce($4, available_at), lease_until = NULL, updated_at = $5 WHERE seq = $1",
        &[&seq, &state, &error, &available_at, &now],
    )?;
    if available_at.is_some() {
        db.notify(&Watched::Queue(task.queue.clone()))?;
    }
    Ok(match available_at {
        Some(available_at) => TaskFail::Retrying { available_at },
        None => TaskFail::Dead,
    })
}

pub(crate) fn release(db: &mut Db<'_>, task: &TaskRef) -> Result<TaskUpdate> {
    // Not charged: the attempt count goes back; the token does not.
    let update = update_live(
        db,
        task,
        "state = 'pending', attempts = attempts - 1, lease_until = NULL, updated_at = n.now",
        &[],
    )?;
    if update == TaskUpdate::Applied {
        db.notify(&Watched::Queue(task.queue.clone()))?;
    }
    Ok(update)
}

pub(crate) fn retry(db: &mut Db<'_>, queue: &QueueName, id: &TaskId) -> Result<TaskRetry> {
    let row = db.query_opt(
        &format!(
            "WITH t AS (SELECT seq, state FROM task WHERE queue = $1 AND id = $2 FOR UPDATE), \
             u AS (UPDATE task SET state = 'pending', attempts = 0, available_at = {NOW}, updated_at = {NOW} \
                   FROM t WHERE task.seq = t.seq AND t.state = 'dead' RETURNING 1) \
             SELECT t.state, EXISTS (SELECT 1 FROM u) FROM t"
        ),
        &[&queue.as_str(), &id.as_str()],
    )?;
    let Some(row) = row else { return Ok(TaskRetry::NotFound) };
    if row.get(1) {
        db.notify(&Watched::Queue(queue.clone()))?;
        return Ok(TaskRetry::Revived);
    }
    let state: String = row.get(0);
    let state = TaskState::parse(&state).ok_or_else(|| Error::BadRow(format!("unknown task state {state:?}")))?;
    Ok(TaskRetry::NotDead(state))
}

/// A page of one queue's tasks of one state by key ([`TaskPage`]): as in
/// the SQLite store, the tasks after a key in list order are three ranges
/// of the index (the key's priority and time with a later seq, its
/// priority with a later time, lower priorities), each read as a seek in
/// index order until the page is full; pages before a key and the last
/// page read them backwards and turn the result around.
pub(crate) fn list_page(
    db: &mut Db<'_>,
    queue: &QueueName,
    state: TaskState,
    page: &TaskPage,
    limit: u32,
) -> Result<Vec<Task>> {
    const FORWARD: &str = "priority DESC, available_at, seq";
    const BACKWARD: &str = "priority, available_at DESC, seq DESC";
    let now = db.now()?;
    // Pending tasks come off the claim index, whose predicate must be
    // written out to match; the others through the state index.
    let state_is = if state == TaskState::Pending {
        "state = 'pending' AND $2::text IS NOT NULL"
    } else {
        "state = $2"
    };
    let base = format!("SELECT {TASK_COLUMNS} FROM task WHERE queue = $1 AND {state_is}");
    let (queue, state) = (queue.as_str(), state.as_str());
    let limit = i64::from(limit);
    let mut out: Vec<Task> = Vec::new();
    let read =
        |db: &mut Db<'_>, out: &mut Vec<Task>, range: &str, order: &str, key: &[&(dyn ToSql + Sync)]| -> Result<()> {
            let left = limit - i64::try_from(out.len()).unwrap_or(i64::MAX);
            if left <= 0 {
                return Ok(());
            }
            let sql = format!("{base}{range} ORDER BY {order} LIMIT ${}", key.len() + 3);
            let mut bound: Vec<&(dyn ToSql + Sync)> = vec![&queue, &state];
            bound.extend_from_slice(key);
            bound.push(&left);
            for row in db.query(&sql, &bound)? {
                out.push(read_task(&row, now)?);
            }
            Ok(())
        };
    match page {
        TaskPage::Last => {
            read(db, &mut out, "", BACKWARD, &[])?;
            out.reverse();
        }
        TaskPage::After(key) | TaskPage::Before(key) => {
            let after = matches!(page, TaskPage::After(_));
            let seq: Option<i64> = db
                .query_opt(
                    "SELECT seq FROM task WHERE queue = $1 AND id = $2",
                    &[&queue, &key.id.as_str()],
                )?
                .map(|r| r.get(0));
            // A key whose task is gone: every task tying with it on
            // priority and time is listed (a repeat, never a skip).
            let seq = seq.unwrap_or(if after { -1 } else { i64::MAX });
            let (priority, at) = (key.priority, key.available_at);
            if after {
                read(
                    db,
                    &mut out,
                    " AND priority = $3 AND available_at = $4 AND seq > $5",
                    "seq",
                    &[&priority, &at, &seq],
                )?;
                read(
                    db,
                    &mut out,
                    " AND priority = $3 AND available_at > $4",
                    "available_at, seq",
                    &[&priority, &at],
                )?;
                read(db, &mut out, " AND priority < $3", FORWARD, &[&priority])?;
            } else {
                read(
                    db,
                    &mut out,
                    " AND priority = $3 AND available_at = $4 AND seq < $5",
                    "seq DESC",
                    &[&priority, &at, &seq],
                )?;
                read(
                    db,
                    &mut out,
                    " AND priority = $3 AND available_at < $4",
                    "available_at DESC, seq DESC",
                    &[&priority, &at],
                )?;
                read(db, &mut out, " AND priority > $3", BACKWARD, &[&priority])?;
                out.reverse();
            }
        }
    }
    Ok(out)
}

pub(crate) fn list(db: &mut Db<'_>, p: &TaskListParams) -> Result<Vec<Task>> {
    let now = db.now()?;
    // One queue and one state (the status page's lists): the same order
    // without the OR-of-parameters, so a page of pending tasks comes off
    // the claim index (its predicate must be written out to match) and
    // other states through the state index, however long the queue.
    let sql = match (&p.queue, p.state) {
        (Some(_), Some(TaskState::Pending)) => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE queue = $1 AND state = 'pending' AND $2::text IS NOT NULL \
             ORDER BY priority DESC, available_at, seq LIMIT $3"
        ),
        (Some(_), Some(_)) => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE queue = $1 AND state = $2 \
             ORDER BY priority DESC, available_at, seq LIMIT $3"
        ),
        _ => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR state = $2) \
             ORDER BY queue, CASE state WHEN 'pending' THEN 0 WHEN 'running' THEN 1 WHEN 'dead' THEN 2 ELSE 3 END, \
             priority DESC, available_at, seq LIMIT $3"
        ),
    };
    db.query(
        &sql,
        &[
            &p.queue.as_ref().map(QueueName::as_str),
            &p.state.map(TaskState::as_str),
            &i64::from(p.limit),
        ],
    )?
    .iter()
    .map(|r| read_task(r, now))
    .collect()
}

pub(crate) fn stats(db: &mut Db<'_>, queue: Option<&QueueName>) -> Result<Vec<QueueStats>> {
    let rows = db.query(
        "SELECT queue, state, count(*) FROM task WHERE ($1::text IS NULL OR queue = $1) \
         GROUP BY queue, state ORDER BY queue",
        &[&queue.map(QueueName::as_str)],
    )?;
    let mut counts = Vec::new();
    for row in rows {
        let q = name("queue name", row.get::<_, &str>(0))?;
        let state: String = row.get(1);
        let state = TaskState::parse(&state).ok_or_else(|| Error::BadRow(format!("unknown task state {state:?}")))?;
        counts.push((q, state, row.get::<_, i64>(2) as u64));
    }
    Ok(queue_stats(counts))
}

pub(crate) fn purge(db: &mut Db<'_>, queue: &QueueName, state: TaskState, older_than: Duration) -> Result<u64> {
    db.execute(
        &format!(
            "DELETE FROM task WHERE queue = $1 AND state = $2 AND state IN ('done', 'dead') AND updated_at < {NOW} - $3::bigint * interval '1 microsecond'"
        ),
        &[&queue.as_str(), &state.as_str(), &micros(older_than)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_sql::{statements, substitute};

    /// `bench/task.sql`, which pgbench runs as the reference, holds the
    /// very statements a claim and a completion send (parameters spelled
    /// as its literals and variables).
    #[test]
    fn the_pgbench_reference_runs_the_same_statements() {
        let claim = substitute(
            claim_sql(),
            &[
                "'pgbench'",
                "'bench'",
                "60000000",
                "60000",
                "'leasehold.bench'",
                r"E'queue\x3apgbench'",
            ],
        );
        let complete = substitute(&update_live_sql(COMPLETE_SET), &["'pgbench'", ":id", ":token", "NULL"]);
        assert_eq!(
            statements(include_str!("../bench/task.sql")),
            [
                statements(&claim)[0].clone() + " \\gset",
                statements(&complete)[0].clone()
            ]
        );
    }
}
