//! Task queue operations, each inside one transaction opened by the caller.
//!
//! A claim's lease is on the boot clock (like a lease grant); when a task
//! becomes claimable (`available_ms`) is wall-clock scheduling, on the
//! wall clock the transaction reads (`Now::wall`, the one claims compare
//! with). Claims use a partial index over pending tasks in claim order, so
//! finished tasks and the queue's length do not slow them down; expired
//! claims are found through a partial index over running tasks (a handful:
//! one per worker).

use std::time::{Duration, SystemTime};

use leasehold_backend::failpoint;
use leasehold_backend::task::{add_each, queue_stats};
use leasehold_backend::unix_ms::{from_ms, to_ms};
use leasehold_backend::{
    Claim, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskClaimParams, TaskFail, TaskId,
    TaskListParams, TaskLost, TaskPage, TaskRef, TaskRetry, TaskState, TaskUpdate, Token, duration_millis, later,
    signed, stored_millis,
};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{OptionalExtension, ToSql, Transaction, params, params_from_iter};

use crate::Now;
use crate::lease::{Error, Result, expires_at};

fn wall_ms(now: &Now) -> i64 {
    to_ms(now.wall)
}

fn json_text(v: &serde_json::Value) -> String {
    serde_json::to_string(v).expect("a JSON value always serializes")
}

fn parse_json(what: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| Error::BadRow(format!("unreadable {what} in the task table: {e}")))
}

const TASK_COLUMNS: &str = "queue, id, payload, priority, state, attempts, max_attempts, token, owner, available_ms, \
     boot_id, lease_until_ns, expirations, failures, last_error, result, created_ms, updated_ms, ttl_ms";

fn read_task(r: &rusqlite::Row<'_>, now: &Now) -> rusqlite::Result<Result<Task>> {
    let name = |i: usize| -> rusqlite::Result<Result<leasehold_backend::LeaseName>> {
        let s: String = r.get(i)?;
        Ok(leasehold_backend::LeaseName::stored(s.clone())
            .map_err(|_| Error::BadRow(format!("invalid name {s:?} in the task table"))))
    };
    let queue = match name(0)? {
        Ok(q) => q,
        Err(e) => return Ok(Err(e)),
    };
    let id = match name(1)? {
        Ok(i) => i,
        Err(e) => return Ok(Err(e)),
    };
    let state: String = r.get(4)?;
    let Some(state) = TaskState::parse(&state) else {
        return Ok(Err(Error::BadRow(format!("task {id} has an unknown state {state:?}"))));
    };
    let payload: String = r.get(2)?;
    let Ok(payload) = serde_json::from_str(&payload) else {
        return Ok(Err(Error::BadRow(format!("task {id} has an unreadable payload"))));
    };
    let result: Option<String> = r.get(15)?;
    let result = match result.map(|t| serde_json::from_str(&t)) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => return Ok(Err(Error::BadRow(format!("task {id} has an unreadable result")))),
    };
    let boot_id: Option<String> = r.get(10)?;
    let until: Option<i64> = r.get(11)?;
    let lease_remaining = match (state, boot_id, until) {
        (TaskState::Running, Some(b), Some(u)) if b == now.boot_id => {
            Some(Duration::from_nanos(u.saturating_sub(now.ns).max(0).unsigned_abs()))
        }
        (TaskState::Running, ..) => Some(Duration::ZERO),
        _ => None,
    };
    Ok(Ok(Task {
        queue,
        id,
        payload,
        priority: r.get(3)?,
        state,
        attempts: r.get(5)?,
        max_attempts: r.get(6)?,
        token: Token(r.get::<_, i64>(7)? as u64),
        owner: r.get(8)?,
        available_at: from_ms(r.get(9)?),
        lease_remaining,
        expirations: r.get(12)?,
        failures: r.get(13)?,
        last_error: r.get(14)?,
        result,
        created_at: from_ms(r.get(16)?),
        updated_at: from_ms(r.get(17)?),
        claim_ttl: r.get::<_, Option<i64>>(18)?.map(stored_millis),
    }))
}

