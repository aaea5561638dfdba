//! Lease throughput against the durability floor, measured in one run:
//! acquire+release cycles per second through the library and through the
//! CLI, next to the least a durable transaction can cost on the same
//! filesystem. Prints a Markdown table (bench/run includes it).
//!
//!     cargo run --release -p leasehold-bench --bin lease_rate -- DIR [CLI_BINARY] [ROUNDS]
//!
//! The floor is one fsync'd write of the same bytes a library transaction
//! writes, as SQLite's write-ahead log writes them: appended at the log's
//! next offset, the log kept at the size it reaches between checkpoints
//! (about 4 MiB) and written again from its start once full, so that, as
//! in the store, the blocks are already allocated and the fsync flushes
//! the data, not a growing file's size. "The same bytes" is measured, not
//! assumed: the kernel's count of bytes this process handed to write
//! calls (`wchar` in /proc/self/io) over the warm-up's transactions, the
//! checkpoints' share included. The library does all of that and more
//! (reads, SQLite's work, checkpoints and their fsyncs), so a transaction
//! cannot beat the floor except by noise; the ratio says how close it
//! comes. (An earlier floor of 4 KiB appended to a growing file cost more
//! than a transaction does — each fsync also committed the file's new
//! size — and was beaten.)
//!
//! Each round measures the floor and then the library, back to back, and
//! the ratios are taken per round: the disks here run in phases (a few
//! hundred to several thousand fsyncs a second, changing within minutes),
//! and a ratio of two medians taken in different phases means nothing.
//! Issue 15's goal: a library transaction (an acquire, or a release) at
//! >= 0.5x the floor.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use leasehold::Store;
use leasehold_bench::{library, rate, spread, verdict};

/// The write-ahead log's size between checkpoints: SQLite checkpoints at
/// 1 000 pages (its default), each a 4 096-byte page and a 24-byte header.
const LOG_BYTES: u64 = 1000 * (4096 + 24);

/// Rounds of `FLOOR_WRITES` floor transactions, then `CYCLES` library
/// cycles (twice as many durable transactions): short, so that most
/// rounds fall within one disk phase.
const FLOOR_WRITES: u32 = 60;
const CYCLES: u32 = 30;
/// Warm-up cycles: past the first checkpoints, so that the bytes counted
/// per transaction include their share.
const WARM_UP_CYCLES: u32 = 600;

/// Bytes this process has handed to write(2) and its kin so far.
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io (Linux)");
    io.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a wchar line in /proc/self/io")
}

/// The floor's log: allocated in full before the first measurement (by
/// writing it, not by fallocate, whose extents would be converted on the
/// first write), as a store's log is after its first checkpoint.
struct FloorLog {
    file: File,
    offset: u64,
    record: Vec<u8>,
}

impl FloorLog {
    fn create(path: &Path, record_bytes: usize) -> FloorLog {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(path)
            .unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0;
        while written < LOG_BYTES {
            file.write_all(&chunk).unwrap();
            written += chunk.len() as u64;
        }
        file.sync_all().unwrap();
        FloorLog {
            file,
            offset: 0,
            record: vec![7u8; record_bytes],
        }
    }

    /// `n` fsync'd appends of the record; per second.
    fn transactions(&mut self, n: u32) -> f64 {
        let start = Instant::now();
        for _ in 0..n {
            if self.offset + self.record.len() as u64 > LOG_BYTES {
                self.offset = 0;
            }
            self.file.write_all_at(&self.record, self.offset).unwrap();
            self.file.sync_all().unwrap();
            self.offset += self.record.len() as u64;
        }
        rate(n, start.elapsed())
    }
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

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let bin = args.next().filter(|b| !b.is_empty()).map(PathBuf::from);
    let rounds: usize = args.next().map_or(30, |r| r.parse().expect("ROUNDS is a number"));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("bench.db");
    // A new store each run: the file and the log kept beside it.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let url = format!("sqlite://{}", db.display());
    let store = Store::open_sqlite(&db).unwrap();
    let before = written_bytes();
    library(&store, WARM_UP_CYCLES);
    let per_transaction = (written_bytes() - before) / u64::from(2 * WARM_UP_CYCLES);
    let mut floor_log = FloorLog::create(&dir.join("floor.log"), usize::try_from(per_transaction).unwrap());

    let (mut floor, mut lib, mut lib_ratio, mut cl, mut cli_ratio) = (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let f = floor_log.transactions(FLOOR_WRITES);
        let l = library(&store, CYCLES);
        floor.push(f);
        lib.push(l);
        // Two durable transactions a cycle.
        lib_ratio.push(2.0 * l / f);
        if let Some(bin) = &bin
            && round % 6 == 0
        {
            let c = cli(bin, &url, 30);
            cl.push(c);
            cli_ratio.push(2.0 * c / f);
        }
    }
    let _ = std::fs::remove_file(dir.join("floor.log"));
    println!("| what ({rounds} rounds, each next to the floor) | per second | per transaction ÷ the floor | goal |");
    println!("|---|---:|---:|---|");
    println!(
        "| **the floor**: one fsync'd write of {per_transaction} bytes (what a library transaction writes) into a preallocated log | {} transactions | 1 | |",
        spread(&floor, 0)
    );
    println!(
        "| library `try_acquire` + `release` (two durable transactions) | {} cycles | {} | {} |",
        spread(&lib, 0),
        spread(&lib_ratio, 2),
        verdict(leasehold_bench::median(&lib_ratio), 0.5)
    );
    if !cl.is_empty() {
        println!(
            "| CLI `leasehold acquire` + `leasehold release` (two processes; {} of the rounds) | {} cycles | {} | |",
            cl.len(),
            spread(&cl, 0),
            spread(&cli_ratio, 3)
        );
    }
}
