//! Lease throughput on etcd, measured in one run: acquire+release cycles
//! per second through the library, next to `etcdctl` doing the equivalent
//! in a loop: the bare pair of transactions (acquire: compare
//! `create_revision == 0`, put; release: compare, delete), and the same with
//! a server-side TTL (lease grant, the pair with the put on the lease,
//! lease revoke).
//!
//!     cargo run --release -p leasehold --example etcd_rate -- HOST:PORT [N]
//!
//! Use a throwaway etcd: it writes under /leasehold-bench and /etcdctl-bench.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

mod common;

use common::{library, rate};
use leasehold::{Store, StoreOptions, StoreUrl};

fn etcd_library(endpoint: &str, n: u32) -> f64 {
    let url = StoreUrl::parse(&format!("etcd://{endpoint}?prefix=/leasehold-bench")).unwrap();
    library(&Store::open(&url, &StoreOptions::default()).unwrap(), n)
}

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
    let endpoint = args.next().expect("usage: etcd_rate HOST:PORT [N]");
    let n: u32 = args.next().map_or(300, |s| s.parse().expect("N"));
    println!("acquire+release cycles per second against etcd at {endpoint}, {n} each:");
    println!(
        "  leasehold library (try_acquire + release): {:8.1}/s",
        etcd_library(&endpoint, n)
    );
    println!(
        "  etcdctl: txn + txn:                        {:8.1}/s",
        etcdctl_bare(&endpoint, n)
    );
    println!(
        "  etcdctl: lease grant + txn + txn + revoke: {:8.1}/s",
        etcdctl_leased(&endpoint, n)
    );
    println!(
        "  leasehold library, again:                  {:8.1}/s",
        etcd_library(&endpoint, n)
    );
}
