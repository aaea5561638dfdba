//! `/metrics` in the Prometheus text format (0.0.4), written by hand: it
//! is a few lines per family.
//!
//! Gauges come from the latest reading; counters from what the follower
//! counted since `serve` started ([`crate::watch`]) — they only grow, and
//! start again at zero when `serve` restarts, as Prometheus expects of a
//! counter. A name's counters appear at its first event since then.

use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime};

use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::{HistoryEvent, LeaseName, telemetry};

use crate::watch::{COUNTED, Counters, OUTCOMES, QueueView, ScheduleView, Snapshot};

/// The Prometheus text format's media type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value: backslash, double quote and newline escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One line of a family: `name{key="value",...} value`.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{key}=\"{}\"", label(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A family of one value, without labels.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl fmt::Display) {
    family(out, name, kind, help);
    sample(out, name, &[], value);
}

/// The counter family of each counted event.
fn counter_of(event: HistoryEvent) -> (&'static str, &'static str) {
    match event {
        HistoryEvent::Granted => ("leasehold_lease_grants_total", "Grants given (new tokens issued)."),
        HistoryEvent::Reacquired => (
            "leasehold_lease_reacquisitions_total",
            "Live grants re-acquired by their explicit owner (same token).",
        ),
        HistoryEvent::Released => ("leasehold_lease_releases_total", "Grants released by their holder."),
        HistoryEvent::Expired => (
            "leasehold_lease_expiries_total",
            "Grants whose TTL ran out (counted when the store records it: at the next operation on the name).",
        ),
        HistoryEvent::FastTakeover => (
            "leasehold_lease_takeovers_by_proof_total",
            "Live grants taken over because their holder was proved dead.",
        ),
        HistoryEvent::StaleRefused => (
            "leasehold_lease_refusals_total",
            "Renewals or releases refused for a token that is not live.",
        ),
        HistoryEvent::FencePassed => ("leasehold_fence_passes_total", "Fence checks passed."),
        HistoryEvent::FenceRefused => (
            "leasehold_fence_refusals_total",
            "Fence checks refused (a stale token).",
        ),
    }
}

/// A daemon's own counters (`work`/`cron --metrics-listen`): what this
/// process did since it started, whatever the store holds.
#[must_use]
pub fn render_process(c: &telemetry::Counters) -> String {
    let mut out = String::with_capacity(4 * 1024);
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    family(
        &mut out,
        "leasehold_daemon_tasks_total",
        "counter",
        "Tasks this worker finished, by outcome (done, failed, dead, lost, handed back).",
    );
    for (outcome, count) in telemetry::TASK_OUTCOMES.iter().zip(&c.tasks) {
        sample(
            &mut out,
            "leasehold_daemon_tasks_total",
            &[("outcome", outcome)],
            n(count),
        );
    }
    family(
        &mut out,
        "leasehold_daemon_slots_total",
        "counter",
        "Slot records this daemon wrote, by outcome: claimed is a slot fired; missed counts the slots its record stands for.",
    );
    for (outcome, count) in telemetry::SLOT_OUTCOMES.iter().zip(&c.slots) {
        sample(
            &mut out,
            "leasehold_daemon_slots_total",
            &[("outcome", outcome.as_str())],
            n(count),
        );
    }
    single(
        &mut out,
        "leasehold_daemon_grants_total",
        "counter",
        "Grants this process was given.",
        n(&c.grants),
    );
    single(
        &mut out,
        "leasehold_daemon_lease_losses_total",
        "counter",
        "Grants and task claims this process kept and lost.",
        n(&c.losses),
    );
    single(
        &mut out,
        "leasehold_daemon_renewal_failures_total",
        "counter",
        "Renewals that failed and were tried again.",
        n(&c.renewal_failures),
    );
    single(
        &mut out,
        "leasehold_daemon_store_unavailable_total",
        "counter",
        "Times the store did not answer and the daemon tried again later.",
        n(&c.unavailable),
    );
    let name = "leasehold_daemon_renewal_latency_seconds";
    family(
        &mut out,
        name,
        "histogram",
        "From a renewal's request to its answer, of the grants and claims this process kept.",
    );
    let (buckets, count, sum) = c.renewal_latency.cumulative();
    for (bound, below) in buckets {
        sample(
            &mut out,
            &format!("{name}_bucket"),
            &[("le", &bound.to_string())],
            below,
        );
    }
    sample(&mut out, &format!("{name}_bucket"), &[("le", "+Inf")], count);
    sample(&mut out, &format!("{name}_sum"), &[], sum);
    sample(&mut out, &format!("{name}_count"), &[], count);
    out
}

