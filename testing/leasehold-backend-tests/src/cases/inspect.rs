//! `lease_get` ("`None` if the name was never granted"), `lease_list`
//! ("with `live_only`, only names with a live grant), ordered by name")
//! and `write_lock` (who holds the store's one write lock, if it has one).

use std::time::{Duration, SystemTime};

use leasehold_backend::unix_ms::to_ms;
use leasehold_backend::{Holder, LeaseAcquireParams, Mode};

use crate::params::{self, SHARED};
use crate::{Case, Harness, assert_fresh, names, tokens};

/// Unknown names — including prefixes and extensions of known ones — are
/// `None`.
pub fn inspect_get_unknown_is_none<H: Harness>(t: &mut Case<H>) {
    assert_eq!(t.get("job"), None);
    t.granted(&params::acquire("job"));
    for unknown in ["jo", "job/1", "job ", "Job", "j%", "job_"] {
        assert_eq!(t.get(unknown), None, "lease_get({unknown:?}) after granting \"job\"");
    }
}

/// A grant reads back exactly as it was made: owner, mode, holder, TTL.
pub fn inspect_get_reports_grant<H: Harness>(t: &mut Case<H>) {
    let mode = Mode::Shared { limit: Some(4) };
    let ttl = Duration::from_secs(90);
    let full_holder = Holder {
        host: "other-host.example".into(),
        boot_id: "0f1e2d3c-boot".into(),
        pid_ns: Some(4_026_532_000),
        pid: 31337,
        start_time: Some(987_654_321),
        cmdline: "worker --queue 'a b' ünï".into(),
        pgid: Some(31337),
        guard: Some(leasehold_backend::GuardProcess {
            pid: 31338,
            start_time: 987_654_400,
        }),
        bound: true,
    };
    let bare_holder = Holder {
        pid_ns: None,
        start_time: None,
        pgid: None,
        ..params::holder()
    };
    let before = SystemTime::now();
    let first = t.granted(&LeaseAcquireParams {
        owner: params::explicit("alice"),
        mode,
        ttl,
        holder: full_holder.clone(),
        ..params::acquire("job")
    });
    let second = t.granted(&LeaseAcquireParams {
        owner: params::implicit("host:42"),
        mode: SHARED,
        holder: bare_holder.clone(),
        ..params::acquire("job")
    });
    let after = SystemTime::now();

    let state = t.state("job");
    assert_eq!(state.name.as_str(), "job");
    assert_eq!(state.last_token, second.token);
    assert_eq!(state.waiters.len(), 0);
    assert_eq!(tokens(&state.grants), vec![first.token, second.token]);
    for (read, made) in state.grants.iter().zip([&first, &second]) {
        assert_eq!(read.name, made.name);
        assert_eq!(read.owner, made.owner);
        assert_eq!(read.owner_explicit, made.owner_explicit);
        assert_eq!(read.mode, made.mode);
        assert_eq!(read.holder, made.holder);
        assert_eq!(read.ttl, made.ttl);
        assert_eq!(
            to_ms(read.acquired_at),
            to_ms(made.acquired_at),
            "acquired_at (to the millisecond)"
        );
    }

    let read = &state.grants[0];
    assert_eq!(read.owner, "alice");
    assert!(read.owner_explicit);
    assert_eq!(read.mode, mode);
    assert_eq!(read.holder, full_holder);
    assert_eq!(read.ttl, ttl);
    assert_fresh(read.expires_in, ttl, "lease_get of a new grant");
    let slack = Duration::from_secs(1);
    assert!(
        read.acquired_at + slack >= before && read.acquired_at <= after + slack,
        "acquired_at {:?} is not the time of the grant ({before:?}..{after:?})",
        read.acquired_at
    );

    let read = &state.grants[1];
    assert_eq!(read.owner, "host:42");
    assert!(!read.owner_explicit);
    assert_eq!(read.mode, SHARED);
    assert_eq!(read.holder, bare_holder);
    assert_eq!(read.ttl, params::TTL);
}

/// `lease_list` is ordered by name; `live_only` leaves out names without a
/// live grant.
pub fn inspect_list_ordered_and_live_only<H: Harness>(t: &mut Case<H>) {
    assert_eq!(t.list(false), vec![], "a fresh store lists nothing");
    let mut issued = Vec::new();
    for name in ["gamma", "alpha", "delta", "beta"] {
        issued.push((name, t.granted(&params::acquire(name)).token));
    }
    let beta = issued[3].1;
    t.released(&params::release("beta", beta));

    let all = t.list(false);
    assert_eq!(names(&all), ["alpha", "beta", "delta", "gamma"]);
    for state in &all {
        let (_, token) = issued
            .iter()
            .find(|(name, _)| *name == state.name.as_str())
            .expect("listed name was granted");
        assert_eq!(state.last_token, *token, "last_token of {}", state.name);
        let live = if state.name.as_str() == "beta" {
            vec![]
        } else {
            vec![*token]
        };
        assert_eq!(tokens(&state.grants), live, "grants of {}", state.name);
    }
    assert_eq!(names(&t.list(true)), ["alpha", "delta", "gamma"]);
}

/// Live waiter registrations are counted by `lease_get` and `lease_list`.
pub fn inspect_waiters_counted<H: Harness>(t: &mut Case<H>) {
    t.granted(&params::acquire("job"));
    let a = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    t.enqueue(&params::enqueue("job", SHARED));
    assert_eq!(t.state("job").waiters.len(), 2);
    assert_eq!(t.list(false)[0].waiters.len(), 2);
    assert_eq!(t.list(true)[0].waiters.len(), 2);
    t.remove("job", a);
    assert_eq!(t.state("job").waiters.len(), 1);
}

/// `write_lock` names a holder only while one holds the lock: with every
/// write finished it reports the lock free (a store with one write lock:
/// SQLite) or nothing (a store without one, or that cannot tell) — never
/// a process that is not in a write. (A held lock is named in the SQLite
/// store's own tests and fault case 30, with real processes.)
pub fn inspect_write_lock_names_no_holder_when_nothing_writes<H: Harness>(t: &mut Case<H>) {
    use leasehold_backend::WriteLock;
    let grant = t.granted(&params::acquire("job"));
    assert!(matches!(
        t.renew(&params::renew("job", grant.token)),
        leasehold_backend::LeaseRenew::Renewed(_)
    ));
    t.released(&params::release("job", grant.token));
    match t.backend().write_lock() {
        None | Some(WriteLock::Free) => {}
        held => panic!("write_lock with no write under way: {held:?}"),
    }
}
