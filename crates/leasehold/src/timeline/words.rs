//! How a timeline — and the status page, and the terminal — says
//! durations, times and counts to people: one way everywhere (`2m 5s`,
//! `1h`, `7 days`; `2025-01-02 03:04:05 UTC`), the same as the status
//! page's `assets/app.js` writes its countdowns. Stored words stay as
//! stored; only their TTLs are read as durations ([`reword`]).

use std::time::{Duration, SystemTime};

/// A duration for people: `250ms`, `4.5s`, `2m 5s`, `1h 30m`, `7 days`,
/// `1 day 2h` — the two largest units, so a glance reads it.
#[must_use]
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 {
        let tenths = (ms + 50) / 100;
        return if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let mut parts: Vec<String> = Vec::new();
    if days > 0 {
        parts.push(format!("{days} {}", if days == 1 { "day" } else { "days" }));
        if hours > 0 {
            parts.push(format!("{hours}h"));
        }
    } else if hours > 0 {
        parts.push(format!("{hours}h"));
        if minutes > 0 {
            parts.push(format!("{minutes}m"));
        }
    } else if minutes > 0 {
        parts.push(format!("{minutes}m"));
        if seconds > 0 {
            parts.push(format!("{seconds}s"));
        }
    } else {
        parts.push(format!("{seconds}s"));
    }
    parts.join(" ")
}

/// `n` and the word for it: `1 entry`, `3 entries`.
#[must_use]
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How long ago `t` was, as of `now`: `5m 2s ago` (`just now` within a
/// second; a time ahead of `now` as `in …`).
#[must_use]
pub fn ago(t: SystemTime, now: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(d) if d < Duration::from_secs(1) => "just now".to_owned(),
        Ok(d) => format!("{} ago", duration(d)),
        Err(e) => format!("in {}", duration(e.duration())),
    }
}

/// A time as the page shows it: `2025-01-02 03:04:05 UTC` (the exact
/// RFC 3339 time in its tooltip, where the status page writes a `<time>` element).
#[must_use]
pub fn clock(t: SystemTime) -> String {
    let full = crate::format_time(t); // 2025-01-02T03:04:05.678Z
    if full.len() == 24 && full.as_bytes()[10] == b'T' {
        format!("{} {} UTC", &full[..10], &full[11..19])
    } else {
        full
    }
}

/// A history entry's words for people: the TTLs stores write as seconds
/// with a decimal (`exclusive for 3600.0s to …`, kept as written in every
/// store) read as durations (`exclusive for 1h to …`). Only the page's
/// rendering changes; the stored words and `/api` keep them.
#[must_use]
pub fn reword(detail: &str) -> String {
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail;
    while let Some(at) = rest.find(|c: char| c.is_ascii_digit()) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        // Only a number standing alone (not inside a name such as
        // `host-12.5s`): after a space, a parenthesis or the start.
        let alone = out.is_empty() || out.ends_with([' ', '(']);
        if let Some((d, len)) = stored_seconds(from).filter(|_| alone) {
            out.push_str(&duration(d));
            rest = &from[len..];
        } else {
            let digits = from.find(|c: char| !c.is_ascii_digit()).unwrap_or(from.len());
            out.push_str(&from[..digits]);
            rest = &from[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// `D+.D+s` at the start of `s`, ended by a space, `)`, `,` or the end:
/// the duration and the length it takes.
fn stored_seconds(s: &str) -> Option<(Duration, usize)> {
    let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let whole = digits(s);
    let fraction = digits(s[whole..].strip_prefix('.')?);
    let number = whole + 1 + fraction;
    let after = s[number..].strip_prefix('s')?;
    if whole == 0 || fraction == 0 || !(after.is_empty() || after.starts_with([' ', ')', ','])) {
        return None;
    }
    let secs: f64 = s[..number].parse().ok()?;
    Some((Duration::try_from_secs_f64(secs).ok()?, number + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_one_way() {
        for (ms, want) in [
            (250, "250ms"),
            (1000, "1s"),
            (4_540, "4.5s"),
            (59_000, "59s"),
            (60_000, "1m"),
            (125_000, "2m 5s"),
            (3_600_000, "1h"),
            (5_400_000, "1h 30m"),
            (86_400_000, "1 day"),
            (7 * 86_400_000, "7 days"),
            (93_600_000, "1 day 2h"),
        ] {
            assert_eq!(duration(Duration::from_millis(ms)), want, "{ms}ms");
        }
        assert_eq!(count(1u32, "entry", "entries"), "1 entry");
        assert_eq!(count(0u32, "entry", "entries"), "0 entries");
    }

    #[test]
    fn stored_ttls_read_as_durations_and_names_are_left_alone() {
        assert_eq!(
            reword("exclusive for 3600.0s to host-1.5s:42"),
            "exclusive for 1h to host-1.5s:42"
        );
        assert_eq!(
            reword("TTL of 0.3s ran out (holder h:1)"),
            "TTL of 300ms ran out (holder h:1)"
        );
        assert_eq!(reword("shared for 604800.0s to h:7"), "shared for 7 days to h:7");
        assert_eq!(reword("released by its holder"), "released by its holder");
        assert_eq!(reword("token 12 at 3.5"), "token 12 at 3.5");
    }
}
