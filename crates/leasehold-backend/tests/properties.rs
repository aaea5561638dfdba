//! Properties of the duration and time conversions (issue 12, case 4):
//! every conversion is total and saturates instead of wrapping; what is
//! formatted within a limit parses back to itself; a parser with a limit
//! accepts nothing outside it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_backend::limits::{self, Limit};
use leasehold_backend::unix_ms::{from_ms, to_ms};
use leasehold_backend::{
    duration_millis, duration_nanos, format_duration, format_time, later, parse_duration, parse_duration_within,
    parse_time_within, signed, stored_millis,
};
use proptest::prelude::*;

/// Any duration: every second count, every nanosecond.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        // Near the places conversions used to wrap: 2^64 ns and 2^64 ms.
        (0..u64::MAX / 1_000_000_000 * 2).prop_map(Duration::from_nanos),
        (18_446_744_073_709_000..=18_446_744_073_710_000u64).prop_map(Duration::from_secs),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

/// Any time a `SystemTime` holds here: seconds in an `i64` either side of
/// the epoch.
fn any_time() -> impl Strategy<Value = SystemTime> {
    (any::<bool>(), 0..=i64::MAX as u64, 0..1_000_000_000u32).prop_map(|(after, s, n)| {
        let d = Duration::new(s, n);
        if after { UNIX_EPOCH + d } else { UNIX_EPOCH - d }
    })
}

fn any_limit() -> impl Strategy<Value = Limit> {
    proptest::sample::select(limits::ALL.to_vec())
}

/// A duration within `limit`, to the millisecond (what stores and
/// `format_duration` keep).
fn within(limit: Limit) -> impl Strategy<Value = Duration> {
    (duration_millis(limit.min)..=duration_millis(limit.max)).prop_map(Duration::from_millis)
}

/// Text near what people write: numbers (some huge), units, spaces, junk.
fn duration_text() -> impl Strategy<Value = String> {
    let unit = proptest::sample::select(vec![
        "", "ms", "s", "m", "h", "d", "w", "M", "y", "years", "us", "ns", " ", ".", "-", "x",
    ]);
    let number = prop_oneof![
        (0..1000u64).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (any::<u64>(), 0..1000u32).prop_map(|(a, b)| format!("{a}.{b}")),
        Just("18446744073709552".to_owned()),
        Just("300000000000".to_owned()),
    ];
    proptest::collection::vec((number, unit), 1..4).prop_map(|parts| {
        parts
            .into_iter()
            .flat_map(|(n, u)| [n, u.to_owned()])
            .collect::<String>()
    })
}

proptest! {
    #[test]
    fn duration_conversions_saturate(d in any_duration(), e in any_duration()) {
        prop_assert_eq!(u128::from(duration_nanos(d)), d.as_nanos().min(u128::from(u64::MAX)));
        prop_assert_eq!(u128::from(duration_millis(d)), d.as_millis().min(u128::from(u64::MAX)));
        prop_assert_eq!(signed(duration_millis(d)) as u64, duration_millis(d).min(i64::MAX as u64));
        // Saturation keeps order: a longer duration never converts to less.
        let (short, long) = if d <= e { (d, e) } else { (e, d) };
        prop_assert!(duration_nanos(short) <= duration_nanos(long));
        prop_assert!(duration_millis(short) <= duration_millis(long));
    }

    #[test]
    fn stored_millis_read_back(ms in any::<i64>()) {
        let d = stored_millis(ms);
        prop_assert_eq!(signed(duration_millis(d)), ms.max(0), "a negative count reads as zero");
    }

    #[test]
    fn unix_ms_round_trips_every_i64(ms in any::<i64>()) {
        prop_assert_eq!(to_ms(from_ms(ms)), ms);
    }

    #[test]
    fn unix_ms_of_any_time_saturates_in_order(t in any_time(), u in any_time()) {
        let (early, late) = if t <= u { (t, u) } else { (u, t) };
        prop_assert!(to_ms(early) <= to_ms(late));
        if to_ms(t).unsigned_abs() < i64::MAX.unsigned_abs() {
            // Not saturated: within a millisecond of where it was
            // (truncated toward the epoch).
            let back = from_ms(to_ms(t));
            let gap = back.duration_since(t).unwrap_or_else(|e| e.duration());
            prop_assert!(gap < Duration::from_millis(1), "{t:?} -> {} -> {back:?}", to_ms(t));
        }
    }

    #[test]
    fn later_never_panics_nor_goes_back(t in any_time(), d in any_duration()) {
        let l = later(t, d);
        prop_assert!(l >= t);
        if let Some(exact) = t.checked_add(d) {
            prop_assert_eq!(l, exact);
        }
    }

    #[test]
    fn format_time_is_total_and_exact_in_range(t in any_time()) {
        let text = format_time(t);
        match humantime::parse_rfc3339(&text) {
            Ok(parsed) => prop_assert_eq!(to_ms(parsed), to_ms(t), "{}", text),
            Err(_) => prop_assert!(
                text.starts_with("after 9999") || text.starts_with("before 1970"),
                "{} is neither RFC 3339 nor said to be out of range", text
            ),
        }
    }

    #[test]
    fn format_then_parse_round_trips_within_each_limit(
        (limit, d) in any_limit().prop_flat_map(|l| (Just(l), within(l)))
    ) {
        let text = format_duration(d);
        prop_assert_eq!(parse_duration_within(&text, limit), Ok(d), "{}", text);
    }

    #[test]
    fn a_parser_with_a_limit_accepts_only_what_lies_within(limit in any_limit(), text in duration_text()) {
        let within = parse_duration_within(&text, limit);
        match parse_duration(&text) {
            Ok(d) if d >= limit.min && d <= limit.max => prop_assert_eq!(within, Ok(d)),
            Ok(d) => {
                let message = within.unwrap_err().to_string();
                prop_assert!(message.contains(&format_duration(limit.max)), "{} for {:?}: {}", text, d, message);
            }
            Err(e) => prop_assert_eq!(within, Err(e)),
        }
    }

    #[test]
    fn a_start_time_is_accepted_only_within_the_delay(t in any_time()) {
        let now = humantime::parse_rfc3339("2026-06-01T00:00:00Z").unwrap();
        let text = format_time(t);
        if let Ok(at) = parse_time_within(&text, limits::DELAY, now) {
            prop_assert!(at <= now + limits::DELAY.max, "{}", text);
            prop_assert_eq!(to_ms(at), to_ms(t));
        }
    }

    #[test]
    fn out_of_range_is_refused_naming_the_value(limit in any_limit(), d in any_duration()) {
        match limit.check(d) {
            Ok(ok) => prop_assert!(ok >= limit.min && ok <= limit.max),
            Err(e) => {
                prop_assert!(d < limit.min || d > limit.max);
                prop_assert_eq!(e.value, d);
                prop_assert!(e.to_string().contains(&format_duration(d)));
            }
        }
    }
}
