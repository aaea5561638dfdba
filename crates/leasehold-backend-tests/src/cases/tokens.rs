//! "Tokens are per name and strictly increasing over all time […] the counter
//! survives release, expiry, takeover and restart."

use leasehold_backend::{HistoryEvent, LeaseAcquireParams, Token};

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
