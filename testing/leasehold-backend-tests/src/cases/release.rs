//! `lease_release`: "End a live grant at once, keeping the token counter."

use leasehold_backend::{
    LeaseAcquireParams, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams, LostReason, Token,
};

use crate::params;
use crate::{Case, Harness};

/// A release frees the name at once (no waiting for the TTL) and keeps
/// `last_token`.
pub fn release_ends_grant_at_once_and_keeps_counter<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    t.released(&params::release("job", grant.token));
    let state = t.state("job");
    assert_eq!(state.grants, vec![], "the released grant is still listed");
    assert_eq!(state.last_token, grant.token);

    let next = t.granted(&LeaseAcquireParams {
        owner: params::implicit("next"),
        ..params::acquire("job")
    });
    assert!(next.token > grant.token);
}

/// A second release of the same grant is `Lost(Gone)` and does not touch a
/// newer grant.
pub fn release_twice_is_lost<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    t.released(&params::release("job", grant.token));
    assert_eq!(
        t.release(&params::release("job", grant.token)),
        LeaseRelease::Lost(LostReason::Gone)
    );

    let next = t.granted(&params::acquire("job"));
    assert_eq!(
        t.release(&params::release("job", grant.token)),
        LeaseRelease::Lost(LostReason::Gone),
        "a stale release while a newer grant is live"
    );
    assert_eq!(t.live("job"), vec![next.token], "a stale release ended the newer grant");
    assert_eq!(
        t.release(&params::release("never", Token(1))),
        LeaseRelease::Lost(LostReason::Gone),
        "release on a name never granted"
    );
}

/// A release naming another owner is `Lost(NotOwner)`; the grant stays live.
pub fn release_with_wrong_owner_is_not_owner<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    });
    let as_owner = |owner: &str| LeaseReleaseParams {
        owner: Some(owner.into()),
        ..params::release("job", grant.token)
    };
    assert_eq!(
        t.release(&as_owner("mallory")),
        LeaseRelease::Lost(LostReason::NotOwner)
    );
    assert_eq!(t.live("job"), vec![grant.token], "a refused release ended the grant");
    t.held(&params::acquire("job"));

    t.released(&as_owner("alice"));
    assert_eq!(t.live("job"), vec![]);
}

/// A release that leaves out the explicit owner of a grant is
/// `Lost(OwnerRequired)`; the grant stays live until its owner releases it.
pub fn release_without_explicit_owner_is_refused<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    });
    assert_eq!(
        t.release(&params::release("job", grant.token)),
        LeaseRelease::Lost(LostReason::OwnerRequired)
    );
    assert_eq!(t.live("job"), vec![grant.token], "a refused release ended the grant");
    t.released(&LeaseReleaseParams {
        owner: Some("alice".into()),
        ..params::release("job", grant.token)
    });
    assert_eq!(t.live("job"), vec![]);
}

/// A grant is a capability: a renewal or release naming a grant acts on
/// that grant only. A token the store holds for another grant (issued
/// again after the store lost data) is `Lost(OtherGrant)`, and the other
/// grant is left as it was — neither extended nor ended.
pub fn release_and_renew_act_only_on_the_named_grant<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    let other = leasehold_backend::GrantId(grant.id().0 ^ 1);
    assert_eq!(
        t.renew(&LeaseRenewParams {
            grant: Some(other),
            ..params::renew("job", grant.token)
        }),
        LeaseRenew::Lost(LostReason::OtherGrant),
        "a renewal naming another grant"
    );
    assert_eq!(
        t.release(&LeaseReleaseParams {
            grant: Some(other),
            ..params::release("job", grant.token)
        }),
        LeaseRelease::Lost(LostReason::OtherGrant),
        "a release naming another grant"
    );
    let state = t.state("job");
    assert_eq!(state.grants.len(), 1, "the grant was ended by another grant's release");
    assert_eq!(state.grants[0].id(), grant.id(), "the grant changed");
    assert!(
        matches!(
            t.renew(&LeaseRenewParams {
                grant: Some(grant.id()),
                ..params::renew("job", grant.token)
            }),
            LeaseRenew::Renewed(_)
        ),
        "a renewal naming its own grant"
    );
    t.released(&LeaseReleaseParams {
        grant: Some(grant.id()),
        ..params::release("job", grant.token)
    });
    assert_eq!(t.live("job"), vec![], "the named grant was not released");
}

/// A token alone (which `status` shows to anyone) never renews nor ends a
/// grant bound to a process: that process ends it — or a caller naming
/// its grant. Nothing changes on the refusal.
pub fn release_by_token_alone_never_ends_a_bound_grant<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&LeaseAcquireParams {
        holder: params::bound(4242),
        ..params::acquire("job")
    });
    assert_eq!(
        t.release(&params::release("job", grant.token)),
        LeaseRelease::Lost(LostReason::BoundToProcess)
    );
    assert_eq!(
        t.renew(&params::renew("job", grant.token)),
        LeaseRenew::Lost(LostReason::BoundToProcess)
    );
    assert_eq!(
        t.live("job"),
        vec![grant.token],
        "a release by token alone ended a bound grant"
    );
    t.released(&LeaseReleaseParams {
        grant: Some(grant.id()),
        ..params::release("job", grant.token)
    });
    assert_eq!(t.live("job"), vec![]);
}
