//! The range of every duration a caller can pass, written once.
//!
//! | limit | range | what it bounds |
//! |---|---|---|
//! | [`TTL`] | 1 ms – 1 year | a grant's or a claim's TTL (`--ttl`), a waiter registration |
//! | [`HEARTBEAT`] | 1 ms – 1 year | `--heartbeat`, `KeeperOptions::heartbeat` |
//! | [`MARGIN`] | 0 – 1 year | `KeeperOptions::margin` |
//! | [`GRACE`] | 0 – 1 year | `--grace` |
//! | [`STALL`] | 1 ms – 1 year | `--stall-timeout` |
//! | [`WAIT`] | 0 – 1 year | `--wait` (`acquire`, `run`, `lock`), `Store::acquire_wait`, `lock::lock` |
//! | [`POLL_INTERVAL`] | 1 ms – 1 year | `StoreOptions::poll_interval` |
//! | [`DELAY`] | 0 – 100 years | `task add --delay`, `--at` (from now), `task fail --retry-in`, [`crate::Available`] |
//! | [`AGE`] | 0 – 100 years | `task purge --older-than` |
//! | [`EVERY`] | 100 ms – 1 year | a schedule's `@every` interval |
//!
//! A year is 365.25 days, what `1y` means. Why these bounds: a TTL is
//! renewed by its holder, so a year is far past any real one, and the
//! boot-clock expiry of SQLite (nanoseconds in an `i64`, 292 years) and an
//! etcd lease (whole seconds) hold it with room to spare; 1 ms is the
//! resolution stores keep a TTL in, so a shorter TTL would be stored as a
//! dead grant. A delay or an age of a century keeps every stored time in
//! the years RFC 3339 can print (up to 9999) and in PostgreSQL's
//! timestamps. An `@every` slot is claimed in the store with a
//! transaction (and usually runs a command with a lease of its own): at
//! 100 ms a schedule asks about ten transactions a second of a store whose
//! durable commit takes milliseconds, and the interval is still longer
//! than the 100 ms the daemon aims to fire a slot within — below it, the
//! next slot would be due before the last one is fired. A longer interval
//! than a year is a cron pattern's job (`@yearly`).
//!
//! Where they are checked, each before anything is written: the CLI parses
//! every duration flag with [`crate::parse_duration_within`] and its limit
//! (a usage error, exit 2); the library checks what only it sees (waits,
//! the poll interval, a keeper's options); and every store checks the
//! parameters of the seam (`check` below) so that no front can store a
//! duration it could not read back. Out of range is refused
//! ([`OutOfRange`]), never clamped.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::{
    Available, LeaseAcquireParams, LeaseRenewParams, Retry, TaskAddParams, TaskClaimParams, TaskFailParams,
    TaskHeartbeatParams, TaskPurgeParams, WaiterEnqueueParams, format_duration,
};

/// A year as `1y` means it: 365.25 days.
pub const YEAR: Duration = Duration::from_secs(31_557_600);

/// A hundred [`YEAR`]s, as `100y` means it.
pub const CENTURY: Duration = Duration::from_secs(100 * 31_557_600);

const MS: Duration = Duration::from_millis(1);

/// The range one kind of duration must lie in (bounds included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What is limited, as a message names it ("a TTL").
    pub what: &'static str,
    pub min: Duration,
    pub max: Duration,
}

// What each one bounds: the table in the module docs.
pub const TTL: Limit = Limit::new("a TTL", MS, YEAR);
pub const HEARTBEAT: Limit = Limit::new("a heartbeat", MS, YEAR);
pub const MARGIN: Limit = Limit::new("a margin", Duration::ZERO, YEAR);
pub const GRACE: Limit = Limit::new("a grace period", Duration::ZERO, YEAR);
pub const STALL: Limit = Limit::new("a stall timeout", MS, YEAR);
pub const WAIT: Limit = Limit::new("a wait timeout", Duration::ZERO, YEAR);
pub const POLL_INTERVAL: Limit = Limit::new("a poll interval", MS, YEAR);
pub const DELAY: Limit = Limit::new("a delay", Duration::ZERO, CENTURY);
pub const AGE: Limit = Limit::new("an age", Duration::ZERO, CENTURY);
pub const EVERY: Limit = Limit::new("an @every interval", Duration::from_millis(100), YEAR);

/// Every limit, for tests that go through all of them.
pub const ALL: [Limit; 10] = [
    TTL,
    HEARTBEAT,
    MARGIN,
    GRACE,
    STALL,
    WAIT,
    POLL_INTERVAL,
    DELAY,
    AGE,
    EVERY,
];

impl Limit {
    const fn new(what: &'static str, min: Duration, max: Duration) -> Self {
        Self { what, min, max }
    }

