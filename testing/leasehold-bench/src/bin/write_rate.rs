//! Write rate of `leasehold write` (CLI), `write_atomic` (library) and a raw
//! write + fsync + rename + directory fsync loop, in one run, on the
//! filesystem of DIR, alternating over rounds; prints a Markdown table of
//! medians (min–max) and the ratios to the raw sequence taken per round.
//!
//! ```text
//! cargo build --release -p leasehold-cli
//! cargo run --release -p leasehold-bench --bin write_rate -- DIR [LIB_CALLS] [CLI_CALLS] [ROUNDS]
//! ```
//!
//! The CLI is `target/release/leasehold` unless `LEASEHOLD_BIN` names one.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use leasehold::files::{WriteOptions, write_atomic};
use leasehold_bench::{per_sec, spread};

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

fn timed(calls: usize, mut op: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..calls {
        op(i);
    }
    per_sec(calls, start.elapsed())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".into())).join("leasehold-write-rate");
    let lib_calls: usize = args.next().map_or(Ok(400), |a| a.parse())?;
    let cli_calls: usize = args.next().map_or(Ok(40), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let bin =
        std::env::var_os("LEASEHOLD_BIN").map_or_else(|| PathBuf::from("target/release/leasehold"), PathBuf::from);
    fs::create_dir_all(&dir)?;
    let dir_fd = fs::File::open(&dir)?;
    let options = WriteOptions::default();
    let lib_target = dir.join("lib.json");
    let cli_target = dir.join("cli.json");
    let cli_exists = bin.exists();

    // Each round: the raw sequence, the library, the CLI, one after the
    // other; the ratios are taken within the round.
    let (mut raw, mut lib, mut cli, mut lib_ratio, mut cli_ratio) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let r = timed(lib_calls, |i| raw_write(&dir, &dir_fd, &payload(i)).expect("raw write"));
        let l = timed(lib_calls, |i| {
            write_atomic(&lib_target, &payload(i), &options).expect("write_atomic");
        });
        raw.push(r);
        lib.push(l);
        lib_ratio.push(l / r);
        if cli_exists {
            let c = timed(cli_calls, |i| {
                let mut child = Command::new(&bin)
                    .arg("write")
                    .arg(&cli_target)
                    .stdin(Stdio::piped())
                    .spawn()
                    .expect("run leasehold");
                child.stdin.take().unwrap().write_all(&payload(i)).unwrap();
                assert!(child.wait().unwrap().success(), "leasehold write failed");
            });
            cli.push(c);
            cli_ratio.push(c / r);
        }
    }
    println!(
        "| what ({} bytes each; {rounds} rounds of {lib_calls} writes, the CLI {cli_calls}) | writes/s | ÷ the raw sequence |",
        payload(0).len()
    );
    println!("|---|---:|---:|");
    println!(
        "| the raw sequence: write + fsync + rename + fsync(dir) | {} | 1 |",
        spread(&raw, 0)
    );
    println!(
        "| `write_atomic` (library) | {} | {} |",
        spread(&lib, 0),
        spread(&lib_ratio, 2)
    );
    if cli_exists {
        println!(
            "| `leasehold write` (CLI: a process, takes `FILE.lock`) | {} | {} |",
            spread(&cli, 0),
            spread(&cli_ratio, 2)
        );
    } else {
        println!(
            "| (no {}: build it with cargo build --release -p leasehold-cli) | | |",
            bin.display()
        );
    }
    fs::remove_dir_all(&dir)?;
    Ok(())
}
