//! Task queue operations, each inside one transaction opened by the caller.
//!
//! The same rules as the SQLite store (`leasehold-sqlite/src/task.rs`),
//! with PostgreSQL's concurrency:
//!
//! - A claim is one `UPDATE` of the first pending task in claim order,
//!   chosen through the partial index `task_claim` with `FOR UPDATE SKIP
//!   LOCKED`: concurrent claimers take different tasks and never wait for
//!   each other.
//! - Expired claims are returned to the queue by the claimer, in one
//!   `UPDATE` whose condition (still running, lease ended) is re-checked on
//!   the row it changes — no read-then-write gap, and rows another session
//!   holds are skipped, not waited for.
//! - Heartbeat, complete and release are one token-scoped `UPDATE` each
//!   (the current token, still running, lease not ended on the server's
//!   clock); only when it matches nothing is the task read, to say why.
//! - When a task becomes claimable (added now or after a delay, retried
//!   after a failure) is computed from the server's clock, read in the
//!   transaction, as claims compare it — never from the client's.
//! - What makes a task claimable (added, handed back, failed with a retry,
//!   revived, reaped) also notifies the queue's waiters on commit.

use std::time::{Duration, SystemTime};

use leasehold_backend::task::backoff;
use leasehold_backend::{
    Claim, LeaseName, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskClaimParams, TaskFail, TaskId,
    TaskListParams, TaskLost, TaskRef, TaskRetry, TaskState, TaskUpdate, Token, Watched, duration_millis, signed,
    stored_millis,
};
use postgres::Row;

use crate::{Db, Error, NOW, Result, micros, plus, until};

fn json_text(v: &serde_json::Value) -> String {
    serde_json::to_string(v).expect("a JSON value always serializes")
}

fn parse_json(what: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::BadRow(format!("unreadable {what} in the task table: {e}")))
}

fn name(what: &str, s: &str) -> Result<LeaseName> {
    LeaseName::new(s).map_err(|_| Error::BadRow(format!("invalid {what} {s:?} in the task table")))
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
    let mut outcomes = Vec::with_capacity(tasks.len());
    let mut clean = true;
    for t in tasks {
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
            outcomes.push(TaskAdd::Added);
            continue;
        }
        let existing =
            get_at(db, now, &t.queue, &t.id)?.ok_or_else(|| Error::BadRow("conflicting task vanished".into()))?;
        if existing.payload == t.payload {
            outcomes.push(TaskAdd::Exists);
        } else {
            clean = false;
            outcomes.push(TaskAdd::Conflict {
                existing: Box::new(existing),
            });
        }
    }
    Ok((outcomes, clean))
}

/// Return expired claims of `queue` to pending, or to dead when their
/// attempts are used up.
fn reap(db: &mut Db<'_>, queue: &QueueName) -> Result<()> {
    let reaped = db.execute(
        &format!(
            "UPDATE task SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, \
             expirations = expirations + 1, lease_until = NULL, updated_at = {NOW}, \
             last_error = 'claim expired: the worker ' || coalesce(owner, '?') || ' stopped heartbeating (attempt ' \
                 || attempts || ' of ' || max_attempts || ')' \
             WHERE seq IN (SELECT seq FROM task WHERE queue = $1 AND state = 'running' AND lease_until <= {NOW} \
                           FOR UPDATE SKIP LOCKED) \
               AND state = 'running' AND lease_until <= {NOW}"
        ),
        &[&queue.as_str()],
    )?;
    if reaped > 0 {
        db.notify(&Watched::Queue(queue.clone()))?;
    }
    Ok(())
}

pub(crate) fn claim(db: &mut Db<'_>, p: &TaskClaimParams) -> Result<Option<Claim>> {
    reap(db, &p.queue)?;
    let row = db.query_opt(
        &format!(
            "UPDATE task SET state = 'running', attempts = attempts + 1, token = token + 1, owner = $2, \
             lease_until = n.now + $3::bigint * interval '1 microsecond', updated_at = n.now, ttl_ms = $4 \
             FROM (SELECT {NOW} AS now) AS n \
             WHERE seq = (SELECT seq FROM task WHERE queue = $1 AND state = 'pending' AND available_at <= {NOW} \
                          ORDER BY priority DESC, available_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id, payload::text, attempts, max_attempts, token"
        ),
        &[
            &p.queue.as_str(),
            &p.owner,
            &micros(p.ttl),
            &signed(duration_millis(p.ttl)),
        ],
    )?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(Claim {
        queue: p.queue.clone(),
        id: name("task id", r.get::<_, &str>(0))?,
        payload: parse_json("payload", r.get(1))?,
        attempt: r.get::<_, i32>(2) as u32,
        max_attempts: r.get::<_, i32>(3) as u32,
        token: Token(r.get::<_, i64>(4) as u64),
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
    let n = db.execute(
        &format!("UPDATE task SET {set} FROM (SELECT {NOW} AS now) AS n WHERE {LIVE_CLAIM}"),
        &params,
    )?;
    if n == 1 {
        Ok(TaskUpdate::Applied)
    } else {
        Ok(TaskUpdate::Lost(lost(db, task)?))
    }
}

pub(crate) fn heartbeat(db: &mut Db<'_>, task: &TaskRef, ttl: Duration) -> Result<TaskUpdate> {
    update_live(
        db,
        task,
        "lease_until = n.now + $4::bigint * interval '1 microsecond', updated_at = n.now",
        &[&micros(ttl)],
    )
}

pub(crate) fn complete(db: &mut Db<'_>, task: &TaskRef, result: Option<&serde_json::Value>) -> Result<TaskUpdate> {
    update_live(
        db,
        task,
        "state = 'done', result = $4::text::jsonb, lease_until = NULL, updated_at = n.now",
        &[&result.map(json_text)],
    )
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
    let delay = match retry {
        Retry::Never => None,
        _ if attempts >= max_attempts => None,
        Retry::After(d) => Some(d),
        Retry::Backoff => Some(backoff(attempts as u32, entropy)),
    };
    let (state, available_at) = match delay {
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
    let mut out: Vec<QueueStats> = Vec::new();
    for row in rows {
        let q = name("queue name", row.get::<_, &str>(0))?;
        let state: String = row.get(1);
        let n = row.get::<_, i64>(2) as u64;
        if out.last().is_none_or(|s| s.queue != q) {
            out.push(QueueStats {
                queue: q,
                pending: 0,
                running: 0,
                done: 0,
                dead: 0,
            });
        }
        let s = out.last_mut().expect("pushed above");
        match TaskState::parse(&state) {
            Some(TaskState::Pending) => s.pending = n,
            Some(TaskState::Running) => s.running = n,
            Some(TaskState::Done) => s.done = n,
            Some(TaskState::Dead) => s.dead = n,
            None => return Err(Error::BadRow(format!("unknown task state {state:?}"))),
        }
    }
    Ok(out)
}

pub(crate) fn purge(db: &mut Db<'_>, queue: &QueueName, state: TaskState, older_than: Duration) -> Result<u64> {
    db.execute(
        &format!(
            "DELETE FROM task WHERE queue = $1 AND state = $2 AND state IN ('done', 'dead') AND updated_at < {NOW} - $3::bigint * interval '1 microsecond'"
        ),
        &[&queue.as_str(), &state.as_str(), &micros(older_than)],
    )
}
