//! "Exclusive grants exclude every other live grant; shared grants coexist
//! up to the acquirer's limit." A refusal is `Held`, listing the live grants
//! oldest first.

use leasehold_backend::{LeaseAcquireParams, Mode};

use crate::params::{self, SHARED};
use crate::{Case, Harness, tokens};

fn shared(owner: &str, mode: Mode) -> LeaseAcquireParams {
    LeaseAcquireParams {
        owner: params::implicit(owner),
        mode,
        ..params::acquire("dir")
    }
}

/// A live exclusive grant refuses another exclusive and a shared acquirer.
pub fn modes_exclusive_excludes_everything<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&params::acquire("job"));
    let held = t.held(&LeaseAcquireParams {
        owner: params::implicit("second"),
        ..params::acquire("job")
    });
    assert_eq!(tokens(&held.grants), vec![first.token], "Held lists the holder");
    assert_eq!(held.grants[0].owner, params::OWNER);
    assert_eq!(held.grants[0].holder, params::holder());
    assert_eq!(held.waiters_ahead, 0);
    assert_eq!(held.ticket, None, "no ticket was given");

    let held = t.held(&LeaseAcquireParams {
        mode: SHARED,
        ..params::acquire("job")
    });
    assert_eq!(tokens(&held.grants), vec![first.token]);
    assert_eq!(t.live("job"), vec![first.token], "refusals change nothing");
}

/// Shared grants without a limit coexist, each with its own, larger token.
pub fn modes_shared_coexist<H: Harness>(t: &mut Case<H>) {
    let a = t.granted(&shared("a", SHARED));
    let b = t.granted(&shared("b", SHARED));
    let c = t.granted(&shared("c", SHARED));
    assert!(a.token < b.token && b.token < c.token, "{a:?} {b:?} {c:?}");
    assert_eq!(b.mode, SHARED);
    let state = t.state("dir");
    assert_eq!(tokens(&state.grants), vec![a.token, b.token, c.token]);
    assert_eq!(state.last_token, c.token);
    let owners: Vec<&str> = state.grants.iter().map(|g| g.owner.as_str()).collect();
    assert_eq!(owners, ["a", "b", "c"]);
}

/// `Shared { limit: Some(2) }`: a third acquirer is held until one leaves.
pub fn modes_shared_limit<H: Harness>(t: &mut Case<H>) {
    let two = Mode::Shared { limit: Some(2) };
    let a = t.granted(&shared("a", two));
    let b = t.granted(&shared("b", two));
    let held = t.held(&shared("c", two));
    assert_eq!(tokens(&held.grants), vec![a.token, b.token]);
    assert_eq!(t.live("dir"), vec![a.token, b.token]);

    t.released(&params::release("dir", a.token));
    let c = t.granted(&shared("c", two));
    assert!(c.token > b.token);
    assert_eq!(t.live("dir"), vec![b.token, c.token]);
}

/// An exclusive acquirer is held while any shared grant is live, and granted
/// once the last one is released.
pub fn modes_exclusive_refused_while_shared_live<H: Harness>(t: &mut Case<H>) {
    let a = t.granted(&shared("a", SHARED));
    let b = t.granted(&shared("b", SHARED));
    let writer = LeaseAcquireParams {
        owner: params::implicit("writer"),
        ..params::acquire("dir")
    };
    let held = t.held(&writer);
    assert_eq!(tokens(&held.grants), vec![a.token, b.token], "Held lists both readers");

    t.released(&params::release("dir", a.token));
    let held = t.held(&writer);
    assert_eq!(tokens(&held.grants), vec![b.token]);

    t.released(&params::release("dir", b.token));
    let grant = t.granted(&writer);
    assert!(grant.token > b.token);
    assert_eq!(grant.mode, Mode::Exclusive);
    assert_eq!(t.live("dir"), vec![grant.token]);
}

/// Mixed limits: the smallest limit among the holders and the newcomer
/// decides, so no holder ever has more beside it than it asked for — a
/// newcomer with a larger limit, or none, is held too.
pub fn modes_shared_limits_mixed_keep_the_smallest<H: Harness>(t: &mut Case<H>) {
    let limit = |n| Mode::Shared { limit: Some(n) };
    let first = t.granted(&shared("a", limit(2)));
    let second = t.granted(&shared("b", limit(2)));
    for (owner, mode) in [("c", limit(3)), ("d", SHARED), ("e", limit(1))] {
        let held = t.held(&shared(owner, mode));
        assert_eq!(
            tokens(&held.grants),
            vec![first.token, second.token],
            "{owner} {mode:?}"
        );
    }
    assert_eq!(t.live("dir"), vec![first.token, second.token]);

    // One leaves: a limit of 3 now fits beside a holder of limit 2 (two
    // holders), and then nobody more.
    t.released(&params::release("dir", first.token));
    let third = t.granted(&shared("c", limit(3)));
    t.held(&shared("d", SHARED));
    t.released(&params::release("dir", second.token));
    // c (limit 3) alone: an unlimited newcomer fits, and a third too.
    let fourth = t.granted(&shared("d", SHARED));
    let fifth = t.granted(&shared("e", SHARED));
    t.held(&shared("f", SHARED));
    assert_eq!(t.live("dir"), vec![third.token, fourth.token, fifth.token]);
    // A newcomer whose own limit is below the count is held.
    t.released(&params::release("dir", fifth.token));
    t.held(&shared("g", limit(2)));
    let sixth = t.granted(&shared("g", limit(3)));
    assert_eq!(t.live("dir"), vec![third.token, fourth.token, sixth.token]);
}
