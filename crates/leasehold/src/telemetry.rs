//! What this process tells an operator: events through `tracing` (target
//! `leasehold`, a field `event` naming each) and counters a daemon serves
//! as Prometheus metrics (`work`/`cron --metrics-listen`).
//!
//! Each event's name, level, fields and counter are written once, here;
//! the library calls these functions where the thing happens, so the CLI,
//! the Python package and any program embedding the library log the same
//! events. Where they go is the subscriber's: the CLI's `--log-format
//! text|json`, Python's `logging` (logger `pyleasehold`). docs/LOGGING.md
//! lists every event and its fields; a test holds it to [`EVENTS`].
//!
//! Levels: warn for what nobody else reports (a renewal failed, a grant
//! lost); info for the rest, outcomes included — a stopped command, a
//! failed task, a slot's record are handed to the caller, which reports
//! them (the CLI's lines and exit codes, Python's exceptions), so the
//! CLI's default level (warn) shows each once.
//!
//! Field names are the same across events: `name` (a lease), `token`,
//! `grant` (a grant id), `owner`, `pid`, `queue`, `task`, `attempt`,
//! `schedule`, `slot` (RFC 3339), `outcome`, `reason`, `error`,
//! `exit_code`, and durations in milliseconds (`ttl_ms`, `duration_ms`,
//! `latency_ms`, `retry_in_ms`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold_backend::{Grant, LeaseName, LeaseRelease, Token};

use crate::json::rfc3339;
use crate::schedule::{SlotOutcome, SlotRecord};
use crate::worker::{Outcome, TaskInfo};

/// Every event's name, in docs/LOGGING.md's order.
pub const EVENTS: &[&str] = &[
    "lease.granted",
    "lease.released",
    "lease.renewed",
    "lease.renewal_failed",
    "lease.lost",
    "command.stopping",
    "command.exited",
    "task.claimed",
    "task.finished",
    "slot.recorded",
    "schedule.failed",
    "schedule.note",
    "store.unavailable",
];

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A grant given to this process (`try_acquire`, a wait that won, `run`,
/// a slot's or a leader's grant).
pub(crate) fn granted(grant: &Grant) {
    COUNTERS.grants.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        target: "leasehold",
        event = "lease.granted",
        name = %grant.name,
        token = grant.token.0,
        grant = %grant.id(),
        owner = %grant.owner,
        pid = grant.holder.pid,
        ttl_ms = ms(grant.ttl),
        "granted {} (token {})",
        grant.name,
        grant.token
    );
}

/// A release this process asked for, and what the store answered.
pub(crate) fn released(name: &LeaseName, token: Token, release: &LeaseRelease) {
    let outcome = match release {
        LeaseRelease::Released => "released".to_owned(),
        LeaseRelease::Lost(reason) => format!("not live: {reason}"),
    };
    tracing::info!(
        target: "leasehold",
        event = "lease.released",
        name = %name,
        token = token.0,
        outcome = %outcome,
        "released {name} (token {token}): {outcome}"
    );
}

/// A kept grant or claim renewed, `latency` after its request went out.
pub(crate) fn renewed(kind: &str, name: &str, token: Token, latency: Duration) {
    COUNTERS.renewal_latency.observe(latency);
    tracing::debug!(
        target: "leasehold",
        event = "lease.renewed",
        kind,
        name,
        token = token.0,
        latency_ms = ms(latency),
        "{kind} {name} renewed (token {token})"
    );
}

/// A renewal that failed and will be tried again (the grant is not lost
/// while its window lasts).
pub(crate) fn renewal_failed(kind: &str, name: &str, token: Token, error: &dyn std::fmt::Display) {
    COUNTERS.renewal_failures.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        target: "leasehold",
        event = "lease.renewal_failed",
        kind,
        name,
        token = token.0,
        error = %error,
        "renewal failed, retrying: {error}"
    );
}

/// A kept grant or claim lost.
pub(crate) fn lost(kind: &str, name: &str, token: Token, reason: &dyn std::fmt::Display) {
    COUNTERS.losses.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        target: "leasehold",
        event = "lease.lost",
        kind,
        name,
        token = token.0,
        reason = %reason,
        "{kind} lost: {reason}"
    );
}

