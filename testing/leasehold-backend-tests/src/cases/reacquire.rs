//! "Re-acquiring with the same explicit `--owner` while the grant is live is
//! idempotent: same token, expiry extended" — and only then.

use std::time::Duration;

use leasehold_backend::{HistoryEvent, Holder, LeaseAcquireParams};

use crate::params::{self, SHARED, TTL};
use crate::{Case, Harness, assert_fresh, tokens};

fn alice() -> LeaseAcquireParams {
    LeaseAcquireParams {
        owner: params::explicit("alice"),
        ..params::acquire("job")
    }
}

/// The same explicit owner and mode gets the same grant back, recorded as
/// `reacquired`.
pub fn reacquire_explicit_owner_is_idempotent<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&alice());
    assert_eq!(first.owner, "alice");
    assert!(first.owner_explicit, "owner_explicit of an explicit owner");
    let again = t.granted(&alice());
    assert_eq!(again.token, first.token, "idempotent re-acquisition changed the token");
    assert!(again.owner_explicit);
    let state = t.state("job");
    assert_eq!(tokens(&state.grants), vec![first.token], "a second grant was made");
    assert_eq!(state.last_token, first.token, "a token was issued");
    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::Reacquired, Some(first.token)),
            (HistoryEvent::Granted, Some(first.token)),
        ]
    );
}

/// Idempotent re-acquisition extends the expiry to the full TTL again.
pub fn reacquire_explicit_owner_extends_expiry<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&alice());
    t.advance(Duration::from_secs(40));
    let again = t.granted(&alice());
    assert_eq!(again.token, first.token);
    assert_fresh(again.expires_in, TTL, "re-acquired grant");
    t.advance(Duration::from_secs(40));
    assert_eq!(
        t.live("job"),
        vec![first.token],
        "80s after the grant, 40s after re-acquiring it"
    );
}

/// An owner label that was not given explicitly is informational: the same
/// label again is just another acquirer, and is held. Idempotence needs both
/// the grant's and the acquirer's label to be explicit (`Grant::owner_explicit`:
/// "then it also […] makes re-acquisition idempotent").
pub fn reacquire_implicit_owner_is_held<H: Harness>(t: &mut Case<H>) {
    let bob = LeaseAcquireParams {
        owner: params::implicit("bob"),
        ..params::acquire("job")
    };
    let first = t.granted(&bob);
    assert!(!first.owner_explicit);
    let held = t.held(&bob);
    assert_eq!(tokens(&held.grants), vec![first.token]);

    // A grant whose label was not explicit is not re-acquired by an explicit
    // owner that happens to use the same label ...
    let held = t.held(&LeaseAcquireParams {
        owner: params::explicit("bob"),
        ..params::acquire("job")
    });
    assert_eq!(tokens(&held.grants), vec![first.token]);

    // ... nor is an explicit owner's grant by a non-explicit acquirer.
    t.released(&params::release("job", first.token));
    let grant = t.granted(&alice());
    t.held(&LeaseAcquireParams {
        owner: params::implicit("alice"),
        ..params::acquire("job")
    });
    assert_eq!(t.live("job"), vec![grant.token]);
    assert_eq!(t.state("job").last_token, grant.token);
}

/// Idempotence needs the same mode: the explicit owner of a shared grant
/// asking for an exclusive one is held; asking for shared again is not.
pub fn reacquire_other_mode_is_not_idempotent<H: Harness>(t: &mut Case<H>) {
    let reader = LeaseAcquireParams {
        mode: SHARED,
        ..alice()
    };
    let first = t.granted(&reader);
    let held = t.held(&alice());
    assert_eq!(tokens(&held.grants), vec![first.token]);
    let again = t.granted(&reader);
    assert_eq!(again.token, first.token);
    assert_eq!(t.live("job"), vec![first.token]);
}

/// After its grant expired, the explicit owner gets a new grant and token.
pub fn reacquire_after_expiry_gets_new_token<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&t.expiring(alice()));
    t.expire();
    let second = t.granted(&alice());
    assert!(
        second.token > first.token,
        "an expired grant was revived: token {} (was {})",
        second.token,
        first.token
    );
    assert_eq!(t.live("job"), vec![second.token]);
    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::Granted, Some(second.token)),
            (HistoryEvent::Expired, Some(first.token)),
            (HistoryEvent::Granted, Some(first.token)),
        ]
    );
}

