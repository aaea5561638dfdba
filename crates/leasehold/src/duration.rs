//! Humane durations: `90s`, `5m`, `1h30m`, `250ms`; a bare number is seconds.

use std::time::Duration;

/// Parse a duration as users write it.
///
/// # Errors
/// A message naming the input and showing accepted forms.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::parse_duration;
/// assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("{s:?} is not a duration; write e.g. 90s, 5m, 1h30m, 250ms, or a bare number of seconds");
    if t.is_empty() {
        return Err(bad());
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t.parse().map_err(|_| bad())?;
        return Duration::try_from_secs_f64(secs).map_err(|_| bad());
    }
    humantime::parse_duration(t).map_err(|_| bad())
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

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(e.contains("90s"), "{s}: {e}");
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(Duration::from_secs(90)), "1m 30s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        // Found by fuzzing (FAULTS 21): 2250ms was shown as "2s".
        assert_eq!(format_duration(Duration::from_millis(2250)), "2s 250ms");
        assert_eq!(parse_duration("2s 250ms").unwrap(), Duration::from_millis(2250));
    }
}
