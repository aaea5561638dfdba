//! leasehold's benchmarks (not tests): the programs `bench/run` measures
//! against their references (`src/bin/`), the in-process micro-benchmarks
//! (`benches/hot_paths.rs`), and what the programs share, here: rates,
//! medians and the one way `bench/run`'s tables show a figure — `median
//! (min–max)` over rounds — and a goal's verdict (bench/run collects the
//! rows whose last cell is a verdict into its goals table, so each program
//! writes it the same way). Not published; docs/PERFORMANCE.md shows the
//! figures.

use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};

/// Operations per second.
#[must_use]
pub fn rate(n: u32, elapsed: Duration) -> f64 {
    f64::from(n) / elapsed.as_secs_f64()
}

/// Operations per second, for counts kept as `usize`.
#[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
#[must_use]
pub fn per_sec(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64()
}

/// `n` acquire+release cycles of one name through the library, per second.
pub fn library(store: &Store, n: u32) -> f64 {
    let name = LeaseName::new("bench-lib").unwrap();
    let options = AcquireOptions::default();
    let start = Instant::now();
    for _ in 0..n {
        let Acquire::Acquired(g) = store.try_acquire(&name, &options).unwrap() else {
            panic!("held")
        };
        store.release(&g).unwrap();
    }
    rate(n, start.elapsed())
}

/// The median of `v` (the upper one of an even count).
#[must_use]
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `median (min–max)` of `v`, with `digits` decimals.
#[must_use]
pub fn spread(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.digits$} ({lo:.digits$}–{hi:.digits$})", median(v))
}

/// A goal's cell: `0.62 ≥ 0.5: **met**` — the last cell of a row with a
/// goal (bench/run's goals table shows it as it is).
#[must_use]
pub fn verdict(median_ratio: f64, at_least: f64) -> String {
    let met = if median_ratio >= at_least { "met" } else { "missed" };
    format!("{median_ratio:.2} ≥ {at_least}: **{met}**")
}

/// A goal's cell for a ratio that must stay low (a cost, not a rate):
/// `1.04 ≤ 1.2: **met**`, as bench/run's per-call rows write it.
#[must_use]
pub fn verdict_at_most(median_ratio: f64, at_most: f64) -> String {
    let met = if median_ratio <= at_most { "met" } else { "missed" };
    format!("{median_ratio:.2} ≤ {at_most}: **{met}**")
}
