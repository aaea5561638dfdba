//! "Every grant, release, expiry takeover, fast takeover and refused stale
//! token is recorded", newest first, at most `limit` entries.

use leasehold_backend::{HistoryEvent, LeaseAcquireParams, LeaseRelease, LeaseReleaseParams, LeaseRenew, Token};

use crate::params::{self, SHARED};
use crate::{Case, Harness};

/// Every kind of event except expiry, in order, newest first; `limit` keeps
/// the newest entries.
pub fn history_newest_first_and_limited<H: Harness>(t: &mut Case<H>) {
    use HistoryEvent::{FastTakeover, FencePassed, FenceRefused, Granted, Reacquired, Released, StaleRefused};

    let alice = LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    };
    let t1 = t.granted(&alice).token;
    assert_eq!(t.granted(&alice).token, t1);
    let alice_releases = LeaseReleaseParams {
        owner: Some("alice".into()),
        ..params::release("job", t1)
    };
    t.released(&alice_releases);
    assert!(matches!(t.release(&alice_releases), LeaseRelease::Lost(_)));
    let t2 = t.granted(&params::acquire("job")).token;
    let t3 = t
        .granted(&LeaseAcquireParams {
            evict: vec![t2],
            ..params::acquire("job")
        })
        .token;
    t.fence(&params::fence("job", t3));
    t.fence(&params::fence("job", t1));
    assert!(matches!(t.renew(&params::renew("job", t2)), LeaseRenew::Lost(_)));

    let expected: Vec<(HistoryEvent, Option<Token>)> = vec![
        (StaleRefused, Some(t2)),
        (FenceRefused, Some(t1)),
        (FencePassed, Some(t3)),
        (Granted, Some(t3)),
        (FastTakeover, Some(t2)),
        (Granted, Some(t2)),
        (StaleRefused, Some(t1)),
        (Released, Some(t1)),
        (Reacquired, Some(t1)),
        (Granted, Some(t1)),
    ];
    assert_eq!(t.events("job"), expected);

    let history = t.history("job");
    assert!(
        history.windows(2).all(|w| w[0].at >= w[1].at),
        "history is not newest first by time: {history:#?}"
    );
    let first_grant = history.last().expect("history is not empty");
    assert_eq!(
        first_grant.owner.as_deref(),
        Some("alice"),
        "a grant's history entry names its owner"
    );

    for limit in [1, 3] {
        let limited: Vec<_> = t
            .history_limited("job", limit)
            .iter()
            .map(|e| (e.event, e.token))
            .collect();
        assert_eq!(limited, expected[..limit as usize], "history with limit {limit}");
    }
    assert_eq!(t.history("job2"), vec![], "history of an untouched name");
}

/// Expired grants are recorded as `expired` when the next acquisition
/// removes them — every one of them, shared grants included.
pub fn history_records_expiry<H: Harness>(t: &mut Case<H>) {
    let reader = |owner: &str| {
        t.expiring(LeaseAcquireParams {
            owner: params::implicit(owner),
            mode: SHARED,
            ..params::acquire("dir")
        })
    };
    let a = t.granted(&reader("a")).token;
    let b = t.granted(&reader("b")).token;
    t.expire();
    let writer = t.granted(&params::acquire("dir")).token;

    let events = t.events("dir");
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(events[0], (HistoryEvent::Granted, Some(writer)));
    let mut expired = events[1..3].to_vec();
    expired.sort_by_key(|(_, token)| *token);
    assert_eq!(
        expired,
        vec![(HistoryEvent::Expired, Some(a)), (HistoryEvent::Expired, Some(b))],
        "both expired readers are recorded, before the grant that followed: {events:?}"
    );
    assert_eq!(
        events[3..],
        [(HistoryEvent::Granted, Some(b)), (HistoryEvent::Granted, Some(a))]
    );
}
