//! How a command is kept under a grant of a given TTL: heartbeat, grace
//! and slack, so that the command is always stopped in time (the module
//! docs of [`crate::supervise`] give the timeline).

use std::fmt;
use std::time::Duration;

use crate::spelling::{Setting, Spelling};
use crate::{KeeperOptions, format_duration};

/// Slack between SIGKILL and the earliest store-side expiry: covers signal
/// delivery and scheduling. The keeper stops trusting a grant (and the
/// command gets SIGTERM) at `sent + ttl - grace - slack`; SIGKILL follows
/// at `sent + ttl - slack`.
#[must_use]
pub fn slack(ttl: Duration) -> Duration {
    (ttl / 20).max(Duration::from_millis(500))
}

/// The grace period when none is given: a fifth of the TTL, at most 10 s.
#[must_use]
pub fn default_grace(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(10))
}

/// How late a renewal may get through — the renewer woken late by a busy
/// scheduler, plus the store's answer — and still move the trust window
/// before it closes, with the default heartbeat: at least this much, and
/// never less than three quarters of the window (`ttl − grace − slack`).
///
/// The window is the same whatever the heartbeat; renewing sooner only
/// leaves each renewal more of it. A window of a few hundred milliseconds
/// (TTL 1 s: 300 ms) renewed at half of it left a renewal 150 ms, which two
/// busy processes on a small machine took away from it now and then
/// (issue 22: 8 runs of 50 lost their lease); a quarter leaves 225 ms. For
/// long TTLs TTL/3 leaves far more than this, and stays.
pub const RENEWAL_ROOM: Duration = Duration::from_secs(1);

/// The heartbeat when none is given, for a trust window of `window`
/// (`ttl − grace − slack`): TTL/3, shortened so that a renewal has
/// [`RENEWAL_ROOM`] — or at least three quarters of the window, when the
/// window is shorter than 4/3 s — and never more than half of the window.
fn default_heartbeat(ttl: Duration, window: Duration) -> Duration {
    let room = (window / 4).max(window.saturating_sub(RENEWAL_ROOM));
    (ttl / 3).min(window / 2).min(room)
}

/// How a command is kept under a grant of `keeper.ttl`: the grace period
/// (SIGTERM to SIGKILL) and the keeper's options (heartbeat; margin =
/// grace + slack).
#[derive(Debug, Clone)]
pub struct Timing {
    pub grace: Duration,
    pub keeper: KeeperOptions,
}

/// What is wrong with a [`TimingError`]'s combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimingProblem {
    /// Grace and slack alone fill the TTL: no heartbeat fits.
    NoTimeToRenew,
    /// The first renewal would come after the window closes (or a
    /// duration is out of its limit).
    TooLong,
}

/// A combination of durations that cannot stop the command before the
/// store could expire its grant, with the values as filled in; each
/// `*_given` says whether the caller gave the value or it was a default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "heartbeat {} + grace {} + slack {} must be shorter than the TTL {}: otherwise the command could not be stopped before the grant expires in the store",
    format_duration(*heartbeat), format_duration(*grace), format_duration(*slack), format_duration(*ttl)
)]
pub struct TimingError {
    pub problem: TimingProblem,
    pub heartbeat: Duration,
    pub heartbeat_given: bool,
    pub grace: Duration,
    pub grace_given: bool,
    pub slack: Duration,
    pub ttl: Duration,
}

/// A change that would make a refused [`TimingError`] work: the TTL may
/// always be raised; grace and heartbeat lowered only where the caller gave
/// them (a default already gives way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimingRemedy {
    RaiseTtl,
    LowerGrace,
    LowerHeartbeat,
}

impl TimingRemedy {
    /// "raise --ttl", "lower grace=": the remedy in the caller's spelling.
    #[must_use]
    pub fn worded(self, spelling: &dyn Spelling) -> String {
        let (verb, setting) = match self {
            Self::RaiseTtl => ("raise", Setting::Ttl),
            Self::LowerGrace => ("lower", Setting::Grace),
            Self::LowerHeartbeat => ("lower", Setting::Heartbeat),
        };
        format!("{verb} {}", spelling.name(setting))
    }
}

impl TimingError {
    /// What the caller may change, in the order a message offers it.
    #[must_use]
    pub fn remedies(&self) -> Vec<TimingRemedy> {
        let mut remedies = vec![TimingRemedy::RaiseTtl];
        if self.grace_given {
            remedies.push(TimingRemedy::LowerGrace);
        }
        if self.heartbeat_given && self.problem == TimingProblem::TooLong {
            remedies.push(TimingRemedy::LowerHeartbeat);
        }
        remedies
    }

