//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! Firestore emulator started for this test binary; each case gets its
//! own root collection, so each starts from an empty store.

mod support;

use leasehold_backend_tests::{PrefixedStore, ServerHarness};
use leasehold_firestore::FirestoreBackend;

struct Firestore;

impl PrefixedStore for Firestore {
    type Backend = FirestoreBackend;

    fn unique_prefix() -> String {
        support::unique_prefix("conformance")
    }

    fn open(prefix: &str) -> FirestoreBackend {
        support::open(prefix)
    }
}

fn main() {
    leasehold_backend_tests::main::<ServerHarness<Firestore>>()
}
