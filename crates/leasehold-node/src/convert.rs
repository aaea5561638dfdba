//! JavaScript values to the library's types: durations, waits, names,
//! shares, tokens. Parsing and limits stay the library's
//! (`leasehold::parse_duration`, `leasehold::limits`); this only says which
//! JavaScript values mean what. A number of a duration is milliseconds, as
//! `setTimeout`'s is; a string is the CLI's spelling (`"90s"`, `"5m"`).

use std::time::Duration;

use leasehold::{KeeperOptions, LeaseName, Mode, QueueName, TaskId};
use napi::Either;

use crate::errors;

/// A duration: a number of milliseconds, or a string the library parses.
pub fn duration(value: &Either<f64, String>, what: &str) -> napi::Result<Duration> {
    match value {
        Either::B(text) => leasehold::parse_duration(text).map_err(|e| errors::invalid(format!("{what}: {e}"))),
        Either::A(ms) => Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
            errors::invalid(format!(
                "{what}: {ms} ms is not a duration (negative or not finite); write e.g. 90000 (ms) or \"90s\""
            ))
        }),
    }
}

/// An optional duration.
pub fn opt_duration(value: Option<&Either<f64, String>>, what: &str) -> napi::Result<Option<Duration>> {
    value.map(|v| duration(v, what)).transpose()
}

pub use leasehold::Wait;

/// `{ wait }`: `undefined` or `false` no wait; `true` or `Infinity`
/// forever; else a duration, within the library's limit.
pub fn wait(value: Option<&Either<bool, Either<f64, String>>>) -> napi::Result<Wait> {
    let wait = match value {
        None | Some(Either::A(false)) => Wait::No,
        Some(Either::A(true)) => Wait::Forever,
        Some(Either::B(Either::A(ms))) if *ms == f64::INFINITY => Wait::Forever,
        Some(Either::B(d)) => Wait::Upto(duration(d, "wait")?),
    };
    if let Some(Some(limit)) = wait.timeout() {
        leasehold::limits::WAIT
            .check(limit)
            .map_err(|e| errors::library(&e.into()))?;
    }
    Ok(wait)
}

/// `{ ttl, heartbeat, margin }` of a hold (a lease, a claim): how its
/// keeper keeps it — the TTL the library's default when not given.
pub fn keep(
    ttl: Option<&Either<f64, String>>,
    heartbeat: Option<&Either<f64, String>>,
    margin: Option<&Either<f64, String>>,
) -> napi::Result<KeeperOptions> {
    KeeperOptions::checked(
        opt_duration(ttl, "ttl")?.unwrap_or(DEFAULT_TTL),
        opt_duration(heartbeat, "heartbeat")?,
        opt_duration(margin, "margin")?,
        &leasehold::spelling::Options,
    )
    .map_err(errors::invalid)
}

/// The TTL when none is given: the library's default, as the CLI's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// A lease name, refused with the library's reason.
pub fn lease_name(name: &str) -> napi::Result<LeaseName> {
    LeaseName::new(name).map_err(|e| errors::name("lease name", name, &e))
}

/// A queue name, refused with the library's reason.
pub fn queue_name(name: &str) -> napi::Result<QueueName> {
    QueueName::new(name).map_err(|e| errors::name("queue name", name, &e))
}

/// A task id, refused with the library's reason.
pub fn task_id(id: &str) -> napi::Result<TaskId> {
    TaskId::new(id).map_err(|e| errors::name("task id", id, &e))
}

/// A whole number from `min` to `max` given by JavaScript (refused
/// rather than rounded).
pub fn whole(value: f64, what: &str, min: i64, max: i64) -> napi::Result<i64> {
    #[allow(clippy::cast_precision_loss, reason = "the bounds given are within 2^53")]
    let (low, high) = (min as f64, max as f64);
    if value.fract() != 0.0 || !(low..=high).contains(&value) {
        return Err(errors::invalid(format!(
            "{what}: {value} is not a whole number from {min} to {max}"
        )));
    }
    #[allow(clippy::cast_possible_truncation, reason = "checked above")]
    Ok(value as i64)
}

/// `shared`: `undefined`/`false` exclusive, `true` shared without a limit,
/// a number a limit (a whole number from 1).
pub fn mode(shared: Option<&Either<bool, f64>>) -> napi::Result<Mode> {
    Ok(match shared {
        None | Some(Either::A(false)) => Mode::Exclusive,
        Some(Either::A(true)) => Mode::Shared { limit: None },
        Some(Either::B(n)) => {
            if n.fract() != 0.0 || *n < 1.0 || *n > f64::from(u32::MAX) {
                return Err(errors::invalid(format!(
                    "shared: {n} is not a limit; give true (no limit) or a whole number from 1"
                )));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked above")]
            Mode::Shared { limit: Some(*n as u32) }
        }
    })
}

/// JSON text from JavaScript (`JSON.stringify`'s) as the library's value.
pub fn json(text: &str, what: &str) -> napi::Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| errors::invalid(format!("{what} is not JSON: {e}")))
}

/// The largest integer a JavaScript number holds exactly (2^53 − 1).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// A token, id or count as a JavaScript number — refused rather than
/// rounded past 2^53 − 1 (a fencing token that rounds could compare
/// equal to a newer one).
pub fn exact(value: u64, what: &str) -> napi::Result<f64> {
    if value > MAX_SAFE {
        return Err(errors::of_kind(
            leasehold::ErrorKind::Unsupported,
            format!("{what} {value} is above 2^53 − 1, the largest integer a JavaScript number holds exactly"),
        ));
    }
    #[allow(clippy::cast_precision_loss, reason = "checked above: exact")]
    Ok(value as f64)
}

/// A token given by JavaScript: a whole number from 0 to 2^53 − 1.
pub fn token(value: f64) -> napi::Result<leasehold::Token> {
    if value.fract() != 0.0 || !(0.0..=9_007_199_254_740_991.0).contains(&value) {
        return Err(errors::invalid(format!(
            "token: {value} is not a fencing token (a whole number from 0)"
        )));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked above")]
    Ok(leasehold::Token(value as u64))
}

/// The time `ms` milliseconds after the Unix epoch (a `Date`'s `getTime()`).
pub fn epoch_time(ms: f64, what: &str) -> napi::Result<std::time::SystemTime> {
    Duration::try_from_secs_f64(ms / 1000.0)
        .ok()
        .and_then(|since| std::time::UNIX_EPOCH.checked_add(since))
        .ok_or_else(|| errors::invalid(format!("{what}: {ms} is not a time (an invalid Date, or before 1970)")))
}

/// Milliseconds since the Unix epoch of `at` (for `new Date(ms)`).
pub fn epoch_ms(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
