//! `task_retry`: "Revive a dead task: `pending`, attempts reset (tokens keep
//! growing)." "Only dead tasks can be revived."

use std::time::Duration;

use leasehold_backend::{Retry, TaskAddParams, TaskFail, TaskLost, TaskRetry, TaskState, TaskUpdate};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref, stable};
use crate::params;
use crate::{Case, Harness};

/// A dead task revived is pending with its attempts reset; its next claim
/// is attempt 1 with a token greater than every earlier one, and the old
/// tokens stay stale.
pub fn task_retry_revives_dead_task<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        max_attempts: 2,
        ..params::task("q", "a", json!(1))
    });
    let first = t.task_claimed(&params::claim("q"));
    assert!(matches!(
        t.task_fail(&claim_ref(&first), "one", Retry::After(Duration::ZERO)),
        TaskFail::Retrying { .. }
    ));
    let second = t.task_claimed(&params::claim("q"));
    assert_eq!(t.task_fail(&claim_ref(&second), "two", Retry::Backoff), TaskFail::Dead);
    assert_eq!(t.task("q", "a").state, TaskState::Dead);

    assert_eq!(t.task_retry("q", "a"), TaskRetry::Revived);
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Pending, "a revived task");
    assert_eq!(task.attempts, 0, "a retry resets the attempts");
    assert_eq!(task.token, second.token, "a retry never resets the token");
    assert_eq!(
        t.task_retry("q", "a"),
        TaskRetry::NotDead(TaskState::Pending),
        "a second retry"
    );

    let third = t.task_claimed(&params::claim("q"));
    assert_eq!(third.attempt, 1, "the first claim after a retry");
    assert!(
        third.token > second.token && third.token > first.token,
        "token {} after {} and {}",
        third.token,
        first.token,
        second.token
    );
    for old in [&first, &second] {
        assert_eq!(
            t.task_complete(&claim_ref(old), None),
            TaskUpdate::Lost(TaskLost::Stale),
            "completion with a token from before the retry"
        );
    }
    assert_eq!(
        t.task_complete(&claim_ref(&third), Some(&json!("ok"))),
        TaskUpdate::Applied
    );
    assert_eq!(t.task("q", "a").state, TaskState::Done);
}

/// A retry of a pending, running or done task is `NotDead(state)` and
/// changes nothing; of an unknown task (or queue), `NotFound`.
pub fn task_retry_of_live_or_unknown_is_refused<H: Harness>(t: &mut Case<H>) {
    assert_eq!(t.task_retry("q", "a"), TaskRetry::NotFound, "an unknown task");
    t.task_added(params::task("q", "a", json!(1)));
    let pending = stable(t.task("q", "a"));
    assert_eq!(t.task_retry("q", "a"), TaskRetry::NotDead(TaskState::Pending));
    assert_eq!(
        stable(t.task("q", "a")),
        pending,
        "a refused retry changed a pending task"
    );

    let claim = t.task_claimed(&params::claim("q"));
    let running = stable(t.task("q", "a"));
    assert_eq!(t.task_retry("q", "a"), TaskRetry::NotDead(TaskState::Running));
    assert_eq!(
        stable(t.task("q", "a")),
        running,
        "a refused retry changed a running task"
    );
    assert_eq!(
        t.task_heartbeat(&claim_ref(&claim), params::CLAIM_TTL),
        TaskUpdate::Applied
    );

    assert_eq!(
        t.task_complete(&claim_ref(&claim), Some(&json!(2))),
        TaskUpdate::Applied
    );
    let done = stable(t.task("q", "a"));
    assert_eq!(t.task_retry("q", "a"), TaskRetry::NotDead(TaskState::Done));
    assert_eq!(stable(t.task("q", "a")), done, "a refused retry changed a done task");

    assert_eq!(t.task_retry("q", "b"), TaskRetry::NotFound, "an unknown id");
    assert_eq!(
        t.task_retry("other", "a"),
        TaskRetry::NotFound,
        "the id in another queue"
    );
}
