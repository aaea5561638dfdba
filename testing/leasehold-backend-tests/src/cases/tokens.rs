//! "Tokens are per name and strictly increasing over all time […] the counter
//! survives release, expiry, takeover and restart."

use leasehold_backend::{
    ErrorKind, FenceRefusal, HistoryEvent, LeaseAcquireParams, LeaseFence, LeaseRenew, Token, TokensBumpParams,
    TokensBumped,
};

use crate::params;
use crate::{Case, Harness};

/// The first grant of a name has a positive token, reported as `last_token`.
pub fn tokens_first_grant_is_positive<H: Harness>(t: &mut Case<H>) {
    let grant = t.granted(&params::acquire("job"));
    assert!(grant.token >= Token(1), "first token is {}", grant.token);
    let state = t.state("job");
    assert_eq!(state.last_token, grant.token, "last_token after the first grant");
    assert_eq!(t.live("job"), vec![grant.token]);
}

/// acquire → release → acquire gives a larger token each time.
pub fn tokens_increase_across_release<H: Harness>(t: &mut Case<H>) {
    let mut last = Token(0);
    for round in 0..3 {
        let grant = t.granted(&params::acquire("job"));
        assert!(grant.token > last, "round {round}: token {} after {last}", grant.token);
        assert_eq!(t.state("job").last_token, grant.token);
        t.released(&params::release("job", grant.token));
        assert_eq!(
            t.state("job").last_token,
            grant.token,
            "release must keep the token counter"
        );
        last = grant.token;
    }
}

/// A grant that expired is replaced by one with a larger token.
pub fn tokens_increase_across_expiry<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&t.expiring(params::acquire("job")));
    t.expire();
    let second = t.granted(&params::acquire("job"));
    assert!(
        second.token > first.token,
        "token {} after the expired {}",
        second.token,
        first.token
    );
    assert_eq!(t.state("job").last_token, second.token);
}

/// Evicting a live grant (fast takeover) gives a larger token, and the
/// history records the takeover of the old one.
pub fn tokens_increase_across_fast_takeover<H: Harness>(t: &mut Case<H>) {
    let old = t.granted(&params::acquire("job"));
    let new = t.granted(&LeaseAcquireParams {
        owner: params::implicit("successor"),
        evict: vec![old.token],
        ..params::acquire("job")
    });
    assert!(
        new.token > old.token,
        "token {} after taking over {}",
        new.token,
        old.token
    );
    assert_eq!(t.live("job"), vec![new.token], "only the new grant is live");
    assert!(
        t.events("job").contains(&(HistoryEvent::FastTakeover, Some(old.token))),
        "history lacks fast_takeover of {}: {:?}",
        old.token,
        t.events("job")
    );
}

/// A live grant and the counter survive closing and reopening the store.
pub fn tokens_survive_reopen<H: Harness>(t: &mut Case<H>) {
    let first = t.granted(&params::acquire("job"));
    t.reopen();
    let state = t.state("job");
    assert_eq!(state.last_token, first.token, "last_token after reopen");
    assert_eq!(t.live("job"), vec![first.token], "a live grant survives reopen");
    t.held(&params::acquire("job"));

    t.released(&params::release("job", first.token));
    t.reopen();
    assert_eq!(
        t.state("job").last_token,
        first.token,
        "last_token after release and reopen"
    );
    let second = t.granted(&params::acquire("job"));
    assert!(
        second.token > first.token,
        "token {} after reopen, the previous was {}",
        second.token,
        first.token
    );
}

/// Tokens and grants of one name do not touch another's (`job` is not a
/// prefix of `job2` to the store).
pub fn tokens_are_per_name<H: Harness>(t: &mut Case<H>) {
    let job = t.granted(&params::acquire("job"));
    let mut last = Token(0);
    for round in 0..3 {
        // Granted while `job` is held exclusively: another lease.
        let other = t.granted(&params::acquire("job2"));
        assert!(
            other.token > last,
            "round {round}: job2 token {} after {last}",
            other.token
        );
        t.released(&params::release("job2", other.token));
        last = other.token;
    }
    assert_eq!(
        t.state("job").last_token,
        job.token,
        "grants of job2 moved job's counter"
    );
    assert_eq!(t.live("job"), vec![job.token]);
    assert_eq!(t.state("job2").last_token, last);
}

