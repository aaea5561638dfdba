//! `task_fail`: "Record a failed attempt of a live claim: back to `pending`
//! after a delay, or `dead` (no retry, or attempts used up)." `Backoff` is
//! "the default backoff for the attempt": exponential from 1 s, doubling,
//! ±25% jitter.

use std::time::Duration;

use leasehold_backend::{Retry, TaskAddParams, TaskFail, TaskState};
use serde_json::json;

use super::task_support::{ROUNDING, TaskCalls, apart, claim_ref, claimed_when_due, since};
use crate::params;
use crate::{Case, Harness};

/// `Retry::After(d)`: pending again, not claimable before `d` has passed on
/// the store's clock, claimable after; the failure and its error recorded.
/// The store's clock runs an hour ahead of this process's, so a delay
/// measured on the caller's clock would be due at once.
pub fn task_fail_retry_after_delay<H: Harness>(t: &mut Case<H>) {
    t.advance(Duration::from_secs(3600));
    t.task_added(params::task("q", "a", json!(1)));
    let first = t.task_claimed(&params::claim("q"));
    let delay = Duration::from_secs(30);
    let TaskFail::Retrying { available_at } = t.task_fail(&claim_ref(&first), "boom: disk full", Retry::After(delay))
    else {
        panic!("fail with Retry::After(30s) at attempt 1 of 5 must be Retrying");
    };
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Pending);
    assert_eq!(task.failures, 1, "failures after one fail");
    assert_eq!(task.expirations, 0);
    assert_eq!(task.attempts, 1, "a failure charges its attempt");
    assert_eq!(task.last_error.as_deref(), Some("boom: disk full"));
    assert_eq!(task.lease_remaining, None, "a pending task has no lease");
    assert!(
        apart(task.available_at, available_at) <= ROUNDING,
        "the stored available_at {:?} is not the reported {available_at:?}",
        task.available_at
    );
    let waited = since(task.available_at, task.updated_at);
    assert!(
        waited.abs_diff(delay) <= ROUNDING,
        "Retry::After(30s) made it available {waited:?} after the failure"
    );

    let second = claimed_when_due(t, "q", delay, "a 30s retry delay");
    assert_eq!(second.attempt, 2);
    assert!(second.token > first.token);
    assert_eq!(
        t.task_fail(&claim_ref(&first), "late", Retry::Never),
        TaskFail::Lost(leasehold_backend::TaskLost::Stale),
        "a second fail with the first claim's token"
    );
}

/// `Retry::Never`: dead at once, with attempts left; never claimed again.
pub fn task_fail_never_is_dead<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let claim = t.task_claimed(&params::claim("q"));
    assert_eq!(
        t.task_fail(&claim_ref(&claim), "bad input", Retry::Never),
        TaskFail::Dead,
        "fail with Retry::Never at attempt 1 of 5"
    );
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Dead);
    assert_eq!((task.attempts, task.failures, task.expirations), (1, 1, 0));
    assert_eq!(task.last_error.as_deref(), Some("bad input"));
    assert_eq!(task.result, None);
    t.task_claim_none(&params::claim("q"), "the only task is dead");
}

/// Once the attempts are used up a failure is dead whatever retry it asks
/// for, with the last error recorded.
pub fn task_fail_attempts_used_up_is_dead_even_with_retry<H: Harness>(t: &mut Case<H>) {
    for (id, retry) in [("after", Retry::After(Duration::ZERO)), ("backoff", Retry::Backoff)] {
        t.task_added(TaskAddParams {
            max_attempts: 2,
            ..params::task(id, id, json!(1))
        });
        let first = t.task_claimed(&params::claim(id));
        assert_eq!(first.attempt, 1);
        let outcome = t.task_fail(&claim_ref(&first), "first error", Retry::After(Duration::ZERO));
        assert!(
            matches!(outcome, TaskFail::Retrying { .. }),
            "{id}: fail at attempt 1 of 2 with a zero delay must retry, was {outcome:?}"
        );
        let second = t.task_claimed(&params::claim(id));
        assert_eq!(second.attempt, 2, "{id}: a zero retry delay is claimable at once");
        assert_eq!(
            t.task_fail(&claim_ref(&second), "second error", retry),
            TaskFail::Dead,
            "{id}: fail with {retry:?} at attempt 2 of 2"
        );
        let task = t.task(id, id);
        assert_eq!(task.state, TaskState::Dead, "{id}");
        assert_eq!((task.attempts, task.failures), (2, 2), "{id}");
        assert_eq!(task.last_error.as_deref(), Some("second error"), "{id}: the last error");
        t.task_claim_none(&params::claim(id), "the only task is dead");
    }
}

/// `Retry::Backoff` after attempt n delays the task by about 2^(n-1) s
/// (within ±25%), measured from the failure on the store's clock; it is not
/// claimable before that and is after.
pub fn task_fail_backoff_is_exponential<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        max_attempts: 10,
        ..params::task("q", "a", json!(1))
    });
    let mut last_token = leasehold_backend::Token(0);
    for attempt in 1..=5u32 {
        let claim = t.task_claimed(&params::claim("q"));
        assert_eq!(claim.attempt, attempt);
        assert!(claim.token > last_token);
        last_token = claim.token;
        let error = format!("error {attempt}");
        let TaskFail::Retrying { available_at } = t.task_fail(&claim_ref(&claim), &error, Retry::Backoff) else {
            panic!("fail with Retry::Backoff at attempt {attempt} of 10 must be Retrying");
        };
        let task = t.task("q", "a");
        assert_eq!(task.state, TaskState::Pending);
        assert_eq!(task.failures, attempt);
        assert_eq!(task.last_error.as_deref(), Some(error.as_str()));
        let waited = since(available_at, task.updated_at);
        let nominal = Duration::from_secs(1 << (attempt - 1));
        assert!(
            waited + ROUNDING >= nominal * 3 / 4 && waited <= nominal * 5 / 4 + ROUNDING,
            "backoff after attempt {attempt} is {waited:?}, expected {nominal:?} ± 25%"
        );
        t.advance(waited.saturating_sub(Duration::from_millis(300)));
        t.task_claim_none(&params::claim("q"), "300ms before the backoff ends");
        t.advance(Duration::from_millis(600));
    }
    assert_eq!(
        t.task_claimed(&params::claim("q")).attempt,
        6,
        "claimable after the 5th backoff"
    );
}
