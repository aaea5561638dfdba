//! How long a call waits for something held — a lease, a lock, a task —
//! as the language packages take it (Python's `wait=`, Node's
//! `{ wait }`): not at all, up to a limit, or for as long as it takes.

use std::path::Path;
use std::time::Duration;

use leasehold_backend::{Held, Mode};

use crate::lock::{Holders, LockedBy};
use crate::spelling::Spelling;

/// How long to wait for something held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Refused at once when held.
    No,
    /// Up to this long.
    Upto(Duration),
    /// For as long as it takes.
    Forever,
}

impl Wait {
    /// As the library's waits take it ([`Store::acquire_wait`](crate::Store::acquire_wait)'s
    /// timeout, `LeaseRun::wait`): `None` no wait, `Some(None)` forever.
    #[allow(
        clippy::option_option,
        reason = "the library's waits (LeaseRun::wait, acquire_wait) are spelled so"
    )]
    #[must_use]
    pub fn timeout(self) -> Option<Option<Duration>> {
        match self {
            Wait::No => None,
            Wait::Upto(d) => Some(Some(d)),
            Wait::Forever => Some(None),
        }
    }

    /// The refusal of an acquirer of `name` in `mode` kept out by `held`
    /// after this wait, in the library's words: with no wait, the remedy
    /// (try again, or wait — as `spelling` writes it); after a wait with a
    /// limit, how long it waited.
    #[must_use]
    pub fn refusal(self, held: &Held, name: &str, mode: Mode, spelling: &dyn Spelling) -> String {
        match self {
            Wait::No => format!(
                "{}. {}",
                held.refusal(name, mode, None),
                crate::spelling::try_again(spelling)
            ),
            Wait::Upto(d) => held.refusal(name, mode, Some(d)).to_string(),
            Wait::Forever => held.refusal(name, mode, None).to_string(),
        }
    }

    /// The refusal of a lock on `path` held by `holders` after this wait,
    /// in the library's words ([`LockedBy`]): with no wait, the remedy as
    /// `spelling` writes it.
    #[must_use]
    pub fn lock_refusal(self, path: &Path, holders: &Holders, spelling: &dyn Spelling) -> String {
        let locked = LockedBy {
            path,
            holders,
            waited: self != Wait::No,
        };
        match self {
            Wait::No => locked.with_remedy(spelling),
            Wait::Upto(_) | Wait::Forever => locked.to_string(),
        }
    }
}