    /// The refusal for a caller who named the settings as `spelling` does:
    /// the values (each default marked), what cannot work, and the
    /// remedies — the one wording the CLI (`--ttl`) and Python (`ttl=`)
    /// print.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold::spelling::Flags;
    /// use leasehold::supervise::Timing;
    /// let e = Timing::new(Duration::from_secs(10), None, Some(Duration::from_secs(10))).unwrap_err();
    /// assert!(e.worded(&Flags).ends_with("Raise --ttl, or lower --grace"));
    /// ```
    #[must_use]
    pub fn worded(&self, spelling: &dyn Spelling) -> String {
        let valued = |setting, value: Duration, given: bool| {
            let default = if given { "" } else { " (default)" };
            format!("{}{default}", spelling.with_value(setting, &format_duration(value)))
        };
        let grace = valued(Setting::Grace, self.grace, self.grace_given);
        let slack = format_duration(self.slack);
        let ttl = spelling.with_value(Setting::Ttl, &format_duration(self.ttl));
        let problem = match self.problem {
            TimingProblem::NoTimeToRenew => format!(
                "{grace} + slack {slack} leave no time to renew within {ttl}: the command could not be stopped \
                 before the lease expires in the store"
            ),
            TimingProblem::TooLong => format!(
                "{} + {grace} + slack {slack} must be shorter than {ttl}: otherwise the command could not be \
                 stopped before the lease expires in the store",
                valued(Setting::Heartbeat, self.heartbeat, self.heartbeat_given),
            ),
        };
        let remedies: Vec<String> = self.remedies().into_iter().map(|r| r.worded(spelling)).collect();
        format!("{problem}. {}", capitalise(&remedies.join(", or ")))
    }
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

impl Timing {
    /// Fill in what the caller left out so that the command can always be
    /// stopped in time: `heartbeat + grace + slack < ttl`, with room for
    /// each renewal's round trip. Defaults scale with the TTL — grace
    /// TTL/5 (at most 10 s), heartbeat TTL/3, shortened where the window
    /// `ttl − grace − slack` is short so that a renewal late by up to
    /// [`RENEWAL_ROOM`] (or three quarters of the window, if that is less)
    /// still moves it — so that every TTL of 1 s or more works with
    /// defaults (TTL 60 s: 20 s and 10 s; TTL 2 s: 275 ms and 400 ms; TTL
    /// 1 s: 75 ms and 200 ms, a renewal may be 225 ms late). Only a
    /// combination the caller spelled out that cannot work is refused.
    ///
    /// # Errors
    /// [`TimingError`], naming the values.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold::supervise::Timing;
    /// let t = Timing::new(Duration::from_secs(60), None, None).unwrap();
    /// assert_eq!((t.keeper.heartbeat, t.grace), (Some(Duration::from_secs(20)), Duration::from_secs(10)));
    /// assert!(Timing::new(Duration::from_secs(10), None, Some(Duration::from_secs(10))).is_err());
    /// ```
    pub fn new(ttl: Duration, heartbeat: Option<Duration>, grace: Option<Duration>) -> Result<Self, TimingError> {
        let slack = slack(ttl);
        let grace_given = grace.is_some();
        let grace = match (grace, heartbeat) {
            (Some(grace), _) => grace,
            (None, None) => default_grace(ttl),
            // Leave half of what the given heartbeat leaves for the renewal.
            (None, Some(heartbeat)) => default_grace(ttl).min(ttl.saturating_sub(slack + heartbeat) / 2),
        };
        let heartbeat_given = heartbeat.is_some();
        let heartbeat = heartbeat.unwrap_or_else(|| default_heartbeat(ttl, ttl.saturating_sub(grace + slack)));
        let keeper = KeeperOptions {
            ttl,
            heartbeat: Some(heartbeat),
            margin: grace + slack,
        };
        let problem = if heartbeat.is_zero() {
            TimingProblem::NoTimeToRenew
        } else if keeper.problem().is_some() {
            TimingProblem::TooLong
        } else {
            return Ok(Self { grace, keeper });
        };
        Err(TimingError {
            problem,
            heartbeat,
            heartbeat_given,
            grace,
            grace_given,
            slack,
            ttl,
        })
    }

