//! The store's clock, as a daemon keeps it between readings.
//!
//! Every decision about a slot's time — due, late, missed, paused since,
//! created at — is taken on the store's clock (DESIGN §7b), which
//! [`RecordBackend::record_clock`](leasehold_backend::RecordBackend::record_clock)
//! reads. A command (`schedule add`, `resume`) reads it once. A daemon
//! cannot read it before every look at its schedules, so it keeps the last
//! reading and counts on from it on its own *monotonic* clock: a jump of
//! this host's wall clock moves nothing, and this host's wall clock being
//! an hour off moves nothing either — slots are fired on the store's time.
//! How far this host's wall clock is from the store's is logged (once per
//! change beyond [`SKEW_TOLD`]), never acted on.

use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::StoreTime;

use crate::{Result, Store};

/// A disagreement between this host's wall clock and the store's that a
/// daemon tells its log: beyond it, a machine's `date` and its daemon's
/// slots differ visibly.
pub const SKEW_TOLD: Duration = Duration::from_secs(1);

/// The store's clock as of one reading, counted on by this process's
/// monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreClock {
    /// The store's time at `taken` (the middle of the reading's round trip).
    at: SystemTime,
    taken: Instant,
    /// How far the reading may be off: the store's own uncertainty plus
    /// half the round trip.
    within: Duration,
    /// This host's wall clock at `taken`, for [`StoreClock::skew`].
    local: SystemTime,
}

impl StoreClock {
    /// Read `store`'s clock now.
    ///
    /// # Errors
    /// Store errors; [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)
    /// for a store that keeps no schedules.
    pub fn read(store: &Store) -> Result<Self> {
        let schedules = store.schedules()?;
        let before = Instant::now();
        let reading: StoreTime = schedules.records().record_clock()?;
        let round_trip = before.elapsed();
        let taken = before + round_trip / 2;
        Ok(Self {
            at: reading.at,
            taken,
            within: reading.within + round_trip / 2,
            local: SystemTime::now() - round_trip / 2,
        })
    }

    /// The store's time now.
    #[must_use]
    pub fn now(&self) -> SystemTime {
        self.at + self.taken.elapsed()
    }

    /// Whether the store's clock has surely passed `t` (by more than the
    /// reading's uncertainty): a slot is claimed only then, so no record
    /// is written for a slot in the store's future.
    #[must_use]
    pub fn surely_past(&self, t: SystemTime) -> bool {
        self.now()
            .checked_sub(self.within)
            .is_some_and(|earliest| earliest >= t)
    }

    /// When, on this process's monotonic clock, the store's clock surely
    /// reaches `t`.
    #[must_use]
    pub fn instant_of(&self, t: SystemTime) -> Instant {
        match t.duration_since(self.at) {
            Ok(ahead) => self.taken + ahead + self.within,
            Err(_) => self.taken,
        }
    }

    /// How far this host's wall clock was ahead of the store's (negative:
    /// behind) when read, in whole milliseconds.
    #[must_use]
    pub fn skew_ms(&self) -> i64 {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        match self.local.duration_since(self.at) {
            Ok(ahead) => ms(ahead),
            Err(behind) => -ms(behind.duration()),
        }
    }

    /// The reading's uncertainty.
    #[must_use]
    pub fn within(&self) -> Duration {
        self.within
    }

    /// A line for the log when this host's wall clock is [`SKEW_TOLD`] or
    /// more off the store's; `None` when it is not.
    #[must_use]
    pub fn skew_told(&self) -> Option<String> {
        let skew = self.skew_ms();
        let off = Duration::from_millis(skew.unsigned_abs());
        (off >= SKEW_TOLD + self.within).then(|| {
            format!(
                "this host's clock is {} {} the store's; slots are timed by the store's clock (set this host's clock right: chrony or systemd-timesyncd)",
                crate::format_duration(off),
                if skew > 0 { "ahead of" } else { "behind" },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(at_secs: u64, within_ms: u64) -> StoreClock {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(at_secs);
        StoreClock {
            at,
            taken: Instant::now(),
            within: Duration::from_millis(within_ms),
            local: at + Duration::from_secs(3600),
        }
    }

    #[test]
    fn a_slot_is_past_only_beyond_the_readings_uncertainty() {
        let c = clock(1_000, 200);
        let at = |ms: i64| {
            let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
            if ms >= 0 {
                base + Duration::from_millis(ms.unsigned_abs())
            } else {
                base - Duration::from_millis(ms.unsigned_abs())
            }
        };
        assert!(c.surely_past(at(-300)));
        assert!(!c.surely_past(at(-100)), "within the uncertainty");
        assert!(!c.surely_past(at(1)));
    }

    #[test]
    fn a_host_an_hour_ahead_is_told() {
        let c = clock(1_000, 0);
        assert_eq!(c.skew_ms(), 3_600_000);
        let told = c.skew_told().unwrap();
        assert!(told.contains("1h ahead of the store's"), "{told}");
    }
}
