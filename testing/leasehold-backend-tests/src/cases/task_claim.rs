//! `task_claim`: "Claim the first claimable task in claim order: `running`,
//! one more attempt, a new token, a lease of `ttl`. `None` when nothing is
//! claimable." Claim order: "priority (higher first), then available-at,
//! then insertion order". "A claim whose lease expired is claimable again
//! (its attempt is counted as an expiry)".

use std::time::{Duration, SystemTime};

use leasehold_backend::{Available, TaskAddParams, TaskLost, TaskState, TaskUpdate, Token};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref};
use crate::params::{self, CLAIM_TTL, WORKER};
use crate::{Case, Harness, assert_fresh};

/// Priority first (higher first), then available-at (earlier first), then
/// insertion order — never the id's order.
pub fn task_claim_order_priority_then_available_then_insertion<H: Harness>(t: &mut Case<H>) {
    // All in the past, so all claimable now.
    let base = SystemTime::now() - Duration::from_secs(600);
    let add = |id: &str, priority: i64, at: SystemTime| {
        t.task_added(TaskAddParams {
            priority,
            available: Available::At(at),
            ..params::task("q", id, json!(id))
        });
    };
    add("p5-later", 5, base + Duration::from_secs(30));
    add("z-p0-first-inserted", 0, base);
    add("p-neg-earliest", -1, base - Duration::from_secs(300));
    add("a-p0-second-inserted", 0, base);
    add("p0-earlier", 0, base - Duration::from_secs(30));
    add("p5-base", 5, base);
    let order: Vec<String> = (0..6)
        .map(|_| t.task_claimed(&params::claim("q")).id.as_str().to_owned())
        .collect();
    assert_eq!(
        order,
        [
            "p5-base",
            "p5-later",
            "p0-earlier",
            "z-p0-first-inserted",
            "a-p0-second-inserted",
            "p-neg-earliest",
        ],
        "claim order: priority (higher first), then available_at, then insertion"
    );
    t.task_claim_none(&params::claim("q"), "all six are claimed");
}

/// A task whose `available_at` is in the future is not claimable (even with a
/// higher priority it does not block the claimable ones) until the store's
/// clock passes it.
pub fn task_claim_delayed_task_waits_for_its_time<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        priority: 10,
        available: Available::At(SystemTime::now() + Duration::from_secs(30)),
        ..params::task("q", "later", json!(1))
    });
    t.task_claim_none(&params::claim("q"), "the only task is due in 30s");
    t.task_added(params::task("q", "now", json!(2)));
    assert_eq!(
        t.task_claimed(&params::claim("q")).id.as_str(),
        "now",
        "a task not yet due must not be claimed, nor block the due ones"
    );
    t.advance(Duration::from_secs(28));
    t.task_claim_none(&params::claim("q"), "28s into a 30s delay");
    assert_eq!(t.task("q", "later").state, TaskState::Pending);
    t.advance(Duration::from_secs(3));
    let claim = t.task_claimed(&params::claim("q"));
    assert_eq!((claim.id.as_str(), claim.attempt), ("later", 1), "31s into a 30s delay");
}

/// An empty queue, an unknown queue, and a queue whose tasks are all
/// running or done have nothing to claim.
pub fn task_claim_nothing_claimable_is_none<H: Harness>(t: &mut Case<H>) {
    t.task_claim_none(&params::claim("never-used"), "an unknown queue");
    t.task_added(params::task("q", "a", json!(1)));
    t.task_added(params::task("q", "b", json!(2)));
    t.task_claim_none(&params::claim("other"), "tasks of another queue");
    let a = t.task_claimed(&params::claim("q"));
    let b = t.task_claimed(&params::claim("q"));
    assert_eq!((a.id.as_str(), b.id.as_str()), ("a", "b"));
    t.task_claim_none(&params::claim("q"), "both tasks are running with live claims");
    assert_eq!(t.task_complete(&claim_ref(&a), Some(&json!("ok"))), TaskUpdate::Applied);
    t.task_claim_none(&params::claim("q"), "one task is done, the other running");
}

/// A claim makes the task running for its owner: attempt 1, token 1 (the
/// first claim's token), a lease of the asked TTL.
pub fn task_claim_makes_running_with_attempt_and_token<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        max_attempts: 4,
        ..params::task("q", "a", json!({"job": 1}))
    });
    let claim = t.task_claimed(&params::claim("q"));
    assert_eq!(claim.id.as_str(), "a");
    assert_eq!(claim.payload, json!({"job": 1}));
    assert_eq!(claim.attempt, 1, "the first claim is attempt 1");
    assert_eq!(claim.max_attempts, 4);
    assert_eq!(claim.token, Token(1), "the first claim's token");
    assert_eq!(claim.ttl, CLAIM_TTL);
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Running);
    assert_eq!(task.attempts, 1);
    assert_eq!(task.token, claim.token, "Task::token is the newest claim's");
    assert_eq!(task.owner.as_deref(), Some(WORKER));
    let left = task
        .lease_remaining
        .expect("a running task reports its lease_remaining");
    assert_fresh(left, CLAIM_TTL, "lease_remaining of a fresh claim");
}

