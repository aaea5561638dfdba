//! Fast takeover: `lease_acquire` drops "the grants listed in `params.evict`
//! if still present (recorded as `fast_takeover`)". Proving the holder dead
//! is the caller's job; the store only makes sure an eviction names a grant
//! that is still there.

use leasehold_backend::{HistoryEvent, LeaseAcquireParams, LeaseRelease, LeaseRenew, LostReason, Token};

use crate::params;
use crate::{Case, Harness, tokens};

fn successor(evict: Vec<Token>) -> LeaseAcquireParams {
    LeaseAcquireParams {
        owner: params::implicit("successor"),
        evict,
        ..params::acquire("job")
    }
}

/// Evicting the live grant takes the name over at once with a new token; the
/// evicted token is gone for renew and release.
pub fn evict_takes_over_live_grant<H: Harness>(t: &mut Case<H>) {
    let old = t.granted(&params::acquire("job"));
    let new = t.granted(&successor(vec![old.token]));
    assert!(new.token > old.token);
    assert_eq!(new.owner, "successor");
    assert_eq!(t.live("job"), vec![new.token]);
    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::Granted, Some(new.token)),
            (HistoryEvent::FastTakeover, Some(old.token)),
            (HistoryEvent::Granted, Some(old.token)),
        ]
    );
    assert_eq!(
        t.renew(&params::renew("job", old.token)),
        LeaseRenew::Lost(LostReason::Gone),
        "renew of a grant taken over"
    );
    assert_eq!(
        t.release(&params::release("job", old.token)),
        LeaseRelease::Lost(LostReason::Gone),
        "release of a grant taken over"
    );
    assert_eq!(t.live("job"), vec![new.token]);
}

/// Evicting a token that is no longer (or never was) a live grant does not
/// take over the current holder's newer grant.
pub fn evict_of_stale_token_is_ignored<H: Harness>(t: &mut Case<H>) {
    let old = t.granted(&params::acquire("job"));
    t.released(&params::release("job", old.token));
    let current = t.granted(&LeaseAcquireParams {
        owner: params::implicit("current"),
        ..params::acquire("job")
    });

    let held = t.held(&successor(vec![old.token]));
    assert_eq!(tokens(&held.grants), vec![current.token]);
    let never = Token(current.token.0 + 1);
    let held = t.held(&successor(vec![never]));
    assert_eq!(tokens(&held.grants), vec![current.token]);

    assert_eq!(t.live("job"), vec![current.token]);
    assert_eq!(t.state("job").last_token, current.token);
    let events = t.events("job");
    assert!(
        !events.iter().any(|(e, _)| *e == HistoryEvent::FastTakeover),
        "a stale eviction was recorded as a takeover: {events:?}"
    );
}
