//! Lease throughput and latency under contention: P workers (threads, each
//! with its own store connection — to SQLite the same as P processes)
//! acquiring and releasing either the same name or a name each, for a fixed
//! time. Reports cycles per second and acquire latency (p50/p99).
//!
//!     cargo run --release -p leasehold --example contention -- DIR [SECONDS]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};

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
        store.release(name, grant.token, None).unwrap();
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

fn main() {
    let dir: PathBuf = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let seconds: u64 = std::env::args().nth(2).map_or(3, |s| s.parse().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = Arc::new(dir.join("contention.db"));
    drop(Store::open_sqlite(&db).unwrap());
    println!("| workers | names | cycles/s | p50 acquire | p99 acquire |");
    println!("|---:|---|---:|---:|---:|");
    for workers in [1usize, 2, 8] {
        for same in [true, false] {
            if workers == 1 && !same {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = (0..workers)
                .map(|w| {
                    let (db, stop) = (db.clone(), stop.clone());
                    let name = LeaseName::new(if same {
                        "shared-name".to_owned()
                    } else {
                        format!("name-{w}")
                    })
                    .unwrap();
                    std::thread::spawn(move || worker(&db, &name, &stop))
                })
                .collect();
            let start = Instant::now();
            std::thread::sleep(Duration::from_secs(seconds));
            stop.store(true, Ordering::Relaxed);
            let mut all: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
            let elapsed = start.elapsed();
            all.sort();
            #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
            let rate = all.len() as f64 / elapsed.as_secs_f64();
            println!(
                "| {workers} | {} | {rate:.0} | {:.2} ms | {:.2} ms |",
                if same { "same" } else { "one each" },
                percentile(&all, 0.5).as_secs_f64() * 1000.0,
                percentile(&all, 0.99).as_secs_f64() * 1000.0
            );
        }
    }
}