pub(crate) fn get(tx: &Transaction<'_>, now: &Now, queue: &QueueName, id: &TaskId) -> Result<Option<Task>> {
    let mut stmt = tx.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM task WHERE queue = ?1 AND id = ?2"))?;
    match stmt
        .query_row(params![queue.as_str(), id.as_str()], |r| read_task(r, now))
        .optional()?
    {
        Some(t) => Ok(Some(t?)),
        None => Ok(None),
    }
}

/// Add tasks; returns the outcomes and whether to commit (no conflict).
pub(crate) fn add(tx: &Transaction<'_>, now: &Now, tasks: &[TaskAddParams]) -> Result<(Vec<TaskAdd>, bool)> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO task (queue, id, payload, priority, state, max_attempts, available_ms, created_ms, updated_ms) \
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?7, ?7) ON CONFLICT (queue, id) DO NOTHING",
    )?;
    // One buffer for every payload's text: a batch of a million tasks
    // is otherwise a million strings made and freed (issue 28).
    let mut payload = Vec::with_capacity(256);
    let now_ms = wall_ms(now);
    add_each(tasks, |t| {
        payload.clear();
        serde_json::to_writer(&mut payload, &t.payload).expect("a JSON value always serializes");
        let inserted = insert.execute(params![
            t.queue.as_str(),
            t.id.as_str(),
            // serde_json writes UTF-8: bound as text, as a String would be.
            ToSqlOutput::Borrowed(ValueRef::Text(&payload)),
            t.priority,
            t.max_attempts,
            to_ms(t.available.at(now.wall)),
            now_ms,
        ])?;
        if inserted == 1 {
            return Ok(None);
        }
        get(tx, now, &t.queue, &t.id)?
            .map(Some)
            .ok_or_else(|| Error::BadRow("conflicting task vanished".into()))
    })
}

/// Return expired claims of `queue` to pending, or to dead when their
/// attempts are used up.
fn reap(tx: &Transaction<'_>, now: &Now, queue: &QueueName) -> Result<()> {
    let expired = "queue = ?1 AND state = 'running' AND (boot_id IS NOT ?2 OR lease_until_ns <= ?3)";
    tx.prepare_cached(&format!(
        "UPDATE task SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END, \
         expirations = expirations + 1, boot_id = NULL, lease_until_ns = NULL, updated_ms = ?4, \
         last_error = 'claim expired: the worker ' || coalesce(owner, '?') || ' stopped heartbeating (attempt ' \
             || attempts || ' of ' || max_attempts || ')' \
         WHERE {expired}"
    ))?
    .execute(params![queue.as_str(), now.boot_id, now.ns, wall_ms(now)])?;
    Ok(())
}

/// The claim query: the first pending task in claim order. It must be
/// served by the `task_claim` index (a test checks the plan), so that its
/// cost does not depend on how many tasks the table holds.
pub const CLAIM_SQL: &str = "SELECT seq FROM task WHERE queue = ?1 AND state = 'pending' AND available_ms <= ?2 \
     ORDER BY priority DESC, available_ms, seq LIMIT 1";

