//! Ending a kept grant for a language package (Python's `release()`,
//! Node's `release()`): stop the keeper, release unless the store has
//! already refused a renewal, and say how it ended — in one wording for
//! every front end.

use std::fmt;

use leasehold_backend::{Grant, LeaseRelease};

use super::{Keeper, Loss};
use crate::{Error, Store};

/// How the release of a kept grant ended.
#[derive(Debug)]
pub enum Released {
    /// Released: the next acquirer takes it at once.
    Released,
    /// The grant had been lost before the release (its keeper's loss, or
    /// the store's answer): what was done under it may have overlapped a
    /// newer holder. The message says so.
    Lost(String),
    /// The store failed to release it; it expires by its TTL.
    Failed(Error),
}

/// The grant a message names: "lease NAME (token T)".
#[must_use]
pub fn described(grant: &Grant) -> String {
    format!("lease {} (token {})", grant.name, grant.token)
}

impl<L: fmt::Display> Loss<L> {
    /// The one wording of a hold's loss, for a package's `LeaseLost`:
    /// `what` names it ("lease NAME (token T)").
    #[must_use]
    pub fn told(&self, what: &str) -> String {
        format!(
            "{what} was lost: {self}. Stop using it: what it protects may be someone else's now (a new holder has a newer token)"
        )
    }
}

/// Stop `keeper` and release `grant`, unless the store already refused a
/// renewal (then there is nothing to release). Blocking: a store round trip.
pub fn release_kept(store: &Store, grant: &Grant, keeper: Keeper) -> Released {
    let what = described(grant);
    match keeper.stop() {
        Some(Loss::Refused(reason)) => Released::Lost(Loss::Refused(reason).told(&what)),
        Some(loss) => {
            // Lost by the deadline: the grant may still be ours in the
            // store; release it all the same so the next holder need not
            // wait for its TTL.
            let _ = store.release(grant);
            Released::Lost(loss.told(&what))
        }
        None => match store.release(grant) {
            Ok(LeaseRelease::Released) => Released::Released,
            Ok(LeaseRelease::Lost(reason)) => Released::Lost(format!(
                "{what} was already gone when released: {reason}; what was done under it may have overlapped a newer holder"
            )),
            Err(e) => Released::Failed(e),
        },
    }
}
