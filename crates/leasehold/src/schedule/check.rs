//! What a schedule must be to be kept: [`Schedule::check`], which
//! [`Schedules::add`](super::Schedules::add) runs before it writes
//! anything. Each refusal is a setting that would make the schedule fire
//! nothing, or something else than its author meant, found out only at its
//! slots by a daemon on another machine:
//!
//! - `deadline` 0: every slot would be recorded missed.
//! - `jitter` at least the time between two slots: a daemon that waits it
//!   out finds the next slot due, and records this one missed; at least
//!   the deadline: a slot claimed after its wait is past its deadline; more
//!   than [`JITTER_MAX`]: no spread of load needs it.
//! - a command that is empty, or a relative path with a `/` in it
//!   (`./report.sh`): each daemon would look it up in its own working
//!   directory (under a service unit, `/`). The CLI resolves such a path
//!   against the directory `schedule add` runs in and stores the absolute
//!   one; a bare name (`python3`) is looked up on each daemon's `PATH`.
//! - a queue name that is not one, a TTL and grace no command could be
//!   stopped in time with ([`Timing::new`]).
//!
//! Pure: no store, no clock (the cron gaps are looked for from the
//! schedule's `created`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use leasehold_backend::{BackendError, ErrorKind};

use super::record::{Action, Schedule, queue_of};
use crate::supervise::Timing;
use crate::{Result, format_duration, format_time, quoted};

/// The longest jitter: a jitter spreads the claims of schedules due at one
/// instant over seconds or minutes; the longest in common use (apt's daily
/// timers wait up to 12 h at random) is the bound.
pub const JITTER_MAX: Duration = Duration::from_secs(12 * 3600);

/// How far ahead of its creation a cron schedule's slots are looked at for
/// the shortest time between two of them: a year, so that both changes of
/// clock of its zone are in it (a fixed time pushed past a skipped hour
/// can come closer to the next one, a repeated hour brings an elapsed-time
/// pattern's slots an hour apart).
pub const GAP_SEARCH: Duration = Duration::from_secs(366 * 86_400);

/// At most this many slots are looked at (a pattern firing every few
/// minutes has over 100,000 in a year; its shortest gap shows in the
/// first of them).
pub const GAP_SEARCH_SLOTS: usize = 100_000;

fn refused(reason: String, hint: impl Into<String>) -> crate::Error {
    BackendError::new(ErrorKind::InvalidInput, String::new(), reason)
        .hint(hint)
        .into()
}

impl Schedule {
    /// Whether this schedule can be kept as it is; see the module docs for
    /// what is refused and why.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`]: a message that names the setting, its
    /// value and what to give instead.
    ///
    /// # Examples
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use leasehold::LeaseName;
    /// use leasehold::schedule::{Action, Schedule, ScheduleSpec};
    ///
    /// let spec = ScheduleSpec::parse("@every 5s", None)?;
    /// let command = Action::Run { command: vec!["/usr/local/bin/report".into()] };
    /// let mut schedule = Schedule::new(LeaseName::new("report")?, spec, command, SystemTime::now());
    /// assert!(schedule.check().is_ok());
    /// schedule.jitter = Duration::from_secs(5);
    /// assert!(schedule.check().unwrap_err().to_string().contains("between two slots"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self) -> Result<()> {
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err(refused(
                "--deadline 0ms leaves no time to start a slot: every slot would be recorded missed".into(),
                "give a deadline longer than 0 (--deadline 30s), or none (no limit)",
            ));
        }
        self.check_jitter()?;
        match &self.action {
            Action::Run { command } => check_command(command)?,
            Action::Enqueue { queue, .. } => {
                queue_of(queue).map_err(|_| {
                    refused(
                        format!("{} is not a queue name", quoted(queue)),
                        "give a queue name such as jobs (--queue jobs)",
                    )
                })?;
            }
        }
        if let Err(e) = Timing::new(self.ttl, None, self.grace) {
            return Err(refused(e.to_string(), "give a longer --ttl, or a shorter --grace"));
        }
        Ok(())
    }

    fn check_jitter(&self) -> Result<()> {
        let jitter = self.jitter;
        if jitter.is_zero() {
            return Ok(());
        }
        if jitter > JITTER_MAX {
            return Err(refused(
                format!(
                    "--jitter {} is longer than the {} a jitter may be",
                    format_duration(jitter),
                    format_duration(JITTER_MAX)
                ),
                format!(
                    "a jitter spreads the claims of schedules due at one instant over seconds or minutes: give one of at most {}",
                    format_duration(JITTER_MAX)
                ),
            ));
        }
        if let Some(deadline) = self.deadline.filter(|d| jitter >= *d) {
            return Err(refused(
                format!(
                    "--jitter {} is not shorter than --deadline {}: a daemon waits up to its jitter before it claims a slot, and a slot claimed past its deadline is recorded missed",
                    format_duration(jitter),
                    format_duration(deadline)
                ),
                "give a jitter shorter than the deadline",
            ));
        }
        if let Some((gap, at)) = self.gap_within(jitter) {
            return Err(refused(
                format!(
                    "--jitter {} is not shorter than the time between two slots of {} ({} after the slot at {})",
                    format_duration(jitter),
                    quoted(self.spec.text()),
                    format_duration(gap),
                    format_time(at)
                ),
                format!(
                    "a daemon that waits out its jitter would find the next slot due, and record this one missed: give a jitter under {}, or none",
                    format_duration(gap)
                ),
            ));
        }
        Ok(())
    }

    /// The first two slots at most `jitter` apart (the gap and the first
    /// slot), looked for over [`GAP_SEARCH`] from `created`, at most
    /// [`GAP_SEARCH_SLOTS`] slots.
    fn gap_within(&self, jitter: Duration) -> Option<(Duration, SystemTime)> {
        let until = self.created.checked_add(GAP_SEARCH);
        let mut slots = self
            .spec
            .slots_after(self.created)
            .take_while(|slot| until.is_none_or(|until| *slot <= until))
            .take(GAP_SEARCH_SLOTS);
        let mut last = slots.next()?;
        for slot in slots {
            let gap = slot.duration_since(last).unwrap_or_default();
            if gap <= jitter {
                return Some((gap, last));
            }
            last = slot;
        }
        None
    }
}

