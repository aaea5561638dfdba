//! `lease_fence`: a token may still write if it is the "newest live grant
//! for an exclusive lease; a live grant for a shared one", and the verdict
//! is recorded in the history. A refusal carries "the newest token ever
//! issued for the name".

use leasehold_backend::{FenceRefusal, HistoryEvent, LeaseAcquireParams, LeaseFence, Token};

use crate::params::{self, FENCE_CALLER, SHARED};
use crate::{Case, Harness};

fn assert_passes<H: Harness>(t: &Case<H>, lease: &str, token: Token) {
    match t.fence(&params::fence(lease, token)) {
        LeaseFence::Passed(grant) => assert_eq!(grant.token, token, "Passed reports another grant"),
        refused @ LeaseFence::Refused { .. } => {
            panic!("fence({lease:?}, {token}) of a live grant: {refused:?}")
        }
    }
}

fn refused(newest: Token, reason: FenceRefusal) -> LeaseFence {
    LeaseFence::Refused {
        newest: Some(newest),
        reason,
    }
}

/// Exclusive: only the newest grant passes, and only while live.
pub fn fence_exclusive_newest_live_only<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&params::acquire("job"));
    assert_passes(t, "job", first.token);

    t.released(&params::release("job", first.token));
    assert_eq!(
        t.fence(&params::fence("job", first.token)),
        refused(first.token, FenceRefusal::NotLive),
        "fence of a released grant"
    );

    let second = t.granted(&params::acquire("job"));
    assert_passes(t, "job", second.token);
    assert_eq!(
        t.fence(&params::fence("job", first.token)),
        refused(second.token, FenceRefusal::Superseded),
        "fence of an older token while a newer grant is live"
    );
    assert!(
        matches!(
            t.fence(&params::fence("job", Token(second.token.0 + 1))),
            LeaseFence::Refused { newest: Some(n), .. } if n == second.token
        ),
        "fence of a token never issued must be refused"
    );
    assert!(
        matches!(
            t.fence(&params::fence("never-granted", Token(1))),
            LeaseFence::Refused { newest: None, .. }
        ),
        "fence on a name never granted: refused, and no newest token"
    );

    t.released(&params::release("job", second.token));
    assert_eq!(
        t.fence(&params::fence("job", second.token)),
        refused(second.token, FenceRefusal::NotLive)
    );
}

/// A grant past its TTL no longer passes, even before anything has cleaned
/// it up.
pub fn fence_expired_token_is_not_live<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&t.expiring(params::acquire("job")));
    t.almost_expire();
    assert_passes(t, "job", grant.token);
    t.expire();
    assert_eq!(
        t.fence(&params::fence("job", grant.token)),
        refused(grant.token, FenceRefusal::NotLive),
        "fence of an expired grant"
    );
}

/// Shared: any live grant passes, older or not; a released one does not.
pub fn fence_shared_any_live_grant<H: Harness>(t: &mut Case<H>) {
    let reader = |owner: &str| LeaseAcquireParams {
        owner: params::implicit(owner),
        mode: SHARED,
        ..params::acquire("dir")
    };
    let a = t.granted(&reader("a"));
    let b = t.granted(&reader("b"));
    assert_passes(t, "dir", a.token);
    assert_passes(t, "dir", b.token);

    t.released(&params::release("dir", a.token));
    // The reason is left open: the grant is not live, and a newer grant
    // exists; the contract does not say which of the two to report.
    assert!(
        matches!(
            t.fence(&params::fence("dir", a.token)),
            LeaseFence::Refused { newest: Some(newest), .. } if newest == b.token
        ),
        "a released shared grant must be refused, naming the newest token {}",
        b.token
    );
    assert_passes(t, "dir", b.token);
}

/// Passes and refusals are recorded with the token and the caller.
pub fn fence_verdicts_are_recorded<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&params::acquire("job"));
    assert_passes(t, "job", first.token);
    t.released(&params::release("job", first.token));
    let second = t.granted(&params::acquire("job"));
    assert!(matches!(
        t.fence(&params::fence("job", first.token)),
        LeaseFence::Refused { .. }
    ));

    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::FenceRefused, Some(first.token)),
            (HistoryEvent::Granted, Some(second.token)),
            (HistoryEvent::Released, Some(first.token)),
            (HistoryEvent::FencePassed, Some(first.token)),
            (HistoryEvent::Granted, Some(first.token)),
        ]
    );
    for entry in t.history("job") {
        if matches!(entry.event, HistoryEvent::FencePassed | HistoryEvent::FenceRefused) {
            assert!(
                entry.owner.as_deref() == Some(FENCE_CALLER) || entry.detail.contains(FENCE_CALLER),
                "the fence caller is not recorded: {entry:?}"
            );
        }
    }
}

/// A caller that names its grant passes only when the token's grant in
/// the store is that one: after a restore the store may hold the token for
/// another grant. Without a grant, the token alone is judged, as before.
pub fn fence_with_another_grant_of_the_token_is_refused<H: Harness>(t: &mut Case<H>) {
    let g = t.granted(&params::acquire("job"));
    let with = |grant| leasehold_backend::LeaseFenceParams {
        grant,
        ..params::fence("job", g.token)
    };
    assert!(matches!(t.fence(&with(Some(g.id()))), LeaseFence::Passed(_)));
    assert!(matches!(t.fence(&with(None)), LeaseFence::Passed(_)));
    let other = leasehold_backend::GrantId(g.id().0 ^ 1);
    assert_eq!(
        t.fence(&with(Some(other))),
        LeaseFence::Refused {
            newest: Some(g.token),
            reason: FenceRefusal::NotLive
        }
    );
    assert!(
        t.events("job").contains(&(HistoryEvent::FenceRefused, Some(g.token))),
        "the refusal is recorded: {:?}",
        t.events("job")
    );
    // The grant itself was not touched.
    assert_eq!(t.live("job"), vec![g.token]);
}
