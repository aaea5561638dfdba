//! JavaScript values to the library's types: durations, waits, names,
//! shares, tokens. Parsing and limits stay the library's
//! (`leasehold::parse_duration`, `leasehold::limits`); this only says which
//! JavaScript values mean what. A number of a duration is milliseconds, as
//! `setTimeout`'s is; a string is the CLI's spelling (`"90s"`, `"5m"`).

use std::time::Duration;

use leasehold::{LeaseName, Mode};
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
/// forever; else a duration.
pub fn wait(value: Option<&Either<bool, Either<f64, String>>>) -> napi::Result<Wait> {
    Ok(match value {
        None | Some(Either::A(false)) => Wait::No,
        Some(Either::A(true)) => Wait::Forever,
        Some(Either::B(Either::A(ms))) if *ms == f64::INFINITY => Wait::Forever,
        Some(Either::B(d)) => Wait::Upto(duration(d, "wait")?),
    })
}

/// A lease name, refused with the library's reason.
pub fn lease_name(name: &str) -> napi::Result<LeaseName> {
    LeaseName::new(name).map_err(|e| errors::name("lease name", name, &e))
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

/// The largest integer a JavaScript number holds exactly (2^53 − 1).
const MAX_SAFE: u64 = (1 << 53) - 1;

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

/// Milliseconds since the Unix epoch of `at` (for `new Date(ms)`).
pub fn epoch_ms(at: std::time::SystemTime) -> f64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
