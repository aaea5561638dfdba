//! `/metrics` in the Prometheus text format (0.0.4), written by hand: it
//! is a few lines per family.
//!
//! Gauges come from the latest reading; counters from what the follower
//! counted since `serve` started ([`crate::watch`]) — they only grow, and
//! start again at zero when `serve` restarts, as Prometheus expects of a
//! counter. A name's counters appear at its first event since then.

use std::fmt::Write as _;
use std::time::SystemTime;

use leasehold::HistoryEvent;

use crate::watch::{COUNTED, Counters, Snapshot};

/// A label value: backslash, double quote and newline escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
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

#[must_use]
pub fn render(snapshot: &Snapshot, counters: &Counters) -> String {
    let mut out = String::with_capacity(64 * 1024);
    // A grant whose holder is provably gone is no holder: it is counted
    // apart, as takeable (the next acquisition takes it over).
    for (family_name, help, dead) in [
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
        family(&mut out, family_name, "gauge", help);
        for s in &snapshot.leases {
            for mode in ["exclusive", "shared"] {
                let n = s
                    .grants
                    .iter()
                    .filter(|g| g.mode.label() == mode && snapshot.dead(g) == dead)
                    .count();
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "{family_name}{{name=\"{}\",mode=\"{mode}\"}} {n}",
                        label(s.name.as_str())
                    );
                }
            }
        }
    }
    family(
        &mut out,
        "leasehold_lease_waiters",
        "gauge",
        "Waiters queued per name (only names with waiters).",
    );
    for s in snapshot.leases.iter().filter(|s| !s.waiters.is_empty()) {
        let _ = writeln!(
            out,
            "leasehold_lease_waiters{{name=\"{}\"}} {}",
            label(s.name.as_str()),
            s.waiters.len()
        );
    }
    family(
        &mut out,
        "leasehold_leases_held",
        "gauge",
        "Names with at least one grant whose holder is not provably gone.",
    );
    let _ = writeln!(
        out,
        "leasehold_leases_held {}",
        snapshot.leases.iter().filter(|s| snapshot.held(s)).count()
    );
    family(&mut out, "leasehold_lease_names", "gauge", "Names ever granted.");
    let _ = writeln!(out, "leasehold_lease_names {}", snapshot.leases.len());

    for (k, event) in COUNTED.iter().enumerate() {
        let (name, help) = counter_of(*event);
        family(&mut out, name, "counter", help);
        for (lease, counts) in &counters.events {
            if counts[k] > 0 {
                let _ = writeln!(out, "{name}{{name=\"{}\"}} {}", label(lease.as_str()), counts[k]);
            }
        }
    }
    family(
        &mut out,
        "leasehold_lease_takeovers_by_expiry_total",
        "counter",
        "Grants given right after the previous holder's grant expired.",
    );
    for (lease, counts) in &counters.events {
        if counts[COUNTED.len()] > 0 {
            let _ = writeln!(
                out,
                "leasehold_lease_takeovers_by_expiry_total{{name=\"{}\"}} {}",
                label(lease.as_str()),
                counts[COUNTED.len()]
            );
        }
    }

    if let Some(queues) = &snapshot.queues {
        family(
            &mut out,
            "leasehold_queue_tasks",
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
                let _ = writeln!(
                    out,
                    "leasehold_queue_tasks{{queue=\"{}\",state=\"{state}\"}} {n}",
                    label(s.queue.as_str())
                );
            }
        }
        family(
            &mut out,
            "leasehold_queue_oldest_pending_age_seconds",
            "gauge",
            "How long the next task to be claimed has been claimable (0 when none is).",
        );
        let now = SystemTime::now();
        for q in queues {
            let age = q.oldest_pending_age(now).map_or(0.0, |d| d.as_secs_f64());
            let _ = writeln!(
                out,
                "leasehold_queue_oldest_pending_age_seconds{{queue=\"{}\"}} {age:.3}",
                label(q.stats.queue.as_str())
            );
        }
        family(
            &mut out,
            "leasehold_queue_claim_age_seconds",
            "gauge",
            "Longest time since a running task was claimed (heartbeats do not reset it; 0 when none runs).",
        );
        for q in queues {
            let age = q
                .running
                .iter()
                .filter_map(|t| now.duration_since(t.claimed_at()?).ok())
                .max()
                .map_or(0.0, |d| d.as_secs_f64());
            let _ = writeln!(
                out,
                "leasehold_queue_claim_age_seconds{{queue=\"{}\"}} {age:.3}",
                label(q.stats.queue.as_str())
            );
        }
        family(
            &mut out,
            "leasehold_queue_claims_late",
            "gauge",
            "Running claims overdue for a heartbeat (less than half their TTL left).",
        );
        for q in queues {
            let _ = writeln!(
                out,
                "leasehold_queue_claims_late{{queue=\"{}\"}} {}",
                label(q.stats.queue.as_str()),
                q.late
            );
        }
        family(
            &mut out,
            "leasehold_queue_claims_expired",
            "gauge",
            "Running claims whose lease ran out (the task comes back).",
        );
        for q in queues {
            let _ = writeln!(
                out,
                "leasehold_queue_claims_expired{{queue=\"{}\"}} {}",
                label(q.stats.queue.as_str()),
                q.expired
            );
        }
        for (name, help, pick) in [
            (
                "leasehold_queue_claims_total",
                "Claims seen since serve started (a lower bound: one that starts and fails back within a refresh is missed).",
                0,
            ),
            (
                "leasehold_queue_completions_total",
                "Tasks that became done since serve started.",
                1,
            ),
            (
                "leasehold_queue_deaths_total",
                "Tasks that became dead since serve started.",
                2,
            ),
        ] {
            family(&mut out, name, "counter", help);
            for (queue, c) in &counters.queues {
                let v = [c.claims, c.completions, c.deaths][pick];
                let _ = writeln!(out, "{name}{{queue=\"{}\"}} {v}", label(queue.as_str()));
            }
        }
    }
    family(
        &mut out,
        "leasehold_serve_refresh_seconds",
        "gauge",
        "How long the last reading of the store took.",
    );
    let _ = writeln!(
        out,
        "leasehold_serve_refresh_seconds {:.6}",
        counters.last_refresh.as_secs_f64()
    );
    family(
        &mut out,
        "leasehold_serve_refreshes_total",
        "counter",
        "Readings of the store.",
    );
    let _ = writeln!(out, "leasehold_serve_refreshes_total {}", counters.refreshes);
    family(
        &mut out,
        "leasehold_serve_refresh_errors_total",
        "counter",
        "Readings that failed.",
    );
    let _ = writeln!(out, "leasehold_serve_refresh_errors_total {}", counters.refresh_errors);
    family(
        &mut out,
        "leasehold_serve_history_gaps_total",
        "counter",
        "Times a name had more new history than the store keeps between two visits (events may be missed).",
    );
    let _ = writeln!(out, "leasehold_serve_history_gaps_total {}", counters.history_gaps);
    out
}
