//! What the throughput examples share.

use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};

/// Operations per second.
pub fn rate(n: u32, elapsed: Duration) -> f64 {
    f64::from(n) / elapsed.as_secs_f64()
}

/// `n` acquire+release cycles of one name through the library, per second.
pub fn library(store: &Store, n: u32) -> f64 {
    let name = LeaseName::new("bench-lib").unwrap();
    let options = AcquireOptions::default();
    let start = Instant::now();
    for _ in 0..n {
        let Acquire::Acquired(g) = store.try_acquire(&name, &options).unwrap() else {
            panic!("held")
        };
        store.release(&name, g.token, None).unwrap();
    }
    rate(n, start.elapsed())
}