/// What a supervised command runs under, for its events: the kept kind,
/// name and token (none for a command that keeps nothing).
#[derive(Debug, Clone, Default)]
pub(crate) struct Under {
    pub kind: &'static str,
    pub name: String,
    pub token: Option<u64>,
}

/// A supervisor stopping its command (SIGTERM to its tree, SIGKILL after
/// the grace) and why.
pub(crate) fn stopping(under: &Under, pid: Option<u32>, reason: &dyn std::fmt::Display) {
    tracing::info!(
        target: "leasehold",
        event = "command.stopping",
        kind = under.kind,
        name = %under.name,
        token = under.token,
        pid,
        reason = %reason,
        "stopping the command of {} {}: {reason}",
        under.kind,
        under.name
    );
}

/// A supervised command's end: its exit code (none when its guard died),
/// how long it ran, and what stopped it (none when it ended by itself).
pub(crate) fn exited(
    under: &Under,
    pid: Option<u32>,
    exit_code: Option<u8>,
    duration: Duration,
    stopped: Option<&dyn std::fmt::Display>,
) {
    let stopped = stopped.map(ToString::to_string);
    tracing::info!(
        target: "leasehold",
        event = "command.exited",
        kind = under.kind,
        name = %under.name,
        token = under.token,
        pid,
        exit_code,
        duration_ms = ms(duration),
        reason = stopped.as_deref(),
        "the command of {} {} ended{}",
        under.kind,
        under.name,
        exit_code.map_or_else(|| " (its guard died)".to_owned(), |c| format!(" with exit code {c}"))
    );
}

/// A worker's task claimed.
pub(crate) fn task_claimed(task: &TaskInfo) {
    tracing::info!(
        target: "leasehold",
        event = "task.claimed",
        queue = %task.queue,
        task = %task.id,
        attempt = task.attempt,
        token = task.token.0,
        "claimed {} {} (attempt {}/{})",
        task.queue,
        task.id,
        task.attempt,
        task.max_attempts
    );
}

/// A worker's task finished, with its outcome (`done`, `failed`, `dead`,
/// `lost`, `handed back`).
pub(crate) fn task_finished(task: &TaskInfo, outcome: &Outcome, took: Duration) {
    COUNTERS.count_task(outcome);
    let kind = outcome.kind();
    let detail = outcome.to_string();
    tracing::info!(
        target: "leasehold",
        event = "task.finished",
        queue = %task.queue,
        task = %task.id,
        attempt = task.attempt,
        token = task.token.0,
        outcome = kind,
        duration_ms = ms(took),
        error = (!detail.is_empty()).then_some(detail.as_str()),
        "{kind} {} {}",
        task.queue,
        task.id
    );
}

/// A slot's record written by this daemon: claimed, running, what became
/// of it, or missed.
pub(crate) fn slot_recorded(schedule: &LeaseName, record: &SlotRecord) {
    COUNTERS.count_slot(record.outcome, record.count);
    let duration = record
        .started
        .zip(record.ended)
        .map(|(s, e)| ms(e.duration_since(s).unwrap_or_default()));
    tracing::info!(
        target: "leasehold",
        event = "slot.recorded",
        schedule = %schedule,
        slot = %rfc3339(record.slot),
        outcome = record.outcome.as_str(),
        count = record.count,
        token = record.token,
        exit_code = record.exit_code,
        duration_ms = duration,
        detail = %record.detail,
        "{schedule} {}: {}",
        rfc3339(record.slot),
        record.outcome.as_str()
    );
}

/// The schedule daemon failed at something and goes on.
pub(crate) fn schedule_failed(schedule: Option<&LeaseName>, error: &dyn std::fmt::Display) {
    tracing::info!(
        target: "leasehold",
        event = "schedule.failed",
        schedule = schedule.map(ToString::to_string),
        error = %error,
        "{error}"
    );
}

/// The schedule daemon's word on something that is neither a slot's
/// record nor a failure (a clock off the store's, a record not written).
pub(crate) fn schedule_note(schedule: Option<&LeaseName>, line: &str) {
    tracing::info!(
        target: "leasehold",
        event = "schedule.note",
        schedule = schedule.map(ToString::to_string),
        "{line}"
    );
}

