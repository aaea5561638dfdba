//! Durations and times as people write and read them: `90s`, `5m`,
//! `1h30m`, `250ms` (a bare number is seconds), and RFC 3339 times. The
//! parsers with a limit are the ones the CLI's flags use.

pub use leasehold_host::shorten;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::limits::Limit;

/// Parse a duration as users write it.
///
/// # Errors
/// A message naming the input and showing accepted forms.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold_backend::parse_duration;
/// assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let t = s.trim();
    let bad = || ParseError::NotADuration(s.to_owned());
    if t.is_empty() {
        return Err(bad());
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t.parse().map_err(|_| bad())?;
        return Duration::try_from_secs_f64(secs).map_err(|_| bad());
    }
    humantime::parse_duration(t).map_err(|_| bad())
}

/// Parse a duration that must lie within `limit` (one of
/// [`crate::limits`]): what every duration flag of the CLI is parsed with.
///
/// # Errors
/// As [`parse_duration`], or the [`crate::limits::OutOfRange`] message.
///
/// # Examples
/// ```
/// use leasehold_backend::{limits, parse_duration_within};
/// assert!(parse_duration_within("2m", limits::TTL).is_ok());
/// assert!(parse_duration_within("0", limits::TTL).is_err());
/// assert!(parse_duration_within("101y", limits::DELAY).is_err());
/// ```
pub fn parse_duration_within(s: &str, limit: Limit) -> Result<Duration, ParseError> {
    Ok(limit.check(parse_duration(s)?)?)
}

/// Parse an RFC 3339 time (`2026-12-01T08:00:00Z`, or without the zone:
/// UTC) that lies at most `limit` after `now`.
///
/// # Errors
/// A message naming the input, or the [`crate::limits::OutOfRange`] message.
pub fn parse_time_within(s: &str, limit: Limit, now: SystemTime) -> Result<SystemTime, ParseError> {
    let at = humantime::parse_rfc3339_weak(s.trim()).map_err(|_| ParseError::NotATime(s.to_owned()))?;
    Ok(limit.check_from(now, at)?)
}

/// Why a duration or time as a person wrote it is refused; the message
/// quotes the input ([`quoted`]) and shows the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("{} is not a duration; write e.g. 90s, 5m, 1h30m, 250ms, or a bare number of seconds", quoted(.0))]
    NotADuration(String),
    #[error("{} is not a time; write e.g. 2026-12-01T08:00:00Z", quoted(.0))]
    NotATime(String),
    /// It parses, but lies outside its limit.
    #[error("{0}")]
    OutOfRange(crate::limits::OutOfRange),
}

// Not `#[from]`, which would also chain the range as the source: the
// message says it already (print the cause or chain it, never both).
impl From<crate::limits::OutOfRange> for ParseError {
    fn from(e: crate::limits::OutOfRange) -> Self {
        ParseError::OutOfRange(e)
    }
}

