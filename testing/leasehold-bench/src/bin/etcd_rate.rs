//! Lease throughput on etcd, measured in one run: acquire+release cycles
//! per second through the library, next to `etcdctl` doing the equivalent
//! in a loop: the bare pair of transactions (acquire: compare
//! `create_revision == 0`, put; release: compare, delete), and the same with
//! a server-side TTL (lease grant, the pair with the put on the lease,
//! lease revoke).
//!
//!     cargo run --release -p leasehold-bench --bin etcd_rate -- HOST:PORT [LIB_CYCLES] [ETCDCTL_CYCLES] [ROUNDS]
//!
//! Alternates the three over ROUNDS rounds (default 3; 100 library cycles
//! and 20 of each etcdctl loop a round) and prints a Markdown table of
//! medians (min–max), with the library's rate divided by each reference's
//! in the same round.
//!
//! Use a throwaway etcd: it writes under /leasehold-bench and /etcdctl-bench.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use leasehold::{Store, StoreOptions, StoreUrl};
use leasehold_bench::{library, rate, spread};

fn etcdctl_cmd(endpoint: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("etcdctl")
        .args(["--endpoints", endpoint])
        .args(args)
        .env("ETCDCTL_API", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("etcdctl on PATH");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "etcdctl {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// A non-interactive `etcdctl txn`: compares, success ops, no failure ops.
fn txn(endpoint: &str, compare: &str, op: &str) {
    let out = etcdctl_cmd(endpoint, &["txn"], &format!("{compare}\n\n{op}\n\n\n"));
    assert!(out.starts_with("SUCCESS"), "{out}");
}

const KEY: &str = "/etcdctl-bench/job";

/// The bare pair: one acquiring txn (`create_revision == 0`, put), one
/// releasing txn (key still there, delete).
fn etcdctl_bare(endpoint: &str, n: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        txn(
            endpoint,
            &format!("create(\"{KEY}\") = \"0\""),
            &format!("put {KEY} holder"),
        );
        txn(endpoint, &format!("create(\"{KEY}\") > \"0\""), &format!("del {KEY}"));
    }
    rate(n, start.elapsed())
}

/// With a server-side TTL, as a grant is: lease grant, the acquiring txn
/// putting the key on it, the releasing txn, lease revoke.
fn etcdctl_leased(endpoint: &str, n: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        let granted = etcdctl_cmd(endpoint, &["lease", "grant", "60"], "");
        let id = granted.split_whitespace().nth(1).expect("lease ID").to_owned();
        txn(
            endpoint,
            &format!("create(\"{KEY}\") = \"0\""),
            &format!("put --lease={id} {KEY} holder"),
        );
        txn(endpoint, &format!("create(\"{KEY}\") > \"0\""), &format!("del {KEY}"));
        etcdctl_cmd(endpoint, &["lease", "revoke", &id], "");
    }
    rate(n, start.elapsed())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .expect("usage: etcd_rate HOST:PORT [LIB_CYCLES] [ETCDCTL_CYCLES] [ROUNDS]");
    let lib_cycles: u32 = args.next().map_or(100, |s| s.parse().expect("LIB_CYCLES"));
    let etcdctl_cycles: u32 = args.next().map_or(20, |s| s.parse().expect("ETCDCTL_CYCLES"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("ROUNDS"));
    let url = StoreUrl::parse(&format!("etcd://{endpoint}?prefix=/leasehold-bench")).unwrap();
    let store = Store::open(&url, &StoreOptions::default()).unwrap();
    library(&store, 10); // warm-up: the connection
    let (mut lib, mut bare, mut leased, mut bare_ratio, mut leased_ratio) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let ours = library(&store, lib_cycles);
        let pair = etcdctl_bare(&endpoint, etcdctl_cycles);
        let with_ttl = etcdctl_leased(&endpoint, etcdctl_cycles);
        lib.push(ours);
        bare.push(pair);
        leased.push(with_ttl);
        bare_ratio.push(ours / pair);
        leased_ratio.push(ours / with_ttl);
    }
    println!(
        "| acquire + release ({rounds} rounds: the library {lib_cycles} cycles, etcdctl {etcdctl_cycles} each) | cycles/s | leasehold ÷ this, same round |"
    );
    println!("|---|---:|---:|");
    println!(
        "| leasehold library, `try_acquire` + `release` (one connection) | {} | 1 |",
        spread(&lib, 1)
    );
    println!(
        "| `etcdctl`: txn + txn (a process and a connection per call) | {} | {} |",
        spread(&bare, 1),
        spread(&bare_ratio, 1)
    );
    println!(
        "| `etcdctl`: lease grant + txn + txn + revoke | {} | {} |",
        spread(&leased, 1),
        spread(&leased_ratio, 1)
    );
}
