//! The JSON documents `leasehold --json` prints (docs/JSON.md), as types:
//! the shapes of store data here (a grant, a lease's state, history, a
//! task), the commands' documents and [`Failure`] — the shape of every
//! failure — in `json/commands.rs`. Written once, so every front (the
//! CLI, the status page's `/api`, Python) prints the same document; the
//! CLI's tests check each document, and a unit test docs/JSON.md's table,
//! against [`Document::FIELDS`].

mod commands;
mod schedules;
#[cfg(test)]
mod tests;

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;

use crate::{
    GrantId, HistoryEvent, Holder, LeaseName, Mode, QueueName, QueueStats, TaskId, Token, duration_millis, identity,
};

pub use commands::*;
pub use schedules::*;

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
pub fn alive(grant: &crate::Grant) -> &'static str {
    identity::liveness(&grant.holder).as_str()
}

/// A document as a JSON value. Every front prints documents through it:
/// a value's object keys are sorted, the order documents have always been
/// printed in (declaration order would reorder every document).
///
/// # Panics
///
/// Never: documents have string keys and plain values.
#[must_use]
pub fn value(document: &impl Serialize) -> Value {
    serde_json::to_value(document).expect("a document is plain JSON")
}

/// A type of JSON document.
pub trait Document: Serialize {
    /// The keys it has, in declaration order: what docs/JSON.md and the
    /// CLI's tests check documents against.
    const FIELDS: &'static [&'static str];
}

/// Document structs with their [`Document::FIELDS`] written from the same
/// field list, so the two cannot drift apart. Fields take no serde
/// attributes that rename or flatten them (the list would then lie).
macro_rules! documents {
    ($(
        $(#[$attr:meta])*
        pub struct $name:ident $(<$lt:lifetime>)? {
            $( $(#[$field_attr:meta])* pub $field:ident: $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$attr])*
        #[derive(Debug, serde::Serialize)]
        pub struct $name $(<$lt>)? {
            $( $(#[$field_attr])* pub $field: $ty ),*
        }

        impl $(<$lt>)? $crate::json::Document for $name $(<$lt>)? {
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    )*};
}
use documents;

documents! {
    /// A grant (`acquire`, `renew`, and each of a state's `grants`).
    pub struct Grant<'a> {
        pub name: &'a LeaseName,
        pub token: Token,
        /// For `write --fence-grant`.
        pub grant_id: GrantId,
        pub owner: &'a str,
        pub mode: &'static str,
        /// `null` for an exclusive grant, or a shared one with no limit.
        pub shared_limit: Option<u32>,
        pub expires: String,
        pub expires_in_ms: u64,
        pub ttl_ms: u64,
        pub acquired: String,
        /// See [`alive`].
        pub alive: &'static str,
        pub holder: &'a Holder,
    }

    /// The state of one name (`status NAME`).
    pub struct LeaseState<'a> {
        pub name: &'a LeaseName,
        /// `null` for a name never granted.
        pub last_token: Option<Token>,
        pub waiters: usize,
        pub grants: Vec<Grant<'a>>,
    }

    /// `list` and `status`.
    pub struct Leases<'a> {
        pub leases: Vec<LeaseState<'a>>,
    }

    /// One history entry.
    pub struct HistoryEntry<'a> {
        pub at: String,
        pub event: HistoryEvent,
        pub token: Option<Token>,
        pub owner: Option<&'a str>,
        pub detail: &'a str,
    }

    /// `history NAME`, newest first.
    pub struct History<'a> {
        pub name: &'a LeaseName,
        pub history: Vec<HistoryEntry<'a>>,
    }

    /// A task (`task show`, each of `task list`'s).
    pub struct Task<'a> {
        pub queue: &'a QueueName,
        pub id: &'a TaskId,
        pub state: &'static str,
        pub payload: &'a Value,
        pub priority: i64,
        pub attempts: u32,
        pub max_attempts: u32,
        pub token: Token,
        pub owner: Option<&'a str>,
        pub available_at: String,
        pub lease_remaining_ms: Option<u64>,
        pub expirations: u32,
        pub failures: u32,
        pub last_error: Option<&'a str>,
        pub result: Option<&'a Value>,
        pub created_at: String,
        pub updated_at: String,
    }

    /// `task list QUEUE`; `more`: tasks exist beyond the limit listed
    /// ([`crate::Store::task_list_page`]).
    pub struct Tasks<'a> {
        pub queue: &'a QueueName,
        pub tasks: Vec<Task<'a>>,
        pub more: bool,
    }

    /// `task stats`.
    pub struct Queues<'a> {
        pub queues: &'a [QueueStats],
    }
}

