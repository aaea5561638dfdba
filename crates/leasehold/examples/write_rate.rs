//! Write rate of `leasehold write` (CLI), `write_atomic` (library) and a raw
//! write + fsync + rename + directory fsync loop, in one run, on the
//! filesystem of DIR.
//!
//! ```text
//! cargo build --release -p leasehold-cli
//! cargo run --release -p leasehold --example write_rate -- DIR [LIB_CALLS] [CLI_CALLS]
//! ```
//!
//! The CLI is `target/release/leasehold` unless `LEASEHOLD_BIN` names one.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::files::{WriteOptions, write_atomic};

fn payload(i: usize) -> Vec<u8> {
    format!("{{\"seq\":{i},\"pad\":\"{}\"}}\n", "x".repeat(1000)).into_bytes()
}

/// The raw sequence leasehold's atomic write is measured against.
fn raw_write(dir: &Path, dir_fd: &fs::File, data: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(".raw.tmp");
    let mut file = fs::File::create(&tmp)?;
    file.write_all(data)?;
    file.sync_all()?;
    drop(file);
    rustix::fs::renameat(rustix::fs::CWD, &tmp, rustix::fs::CWD, dir.join("raw.json"))?;
    dir_fd.sync_all()
}

fn rate(label: &str, calls: usize, elapsed: Duration) {
    let n = f64::from(u32::try_from(calls).expect("fewer than 2^32 calls"));
    let per_sec = n / elapsed.as_secs_f64();
    let ms = elapsed.as_secs_f64() * 1000.0 / n;
    println!("| {label:<34} | {calls:>6} | {per_sec:>9.0} | {ms:>8.3} |");
}

fn timed(calls: usize, mut op: impl FnMut(usize)) -> Duration {
    let start = Instant::now();
    for i in 0..calls {
        op(i);
    }
    start.elapsed()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".into())).join("leasehold-write-rate");
    let lib_calls: usize = args.next().map_or(Ok(2000), |a| a.parse())?;
    let cli_calls: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let bin =
        std::env::var_os("LEASEHOLD_BIN").map_or_else(|| PathBuf::from("target/release/leasehold"), PathBuf::from);
    fs::create_dir_all(&dir)?;
    let dir_fd = fs::File::open(&dir)?;
    let options = WriteOptions::default();
    let lib_target = dir.join("lib.json");
    let cli_target = dir.join("cli.json");

    println!("filesystem of {}; payload {} bytes", dir.display(), payload(0).len());
    println!(
        "| {:<34} | {:>6} | {:>9} | {:>8} |",
        "what", "calls", "writes/s", "ms/write"
    );
    println!("|{:-<36}|{:->8}|{:->11}|{:->10}|", "", "", "", "");
    let raw = timed(lib_calls, |i| raw_write(&dir, &dir_fd, &payload(i)).expect("raw write"));
    rate("raw write+fsync+rename+fsync(dir)", lib_calls, raw);
    let lib = timed(lib_calls, |i| {
        write_atomic(&lib_target, &payload(i), &options).expect("write_atomic");
    });
    rate("write_atomic (library)", lib_calls, lib);
    if bin.exists() {
        let cli = timed(cli_calls, |i| {
            let mut child = Command::new(&bin)
                .arg("write")
                .arg(&cli_target)
                .stdin(Stdio::piped())
                .spawn()
                .expect("run leasehold");
            child.stdin.take().unwrap().write_all(&payload(i)).unwrap();
            assert!(child.wait().unwrap().success(), "leasehold write failed");
        });
        rate("leasehold write (CLI, locked)", cli_calls, cli);
    } else {
        println!(
            "(no {}: build it with cargo build --release -p leasehold-cli)",
            bin.display()
        );
    }
    let raw = timed(lib_calls, |i| raw_write(&dir, &dir_fd, &payload(i)).expect("raw write"));
    rate("raw again (drift check)", lib_calls, raw);
    fs::remove_dir_all(&dir)?;
    Ok(())
}
