//! Lease throughput and latency under contention: P workers (threads, each
//! with its own store connection — to SQLite the same as P processes)
//! acquiring and releasing either the same name or a name each, for a fixed
//! time, every setup once a round over ROUNDS rounds. Prints a Markdown
//! table: cycles per second (median, min–max), the ratio to the same
//! round's single worker (what contention costs the total), and acquire
//! latency (p50/p99 over every round).
//!
//!     cargo run --release -p leasehold-bench --bin contention -- DIR [SECONDS] [ROUNDS]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};
use leasehold_bench::{per_sec, spread};

/// One worker: acquire (retrying while held), release; until `stop`.
/// Returns each acquisition's latency (from the first attempt).
fn worker(db: &Path, name: &LeaseName, stop: &AtomicBool) -> Vec<Duration> {
    let store = Store::open_sqlite(db).unwrap();
    let options = AcquireOptions::default();
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let grant = loop {
            match store.try_acquire(name, &options).unwrap() {
                Acquire::Acquired(g) => break Some(g),
                Acquire::Held(_) if stop.load(Ordering::Relaxed) => break None,
                Acquire::Held(_) => std::thread::yield_now(),
            }
        };
        let Some(grant) = grant else { break };
        latencies.push(start.elapsed());
        store.release(&grant).unwrap();
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_sign_loss,
        reason = "an index into a short list"
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// One configuration: `workers` threads on the same name or a name each.
#[derive(Clone, Copy)]
struct Setup {
    workers: usize,
    same: bool,
}

const SETUPS: [Setup; 5] = [
    Setup { workers: 1, same: true },
    Setup { workers: 2, same: true },
    Setup {
        workers: 2,
        same: false,
    },
    Setup { workers: 8, same: true },
    Setup {
        workers: 8,
        same: false,
    },
];

/// Runs `setup` for `duration`: cycles per second and each acquisition's
/// latency.
fn measure(db: &Arc<PathBuf>, setup: Setup, duration: Duration) -> (f64, Vec<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..setup.workers)
        .map(|w| {
            let (db, stop) = (db.clone(), stop.clone());
            let name = LeaseName::new(if setup.same {
                "shared-name".to_owned()
            } else {
                format!("name-{w}")
            })
            .unwrap();
            std::thread::spawn(move || worker(&db, &name, &stop))
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let all: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    (per_sec(all.len(), start.elapsed()), all)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let seconds: f64 = args.next().map_or(2.0, |s| s.parse().expect("SECONDS is a number"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("ROUNDS is a number"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = Arc::new(dir.join("contention.db"));
    drop(Store::open_sqlite(&db).unwrap());
    let duration = Duration::from_secs_f64(seconds);
    // Per setup: each round's rate, its ratio to the same round's single
    // worker, and every latency of every round.
    let mut rates = vec![Vec::new(); SETUPS.len()];
    let mut ratios = vec![Vec::new(); SETUPS.len()];
    let mut latencies = vec![Vec::new(); SETUPS.len()];
    for _ in 0..rounds {
        let mut single = f64::NAN;
        for (i, setup) in SETUPS.iter().enumerate() {
            let (rate, lat) = measure(&db, *setup, duration);
            if i == 0 {
                single = rate;
            }
            rates[i].push(rate);
            ratios[i].push(rate / single);
            latencies[i].extend(lat);
        }
    }
    println!(
        "| workers | names | cycles/s ({rounds} rounds of {seconds} s) | ÷ 1 worker, same round | p50 acquire | p99 acquire |"
    );
    println!("|---:|---|---:|---:|---:|---:|");
    for (i, setup) in SETUPS.iter().enumerate() {
        latencies[i].sort();
        println!(
            "| {} | {} | {} | {} | {:.2} ms | {:.2} ms |",
            setup.workers,
            if setup.same { "same" } else { "one each" },
            spread(&rates[i], 0),
            if i == 0 { "1".to_owned() } else { spread(&ratios[i], 2) },
            percentile(&latencies[i], 0.5).as_secs_f64() * 1000.0,
            percentile(&latencies[i], 0.99).as_secs_f64() * 1000.0
        );
    }
}