/// A command each daemon can find the same: not empty, and its program
/// an absolute path or a bare name (looked up on the daemon's `PATH`).
fn check_command(command: &[String]) -> Result<()> {
    let Some(program) = command.first().filter(|p| !p.is_empty()) else {
        return Err(refused(
            "a schedule's command is empty".into(),
            "give a program and its arguments after -- (-- /usr/local/bin/report --daily)",
        ));
    };
    if program.contains('/') && !Path::new(program).is_absolute() {
        return Err(refused(
            format!(
                "the command {} is a relative path, which each daemon would look up in its own working directory",
                quoted(program)
            ),
            "give its absolute path (`leasehold schedule add` resolves a relative one against the directory it runs in)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::LeaseName;
    use crate::schedule::ScheduleSpec;

    fn schedule(cron: &str, zone: Option<&str>) -> Schedule {
        let command = Action::Run {
            command: vec!["true".into()],
        };
        // 2026-01-01T00:00:00Z: the year ahead holds both changes of clock.
        let created = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let spec = ScheduleSpec::parse(cron, zone).unwrap();
        Schedule::new(LeaseName::new("s").unwrap(), spec, command, created)
    }

    fn refusal(s: &Schedule) -> String {
        let e = s.check().expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        e.to_string()
    }

    #[test]
    fn a_zero_deadline_is_refused_and_any_other_kept() {
        let mut s = schedule("@every 5s", None);
        s.deadline = Some(Duration::ZERO);
        let e = refusal(&s);
        assert!(e.contains("--deadline 0ms") && e.contains("--deadline 30s"), "{e}");
        s.deadline = Some(Duration::from_millis(1));
        s.check().unwrap();
    }

    #[test]
    fn a_jitter_is_shorter_than_the_time_between_slots() {
        let mut s = schedule("@every 5s", None);
        s.jitter = Duration::from_millis(4999);
        s.check().unwrap();
        s.jitter = Duration::from_secs(5);
        let e = refusal(&s);
        assert!(e.contains("--jitter 5s") && e.contains("(5s after the slot at"), "{e}");
        // Cron: the shortest gap, not the first one.
        let mut s = schedule("0,10 0 9 * * *", None);
        s.jitter = Duration::from_secs(9);
        s.check().unwrap();
        s.jitter = Duration::from_secs(10);
        assert!(refusal(&s).contains("(10s after"));
        // Berlin's spring night: 02:30 is skipped and fires at 03:00, half
        // an hour before the 03:30 slot; every other night they are an
        // hour apart.
        let mut s = schedule("30 2,3 * * *", Some("Europe/Berlin"));
        s.jitter = Duration::from_secs(1800);
        let e = refusal(&s);
        assert!(e.contains("(30m after the slot at 2026-03-29T01:00:00.000Z)"), "{e}");
        s.jitter = Duration::from_secs(1799);
        s.check().unwrap();
        // The autumn night: an elapsed-time pattern's repeated hour.
        let mut s = schedule("0 */2 * * *", Some("Europe/Berlin"));
        s.jitter = Duration::from_secs(3600);
        assert!(refusal(&s).contains("(1h after the slot at 2026-10-25T00:00:00.000Z)"));
    }

    #[test]
    fn a_jitter_is_bounded_and_shorter_than_the_deadline() {
        let mut s = schedule("@yearly", None);
        s.jitter = JITTER_MAX;
        s.check().unwrap();
        s.jitter = Duration::from_secs(365 * 86_400);
        assert!(refusal(&s).contains("longer than the 12h"));
        s.jitter = Duration::from_secs(60);
        s.deadline = Some(Duration::from_secs(60));
        assert!(refusal(&s).contains("not shorter than --deadline 1m"));
        s.deadline = Some(Duration::from_secs(61));
        s.check().unwrap();
    }

    #[test]
    fn a_command_is_an_absolute_path_or_a_name_on_path() {
        let mut s = schedule("@hourly", None);
        for (command, kept) in [
            (vec!["true"], true),
            (vec!["/usr/local/bin/report", "--daily"], true),
            (vec!["./report.sh"], false),
            (vec!["bin/report"], false),
            (vec!["../report"], false),
            (vec![""], false),
            (vec![], false),
        ] {
            s.action = Action::Run {
                command: command.iter().map(|c| (*c).to_owned()).collect(),
            };
            assert_eq!(s.check().is_ok(), kept, "{command:?}");
        }
        s.action = Action::Run {
            command: vec!["./report.sh".into()],
        };
        assert!(refusal(&s).contains("\"./report.sh\" is a relative path"));
    }

    #[test]
    fn a_ttl_no_command_could_be_stopped_in_is_refused() {
        let mut s = schedule("@hourly", None);
        s.ttl = Duration::from_secs(2);
        s.grace = Some(Duration::from_secs(5));
        assert!(refusal(&s).contains("give a longer --ttl"));
    }
}
