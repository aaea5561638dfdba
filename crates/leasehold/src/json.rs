//! The JSON shapes of leases, history and tasks, as `leasehold --json`
//! prints them (docs/JSON.md) — written once here, so every front (the
//! CLI, the status page's `/api`) prints the same document.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::{Grant, HistoryEntry, LeaseName, LeaseState, Mode, QueueStats, Task, duration_millis, identity};

/// A time as RFC 3339 (or what it is when RFC 3339 cannot write it).
#[must_use]
pub fn rfc3339(t: SystemTime) -> String {
    crate::format_time(t)
}

/// The time `d` from now, as [`rfc3339`].
#[must_use]
pub fn from_now(d: Duration) -> String {
    rfc3339(crate::later(SystemTime::now(), d))
}

/// Whether a grant's holder is alive, as far as this host can tell: `ttl`
/// (bound to no process), `no` (provably gone), `yes` (its process runs
/// here), `?` (another host, or no evidence).
#[must_use]
pub fn alive(grant: &Grant) -> &'static str {
    identity::liveness(&grant.holder).as_str()
}

/// A grant (`acquire`, `renew`, and each of a state's `grants`).
#[must_use]
pub fn grant(grant: &Grant) -> Value {
    json!({
        "name": grant.name,
        "token": grant.token,
        "grant_id": grant.id(),
        "owner": grant.owner,
        "mode": grant.mode.label(),
        "shared_limit": match grant.mode { Mode::Shared { limit } => json!(limit), Mode::Exclusive => Value::Null },
        "expires": from_now(grant.expires_in),
        "expires_in_ms": duration_millis(grant.expires_in),
        "ttl_ms": duration_millis(grant.ttl),
        "acquired": rfc3339(grant.acquired_at),
        "alive": alive(grant),
        "holder": grant.holder,
    })
}

/// The state of one name (`status NAME`).
#[must_use]
pub fn lease_state(state: &LeaseState) -> Value {
    json!({
        "name": state.name,
        "last_token": state.last_token,
        "waiters": state.waiters.len(),
        "grants": state.grants.iter().map(grant).collect::<Vec<_>>(),
    })
}

/// `status NAME` of a name never granted.
#[must_use]
pub fn never_granted(name: &LeaseName) -> Value {
    json!({ "name": name, "last_token": null, "waiters": 0, "grants": [] })
}

/// `list` and `status`: `{"leases": [...]}`.
#[must_use]
pub fn leases<'a>(states: impl IntoIterator<Item = &'a LeaseState>) -> Value {
    json!({ "leases": states.into_iter().map(lease_state).collect::<Vec<_>>() })
}

/// One history entry.
#[must_use]
pub fn history_entry(e: &HistoryEntry) -> Value {
    json!({
        "at": rfc3339(e.at),
        "event": e.event,
        "token": e.token,
        "owner": e.owner,
        "detail": e.detail,
    })
}

/// `history NAME`: `{"name": .., "history": [...]}`, newest first.
#[must_use]
pub fn history<'a>(name: &LeaseName, entries: impl IntoIterator<Item = &'a HistoryEntry>) -> Value {
    json!({ "name": name, "history": entries.into_iter().map(history_entry).collect::<Vec<_>>() })
}

/// A task (`task show`, each of `task list`'s).
#[must_use]
pub fn task(t: &Task) -> Value {
    json!({
        "queue": t.queue,
        "id": t.id,
        "state": t.state.as_str(),
        "payload": t.payload,
        "priority": t.priority,
        "attempts": t.attempts,
        "max_attempts": t.max_attempts,
        "token": t.token,
        "owner": t.owner,
        "available_at": rfc3339(t.available_at),
        "lease_remaining_ms": t.lease_remaining.map(duration_millis),
        "expirations": t.expirations,
        "failures": t.failures,
        "last_error": t.last_error,
        "result": t.result,
        "created_at": rfc3339(t.created_at),
        "updated_at": rfc3339(t.updated_at),
    })
}

/// `task list QUEUE`: `{"queue": .., "tasks": [...], "more": ..}`; `more`:
/// tasks exist beyond the limit listed ([`crate::Store::task_list_page`]).
#[must_use]
pub fn tasks<'a>(queue: &LeaseName, tasks: impl IntoIterator<Item = &'a Task>, more: bool) -> Value {
    json!({ "queue": queue, "tasks": tasks.into_iter().map(task).collect::<Vec<_>>(), "more": more })
}

/// `task stats`: `{"queues": [...]}`.
#[must_use]
pub fn queues(stats: &[QueueStats]) -> Value {
    json!({ "queues": stats })
}