#[must_use]
pub fn render(snapshot: &Snapshot, counters: &Counters) -> String {
    let mut out = String::with_capacity(64 * 1024);
    holders(&mut out, snapshot);
    waiters(&mut out, snapshot);
    single(
        &mut out,
        "leasehold_leases_held",
        "gauge",
        "Names with at least one grant whose holder is not provably gone.",
        snapshot.leases.iter().filter(|s| snapshot.held(s)).count(),
    );
    single(
        &mut out,
        "leasehold_lease_names",
        "gauge",
        "Names ever granted.",
        snapshot.leases.len(),
    );
    lease_counters(&mut out, counters);
    if let Some(queues) = &snapshot.queues {
        queue_tasks(&mut out, queues);
        queue_gauges(&mut out, queues, SystemTime::now());
        queue_counters(&mut out, counters);
    }
    if let Some(schedules) = &snapshot.schedules {
        schedule_gauges(&mut out, schedules, SystemTime::now());
    }
    single(
        &mut out,
        "leasehold_serve_refresh_seconds",
        "gauge",
        "How long the last reading of the store took.",
        format_args!("{:.6}", counters.last_refresh.as_secs_f64()),
    );
    single(
        &mut out,
        "leasehold_serve_refreshes_total",
        "counter",
        "Readings of the store.",
        counters.refreshes,
    );
    single(
        &mut out,
        "leasehold_serve_refresh_errors_total",
        "counter",
        "Readings that failed.",
        counters.refresh_errors,
    );
    single(
        &mut out,
        "leasehold_serve_history_gaps_total",
        "counter",
        "Times a name had more new history than the store keeps between two visits (events may be missed).",
        counters.history_gaps,
    );
    out
}

/// Grants per name and mode.
fn holders(out: &mut String, snapshot: &Snapshot) {
    // A grant whose holder is provably gone is no holder: it is counted
    // apart, as takeable (the next acquisition takes it over).
    for (name, help, dead) in [
        (
            "leasehold_lease_holders",
            "Grants per name and mode whose holder is not provably gone.",
            false,
        ),
        (
            "leasehold_lease_dead_holders",
            "Grants per name and mode whose holder is provably gone (the next acquisition takes them over).",
            true,
        ),
    ] {
        family(out, name, "gauge", help);
        for s in &snapshot.leases {
            for mode in ["exclusive", "shared"] {
                let n = s
                    .grants
                    .iter()
                    .filter(|g| g.mode.label() == mode && snapshot.dead(g) == dead)
                    .count();
                if n > 0 {
                    sample(out, name, &[("name", s.name.as_str()), ("mode", mode)], n);
                }
            }
        }
    }
}

fn waiters(out: &mut String, snapshot: &Snapshot) {
    let name = "leasehold_lease_waiters";
    family(out, name, "gauge", "Waiters queued per name (only names with waiters).");
    for s in snapshot.leases.iter().filter(|s| !s.waiters.is_empty()) {
        sample(out, name, &[("name", s.name.as_str())], s.waiters.len());
    }
}

/// Per name, the counter of each counted event, then of takeovers after
/// expiry: the order of [`Counters::events`].
fn lease_counters(out: &mut String, counters: &Counters) {
    let takeovers_by_expiry = (
        "leasehold_lease_takeovers_by_expiry_total",
        "Grants given right after the previous holder's grant expired.",
    );
    let families = COUNTED.iter().map(|e| counter_of(*e)).chain([takeovers_by_expiry]);
    for (k, (name, help)) in families.enumerate() {
        family(out, name, "counter", help);
        for (lease, counts) in &counters.events {
            if counts[k] > 0 {
                sample(out, name, &[("name", lease.as_str())], counts[k]);
            }
        }
    }
}

fn queue_tasks(out: &mut String, queues: &[QueueView]) {
    let name = "leasehold_queue_tasks";
    family(
        out,
        name,
        "gauge",
        "Tasks per queue and state (from the store's indexes).",
    );
    for q in queues {
        let s = &q.stats;
        for (state, n) in [
            ("pending", s.pending),
            ("running", s.running),
            ("done", s.done),
            ("dead", s.dead),
        ] {
            sample(out, name, &[("queue", s.queue.as_str()), ("state", state)], n);
        }
    }
}

/// A family with one sample per queue.
fn by_queue<'a>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl Iterator<Item = (&'a LeaseName, impl fmt::Display)>,
) {
    family(out, name, kind, help);
    for (queue, value) in samples {
        sample(out, name, &[("queue", queue.as_str())], value);
    }
}

