//! "Expiry is measured on the store's clock […] never on the caller's wall
//! clock." The suite moves that clock with the harness' `ClockSkew`.

use std::time::Duration;

use leasehold_backend::{HistoryEvent, LeaseAcquireParams};

use crate::params;
use crate::{Capability, Case, Harness, names};

/// A 60s grant is live until the store's clock has moved 60s, then gone:
/// no longer listed as live, and recorded as `expired` by the acquisition
/// that replaces it.
pub fn expiry_on_the_store_clock<H: Harness>(t: &mut Case<H>) {
    if !t.supports(Capability::ClockSkew) {
        return;
    }
    let first = t.granted(&params::acquire("job"));
    let other = LeaseAcquireParams {
        owner: params::implicit("other"),
        ..params::acquire("job")
    };
    t.advance(Duration::from_secs(59)); // of the 60s TTL
    assert_eq!(t.live("job"), vec![first.token], "59s into a 60s grant");
    t.held(&other);

    t.advance(Duration::from_secs(2));
    let state = t.state("job");
    assert_eq!(state.grants, vec![], "61s into a 60s grant it is still listed");
    assert_eq!(state.last_token, first.token);
    assert_eq!(
        names(&t.list(true)),
        Vec::<&str>::new(),
        "live_only lists an expired grant"
    );
    assert_eq!(names(&t.list(false)), ["job"]);

    let second = t.granted(&other);
    assert!(second.token > first.token);
    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::Granted, Some(second.token)),
            (HistoryEvent::Expired, Some(first.token)),
            (HistoryEvent::Granted, Some(first.token)),
        ]
    );
    assert_eq!(t.live("job"), vec![second.token]);
}
