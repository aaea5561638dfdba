//! In-process micro-benchmarks of the hot paths: a token-scoped renew, a
//! claim + complete, and an atomic durable write. Each includes its fsync:
//! that is the cost a caller pays.
//!
//!     cargo bench -p leasehold-bench --bench hot_paths

use std::time::Duration;

use leasehold::files::{WriteOptions, write_atomic};
use leasehold::{Acquire, AcquireOptions, LeaseName, NewTask, Store};

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 200)]
fn renew(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("b.db")).unwrap();
    let name = LeaseName::new("bench").unwrap();
    let Acquire::Acquired(grant) = store.try_acquire(&name, &AcquireOptions::default()).unwrap() else {
        panic!("held")
    };
    bencher.bench_local(|| store.renew(&grant, Duration::from_secs(60)).unwrap());
}

#[divan::bench(sample_count = 200)]
fn acquire_release(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("b.db")).unwrap();
    let name = LeaseName::new("bench").unwrap();
    bencher.bench_local(|| {
        let Acquire::Acquired(grant) = store.try_acquire(&name, &AcquireOptions::default()).unwrap() else {
            panic!("held")
        };
        store.release(&grant).unwrap();
    });
}

#[divan::bench(sample_count = 200)]
fn claim_complete(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("b.db")).unwrap();
    let queue = LeaseName::new("q").unwrap();
    store
        .task_add(&queue, (0..5000).map(|i| NewTask::new(serde_json::json!(i))).collect())
        .unwrap();
    bencher.bench_local(|| {
        let claim = store
            .task_claim(&queue, Duration::from_secs(60), None)
            .unwrap()
            .unwrap();
        store.task_complete(&claim.task_ref(), None).unwrap();
    });
}

#[divan::bench(sample_count = 200)]
fn atomic_write_4k(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("state.json");
    let data = vec![b'x'; 4096];
    bencher.bench_local(|| write_atomic(&target, &data, &WriteOptions::default()).unwrap());
}
