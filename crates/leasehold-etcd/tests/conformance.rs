//! The backend conformance suite (`leasehold-backend-tests`) on a real etcd
//! started for this test binary; each case gets its own key prefix, so each
//! starts from an empty store.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use leasehold_backend::{Backend, ClockSkew};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::etcd;

#[derive(Debug)]
struct EtcdHarness {
    backend: EtcdBackend,
    prefix: String,
    // Never moved: etcd's clock is the server's (`clock_skew: false`).
    skew: ClockSkew,
}

impl leasehold_backend_tests::Harness for EtcdHarness {
    fn new() -> Self {
        static CASE: AtomicU32 = AtomicU32::new(0);
        let prefix = format!(
            "/conformance/{}-{}",
            std::process::id(),
            CASE.fetch_add(1, Ordering::Relaxed)
        );
        let backend = support::open(etcd::shared(), &prefix);
        Self {
            backend,
            prefix,
            skew: ClockSkew::default(),
        }
    }

    fn backend(&self) -> &dyn Backend {
        &self.backend
    }

    fn skew(&self) -> &ClockSkew {
        &self.skew
    }

    /// A new client connection to the same cluster and prefix.
    fn reopen(&mut self) {
        self.backend = support::open(etcd::shared(), &self.prefix);
    }
}

fn main() {
    leasehold_backend_tests::main::<EtcdHarness>()
}
