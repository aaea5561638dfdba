//! The documents of `leasehold schedule` and `leasehold cron`.

use std::time::SystemTime;

use super::{documents, rfc3339};
use crate::schedule::{Action, Kept, SlotRecord};
use crate::{LeaseName, duration_millis};

documents! {
    /// A schedule: `schedule add`, and each of `schedule list`.
    pub struct Schedule<'a> {
        pub name: &'a LeaseName,
        pub cron: &'a str,
        pub zone: &'a str,
        /// `{"kind": "run", "command": [...]}` or `{"kind": "enqueue", "queue", "payload"}`.
        pub action: &'a Action,
        pub overlap: &'static str,
        pub catch_up: &'static str,
        pub deadline_ms: Option<u64>,
        pub jitter_ms: u64,
        pub ttl_ms: u64,
        pub paused: bool,
        pub created: String,
        /// The last slot accounted for (fired, skipped or missed).
        pub last_slot: Option<String>,
        /// The next slot after the last one accounted for (null when paused).
        pub next: Option<String>,
    }

    /// `schedule list`.
    pub struct Schedules<'a> {
        pub schedules: Vec<Schedule<'a>>,
    }

    /// What became of a slot: each of `schedule show`'s slots, and each
    /// line of `cron --json`.
    pub struct Slot<'a> {
        pub name: &'a LeaseName,
        pub slot: String,
        pub outcome: &'static str,
        /// Slots this record stands for (more than 1 for missed ones).
        pub count: u64,
        pub through: String,
        /// The daemon that claimed it.
        pub host: Option<&'a str>,
        pub pid: Option<u32>,
        pub token: Option<u64>,
        pub exit_code: Option<i32>,
        /// When a daemon's claim wrote the record (for missed slots: when
        /// they were recorded missed).
        pub claimed: String,
        pub started: Option<String>,
        pub ended: Option<String>,
        /// How long after the slot's time it started.
        pub late_ms: Option<u64>,
        pub duration_ms: Option<u64>,
        pub detail: &'a str,
    }

    /// `schedule show`.
    pub struct ScheduleShown<'a> {
        pub schedule: Schedule<'a>,
        pub slots: Vec<Slot<'a>>,
    }

    /// `schedule next`.
    pub struct ScheduleNext<'a> {
        pub name: &'a LeaseName,
        pub zone: &'a str,
        /// A paused schedule has no next slots (`slots` is empty).
        pub paused: bool,
        pub slots: Vec<String>,
    }

    /// `schedule pause`, `resume`, `remove`.
    pub struct ScheduleChanged<'a> {
        pub name: &'a LeaseName,
        pub paused: bool,
        pub removed: bool,
    }
}

/// A kept schedule's document; `next` from `now` on.
#[must_use]
pub fn schedule(kept: &Kept, now: SystemTime) -> Schedule<'_> {
    let s = &kept.schedule;
    Schedule {
        name: &s.name,
        cron: s.spec.text(),
        zone: s.spec.zone_name(),
        action: &s.action,
        overlap: s.overlap.as_str(),
        catch_up: s.catch_up.as_str(),
        deadline_ms: s.deadline.map(duration_millis),
        jitter_ms: duration_millis(s.jitter),
        ttl_ms: duration_millis(s.ttl),
        paused: s.paused,
        created: rfc3339(s.created),
        last_slot: kept.state.as_ref().map(|(state, _)| rfc3339(state.last_slot)),
        next: kept.next_slot(now).map(rfc3339),
    }
}

/// A slot record's document.
#[must_use]
pub fn slot<'a>(name: &'a LeaseName, record: &'a SlotRecord) -> Slot<'a> {
    Slot {
        name,
        slot: rfc3339(record.slot),
        outcome: record.outcome.as_str(),
        count: record.count,
        through: rfc3339(record.through),
        host: record.daemon.as_ref().map(|d| d.host.as_str()),
        pid: record.daemon.as_ref().map(|d| d.pid),
        token: record.token,
        exit_code: record.exit_code,
        claimed: rfc3339(record.claimed),
        started: record.started.map(rfc3339),
        ended: record.ended.map(rfc3339),
        late_ms: record.lateness().map(duration_millis),
        duration_ms: record.duration().map(duration_millis),
        detail: &record.detail,
    }
}