/// Format a duration for people: `1m 30s`, `2s 250ms`, `250ms`. Exact to
/// the millisecond, and [`parse_duration`] reads it back: messages that
/// compare durations (heartbeat + grace + slack against the TTL) must not
/// round them into a contradiction.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        humantime::format_duration(Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000)).to_string()
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Whether `c` hides or reorders the text around it when shown: control
/// characters, bidirectional formatting (overrides such as U+202E,
/// embeddings, isolates, marks), zero-width and other invisible format
/// characters (U+200B–U+200D, U+2060–U+2064, the byte order mark, soft
/// hyphen, Hangul fillers, tags), line and paragraph separators. Names
/// hold no control characters, but any of the others: a name, owner or
/// command line showing one could pass for another. Every front that
/// shows stored text to people (the CLI's tables, the status page)
/// escapes these with [`escape_hidden`].
///
/// # Examples
/// ```
/// use leasehold_backend::hides_or_reorders;
/// assert!(hides_or_reorders('\u{202e}') && hides_or_reorders('\u{200b}') && hides_or_reorders('\n'));
/// assert!(!hides_or_reorders('a') && !hides_or_reorders('ש') && !hides_or_reorders('é'));
/// ```
#[must_use]
pub fn hides_or_reorders(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// `s` with every character that [`hides_or_reorders`] written as a
/// `\u{…}` escape, so it shows in its logical order with nothing hidden.
///
/// # Examples
/// ```
/// use leasehold_backend::escape_hidden;
/// assert_eq!(escape_hidden("bidi\u{202e}evil"), "bidi\\u{202e}evil");
/// assert_eq!(escape_hidden("plain"), "plain");
/// ```
#[must_use]
pub fn escape_hidden(s: &str) -> String {
    if !s.chars().any(hides_or_reorders) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if hides_or_reorders(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The most of a value an error repeats, in characters.
pub const VALUE_SHOWN_MAX: usize = 60;

/// A value as an error that refuses it shows it: quoted (escaped as Rust
/// debug output, so a hidden character shows), cut by [`shorten`] to
/// [`VALUE_SHOWN_MAX`] characters — a 4 KB value must not fill the
/// terminal.
///
/// # Examples
/// ```
/// use leasehold_backend::quoted;
/// assert_eq!(quoted("soon"), r#""soon""#);
/// assert_eq!(quoted(&"9".repeat(4096)).chars().count(), 62);
/// ```
#[must_use]
pub fn quoted(s: &str) -> String {
    format!("{:?}", shorten(s, VALUE_SHOWN_MAX))
}

/// The first instant RFC 3339 cannot write (year 10000).
const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);

/// Format a time as RFC 3339 in UTC, to the millisecond. Total: RFC 3339
/// has four-digit years from 1970 here, and a time outside them (a record
/// an old leasehold wrote, a clock far off) is said to be outside, never a
/// panic.
///
/// # Examples
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use leasehold_backend::format_time;
/// assert_eq!(format_time(UNIX_EPOCH + Duration::from_millis(1500)), "1970-01-01T00:00:01.500Z");
/// assert_eq!(format_time(UNIX_EPOCH + Duration::from_secs(1 << 40)), "after 9999-12-31T23:59:59.999Z");
/// assert_eq!(format_time(UNIX_EPOCH - Duration::from_secs(1)), "before 1970-01-01T00:00:00.000Z");
/// ```
#[must_use]
pub fn format_time(t: SystemTime) -> String {
    match t.duration_since(UNIX_EPOCH) {
        Ok(since) if since < YEAR_10000 => humantime::format_rfc3339_millis(t).to_string(),
        Ok(_) => "after 9999-12-31T23:59:59.999Z".to_owned(),
        Err(_) => "before 1970-01-01T00:00:00.000Z".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_the_limit_and_says_so() {
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abcd", 4), "abcd");
        assert_eq!(shorten("äöüß€", 3).chars().count(), 3, "characters, not bytes");
        assert_eq!(shorten("abc", 0), "…", "never panics");
    }

    #[test]
    fn parses_the_forms_users_write() {
        for (s, ms) in [
            ("90s", 90_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("250ms", 250),
            ("0", 0),
            ("2.5", 2500),
            (" 7 ", 7000),
        ] {
            assert_eq!(parse_duration(s).unwrap(), Duration::from_millis(ms), "{s}");
        }
    }

    #[test]
    fn refuses_garbage_with_a_helpful_message() {
        for s in ["", "-5", "5 parsecs", "1e400", "nan", "."] {
            let e = parse_duration(s).unwrap_err();
            assert_eq!(e, ParseError::NotADuration(s.to_owned()));
            assert!(e.to_string().contains("90s"), "{s}: {e}");
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m 30s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        // Found by fuzzing (fault case 21): 2250ms was shown as "2s".
        assert_eq!(format_duration(Duration::from_millis(2250)), "2s 250ms");
        assert_eq!(parse_duration("2s 250ms").unwrap(), Duration::from_millis(2250));
    }

    #[test]
    fn the_last_time_rfc3339_can_write() {
        let last = UNIX_EPOCH + YEAR_10000 - Duration::from_millis(1);
        assert_eq!(format_time(last), "9999-12-31T23:59:59.999Z");
        assert_eq!(
            format_time(last + Duration::from_millis(1)),
            "after 9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn a_time_is_parsed_within_its_limit_from_now() {
        let now = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let limit = crate::limits::DELAY;
        assert!(parse_time_within("2125-12-01T00:00:00Z", limit, now).is_ok());
        assert!(parse_time_within("1999-01-01T00:00:00Z", limit, now).is_ok());
        let e = parse_time_within("9999-01-01T00:00:00Z", limit, now).unwrap_err();
        assert!(matches!(e, ParseError::OutOfRange(_)), "{e:?}");
        assert!(e.to_string().contains("at most 100years"), "{e}");
        assert!(
            parse_time_within("tomorrow", limit, now)
                .unwrap_err()
                .to_string()
                .contains("not a time")
        );
    }
}
