//! Helpers for the network stores' tests of opening a store (TLS, users):
//! what a store that opened can do, and what one that did not said.

use leasehold_backend::{Backend, BackendError, LeaseAcquire, LeaseRelease};

use crate::params;

/// Acquire and release the name `job`: the store works, end to end.
///
/// # Panics
/// When either fails, or the name was held.
pub fn acquire_and_release(store: &dyn Backend) {
    let LeaseAcquire::Acquired(grant) = store.lease_acquire(&params::acquire("job")).unwrap() else {
        panic!("a fresh name was held")
    };
    let release = store.lease_release(&params::release("job", grant.token)).unwrap();
    assert_eq!(release, LeaseRelease::Released);
}

/// The reason and hint of a store refused because it cannot be used
/// (down, or refusing the credentials: exit 69), printed for the test's log.
///
/// # Panics
/// On any other outcome.
pub fn unavailable<T>(outcome: Result<T, BackendError>) -> (String, String) {
    match outcome {
        Err(e) if e.kind().is_store_unusable() => {
            eprintln!("refused ({}): {}; {}", e.kind(), e.reason(), e.hint_text());
            (e.reason().to_owned(), e.hint_text().to_owned())
        }
        Err(other) => panic!("expected unavailable (exit 69), got {other}"),
        Ok(_) => panic!("expected unavailable (exit 69), got a store"),
    }
}

/// The reason of a URL refused as invalid (exit 2).
///
/// # Panics
/// On any other outcome.
pub fn invalid_url<T>(outcome: Result<T, BackendError>) -> String {
    match outcome {
        Err(e) if e.kind() == leasehold_backend::ErrorKind::InvalidInput => e.reason().to_owned(),
        Err(other) => panic!("expected an invalid URL (exit 2), got {other}"),
        Ok(_) => panic!("expected an invalid URL (exit 2), got a store"),
    }
}
