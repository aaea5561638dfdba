//! "Expiry is measured on the store's clock […] never on the caller's wall
//! clock." The suite moves that clock with the harness' `ClockSkew` — or,
//! where it cannot be moved (etcd), lets real time pass over short grants
//! (`Case::expire`).

use leasehold_backend::{HistoryEvent, LeaseAcquireParams};

use crate::params;
use crate::{Case, Harness, names};

/// A grant is live until the store's clock has passed its TTL, then gone:
/// no longer listed as live, and recorded as `expired` by the acquisition
/// that replaces it.
pub fn expiry_on_the_store_clock<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&t.expiring(params::acquire("job")));
    let other = t.expiring(LeaseAcquireParams {
        owner: params::implicit("other"),
        ..params::acquire("job")
    });
    t.almost_expire();
    assert_eq!(t.live("job"), vec![first.token], "just before the end of its TTL");
    t.held(&other);

    t.expire();
    let state = t.state("job");
    assert_eq!(state.grants, vec![], "past its TTL it is still listed");
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