/// The store did not answer a daemon, which tries again in `retry_in`.
pub(crate) fn store_unavailable(error: &dyn std::fmt::Display, retry_in: Duration) {
    COUNTERS.unavailable.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        target: "leasehold",
        event = "store.unavailable",
        error = %error,
        retry_in_ms = ms(retry_in),
        "{error}; retrying in {}",
        crate::format_duration(retry_in)
    );
}

/// The upper bounds of [`Counters::renewal_latency`]'s buckets, in
/// seconds: from a local store's millisecond to a slow remote one's
/// seconds (a renewal later than its TTL's third is a lost window).
pub const LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A histogram of durations: counts per bucket of [`LATENCY_BUCKETS`]
/// (not cumulative), a count and a sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let seconds = d.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| seconds <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Cumulative counts at each bound of [`LATENCY_BUCKETS`], the count
    /// (the `+Inf` bucket) and the sum in seconds, as Prometheus writes a
    /// histogram.
    #[must_use]
    pub fn cumulative(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let mut running = 0;
        let buckets = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(&bound, n)| {
                running += n.load(Ordering::Relaxed);
                (bound, running)
            })
            .collect();
        #[allow(clippy::cast_precision_loss, reason = "a sum of microseconds, shown in seconds")]
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        (buckets, self.count.load(Ordering::Relaxed), sum)
    }
}

/// What this process counted since it started: only grows.
#[derive(Debug, Default)]
pub struct Counters {
    pub grants: AtomicU64,
    pub losses: AtomicU64,
    pub renewal_failures: AtomicU64,
    pub renewal_latency: Histogram,
    pub unavailable: AtomicU64,
    /// Tasks by outcome: done, failed, dead, lost, handed back.
    pub tasks: [AtomicU64; TASK_OUTCOMES.len()],
    /// Slot records written, by outcome ([`SLOT_OUTCOMES`]).
    pub slots: [AtomicU64; SLOT_OUTCOMES.len()],
}

/// The task outcomes counted, in [`Counters::tasks`]' order.
pub const TASK_OUTCOMES: [&str; 5] = ["done", "failed", "dead", "lost", "handed back"];

/// The slot outcomes counted, in [`Counters::slots`]' order: each record
/// a daemon writes (`claimed` is a slot fired; `missed` counts the slots
/// its record stands for).
pub const SLOT_OUTCOMES: [SlotOutcome; 9] = SlotOutcome::ALL;

impl Counters {
    fn count_task(&self, outcome: &Outcome) {
        if let Some(i) = TASK_OUTCOMES.iter().position(|&k| k == outcome.kind()) {
            self.tasks[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn count_slot(&self, outcome: SlotOutcome, count: u64) {
        if let Some(i) = SLOT_OUTCOMES.iter().position(|&o| o == outcome) {
            self.slots[i].fetch_add(count.max(1), Ordering::Relaxed);
        }
    }
}

/// This process's counters.
pub static COUNTERS: std::sync::LazyLock<Counters> = std::sync::LazyLock::new(Counters::default);

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/LOGGING.md's table of the library's events is [`EVENTS`]:
    /// none missing, none made up, in order.
    #[test]
    fn the_docs_list_every_event() {
        let docs = include_str!("../../../docs/LOGGING.md");
        let listed = leasehold_testkit::docs::table_names(docs, "The library's", "The CLI's own");
        assert_eq!(listed, EVENTS);
    }

    #[test]
    fn a_histogram_is_cumulative_and_counts_past_its_last_bound() {
        let h = Histogram::default();
        for ms in [0, 1, 3, 3, 40, 20_000] {
            h.observe(Duration::from_millis(ms));
        }
        let (buckets, count, sum) = h.cumulative();
        assert_eq!(count, 6);
        assert!((sum - 20.047).abs() < 1e-9, "{sum}");
        assert_eq!(buckets[0], (0.001, 2));
        assert_eq!(buckets[2], (0.005, 4));
        assert_eq!(buckets.last(), Some(&(10.0, 5)), "20 s is past every bound but +Inf");
    }
}