/// A grant's document.
#[must_use]
pub fn grant(grant: &crate::Grant) -> Grant<'_> {
    Grant {
        name: &grant.name,
        token: grant.token,
        grant_id: grant.id(),
        owner: &grant.owner,
        mode: grant.mode.label(),
        shared_limit: match grant.mode {
            Mode::Shared { limit } => limit,
            Mode::Exclusive => None,
        },
        expires: from_now(grant.expires_in),
        expires_in_ms: duration_millis(grant.expires_in),
        ttl_ms: duration_millis(grant.ttl),
        acquired: rfc3339(grant.acquired_at),
        alive: alive(grant),
        holder: &grant.holder,
    }
}

/// The state of one name.
#[must_use]
pub fn lease_state(state: &crate::LeaseState) -> LeaseState<'_> {
    LeaseState {
        name: &state.name,
        last_token: Some(state.last_token),
        waiters: state.waiters.len(),
        grants: state.grants.iter().map(grant).collect(),
    }
}

/// `status NAME` of a name never granted.
#[must_use]
pub fn never_granted(name: &LeaseName) -> LeaseState<'_> {
    LeaseState {
        name,
        last_token: None,
        waiters: 0,
        grants: Vec::new(),
    }
}

/// `list` and `status`.
#[must_use]
pub fn leases<'a>(states: impl IntoIterator<Item = &'a crate::LeaseState>) -> Leases<'a> {
    Leases {
        leases: states.into_iter().map(lease_state).collect(),
    }
}

/// One history entry.
#[must_use]
pub fn history_entry(e: &crate::HistoryEntry) -> HistoryEntry<'_> {
    HistoryEntry {
        at: rfc3339(e.at),
        event: e.event,
        token: e.token,
        owner: e.owner.as_deref(),
        detail: &e.detail,
    }
}

/// `history NAME`, newest first.
#[must_use]
pub fn history<'a>(name: &'a LeaseName, entries: impl IntoIterator<Item = &'a crate::HistoryEntry>) -> History<'a> {
    History {
        name,
        history: entries.into_iter().map(history_entry).collect(),
    }
}

/// A task's document.
#[must_use]
pub fn task(t: &crate::Task) -> Task<'_> {
    Task {
        queue: &t.queue,
        id: &t.id,
        state: t.state.as_str(),
        payload: &t.payload,
        priority: t.priority,
        attempts: t.attempts,
        max_attempts: t.max_attempts,
        token: t.token,
        owner: t.owner.as_deref(),
        available_at: rfc3339(t.available_at),
        lease_remaining_ms: t.lease_remaining.map(duration_millis),
        expirations: t.expirations,
        failures: t.failures,
        last_error: t.last_error.as_deref(),
        result: t.result.as_ref(),
        created_at: rfc3339(t.created_at),
        updated_at: rfc3339(t.updated_at),
    }
}

/// `task list QUEUE`.
#[must_use]
pub fn tasks<'a>(queue: &'a QueueName, tasks: impl IntoIterator<Item = &'a crate::Task>, more: bool) -> Tasks<'a> {
    Tasks {
        queue,
        tasks: tasks.into_iter().map(task).collect(),
        more,
    }
}

/// `task stats`.
#[must_use]
pub fn queues(stats: &[QueueStats]) -> Queues<'_> {
    Queues { queues: stats }
}
