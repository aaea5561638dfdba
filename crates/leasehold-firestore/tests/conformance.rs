//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! Firestore emulator started for this test binary; each case gets its
//! own root collection, so each starts from an empty store.

mod support;

use leasehold_backend::{Backend, ClockSkew};
use leasehold_firestore::FirestoreBackend;
use support::open;

#[derive(Debug)]
struct FirestoreHarness {
    backend: FirestoreBackend,
    prefix: String,
    // Never moved: Firestore's clock is the server's (`clock_skew: false`).
    skew: ClockSkew,
}

impl leasehold_backend_tests::Harness for FirestoreHarness {
    fn new() -> Self {
        let prefix = support::unique_prefix("conformance");
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