/// After the lease lapses the task is claimable again: attempt + 1, a
/// strictly greater token, one more expiration, and a `last_error` that says
/// the claim expired. While the lease is live it is not claimable.
pub fn task_claim_expired_claim_is_claimable_again<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let mut last = t.task_claimed(&params::claim_by("q", "worker-0"));
    assert_eq!((last.attempt, last.token), (1, Token(1)));
    for n in 1..=3u32 {
        t.advance(CLAIM_TTL.saturating_sub(Duration::from_secs(1)));
        t.task_claim_none(&params::claim("q"), "the claim is 1s from expiry");
        t.advance(Duration::from_secs(2));
        let owner = format!("worker-{n}");
        let claim = t.task_claimed(&params::claim_by("q", &owner));
        assert_eq!(claim.id.as_str(), "a");
        assert_eq!(claim.attempt, last.attempt + 1, "an expired claim charges its attempt");
        assert!(
            claim.token > last.token,
            "claim {n}: token {} after the expired {}",
            claim.token,
            last.token
        );
        let task = t.task("q", "a");
        assert_eq!(task.state, TaskState::Running);
        assert_eq!(task.attempts, claim.attempt);
        assert_eq!(task.token, claim.token);
        assert_eq!(task.owner.as_deref(), Some(owner.as_str()));
        assert_eq!(task.expirations, n, "claims ended by expiry");
        assert_eq!(task.failures, 0, "an expiry is not a reported failure");
        let error = task.last_error.unwrap_or_default();
        assert!(
            error.to_lowercase().contains("expir"),
            "last_error after an expired claim must say it expired, is {error:?}"
        );
        // The expired claim's token is dead for good.
        assert_eq!(
            t.task_heartbeat(&claim_ref(&last), CLAIM_TTL),
            TaskUpdate::Lost(TaskLost::Stale)
        );
        last = claim;
    }
}

/// A task whose claim expired goes back to pending at once — also when the
/// claim that finds it takes another task — and keeps its place in claim
/// order: behind a pending task of higher priority, ahead of pending tasks
/// that became available after it.
pub fn task_claim_expired_claim_keeps_its_place_in_claim_order<H: Harness>(t: &mut Case<H>) {
    let base = SystemTime::now() - Duration::from_secs(600);
    let add = |id: &str, priority: i64, at: SystemTime| {
        t.task_added(TaskAddParams {
            priority,
            available: Available::At(at),
            ..params::task("q", id, json!(id))
        });
    };
    add("old", 0, base);
    assert_eq!(t.task_claimed(&params::claim("q")).id.as_str(), "old");
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    add("new", 0, base + Duration::from_secs(30));
    add("urgent", 5, base + Duration::from_secs(60));

    assert_eq!(t.task_claimed(&params::claim("q")).id.as_str(), "urgent");
    let old = t.task("q", "old");
    assert_eq!(
        (old.state, old.expirations, old.lease_remaining),
        (TaskState::Pending, 1, None),
        "the expired claim was returned while another task was claimed"
    );
    let again = t.task_claimed(&params::claim("q"));
    assert_eq!((again.id.as_str(), again.attempt), ("old", 2));
    assert_eq!(t.task("q", "old").expirations, 1, "its expiry counted once");
    assert_eq!(t.task_claimed(&params::claim("q")).id.as_str(), "new");
    t.task_claim_none(&params::claim("q"), "all three are claimed");
}

/// Expired claims use up the attempts: after `max_attempts` of them the
/// task is dead (with the expiry as last error) and never claimed again.
pub fn task_claim_expirations_use_up_attempts<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        max_attempts: 3,
        ..params::task("q", "a", json!(1))
    });
    for attempt in 1..=3 {
        let claim = t.task_claimed(&params::claim("q"));
        assert_eq!(claim.attempt, attempt);
        t.advance(CLAIM_TTL + Duration::from_secs(1));
    }
    t.task_claim_none(&params::claim("q"), "3 of 3 attempts expired");
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Dead, "a task whose attempts all expired");
    assert_eq!((task.attempts, task.expirations, task.failures), (3, 3, 0));
    assert_eq!(task.lease_remaining, None, "a dead task has no lease");
    let error = task.last_error.unwrap_or_default();
    assert!(error.to_lowercase().contains("expir"), "last_error is {error:?}");
    t.advance(Duration::from_secs(3600));
    t.task_claim_none(&params::claim("q"), "a dead task, an hour later");
}