/// The gauges with one value per queue, the ages as of `now`.
fn queue_gauges(out: &mut String, queues: &[QueueView], now: SystemTime) {
    let seconds = |age: Option<Duration>| format!("{:.3}", age.map_or(0.0, |d| d.as_secs_f64()));
    by_queue(
        out,
        "leasehold_queue_oldest_pending_age_seconds",
        "gauge",
        "How long the next task to be claimed has been claimable (0 when none is).",
        queues
            .iter()
            .map(|q| (&q.stats.queue, seconds(q.oldest_pending_age(now)))),
    );
    by_queue(
        out,
        "leasehold_queue_claim_age_seconds",
        "gauge",
        "Longest time since a running task was claimed (heartbeats do not reset it; 0 when none runs).",
        queues.iter().map(|q| {
            let longest = q
                .running
                .iter()
                .filter_map(|t| now.duration_since(t.claimed_at()?).ok())
                .max();
            (&q.stats.queue, seconds(longest))
        }),
    );
    by_queue(
        out,
        "leasehold_queue_claims_late",
        "gauge",
        "Running claims overdue for a heartbeat (less than half their TTL left).",
        queues.iter().map(|q| (&q.stats.queue, q.late)),
    );
    by_queue(
        out,
        "leasehold_queue_claims_expired",
        "gauge",
        "Running claims whose lease ran out (the task comes back).",
        queues.iter().map(|q| (&q.stats.queue, q.expired)),
    );
}

fn queue_counters(out: &mut String, counters: &Counters) {
    by_queue(
        out,
        "leasehold_queue_claims_total",
        "counter",
        "Claims seen since serve started (a lower bound: one that starts and fails back within a refresh is missed).",
        counters.queues.iter().map(|(queue, c)| (queue, c.claims)),
    );
    by_queue(
        out,
        "leasehold_queue_completions_total",
        "counter",
        "Tasks that became done since serve started.",
        counters.queues.iter().map(|(queue, c)| (queue, c.completions)),
    );
    by_queue(
        out,
        "leasehold_queue_deaths_total",
        "counter",
        "Tasks that became dead since serve started.",
        counters.queues.iter().map(|(queue, c)| (queue, c.deaths)),
    );
}

/// A time as Unix seconds, to the millisecond (what a store keeps).
fn unix_seconds(t: SystemTime) -> String {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{:.3}", since.as_secs_f64())
}

/// A family with one sample per schedule that has a value.
fn by_schedule<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl Iterator<Item = (&'a LeaseName, Option<String>)>,
) {
    family(out, name, "gauge", help);
    for (schedule, value) in samples {
        if let Some(value) = value {
            sample(out, name, &[("schedule", schedule.as_str())], value);
        }
    }
}

/// The gauges of each schedule; its next slot as of `now`.
fn schedule_gauges(out: &mut String, schedules: &[ScheduleView], now: SystemTime) {
    by_schedule(
        out,
        "leasehold_schedule_paused",
        "Whether the schedule is paused (1: its slots pass unfired) or fires (0).",
        schedules.iter().map(|v| {
            (
                &v.kept.schedule.name,
                Some(u8::from(v.kept.schedule.paused).to_string()),
            )
        }),
    );
    by_schedule(
        out,
        "leasehold_schedule_next_fire_timestamp_seconds",
        "When the schedule's next slot is due, in Unix seconds (absent while it is paused).",
        schedules
            .iter()
            .map(|v| (&v.kept.schedule.name, v.kept.next_slot(now).map(unix_seconds))),
    );
    by_schedule(
        out,
        "leasehold_schedule_last_slot_timestamp_seconds",
        "The schedule's last slot accounted for (fired, skipped or missed), in Unix seconds (absent before its first).",
        schedules.iter().map(|v| {
            (
                &v.kept.schedule.name,
                v.kept.state.as_ref().map(|(s, _)| unix_seconds(s.last_slot)),
            )
        }),
    );
    let slots = "leasehold_schedule_slots";
    family(
        out,
        slots,
        "gauge",
        "Slots per schedule and outcome among its slot records the store keeps (the newest 1000; a record of missed slots counts each slot it stands for).",
    );
    for v in schedules {
        for (outcome, n) in OUTCOMES.iter().zip(v.outcomes()) {
            sample(
                out,
                slots,
                &[
                    ("schedule", v.kept.schedule.name.as_str()),
                    ("outcome", outcome.as_str()),
                ],
                n,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_escapes_its_label_values_and_omits_empty_braces() {
        let mut out = String::new();
        sample(&mut out, "m", &[("name", "a\"b\\c\nd"), ("mode", "shared")], 2);
        single(&mut out, "t", "counter", "Things.", format_args!("{:.3}", 1.5));
        assert_eq!(
            out,
            "m{name=\"a\\\"b\\\\c\\nd\",mode=\"shared\"} 2\n# HELP t Things.\n# TYPE t counter\nt 1.500\n"
        );
    }
}

#[cfg(test)]
mod daemon_tests {
    /// Every family a daemon serves is in docs/LOGGING.md's table.
    #[test]
    fn the_docs_list_every_daemon_family() {
        let docs = include_str!("../../../docs/LOGGING.md");
        let text = super::render_process(&leasehold::telemetry::Counters::default());
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
            .collect();
        assert_eq!(families.len(), 7, "{text}");
        for family in families {
            assert!(
                docs.contains(&format!("| `{family}")),
                "{family} is not in docs/LOGGING.md"
            );
        }
    }
}
