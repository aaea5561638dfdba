//! Fuzzing of every parser of untrusted input (FAULTS case 21): store
//! URLs, durations, names, `task add --batch` JSON lines, fence records.
//!
//! Stand-in for cargo-fuzz (not installed here): a seeded random-input loop
//! per parser, biased towards the bytes parsers care about, with each
//! input's outcome checked (no panic; what parses round-trips or obeys its
//! documented limits). The CI tier runs each for 2 s; the soak tier for
//! `LEASEHOLD_FUZZ_SECS` (default 60 s) each. A failure prints the input.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use leasehold::{LeaseName, NewTask, StoreUrl, files::parse_fence_record, format_duration, parse_duration};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{figure, soak};

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

#[test]
fn fuzz_every_parser_of_untrusted_input() {
    let mut lines = Vec::new();
    let (n, t) = fuzz(
        "durations",
        true,
        &[b"90s", b"1h30m", b"250ms", b"5", b"18446744073709551615s"],
        |i| {
            if let Ok(d) = parse_duration(utf8(i)) {
                // What parses formats back to the same duration, to the millisecond.
                let again = parse_duration(&format_duration(d)).expect("formatted duration parses");
                assert_eq!(again.as_millis(), d.as_millis(), "round trip of {d:?}");
            }
        },
    );
    lines.push(format!("durations {n} inputs in {t:.1?}"));
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
            b"postgres://u@h/d",
        ],
        |i| {
            if let Ok(url) = StoreUrl::parse(utf8(i)) {
                let _ = url.to_string();
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
    let (n, t) = fuzz("fence records", false, &[b"42\n", b"18446744073709551615", b"0"], |i| {
        if let Ok(token) = parse_fence_record(i) {
            assert_eq!(parse_fence_record(format!("{token}\n").as_bytes()), Ok(token));
        }
    });
    lines.push(format!("fence records {n} inputs in {t:.1?}"));
    figure(21, &format!("fuzzing without a crash: {}", lines.join("; ")));
}