pub(crate) fn claim(tx: &Transaction<'_>, now: &Now, p: &TaskClaimParams) -> Result<Option<Claim>> {
    reap(tx, now, &p.queue)?;
    let seq: Option<i64> = tx
        .prepare_cached(CLAIM_SQL)?
        .query_row(params![p.queue.as_str(), wall_ms(now)], |r| r.get(0))
        .optional()?;
    let Some(seq) = seq else { return Ok(None) };
    let (id, payload, attempt, max_attempts, token): (String, String, u32, u32, i64) = tx
        .prepare_cached(
            "UPDATE task SET state = 'running', attempts = attempts + 1, token = token + 1, owner = ?2, \
             boot_id = ?3, lease_until_ns = ?4, updated_ms = ?5, ttl_ms = ?6 WHERE seq = ?1 \
             RETURNING id, payload, attempts, max_attempts, token",
        )?
        .query_row(
            params![
                seq,
                p.owner,
                now.boot_id,
                expires_at(now, p.ttl),
                wall_ms(now),
                signed(duration_millis(p.ttl))
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
    failpoint!("claim", "token");
    Ok(Some(Claim {
        queue: p.queue.clone(),
        id: TaskId::stored(id.clone()).map_err(|_| Error::BadRow(format!("invalid task id {id:?}")))?,
        payload: parse_json("payload", &payload)?,
        attempt,
        max_attempts,
        token: Token(token as u64),
        ttl: p.ttl,
    }))
}

/// seq, state, token, boot id and lease end of a task's claim.
type ClaimRow = (i64, String, i64, Option<String>, Option<i64>);

/// The row of a live claim named by `task`, or why there is none.
fn live_claim(tx: &Transaction<'_>, now: &Now, task: &TaskRef) -> Result<std::result::Result<i64, TaskLost>> {
    let row: Option<ClaimRow> = tx
        .prepare_cached("SELECT seq, state, token, boot_id, lease_until_ns FROM task WHERE queue = ?1 AND id = ?2")?
        .query_row(params![task.queue.as_str(), task.id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    Ok(match row {
        None => Err(TaskLost::NotFound),
        Some((seq, state, token, boot, until))
            if state == "running"
                && token as u64 == task.token.0
                && boot.as_deref() == Some(now.boot_id.as_str())
                && until.is_some_and(|u| u > now.ns) =>
        {
            Ok(seq)
        }
        Some(_) => Err(TaskLost::Stale),
    })
}

pub(crate) fn heartbeat(tx: &Transaction<'_>, now: &Now, task: &TaskRef, ttl: Duration) -> Result<TaskUpdate> {
    let seq = match live_claim(tx, now, task)? {
        Ok(seq) => seq,
        Err(lost) => return Ok(TaskUpdate::Lost(lost)),
    };
    // Not `updated_ms`: a heartbeat extends the claim without changing the
    // task, so a running task's `updated_at` stays the time of its claim
    // (`Task::claimed_at`).
    tx.prepare_cached("UPDATE task SET lease_until_ns = ?2 WHERE seq = ?1")?
        .execute(params![seq, expires_at(now, ttl)])?;
    Ok(TaskUpdate::Applied)
}

pub(crate) fn complete(
    tx: &Transaction<'_>,
    now: &Now,
    task: &TaskRef,
    result: Option<&serde_json::Value>,
) -> Result<TaskUpdate> {
    let seq = match live_claim(tx, now, task)? {
        Ok(seq) => seq,
        Err(lost) => return Ok(TaskUpdate::Lost(lost)),
    };
    tx.prepare_cached(
        "UPDATE task SET state = 'done', result = ?2, boot_id = NULL, lease_until_ns = NULL, updated_ms = ?3 \
         WHERE seq = ?1",
    )?
    .execute(params![seq, result.map(json_text), wall_ms(now)])?;
    Ok(TaskUpdate::Applied)
}

pub(crate) fn fail(tx: &Transaction<'_>, now: &Now, task: &TaskRef, error: &str, retry: Retry) -> Result<TaskFail> {
    let seq = match live_claim(tx, now, task)? {
        Ok(seq) => seq,
        Err(lost) => return Ok(TaskFail::Lost(lost)),
    };
    let (attempts, max_attempts): (u32, u32) = tx
        .prepare_cached("SELECT attempts, max_attempts FROM task WHERE seq = ?1")?
        .query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (state, available_at) = match retry.delay(attempts, max_attempts, now.ns as u64 ^ seq as u64) {
        None => ("dead", None),
        Some(d) => ("pending", Some(later(now.wall, d))),
    };
    tx.prepare_cached(
        "UPDATE task SET state = ?2, failures = failures + 1, last_error = ?3, \
         available_ms = coalesce(?4, available_ms), boot_id = NULL, lease_until_ns = NULL, updated_ms = ?5 \
         WHERE seq = ?1",
    )?
    .execute(params![seq, state, error, available_at.map(to_ms), wall_ms(now)])?;
    Ok(match available_at {
        Some(available_at) => TaskFail::Retrying { available_at },
        None => TaskFail::Dead,
    })
}

pub(crate) fn release(tx: &Transaction<'_>, now: &Now, task: &TaskRef) -> Result<TaskUpdate> {
    let seq = match live_claim(tx, now, task)? {
        Ok(seq) => seq,
        Err(lost) => return Ok(TaskUpdate::Lost(lost)),
    };
    // Not charged: the attempt count goes back; the token does not.
    tx.prepare_cached(
        "UPDATE task SET state = 'pending', attempts = attempts - 1, boot_id = NULL, lease_until_ns = NULL, \
         updated_ms = ?2 WHERE seq = ?1",
    )?
    .execute(params![seq, wall_ms(now)])?;
    Ok(TaskUpdate::Applied)
}

pub(crate) fn retry(tx: &Transaction<'_>, now: &Now, queue: &QueueName, id: &TaskId) -> Result<TaskRetry> {
    let Some(task) = get(tx, now, queue, id)? else {
        return Ok(TaskRetry::NotFound);
    };
    if task.state != TaskState::Dead {
        return Ok(TaskRetry::NotDead(task.state));
    }
    tx.prepare_cached(
        "UPDATE task SET state = 'pending', attempts = 0, available_ms = ?3, updated_ms = ?3 \
         WHERE queue = ?1 AND id = ?2",
    )?
    .execute(params![queue.as_str(), id.as_str(), wall_ms(now)])?;
    Ok(TaskRetry::Revived)
}

/// A page of one queue's tasks of one state by key ([`TaskPage`]). The
/// tasks after a key in list order (`priority DESC, available_ms, seq`) are
/// three ranges of the index, each read in index order: the key's own
/// priority and time with a later seq, its priority with a later time, and
/// lower priorities. Read one after the other until the page is full, each
/// is a seek — however deep the page — where one `OR` of the three would
/// be scanned from the queue's first task. Pages before a key, and the
/// last page, read the same ranges backwards and turn the result around.
pub(crate) fn list_page(
    tx: &Transaction<'_>,
    now: &Now,
    queue: &QueueName,
    state: TaskState,
    page: &TaskPage,
    limit: u32,
) -> Result<Vec<Task>> {
    const FORWARD: &str = "priority DESC, available_ms, seq";
    const BACKWARD: &str = "priority, available_ms DESC, seq DESC";
    // Pending tasks come off the claim index, whose predicate must be
    // written out to match; the others through the state index.
    let state_is = if state == TaskState::Pending {
        "state = 'pending' AND ?2 IS NOT NULL"
    } else {
        "state = ?2"
    };
    let base = format!("SELECT {TASK_COLUMNS} FROM task WHERE queue = ?1 AND {state_is}");
    let (queue, state) = (queue.as_str(), state.as_str());
    let limit = i64::from(limit);
    let mut out: Vec<Task> = Vec::new();
    let read = |out: &mut Vec<Task>, range: &str, order: &str, key: &[&dyn ToSql]| -> Result<()> {
        let left = limit - i64::try_from(out.len()).unwrap_or(i64::MAX);
        if left <= 0 {
            return Ok(());
        }
        let sql = format!("{base}{range} ORDER BY {order} LIMIT ?{}", key.len() + 3);
        let mut stmt = tx.prepare_cached(&sql)?;
        let mut bound: Vec<&dyn ToSql> = vec![&queue, &state];
        bound.extend_from_slice(key);
        bound.push(&left);
        for row in stmt.query_map(params_from_iter(bound), |r| read_task(r, now))? {
            out.push(row??);
        }
        Ok(())
    };
    match page {
        TaskPage::Last => {
            read(&mut out, "", BACKWARD, &[])?;
            out.reverse();
        }
        TaskPage::After(key) | TaskPage::Before(key) => {
            let after = matches!(page, TaskPage::After(_));
            let seq: Option<i64> = tx
                .prepare_cached("SELECT seq FROM task WHERE queue = ?1 AND id = ?2")?
                .query_row(params![queue, key.id.as_str()], |r| r.get(0))
                .optional()?;
            // A key whose task is gone: every task tying with it on
            // priority and time is listed (a repeat, never a skip).
            let seq = seq.unwrap_or(if after { -1 } else { i64::MAX });
            let (priority, at) = (key.priority, to_ms(key.available_at));
            if after {
                read(
                    &mut out,
                    " AND priority = ?3 AND available_ms = ?4 AND seq > ?5",
                    "seq",
                    &[&priority, &at, &seq],
                )?;
                read(
                    &mut out,
                    " AND priority = ?3 AND available_ms > ?4",
                    "available_ms, seq",
                    &[&priority, &at],
                )?;
                read(&mut out, " AND priority < ?3", FORWARD, &[&priority])?;
            } else {
                read(
                    &mut out,
                    " AND priority = ?3 AND available_ms = ?4 AND seq < ?5",
                    "seq DESC",
                    &[&priority, &at, &seq],
                )?;
                read(
                    &mut out,
                    " AND priority = ?3 AND available_ms < ?4",
                    "available_ms DESC, seq DESC",
                    &[&priority, &at],
                )?;
                read(&mut out, " AND priority > ?3", BACKWARD, &[&priority])?;
                out.reverse();
            }
        }
    }
    Ok(out)
}

pub(crate) fn list(tx: &Transaction<'_>, now: &Now, p: &TaskListParams) -> Result<Vec<Task>> {
    // One queue and one state (the status page's lists): the same order,
    // without the OR-of-parameters that stops SQLite from using an index —
    // pending tasks come straight off the claim index, the others through
    // the state index, so neither the queue's length nor its finished tasks
    // make a short page slow.
    let sql = match (&p.queue, p.state) {
        (Some(_), Some(TaskState::Pending)) => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE queue = ?1 AND state = 'pending' AND ?2 IS NOT NULL \
             ORDER BY priority DESC, available_ms, seq LIMIT ?3"
        ),
        (Some(_), Some(_)) => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE queue = ?1 AND state = ?2 \
             ORDER BY priority DESC, available_ms, seq LIMIT ?3"
        ),
        _ => format!(
            "SELECT {TASK_COLUMNS} FROM task WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2) \
             ORDER BY queue, CASE state WHEN 'pending' THEN 0 WHEN 'running' THEN 1 WHEN 'dead' THEN 2 ELSE 3 END, \
             priority DESC, available_ms, seq LIMIT ?3"
        ),
    };
    let mut stmt = tx.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![
            p.queue.as_ref().map(QueueName::as_str),
            p.state.map(TaskState::as_str),
            i64::from(p.limit)
        ],
        |r| read_task(r, now),
    )?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

pub(crate) fn stats(tx: &Transaction<'_>, queue: Option<&QueueName>) -> Result<Vec<QueueStats>> {
    let mut stmt = tx.prepare_cached(
        "SELECT queue, state, count(*) FROM task WHERE (?1 IS NULL OR queue = ?1) GROUP BY queue, state ORDER BY queue",
    )?;
    let rows = stmt.query_map(params![queue.map(QueueName::as_str)], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))
    })?;
    let mut counts = Vec::new();
    for row in rows {
        let (q, state, n) = row?;
        let q = QueueName::stored(q.clone()).map_err(|_| Error::BadRow(format!("invalid queue name {q:?}")))?;
        let state = TaskState::parse(&state).ok_or_else(|| Error::BadRow(format!("unknown task state {state:?}")))?;
        counts.push((q, state, n as u64));
    }
    Ok(queue_stats(counts))
}

pub(crate) fn purge(
    tx: &Transaction<'_>,
    now: &Now,
    queue: &QueueName,
    state: TaskState,
    older_than: Duration,
) -> Result<u64> {
    let cutoff = to_ms(now.wall.checked_sub(older_than).unwrap_or(SystemTime::UNIX_EPOCH));
    // At or before the cutoff: times are kept to the millisecond, so a
    // task finished earlier in this millisecond is "older than 0" too —
    // with `<` it stayed (a flaky `purge(older_than=0)` right after `done`,
    // once commits took one fsync instead of five).
    let n = tx
        .prepare_cached(
            "DELETE FROM task WHERE queue = ?1 AND state = ?2 AND state IN ('done', 'dead') AND updated_ms <= ?3",
        )?
        .execute(params![queue.as_str(), state.as_str(), cutoff])?;
    Ok(n as u64)
}
