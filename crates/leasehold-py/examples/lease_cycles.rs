//! The Rust side of `crates/leasehold-py/bench/run`: lease cycles per
//! second through the library, as the Python package makes them.
//!
//!     lease_cycles STORE_URL SECONDS kept|plain
//!
//! `kept`: `Store::acquire_and_keep`, stop the keeper, release — what one
//! `with store.lease(name):` does from Python. `plain`: `try_acquire` and
//! `release`, no keeper. Prints the cycles per second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, KeeperOptions, Kept, LeaseName, Store, StoreOptions, StoreUrl};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, seconds, how] = args.as_slice() else {
        eprintln!("usage: lease_cycles STORE_URL SECONDS kept|plain");
        std::process::exit(2);
    };
    let store =
        Arc::new(Store::open(&StoreUrl::parse(url).expect("a store URL"), &StoreOptions::default()).expect("open"));
    let name = LeaseName::new("bench").expect("a name");
    let options = AcquireOptions::default();
    let run_for = Duration::from_secs_f64(seconds.parse().expect("seconds"));
    let started = Instant::now();
    let mut cycles = 0u32;
    while started.elapsed() < run_for {
        let grant = if how == "kept" {
            let Kept::Acquired(grant, keeper) = store
                .acquire_and_keep(&name, &options, KeeperOptions::new(options.ttl))
                .expect("acquire")
            else {
                panic!("held")
            };
            keeper.stop();
            grant
        } else {
            let Acquire::Acquired(grant) = store.try_acquire(&name, &options).expect("acquire") else {
                panic!("held")
            };
            grant
        };
        store.release(&grant).expect("release");
        cycles += 1;
    }
    println!("{:.1}", f64::from(cycles) / started.elapsed().as_secs_f64());
}
