//! Lease throughput against the durability floor, measured in one run:
//! acquire+release cycles per second through the library and through the
//! CLI, next to a raw loop of 4 KiB write + fsync on the same filesystem.
//!
//!     cargo run --release -p leasehold --example lease_rate -- DIR [CLI_BINARY]

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

fn main() {
    let dir: PathBuf = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let bin = std::env::args().nth(2).map(PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("bench.db");
    let url = format!("sqlite://{}", db.display());
    let store = Store::open_sqlite(&db).unwrap();
    let (mut floor, mut lib, mut cl) = (vec![], vec![], vec![]);
    // Alternate the measurements, several rounds, so drift hits all alike.
    for _ in 0..5 {
        floor.push(fsync_floor(&dir, 300));
        lib.push(library(&store, 300));
        if let Some(bin) = &bin {
            cl.push(cli(bin, &url, 50));
        }
    }
    let floor = median(floor);
    let lib = median(lib);
    println!("write+fsync floor (4 KiB):        {floor:8.0} /s");
    println!(
        "library acquire+release:          {lib:8.0} cycles/s  ({:.2} x floor)",
        lib / floor
    );
    if !cl.is_empty() {
        let cl = median(cl);
        println!(
            "CLI acquire+release (2 processes): {cl:8.0} cycles/s  ({:.2} x floor)",
            cl / floor
        );
    }
}
