//! The backend conformance suite (`leasehold-backend-tests`) on a real etcd
//! started for this test binary; each case gets its own key prefix, so each
//! starts from an empty store.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use leasehold_backend_tests::{PrefixedStore, ServerHarness};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::etcd;

struct Etcd;

impl PrefixedStore for Etcd {
    type Backend = EtcdBackend;

    fn unique_prefix() -> String {
        static CASE: AtomicU32 = AtomicU32::new(0);
        format!(
            "/conformance/{}-{}",
            std::process::id(),
            CASE.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn open(prefix: &str) -> EtcdBackend {
        support::open(etcd::shared(), prefix)
    }
}

fn main() {
    leasehold_backend_tests::main::<ServerHarness<Etcd>>()
}
