//! The store's clock in SQL: every expiry is computed and judged on the
//! server's clock, so times are written as SQL (`NOW`) or as intervals
//! (`micros`) the server adds, never as the client's time.

use std::time::{Duration, SystemTime};

/// The store's "now" in SQL: the server's clock.
#[cfg(not(feature = "test-clock"))]
pub(crate) const NOW: &str = "clock_timestamp()";
/// The store's "now" in SQL: the server's clock plus the test skew.
#[cfg(feature = "test-clock")]
pub(crate) const NOW: &str = "(clock_timestamp() + coalesce(nullif(current_setting('leasehold.skew_us', true), ''), '0')::bigint * interval '1 microsecond')";

/// Microseconds of a duration for SQL interval arithmetic, capped at the
/// longest duration the limits admit (a century): the seam refuses longer
/// ones, and the cap keeps every sum inside timestamptz's range anyway.
pub(crate) fn micros(d: Duration) -> i64 {
    const CAP: u128 = leasehold_backend::limits::CENTURY.as_micros();
    d.as_micros().min(CAP) as i64
}

/// `at + d` as the server computes it (`micros(d)` later), for a time
/// written as a parameter.
pub(crate) fn plus(at: SystemTime, d: Duration) -> SystemTime {
    leasehold_backend::later(at, Duration::from_micros(micros(d).unsigned_abs()))
}

/// `a - b`, or zero when `b` is later.
pub(crate) fn until(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or(Duration::ZERO)
}
