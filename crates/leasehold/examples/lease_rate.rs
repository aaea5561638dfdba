//! Lease throughput against the durability floor, measured in one run:
//! acquire+release cycles per second through the library and through the
//! CLI, next to a raw loop of 4 KiB write + fsync on the same filesystem.
//!
//!     cargo run --release -p leasehold --example lease_rate -- DIR [CLI_BINARY]
//!
//! Each round measures the floor and then the library, back to back, and
//! the ratios are taken per round: the disks here run in phases (a few
//! hundred to several thousand fsyncs a second, changing within minutes),
//! and a ratio of two medians taken in different phases means nothing.
//! Issue 15's goal: a library transaction (an acquire, or a release) at
//! >= 0.5x the floor.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;

use common::{library, rate};
use leasehold::Store;

fn fsync_floor(dir: &Path, n: u32) -> f64 {
    let path = dir.join("fsync-floor");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let block = [7u8; 4096];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&block).unwrap();
        f.sync_all().unwrap();
    }
    let r = rate(n, start.elapsed());
    let _ = std::fs::remove_file(path);
    r
}

fn cli(bin: &Path, url: &str, n: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        let out = Command::new(bin)
            .args(["--store", url, "acquire", "bench-cli"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let token = String::from_utf8(out.stdout).unwrap();
        let st = Command::new(bin)
            .args(["--store", url, "release", "bench-cli", "--token", token.trim()])
            .status()
            .unwrap();
        assert!(st.success());
    }
    rate(n, start.elapsed())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `median (min–max)` of `v`, with `digits` decimals.
fn spread(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.digits$} ({lo:.digits$}–{hi:.digits$})", median(v.to_vec()))
}

/// Rounds of `FLOOR_WRITES` raw write+fsync, then `CYCLES` library cycles
/// (as many durable transactions): short, so that most rounds fall within
/// one disk phase.
const ROUNDS: usize = 30;
const FLOOR_WRITES: u32 = 60;
const CYCLES: u32 = 30;

fn main() {
    let dir: PathBuf = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let bin = std::env::args().nth(2).map(PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("bench.db");
    let url = format!("sqlite://{}", db.display());
    let store = Store::open_sqlite(&db).unwrap();
    library(&store, CYCLES); // warm-up
    let (mut floor, mut lib, mut cl, mut per_tx) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let f = fsync_floor(&dir, FLOOR_WRITES);
        let l = library(&store, CYCLES);
        floor.push(f);
        lib.push(l);
        // Two durable transactions a cycle.
        per_tx.push(2.0 * l / f);
        if let Some(bin) = &bin
            && round % 6 == 0
        {
            cl.push(cli(bin, &url, 30));
        }
    }
    let ratio = median(per_tx.clone());
    println!("write+fsync floor (4 KiB):        {} /s", spread(&floor, 0));
    println!("library acquire+release:          {} cycles/s", spread(&lib, 0));
    println!(
        "  per transaction vs floor:       {}  ({ROUNDS} rounds, same-round ratios; goal >= 0.5: {})",
        spread(&per_tx, 2),
        if ratio >= 0.5 { "met" } else { "missed" }
    );
    // The disk's phases: rounds whose floor lies below or above the
    // geometric middle of the range, when the range is wide.
    let (lo, hi) = (
        floor.iter().copied().fold(f64::INFINITY, f64::min),
        floor.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    if hi > 3.0 * lo {
        let middle = (lo * hi).sqrt();
        for (phase, slow) in [("slow", true), ("fast", false)] {
            let rounds: Vec<usize> = (0..ROUNDS).filter(|&i| (floor[i] < middle) == slow).collect();
            let pick = |v: &[f64]| rounds.iter().map(|&i| v[i]).collect::<Vec<_>>();
            let r = median(pick(&per_tx));
            println!(
                "  {phase} disk ({:2} rounds, floor {} /s): per transaction {}  (goal >= 0.5: {})",
                rounds.len(),
                spread(&pick(&floor), 0),
                spread(&pick(&per_tx), 2),
                if r >= 0.5 { "met" } else { "missed" }
            );
        }
    }
    if !cl.is_empty() {
        let cl = median(cl);
        println!(
            "CLI acquire+release (2 processes): {cl:8.0} cycles/s  ({:.2} x floor)",
            cl / median(floor)
        );
    }
}
