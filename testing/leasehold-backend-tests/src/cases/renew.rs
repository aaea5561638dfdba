//! `lease_renew`: "Extend a live grant to `now + ttl`; `Lost` if it is not
//! live." Scoped to name, token and owner (the one given, and always an
//! explicit one); a lapsed grant is never revived.

use std::time::Duration;

use leasehold_backend::{
    HistoryEvent, LeaseAcquireParams, LeaseRelease, LeaseRenew, LeaseRenewParams, LostReason, Token,
};

use crate::params::{self, TTL};
use crate::{Case, Harness, assert_fresh};

/// A renewal gives the grant its full TTL again, on the store's clock: the
/// grant outlives its first expiry.
pub fn renew_extends_on_the_store_clock<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    t.advance(Duration::from_secs(40));
    let left = t.state("job").grants[0].expires_in;
    assert!(
        left <= Duration::from_secs(20) && left + crate::SLACK >= Duration::from_secs(20),
        "40s into a 60s grant, expires_in is {left:?}"
    );

    let renewed = match t.renew(&params::renew("job", grant.token)) {
        LeaseRenew::Renewed(renewed) => renewed,
        LeaseRenew::Lost(reason) => panic!("renew of a live grant is lost: {reason:?}"),
    };
    assert_eq!(renewed.token, grant.token, "renew keeps the token");
    assert_fresh(renewed.expires_in, TTL, "renewed grant");
    assert_fresh(t.state("job").grants[0].expires_in, TTL, "lease_get after renew");

    // 80s after the grant, 40s after the renewal: still live.
    t.advance(Duration::from_secs(40));
    assert_eq!(t.live("job"), vec![grant.token], "the renewal did not extend the grant");
    t.held(&params::acquire("job"));
}

/// After expiry a renewal is `Lost(Expired)`, changes nothing, and the same
/// owner's next acquisition is a new grant with a new token.
pub fn renew_after_expiry_is_lost_and_never_revived<H: Harness>(t: &mut Case<H>) {
    let alice = t.expiring(LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    });
    let grant = t.granted(&alice);
    t.expire();
    let renew = LeaseRenewParams {
        owner: Some("alice".into()),
        ..params::renew("job", grant.token)
    };
    assert_eq!(t.renew(&renew), LeaseRenew::Lost(LostReason::Expired));
    assert_eq!(
        t.live("job"),
        Vec::<Token>::new(),
        "a refused renewal revived the grant"
    );

    let again = t.granted(&alice);
    assert!(
        again.token > grant.token,
        "re-acquisition after expiry reissued token {} (was {})",
        again.token,
        grant.token
    );
    assert_eq!(t.live("job"), vec![again.token]);
    // The old token stays dead, even now that its owner holds the name again.
    assert!(matches!(t.renew(&renew), LeaseRenew::Lost(_)));
    assert_eq!(t.live("job"), vec![again.token]);
}

/// A grant that expired and was then removed — by the next holder's
/// acquisition, which records the expiry — is still `Lost(Expired)` to a
/// late renewal or release, not `Gone` ("released or taken over"): the
/// store's history says it expired (issue 22). A released one stays `Gone`.
pub fn renew_after_expiry_and_a_new_holder_says_expired<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&t.expiring(params::acquire("job")));
    let second = t.granted(&t.expiring(params::acquire("other")));
    t.expire();
    let next = t.granted(&params::acquire("job"));
    let next_other = t.granted(&params::acquire("other"));
    assert_eq!(
        t.live("job"),
        vec![next.token],
        "the new holder's acquisition removed the expired grant"
    );
    assert_eq!(
        t.renew(&params::renew("job", first.token)),
        LeaseRenew::Lost(LostReason::Expired),
        "a renewal of the expired grant, removed since"
    );
    assert_eq!(
        t.release(&params::release("other", second.token)),
        LeaseRelease::Lost(LostReason::Expired),
        "a release of the expired grant, removed since"
    );
    assert_eq!(
        t.live("job"),
        vec![next.token],
        "a refused renewal touched the new grant"
    );
    assert_eq!(
        t.live("other"),
        vec![next_other.token],
        "a refused release touched the new grant"
    );

    t.released(&params::release("job", next.token));
    t.granted(&params::acquire("job"));
    assert_eq!(
        t.renew(&params::renew("job", next.token)),
        LeaseRenew::Lost(LostReason::Gone),
        "a released grant is gone, not expired"
    );
}

/// After release a renewal is `Lost(Gone)`.
pub fn renew_after_release_is_gone<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    t.released(&params::release("job", grant.token));
    assert_eq!(
        t.renew(&params::renew("job", grant.token)),
        LeaseRenew::Lost(LostReason::Gone)
    );
    assert_eq!(t.live("job"), Vec::<Token>::new());
}

/// A renewal naming another owner is `Lost(NotOwner)` and leaves the grant
/// as it was; the right owner renews.
pub fn renew_with_wrong_owner_is_not_owner<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    });
    let mallory = LeaseRenewParams {
        owner: Some("mallory".into()),
        ..params::renew("job", grant.token)
    };
    assert_eq!(t.renew(&mallory), LeaseRenew::Lost(LostReason::NotOwner));
    let state = t.state("job");
    assert_eq!(crate::tokens(&state.grants), vec![grant.token]);
    assert_eq!(state.grants[0].owner, "alice");

    let alice = LeaseRenewParams {
        owner: Some("alice".into()),
        ..params::renew("job", grant.token)
    };
    assert!(
        matches!(t.renew(&alice), LeaseRenew::Renewed(g) if g.token == grant.token),
        "the owner's renewal after a refused one"
    );
}

/// A renewal that leaves out the explicit owner of a grant is
/// `Lost(OwnerRequired)` and leaves the grant as it was; a grant with an
/// implicit owner is renewed without one.
pub fn renew_without_explicit_owner_is_refused<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    });
    let longer = LeaseRenewParams {
        ttl: TTL * 10,
        ..params::renew("job", grant.token)
    };
    assert_eq!(t.renew(&longer), LeaseRenew::Lost(LostReason::OwnerRequired));
    let state = t.state("job");
    assert_eq!(crate::tokens(&state.grants), vec![grant.token]);
    assert!(
        state.grants[0].expires_in <= TTL,
        "a refused renewal extended the grant: {:?} left",
        state.grants[0].expires_in
    );
    assert_eq!(t.events("job")[0], (HistoryEvent::StaleRefused, Some(grant.token)));

    let implicit = t.granted(&params::acquire("other"));
    assert!(
        matches!(t.renew(&params::renew("other", implicit.token)), LeaseRenew::Renewed(g) if g.token == implicit.token),
        "an implicit owner need not be named"
    );
}

/// A token never issued (for this name, or any) is `Lost(Gone)`.
pub fn renew_of_unissued_token_is_gone<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    let future = Token(grant.token.0 + 1);
    assert_eq!(
        t.renew(&params::renew("job", future)),
        LeaseRenew::Lost(LostReason::Gone)
    );
    assert_eq!(
        t.renew(&params::renew("other", grant.token)),
        LeaseRenew::Lost(LostReason::Gone),
        "a token of `job` renewed under another name"
    );
    assert_eq!(t.live("job"), vec![grant.token]);
    assert_eq!(
        t.state("job").last_token,
        grant.token,
        "a refused renewal issued a token"
    );
}
