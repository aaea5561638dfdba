//! Why a holder-side deadline passed, as the keeper saw it — so that a
//! lost-lease message says what happened, and never blames a pause that
//! did not happen.
//!
//! The keeper tells apart, from what it measured itself:
//!
//! - **this process did not run**: its threads look at the boot clock at
//!   least every [`POLL`](crate::POLL); when they looked [`NOT_RUN`] or more
//!   later than they had promised, the process was not running meanwhile
//!   (stopped by SIGSTOP, a terminal or a debugger, starved of CPU, or the
//!   machine suspended) — the boot clock counts all of that;
//! - **a request was sent and not answered** by the deadline: the store is
//!   slow, unreachable or locked; a store with one write lock (SQLite)
//!   names who holds it ([`WriteLock`]);
//! - **an answer came too late**: the store answered after the window the
//!   request opened had already closed;
//! - **renewals failed**: the store answered with errors (the last one is
//!   kept, and says what it says — a locked SQLite store names the holder).
//!
//! Several may hold at once; each is said. None of them: the deadline
//! passed with no renewal under way, none failing and the process running
//! — not expected, and said as plainly.

use std::fmt;
use std::time::Duration;

use leasehold_backend::{WriteLock, format_duration};

/// How much later than promised the keeper's threads must look at the
/// clock for the gap to count as "this process did not run": ten times
/// their longest sleep ([`POLL`](crate::POLL)), so that a busy machine's
/// scheduling delays are not taken for a stop.
pub const NOT_RUN: Duration = Duration::from_secs(1);

/// What the keeper knew when its deadline passed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overdue {
    /// This process did not run for this long (at least [`NOT_RUN`]),
    /// measured on the boot clock by its own keeper.
    pub not_run: Option<Duration>,
    /// A request (a renewal, or the acquisition) still unanswered.
    pub unanswered: Option<Unanswered>,
    /// The store's answer came this long after the request was sent, when
    /// the window it opened had already closed.
    pub late_answer: Option<Duration>,
    /// The last error of renewals that kept failing.
    pub last_error: Option<String>,
}

/// A request the store had not answered at the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    /// How long ago it was sent.
    pub sent_ago: Duration,
    /// Who holds the store's write lock (a store with one, SQLite), when it
    /// can tell and it is not this process's own request.
    pub lock: Option<WriteLock>,
}

impl fmt::Display for Overdue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(gap) = self.not_run {
            parts.push(format!(
                "this process did not run for {} (it was stopped — SIGSTOP, a terminal, a debugger —, starved of CPU, or the machine was suspended)",
                format_duration(gap)
            ));
        }
        if let Some(Unanswered { sent_ago, lock }) = &self.unanswered {
            let sent = format!("a renewal sent {} ago was still unanswered", format_duration(*sent_ago));
            parts.push(match lock {
                Some(WriteLock::Free) => format!(
                    "{sent}, though the store's write lock is free now (the store was slow, or the lock was let go just now)"
                ),
                Some(held) => format!("{sent}: the store is locked — its write lock is {held}"),
                None => format!("{sent} (the store is slow, unreachable or locked; it cannot say which)"),
            });
        }
        if let Some(took) = self.late_answer {
            parts.push(format!(
                "the store answered {} after the request was sent, when the trust window it opened had already closed",
                format_duration(took)
            ));
        }
        if let Some(e) = &self.last_error {
            parts.push(format!("renewals kept failing: {e}"));
        }
        if parts.is_empty() {
            return f.write_str("no renewal succeeded before it");
        }
        f.write_str(&parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_host::{ProcessReport, ProcessState};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_cause_is_said_and_a_pause_only_when_measured() {
        let stopped_locker = WriteLock::HeldBy(ProcessReport {
            pid: 4242,
            command: "leasehold run wedge -- ./nightly".into(),
            state: Some(ProcessState::Stopped),
            this_process: false,
        });
        let victim = Overdue {
            unanswered: Some(Unanswered {
                sent_ago: 950 * MS,
                lock: Some(stopped_locker),
            }),
            ..Overdue::default()
        };
        let said = victim.to_string();
        assert!(
            said.starts_with("a renewal sent 950ms ago was still unanswered: the store is locked — its write lock is held by pid 4242 (`leasehold run wedge -- ./nightly`), which is stopped"),
            "{said}"
        );
        for words in ["paused", "did not run", "suspended"] {
            assert!(
                !said.contains(words),
                "a victim is not said to have been paused: {said}"
            );
        }
        let stopped_itself = Overdue {
            not_run: Some(5100 * MS),
            ..Overdue::default()
        };
        assert!(
            stopped_itself
                .to_string()
                .starts_with("this process did not run for 5s 100ms")
        );
        let remote = Overdue {
            unanswered: Some(Unanswered {
                sent_ago: 2 * 1000 * MS,
                lock: None,
            }),
            ..Overdue::default()
        };
        assert!(remote.to_string().contains("slow, unreachable or locked"), "{remote}");
        let late = Overdue {
            late_answer: Some(12_000 * MS),
            ..Overdue::default()
        };
        assert!(late.to_string().contains("answered 12s after"), "{late}");
        assert_eq!(Overdue::default().to_string(), "no renewal succeeded before it");
    }
}
