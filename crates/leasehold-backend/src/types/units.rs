//! Conversions between durations, times and the integers stores keep: the
//! one place they are made, each total (saturating, never wrapping or
//! panicking), so no value a caller passes or a store holds can wrap into
//! another (a TTL of 2^64 ms once became 384 ms) or crash a read.

use std::time::{Duration, SystemTime};

/// Nanoseconds of a duration, saturating (a TTL of centuries is still finite).
#[must_use]
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Milliseconds of a duration, saturating.
#[must_use]
pub fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A count as the signed 64-bit integer SQL stores keep, saturating.
#[must_use]
pub fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A duration from stored milliseconds; a negative count (leasehold never
/// writes one) reads as zero.
#[must_use]
pub fn stored_millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// `t + d`; when that overflows, the latest time a store keeps
/// (`unix_ms::from_ms(i64::MAX)`), or `t` if it is later still: never
/// earlier than `t`.
#[must_use]
pub fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).unwrap_or_else(|| t.max(unix_ms::from_ms(i64::MAX)))
}

/// `SystemTime` as milliseconds since the Unix epoch, in JSON.
pub mod unix_ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    /// Milliseconds since the epoch (negative before it), saturating.
    #[must_use]
    pub fn to_ms(t: SystemTime) -> i64 {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => super::signed(super::duration_millis(d)),
            Err(e) => super::signed(super::duration_millis(e.duration())).saturating_neg(),
        }
    }

    /// The time `ms` milliseconds after the epoch; total for every `i64`
    /// (a `SystemTime` counts seconds in an `i64`).
    #[must_use]
    pub fn from_ms(ms: i64) -> SystemTime {
        if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        }
    }

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(to_ms(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        Ok(from_ms(i64::deserialize(d)?))
    }
}

/// `Duration` as whole milliseconds, in JSON.
pub mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::duration_millis(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