    /// `d`, if it lies within the limit.
    ///
    /// # Errors
    /// [`OutOfRange`] naming the value and the limit.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use leasehold_backend::limits::TTL;
    /// assert!(TTL.check(Duration::from_secs(90)).is_ok());
    /// let e = TTL.check(Duration::ZERO).unwrap_err();
    /// assert_eq!(e.to_string(), "a TTL of 0ms is out of range: it must be at least 1ms and at most 1year");
    /// ```
    pub fn check(self, d: Duration) -> Result<Duration, OutOfRange> {
        if d < self.min || d > self.max {
            return Err(OutOfRange { limit: self, value: d });
        }
        Ok(d)
    }

    /// `at`, if it lies within the limit from `now` (a time before `now`
    /// is zero away).
    ///
    /// # Errors
    /// [`OutOfRange`] naming the distance from `now` and the limit.
    pub fn check_from(self, now: SystemTime, at: SystemTime) -> Result<SystemTime, OutOfRange> {
        self.check(at.duration_since(now).unwrap_or(Duration::ZERO))?;
        Ok(at)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.min.is_zero() {
            write!(f, "at least {} and ", format_duration(self.min))?;
        }
        write!(f, "at most {}", format_duration(self.max))
    }
}

/// A duration outside its [`Limit`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} of {} is out of range: it must be {limit}", limit.what, format_duration(*value))]
pub struct OutOfRange {
    pub limit: Limit,
    pub value: Duration,
}

// What each parameter of the seam must lie within; every store calls these
// before it writes.

impl LeaseAcquireParams {
    /// # Errors
    /// When the TTL or the waiter TTL is out of [`TTL`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        TTL.check(self.ttl)?;
        TTL.check(self.waiter_ttl)?;
        Ok(())
    }
}

impl LeaseRenewParams {
    /// # Errors
    /// When the TTL is out of [`TTL`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        TTL.check(self.ttl).map(drop)
    }
}

impl WaiterEnqueueParams {
    /// # Errors
    /// When the TTL is out of [`TTL`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        TTL.check(self.ttl).map(drop)
    }
}

impl TaskAddParams {
    /// # Errors
    /// When any task's delay is out of [`DELAY`], or its time lies further
    /// ahead than [`DELAY`] (on the caller's wall clock, which chose it).
    pub fn check_all(tasks: &[Self]) -> Result<(), OutOfRange> {
        let now = SystemTime::now();
        tasks.iter().try_for_each(|t| match t.available {
            Available::Now => Ok(()),
            Available::After(delay) => DELAY.check(delay).map(drop),
            Available::At(at) => DELAY.check_from(now, at).map(drop),
        })
    }
}

impl TaskClaimParams {
    /// # Errors
    /// When the TTL is out of [`TTL`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        TTL.check(self.ttl).map(drop)
    }
}

impl Retry {
    /// # Errors
    /// When a chosen delay is out of [`DELAY`].
    pub fn check(self) -> Result<(), OutOfRange> {
        match self {
            Retry::After(d) => DELAY.check(d).map(drop),
            Retry::Backoff | Retry::Never => Ok(()),
        }
    }
}

impl TaskHeartbeatParams {
    /// # Errors
    /// When the TTL is out of [`TTL`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        TTL.check(self.ttl).map(drop)
    }
}

impl TaskFailParams {
    /// # Errors
    /// When a chosen retry delay is out of [`DELAY`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        self.retry.check()
    }
}

impl TaskPurgeParams {
    /// # Errors
    /// When `older_than` is out of [`AGE`].
    pub fn check(&self) -> Result<(), OutOfRange> {
        AGE.check(self.older_than).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_included_and_named() {
        for limit in ALL {
            assert_eq!(limit.check(limit.min), Ok(limit.min), "{}", limit.what);
            assert_eq!(limit.check(limit.max), Ok(limit.max), "{}", limit.what);
            let over = limit.check(limit.max + Duration::from_millis(1)).unwrap_err();
            assert!(over.to_string().contains(&format_duration(limit.max)), "{over}");
            if let Some(under) = limit.min.checked_sub(Duration::from_nanos(1)) {
                assert!(limit.check(under).is_err(), "{}", limit.what);
            }
        }
        assert_eq!(format_duration(YEAR), "1year");
        assert_eq!(format_duration(CENTURY), "100years");
        assert_eq!(
            DELAY.check(CENTURY * 2).unwrap_err().to_string(),
            "a delay of 200years is out of range: it must be at most 100years"
        );
    }

    #[test]
    fn a_time_is_judged_by_its_distance_from_now() {
        let now = SystemTime::UNIX_EPOCH + YEAR * 50;
        assert!(DELAY.check_from(now, now + CENTURY).is_ok());
        assert!(
            DELAY.check_from(now, now - CENTURY).is_ok(),
            "the past is claimable at once"
        );
        assert_eq!(
            DELAY.check_from(now, now + CENTURY + YEAR).unwrap_err().value,
            CENTURY + YEAR
        );
    }
}