    /// The TTL of the grant.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.keeper.ttl
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ttl {}, heartbeat {}, grace {}",
            format_duration(self.keeper.ttl),
            format_duration(self.keeper.heartbeat.unwrap_or(self.keeper.ttl / 3)),
            format_duration(self.grace)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spelling::Flags;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn defaults_fit_every_ttl_of_a_second_or_more() {
        for ms in (1000..=10_000)
            .step_by(100)
            .chain([30_000, 60_000, 90_000, 3_600_000, 86_400_000])
        {
            let ttl = ms * MS;
            let t = Timing::new(ttl, None, None).unwrap_or_else(|e| panic!("{ttl:?}: {e}"));
            let heartbeat = t.keeper.heartbeat.unwrap();
            // Room for the first renewal's round trip: at least what the
            // heartbeat waits.
            assert!(
                ttl.saturating_sub(t.keeper.margin + heartbeat) >= heartbeat.min(ttl / 10),
                "{ttl:?}: {t:?}"
            );
        }
        let t = Timing::new(Duration::from_secs(60), None, None).unwrap();
        assert_eq!(
            (t.keeper.heartbeat, t.grace),
            (Some(20_000 * MS), 10_000 * MS),
            "as before"
        );
        let t = Timing::new(Duration::from_secs(1), None, None).unwrap();
        assert_eq!((t.keeper.heartbeat, t.grace), (Some(75 * MS), 200 * MS));
    }

    #[test]
    fn a_default_heartbeat_leaves_a_late_renewal_its_room() {
        // The promise, computed apart from the formula: after a renewal
        // sent at `s`, the next is due at `s + heartbeat` and must get
        // through before `s + ttl − margin`. What is left is what a late
        // wake-up and the store's answer may take.
        for ms in (1000..=6000).step_by(50).chain([10_000, 60_000, 3_600_000]) {
            let ttl = ms * MS;
            let t = Timing::new(ttl, None, None).unwrap();
            let window = ttl.saturating_sub(t.keeper.margin);
            let left = window.saturating_sub(t.keeper.heartbeat.unwrap());
            let promised = RENEWAL_ROOM.min(window * 3 / 4);
            assert!(
                left >= promised,
                "{ttl:?}: {left:?} left for a renewal, {promised:?} promised ({t})"
            );
            assert!(left >= window / 2, "{ttl:?}: at least half the window ({t})");
        }
        // Long TTLs keep TTL/3.
        for secs in [10, 60, 3600] {
            let t = Timing::new(Duration::from_secs(secs), None, None).unwrap();
            assert_eq!(t.keeper.heartbeat, Some(Duration::from_secs(secs) / 3), "{t}");
        }
    }

    #[test]
    fn a_refusal_names_the_settings_and_only_the_remedies_that_apply() {
        let s = Duration::from_secs(1);
        let e = Timing::new(10 * s, None, Some(10 * s)).unwrap_err();
        assert_eq!(e.remedies(), [TimingRemedy::RaiseTtl, TimingRemedy::LowerGrace]);
        assert_eq!(
            e.worded(&Flags),
            "--grace 10s + slack 500ms leave no time to renew within --ttl 10s: the command could not be stopped \
             before the lease expires in the store. Raise --ttl, or lower --grace"
        );
        let e = Timing::new(10 * s, Some(9600 * MS), None).unwrap_err();
        assert_eq!(e.remedies(), [TimingRemedy::RaiseTtl, TimingRemedy::LowerHeartbeat]);
        assert_eq!(
            e.worded(&Flags),
            "--heartbeat 9s 600ms + --grace 0ms (default) + slack 500ms must be shorter than --ttl 10s: otherwise the \
             command could not be stopped before the lease expires in the store. Raise --ttl, or lower --heartbeat"
        );
    }

    #[test]
    fn only_spelled_out_combinations_are_refused() {
        let s = Duration::from_secs(1);
        // A spelled heartbeat makes the default grace give way.
        let t = Timing::new(10 * s, Some(7 * s), None).unwrap();
        assert!(t.grace < 2 * s, "{t:?}");
        // A spelled grace makes the default heartbeat shorter.
        let t = Timing::new(5 * s, None, Some(3 * s)).unwrap();
        assert!(t.keeper.heartbeat.unwrap() < 1500 * MS, "{t:?}");
        let e = Timing::new(10 * s, Some(5 * s), Some(5 * s)).unwrap_err();
        assert_eq!(
            (e.problem, e.heartbeat_given, e.grace_given),
            (TimingProblem::TooLong, true, true)
        );
        let e = Timing::new(10 * s, None, Some(10 * s)).unwrap_err();
        assert_eq!((e.problem, e.grace_given), (TimingProblem::NoTimeToRenew, true));
        let e = Timing::new(10 * s, Some(9600 * MS), None).unwrap_err();
        assert_eq!(
            (e.problem, e.grace, e.grace_given, e.heartbeat_given),
            (TimingProblem::TooLong, Duration::ZERO, false, true)
        );
        assert!(
            Timing::new(500 * MS, None, None).is_err(),
            "below a second the slack alone is too long"
        );
    }
}
