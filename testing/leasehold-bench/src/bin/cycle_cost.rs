//! The CPU cost of a durable lease cycle, for `bench/callgrind`: opens a
//! SQLite store, warms it up, then runs `N` `try_acquire` + `release`
//! cycles inside `measured_cycles`, the one function callgrind is told to
//! count (`--toggle-collect`). Instruction counts do not depend on the
//! disk or the neighbours, so two builds compare exactly.
//!
//!     cargo build --release -p leasehold-bench --no-default-features --bin cycle_cost
//!     valgrind --tool=callgrind --toggle-collect='*measured_cycles*' \
//!         target/release/cycle_cost DIR 500

use std::path::PathBuf;

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};

fn cycle(store: &Store, name: &LeaseName, options: &AcquireOptions) {
    let Acquire::Acquired(g) = store.try_acquire(name, options).unwrap() else {
        panic!("held")
    };
    store.release(&g).unwrap();
}

#[inline(never)]
fn measured_cycles(store: &Store, name: &LeaseName, options: &AcquireOptions, n: u32) {
    for _ in 0..n {
        cycle(store, name, options);
    }
}

fn main() {
    let dir: PathBuf = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let n: u32 = std::env::args().nth(2).map_or(500, |n| n.parse().expect("N"));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::open_sqlite(&dir.join("cycle-cost.db")).unwrap();
    let name = LeaseName::new("cycle-cost").unwrap();
    let options = AcquireOptions::default();
    // Warm-up: statement caches, pages, and more than a history's worth of
    // entries (two a cycle), so pruning is part of what is measured.
    for _ in 0..600 {
        cycle(&store, &name, &options);
    }
    measured_cycles(&store, &name, &options, n);
    println!("{n} cycles");
}
