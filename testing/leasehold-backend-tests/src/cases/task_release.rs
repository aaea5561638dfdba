//! `task_release`: "Hand a live claim back without charging its attempt";
//! the token does not go back ("strictly greater than every earlier token").

use leasehold_backend::{TaskAddParams, TaskLost, TaskState, TaskUpdate};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref};
use crate::params;
use crate::{Case, Harness};

/// A released task is pending and claimable at once; the next claim has the
/// same attempt number and a strictly greater token; the released token is
/// stale.
pub fn task_release_does_not_charge_the_attempt<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let first = t.task_claimed(&params::claim("q"));
    assert_eq!(t.task_release(&claim_ref(&first)), TaskUpdate::Applied);
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Pending, "a released task");
    assert_eq!(task.attempts, 0, "a release must not charge the attempt");
    assert_eq!(
        (task.failures, task.expirations),
        (0, 0),
        "a release is neither a failure nor an expiry"
    );
    assert_eq!(task.lease_remaining, None);
    assert_eq!(
        t.task_release(&claim_ref(&first)),
        TaskUpdate::Lost(TaskLost::Stale),
        "a second release with the same token"
    );

    let second = t.task_claimed(&params::claim("q"));
    assert_eq!(second.id.as_str(), "a", "a released task is claimable at once");
    assert_eq!(second.attempt, first.attempt, "the attempt after a release");
    assert!(
        second.token > first.token,
        "token {} after the released {}",
        second.token,
        first.token
    );
    assert_eq!(
        t.task_complete(&claim_ref(&first), Some(&json!("old"))),
        TaskUpdate::Lost(TaskLost::Stale),
        "completion with the released token"
    );
    assert_eq!(
        t.task_complete(&claim_ref(&second), Some(&json!("new"))),
        TaskUpdate::Applied
    );
    assert_eq!(t.task("q", "a").result, Some(json!("new")));
}

/// Releases never use up the attempts: a task with one attempt can be
/// claimed and released again and again, and still be completed.
pub fn task_release_never_uses_up_attempts<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        max_attempts: 1,
        ..params::task("q", "a", json!(1))
    });
    let mut last = leasehold_backend::Token(0);
    for round in 0..4 {
        let claim = t.task_claimed(&params::claim("q"));
        assert_eq!(claim.attempt, 1, "round {round}: attempt after releases");
        assert!(claim.token > last, "round {round}: token {} after {last}", claim.token);
        last = claim.token;
        assert_eq!(t.task_release(&claim_ref(&claim)), TaskUpdate::Applied, "round {round}");
    }
    let claim = t.task_claimed(&params::claim("q"));
    assert_eq!(t.task_complete(&claim_ref(&claim), None), TaskUpdate::Applied);
    let task = t.task("q", "a");
    assert_eq!((task.state, task.attempts), (TaskState::Done, 1));
}