fn bump<H: Harness>(t: &Case<H>, by: u64) -> TokensBumped {
    t.backend()
        .tokens_bump(&TokensBumpParams { by })
        .unwrap_or_else(|e| panic!("tokens_bump({by}) failed: {e}"))
}

/// `tokens_bump` (`migrate --bump-tokens N`, after a restore): every token
/// issued after it — for a name the store has and for one it has never
/// seen — exceeds every token issued before by more than N, and a grant
/// live at the bump keeps its token and its rights; the next bump moves on
/// from there; 0 and more than the largest bump are refused.
pub fn tokens_bump_raises_every_next_token<H: Harness>(t: &mut Case<H>) {
    let kept = t.granted(&params::acquire("kept"));
    let done = t.granted(&params::acquire("done"));
    t.released(&params::release("done", done.token));
    let before = kept.token.max(done.token);

    let bumped = bump(t, 1000);
    assert!(
        bumped.highest >= before,
        "{bumped:?}: tokens up to {before} were issued"
    );
    assert_eq!(bumped.floor, Token(bumped.highest.0 + 1000), "{bumped:?}");
    // What is stored keeps its token: the live grant renews and passes the
    // store's fence; the counters read as before.
    assert_eq!(t.live("kept"), vec![kept.token]);
    assert!(matches!(
        t.renew(&params::renew("kept", kept.token)),
        LeaseRenew::Renewed(_)
    ));
    assert!(matches!(
        t.fence(&params::fence("kept", kept.token)),
        LeaseFence::Passed(_)
    ));
    assert_eq!(t.state("done").last_token, done.token);

    // Every next token is above the floor: a name with a grant, a name
    // with a counter only, and a new name.
    t.released(&params::release("kept", kept.token));
    let next: Vec<_> = ["kept", "done", "new"]
        .iter()
        .map(|n| t.granted(&params::acquire(n)))
        .collect();
    for g in &next {
        assert!(
            g.token > bumped.floor,
            "{} got token {} after a bump to {}",
            g.name,
            g.token,
            bumped.floor
        );
        assert_eq!(t.state(g.name.as_str()).last_token, g.token);
        assert!(
            t.events(g.name.as_str())
                .contains(&(HistoryEvent::Granted, Some(g.token))),
            "history of {} lacks its grant of {}: {:?}",
            g.name,
            g.token,
            t.events(g.name.as_str())
        );
    }
    // The old token is refused by the store's fence: a newer grant exists.
    assert_eq!(
        t.fence(&params::fence("kept", kept.token)),
        LeaseFence::Refused {
            newest: Some(next[0].token),
            reason: FenceRefusal::Superseded
        }
    );

    // A second bump starts from everything issued since the first.
    let newest = next.iter().map(|g| g.token).max().expect("three grants");
    let again = bump(t, 5);
    assert!(
        again.highest >= newest && again.floor > bumped.floor,
        "{again:?} after {newest}"
    );
    let after = t.granted(&params::acquire("new2"));
    assert!(
        after.token > again.floor,
        "token {} after a bump to {}",
        after.token,
        again.floor
    );

    for by in [0, TokensBumpParams::MAX + 1] {
        let err = t
            .backend()
            .tokens_bump(&TokensBumpParams { by })
            .expect_err("out of range");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
}

/// The floor of a bump is durable: after reopening, new names still start
/// above it.
pub fn tokens_bump_survives_reopen<H: Harness>(t: &mut Case<H>) {
    let bumped = bump(t, 1_000_000);
    t.reopen();
    let g = t.granted(&params::acquire("fresh"));
    assert!(
        g.token > bumped.floor,
        "token {} after a bump to {} and a reopen",
        g.token,
        bumped.floor
    );
}
