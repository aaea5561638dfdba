//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! Firestore emulator started for this test binary; each case gets its
//! own root collection, so each starts from an empty store.

use std::sync::atomic::{AtomicU32, Ordering};

use leasehold_backend::{Backend, ClockSkew};
use leasehold_firestore::FirestoreBackend;

#[derive(Debug)]
struct FirestoreHarness {
    backend: FirestoreBackend,
    prefix: String,
    // Never moved: Firestore's clock is the server's (`clock_skew: false`).
    skew: ClockSkew,
}

fn host() -> String {
    std::env::var("LEASEHOLD_TEST_FIRESTORE").expect("LEASEHOLD_TEST_FIRESTORE")
}

fn open(prefix: &str) -> FirestoreBackend {
    leasehold_firestore::open_emulator(&host(), "leasehold-test", prefix).expect("open the store")
}

impl leasehold_backend_tests::Harness for FirestoreHarness {
    fn new() -> Self {
        static CASE: AtomicU32 = AtomicU32::new(0);
        let prefix = format!(
            "conformance-{}-{}",
            std::process::id(),
            CASE.fetch_add(1, Ordering::Relaxed)
        );
        Self {
            backend: open(&prefix),
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

    /// A new client to the same emulator and collection.
    fn reopen(&mut self) {
        self.backend = open(&self.prefix);
    }
}

fn main() {
    leasehold_backend_tests::main::<FirestoreHarness>()
}
