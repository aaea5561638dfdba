//! Fuzzing of every parser of untrusted input (fault case 21): store
//! URLs, durations (every duration flag of the CLI, through the parser and
//! the limit it uses), start times (`task add --at`), names, `task add
//! --batch` JSON lines, fence records.
//!
//! Stand-in for cargo-fuzz (not installed here): a seeded random-input loop
//! per parser, biased towards the bytes parsers care about, with each
//! input's outcome checked (no panic; what parses round-trips or obeys its
//! documented limits). The CI tier runs each for 2 s; the soak tier for
//! `LEASEHOLD_FUZZ_SECS` (default 60 s) each. A failure prints the input.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use leasehold::{
    LeaseName, NewTask, StoreUrl, files::parse_fence_record, format_duration, format_time, limits,
    parse_duration_within, parse_time_within, unix_ms,
};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{figure, soak};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![fuzz_every_parser_of_untrusted_input];

fn budget() -> Duration {
    if soak() {
        Duration::from_secs(
            std::env::var("LEASEHOLD_FUZZ_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(60),
        )
    } else {
        Duration::from_secs(2)
    }
}

/// Feed `target` random inputs (strings when `text`) until the budget is spent.
fn fuzz(name: &str, text: bool, seeds: &[&[u8]], mut target: impl FnMut(&[u8])) -> (u64, Duration) {
    let mut rng = Rng::from_env(&format!("fuzz {name}"));
    let started = Instant::now();
    let mut runs = 0u64;
    let mut run = |input: &[u8]| {
        assert!(
            catch_unwind(AssertUnwindSafe(|| target(input))).is_ok(),
            "fuzz {name}: panicked on input {input:?} ({:?})",
            String::from_utf8_lossy(input)
        );
    };
    for s in seeds {
        run(s);
    }
    while started.elapsed() < budget() {
        let mut input = rng.bytes(64);
        // Splice a seed in, so that inputs are near-valid as often as not.
        if !seeds.is_empty() && rng.below(2) == 0 {
            let seed = rng.pick(seeds).to_vec();
            let at = rng.below(input.len() as u64 + 1) as usize;
            input.splice(at..at, seed);
        }
        if text {
            input = String::from_utf8_lossy(&input).into_owned().into_bytes();
        }
        run(&input);
        runs += 1;
    }
    (runs, started.elapsed())
}

fn utf8(input: &[u8]) -> &str {
    std::str::from_utf8(input).expect("text input")
}

/// Every duration flag's parser, with each of its limits: what parses
/// lies within the limit and formats back to itself.
fn fuzz_durations() -> String {
    let (n, t) = fuzz(
        "durations",
        true,
        &[
            b"90s",
            b"1h30m",
            b"250ms",
            b"5",
            b"0",
            b"1y",
            b"100y",
            b"18446744073709551615s",
            b"18446744073709552",
            b"300000000000",
            b"10000y",
        ],
        |i| {
            // Every duration flag of the CLI is parsed by this function
            // with one of these limits (`cli.rs`: `within(limits::…)`).
            for limit in limits::ALL {
                let Ok(d) = parse_duration_within(utf8(i), limit) else {
                    continue;
                };
                assert!(
                    d >= limit.min && d <= limit.max,
                    "{} accepted {d:?}, outside {limit}",
                    limit.what
                );
                // What parses formats back to the same duration, to the
                // millisecond, and still lies within the limit.
                let again = parse_duration_within(&format_duration(d), limit).expect("formatted duration parses");
                assert_eq!(again.as_millis(), d.as_millis(), "round trip of {d:?}");
            }
        },
    );
    format!("durations {n} inputs in {t:.1?}")
}

/// `task add --at`'s time parser: what parses is at most a century ahead
/// and formats back to itself.
fn fuzz_start_times() -> String {
    let now = std::time::SystemTime::now();
    let (n, t) = fuzz(
        "start times",
        true,
        &[
            b"2026-12-01T08:00:00Z",
            b"2126-01-01T00:00:00Z",
            b"9999-12-31T23:59:59.999Z",
            b"1970-01-01 00:00:00",
        ],
        |i| {
            // `task add --at`: at most a century from now.
            if let Ok(at) = parse_time_within(utf8(i), limits::DELAY, now) {
                assert!(
                    limits::DELAY.check_from(now, at).is_ok(),
                    "{:?} accepted, more than {} ahead",
                    utf8(i),
                    format_duration(limits::DELAY.max)
                );
                let shown = format_time(at);
                let again = parse_time_within(&shown, limits::DELAY, now).expect("a formatted time parses");
                assert_eq!(unix_ms::to_ms(again), unix_ms::to_ms(at), "round trip of {shown}");
            }
        },
    );
    format!("start times {n} inputs in {t:.1?}")
}

fn fuzz_every_parser_of_untrusted_input() {
    let mut lines = Vec::new();
    lines.push(fuzz_durations());
    lines.push(fuzz_start_times());
    let (n, t) = fuzz("names", true, &[b"job", b"a/b", b"../x", b"job\n"], |i| {
        if let Ok(name) = LeaseName::new(utf8(i).to_owned()) {
            assert_eq!(name.as_str(), utf8(i));
            assert!(!name.as_str().is_empty() && name.as_str().len() <= 255, "{name:?}");
        }
    });
    lines.push(format!("names {n} inputs in {t:.1?}"));
    let (n, t) = fuzz(
        "store URLs",
        true,
        &[
            b"sqlite:///a.db",
            b"sqlite://~/x",
            b"etcd://h:1,h:2",
            b"etcd://h:1?prefix=/a&cacert=/c.pem&cert=/m.pem&key=/m.key&user=u&password-file=/p",
            b"postgres://u@h/d",
            b"postgres://u:pw@h/d?password=pw",
        ],
        |i| {
            if let Ok(url) = StoreUrl::parse(utf8(i)) {
                let _ = url.to_string();
                let _ = url.redacted();
            }
        },
    );
    lines.push(format!("store URLs {n} inputs in {t:.1?}"));
    let defaults = NewTask::new(serde_json::Value::Null);
    let (n, t) = fuzz(
        "batch lines",
        true,
        &[
            br#"{"id":"a","payload":{"x":[1,2]},"priority":-3,"max_attempts":2}"#,
            br#"{"payload":null}"#,
            b"{}",
        ],
        |i| {
            if let Ok(task) = NewTask::parse_batch_line(utf8(i), &defaults) {
                assert!(task.max_attempts >= 1);
            }
        },
    );
    lines.push(format!("batch lines {n} inputs in {t:.1?}"));
    let seeds: &[&[u8]] = &[b"42\n", b"18446744073709551615", b"0", b"42 00000000000000ab\n"];
    let (n, t) = fuzz("fence records", false, seeds, |i| {
        if let Ok(fence) = parse_fence_record(i) {
            assert_eq!(parse_fence_record(format!("{fence}\n").as_bytes()), Ok(fence));
        }
    });
    lines.push(format!("fence records {n} inputs in {t:.1?}"));
    figure(21, &format!("fuzzing without a crash: {}", lines.join("; ")));
}