/// A registration on behalf of a process (`reacquire_by_process`): the same
/// live process registering again renews its one grant, with the same
/// token, shared or exclusive; another process (or the same pid with
/// another start time: a reused pid) is another holder, and a request that
/// does not ask for it (an in-process holder, whose threads must exclude
/// one another) is held, and so is the same process for another process
/// group (a second command one supervisor runs under the name).
pub fn reacquire_by_the_same_process_renews_its_grant<H: Harness>(t: &mut Case<H>) {
    let process = leasehold_backend::Holder {
        bound: true,
        ..params::holder()
    };
    let register = |mode| LeaseAcquireParams {
        mode,
        holder: process.clone(),
        reacquire_by_process: true,
        ..params::acquire("session")
    };
    let first = t.granted(&register(SHARED));
    let again = t.granted(&register(SHARED));
    assert_eq!(again.token, first.token, "registering again made another grant");
    assert_eq!(t.live("session"), vec![first.token]);
    let reused_pid = LeaseAcquireParams {
        holder: leasehold_backend::Holder {
            start_time: process.start_time.map(|s| s + 1),
            ..process.clone()
        },
        ..register(SHARED)
    };
    let other = t.granted(&reused_pid);
    assert!(other.token > first.token, "a reused pid is another process");
    assert_eq!(t.live("session").len(), 2);

    let solo = LeaseAcquireParams {
        name: params::name("solo"),
        ..register(leasehold_backend::Mode::Exclusive)
    };
    let exclusive = t.granted(&solo);
    let again = t.granted(&solo);
    assert_eq!(again.token, exclusive.token);
    assert_eq!(
        t.events("solo")[0],
        (HistoryEvent::Reacquired, Some(exclusive.token)),
        "recorded as a re-acquisition"
    );
    let another_group = LeaseAcquireParams {
        holder: leasehold_backend::Holder {
            pgid: Some(process.pgid.unwrap_or(0) + 1),
            ..process.clone()
        },
        ..solo.clone()
    };
    let held = t.held(&another_group);
    assert_eq!(
        tokens(&held.grants),
        vec![exclusive.token],
        "another process group: held"
    );
    let in_process = LeaseAcquireParams {
        reacquire_by_process: false,
        ..solo
    };
    let held = t.held(&in_process);
    assert_eq!(tokens(&held.grants), vec![exclusive.token], "not asked: held");
}

/// An owner label never lets a second live process act under a grant
/// another process holds: the same explicit owner from another bound
/// holder (two `run --owner svc`, two library holders) is held, and no
/// token is issued or shared. The same process again, or two unbound
/// acquirers (seed 002's `touch`), re-acquire.
pub fn reacquire_same_owner_from_another_process_is_held<H: Harness>(t: &mut Case<H>) {
    let svc = |holder| LeaseAcquireParams {
        owner: params::explicit("svc"),
        holder,
        ..params::acquire("job")
    };
    let first = t.granted(&svc(params::bound(4242)));
    let held = t.held(&svc(params::bound(4343)));
    assert_eq!(
        tokens(&held.grants),
        vec![first.token],
        "another process shared the grant"
    );
    // Bound to no process, by the same owner: a second holder too.
    let held = t.held(&svc(params::holder()));
    assert_eq!(tokens(&held.grants), vec![first.token]);
    let again = t.granted(&svc(params::bound(4242)));
    assert_eq!(again.token, first.token, "the same process again");
    assert_eq!(t.state("job").last_token, first.token, "a token was issued");

    // A grant bound to no process is touched again by the same owner
    // unbound (same token), but never taken up by a process under it.
    let touch = |holder| LeaseAcquireParams {
        name: params::name("touch"),
        ..svc(holder)
    };
    let unbound = t.granted(&touch(params::holder()));
    let held = t.held(&touch(params::bound(4444)));
    assert_eq!(
        tokens(&held.grants),
        vec![unbound.token],
        "a process took up an unbound grant"
    );
    let touched = t.granted(&touch(Holder {
        pid: 4545,
        ..params::holder()
    }));
    assert_eq!(touched.token, unbound.token, "touch by the same owner is idempotent");
}
