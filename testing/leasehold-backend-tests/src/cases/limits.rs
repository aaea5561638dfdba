//! `leasehold_backend::limits`: "every store checks the parameters of the
//! seam … so that no front can store a duration it could not read back.
//! Out of range is refused, never clamped." Each store refuses the same
//! way — `BackendError::InvalidInput` naming the limit — and writes nothing.

use std::fmt::Debug;
use std::time::{Duration, SystemTime};

use leasehold_backend::limits::{self, Limit};
use leasehold_backend::{
    Available, BackendError, HistoryEvent, LeaseAcquireParams, LeaseRenew, LeaseRenewParams, Retry, TaskAddParams,
    TaskClaimParams, TaskFailParams, TaskHeartbeatParams, TaskPurgeParams, TaskState, TaskUpdate, WaiterEnqueueParams,
};

use super::task_support::{TaskCalls, claim_ref};
use crate::params::{self, TTL};
use crate::{Case, Harness};

const MS: Duration = Duration::from_millis(1);

/// TTLs just outside [`limits::TTL`] and far outside it (one would wrap
/// a millisecond count).
const BAD_TTLS: [Duration; 3] = [Duration::ZERO, limits::TTL.max.saturating_add(MS), Duration::MAX];

/// `outcome` must be the refusal of a value out of `limit`.
fn refused<T: Debug>(what: &str, outcome: Result<T, BackendError>, limit: Limit) {
    match outcome {
        Err(e) if e.out_of_range().is_some() => {
            let e = e.out_of_range().expect("checked");
            assert_eq!(e.limit, limit, "{what}: refused for another limit: {e}");
        }
        other => panic!(
            "{what} must be refused with InvalidInput ({} out of range), got {other:?}",
            limit.what
        ),
    }
}

/// An acquisition, renewal or waiter registration with a TTL out of range
/// is refused, grants and records nothing; the bounds themselves are
/// accepted.
pub fn limits_lease_ttls_out_of_range_are_refused<H: Harness>(t: &mut Case<H>) {
    for ttl in BAD_TTLS {
        let acquire = LeaseAcquireParams {
            ttl,
            ..params::acquire("job")
        };
        refused(
            &format!("lease_acquire(ttl {ttl:?})"),
            t.backend().lease_acquire(&acquire),
            limits::TTL,
        );
        let waiting = LeaseAcquireParams {
            waiter_ttl: ttl,
            ..params::acquire("job")
        };
        refused(
            &format!("lease_acquire(waiter_ttl {ttl:?})"),
            t.backend().lease_acquire(&waiting),
            limits::TTL,
        );
    }
    assert_eq!(t.get("job"), None, "a refused acquisition issued a token");

    let grant = t.granted(&params::acquire("job"));
    for ttl in BAD_TTLS {
        let renew = LeaseRenewParams {
            ttl,
            ..params::renew("job", grant.token)
        };
        refused(
            &format!("lease_renew(ttl {ttl:?})"),
            t.backend().lease_renew(&renew),
            limits::TTL,
        );
        let enqueue = WaiterEnqueueParams {
            ttl,
            ..params::enqueue("job", params::SHARED)
        };
        refused(
            &format!("waiter_enqueue(ttl {ttl:?})"),
            t.backend().waiter_enqueue(&enqueue),
            limits::TTL,
        );
    }
    let state = t.state("job");
    assert_eq!(state.last_token, grant.token, "a refused call issued a token");
    assert_eq!(state.waiters.len(), 0, "a refused registration joined the queue");
    assert_eq!(state.grants[0].ttl, TTL, "a refused renewal changed the TTL");
    assert_eq!(
        t.events("job"),
        vec![(HistoryEvent::Granted, Some(grant.token))],
        "a refused call was recorded"
    );

    let renew = LeaseRenewParams {
        ttl: limits::TTL.max,
        ..params::renew("job", grant.token)
    };
    assert!(
        matches!(t.renew(&renew), LeaseRenew::Renewed(g) if g.ttl == limits::TTL.max),
        "a renewal for the longest TTL allowed"
    );
    let shortest = LeaseAcquireParams {
        ttl: limits::TTL.min,
        ..params::acquire("short")
    };
    t.granted(&shortest);
}

/// A task queue call with a duration out of range — a start or a delay
/// further ahead than [`limits::DELAY`], a claim or heartbeat TTL out of
/// [`limits::TTL`], a retry delay out of [`limits::DELAY`], a purge age out
/// of [`limits::AGE`] — is refused and changes nothing: no task added
/// (not even the valid ones of the batch), no attempt counted.
pub fn limits_task_durations_out_of_range_are_refused<H: Harness>(t: &mut Case<H>) {
    let too_far = limits::DELAY.max + limits::YEAR;
    for (what, available) in [
        ("a start past the limit", Available::At(SystemTime::now() + too_far)),
        ("a delay past the limit", Available::After(too_far)),
    ] {
        let late = TaskAddParams {
            available,
            ..params::task("q", "late", serde_json::json!(2))
        };
        refused(
            &format!("task_add({what})"),
            t.tasks()
                .task_add(&[params::task("q", "a", serde_json::json!(1)), late]),
            limits::DELAY,
        );
        assert_eq!(t.task_get("q", "a"), None, "a refused batch added a task ({what})");
    }

    t.task_added(params::task("q", "a", serde_json::json!(1)));
    for ttl in BAD_TTLS {
        let claim = TaskClaimParams {
            ttl,
            ..params::claim("q")
        };
        refused(
            &format!("task_claim(ttl {ttl:?})"),
            t.tasks().task_claim(&claim),
            limits::TTL,
        );
    }
    let task = t.task("q", "a");
    assert_eq!(
        (task.state, task.attempts),
        (TaskState::Pending, 0),
        "a refused claim changed the task"
    );

    let claim = t.task_claimed(&params::claim("q"));
    let task_ref = claim_ref(&claim);
    for ttl in BAD_TTLS {
        refused(
            &format!("task_heartbeat(ttl {ttl:?})"),
            t.tasks().task_heartbeat(&TaskHeartbeatParams {
                task: task_ref.clone(),
                ttl,
            }),
            limits::TTL,
        );
    }
    refused(
        "task_fail(retry after a delay past the limit)",
        t.tasks().task_fail(&TaskFailParams {
            task: task_ref.clone(),
            error: "boom".into(),
            retry: Retry::After(too_far),
        }),
        limits::DELAY,
    );
    refused(
        "task_purge(older than the limit)",
        t.tasks().task_purge(&TaskPurgeParams {
            queue: params::queue("q"),
            state: TaskState::Done,
            older_than: too_far,
        }),
        limits::AGE,
    );
    let task = t.task("q", "a");
    assert_eq!(
        (task.state, task.attempts, task.failures),
        (TaskState::Running, 1, 0),
        "a refused call changed the claimed task"
    );
    assert_eq!(
        t.task_complete(&task_ref, None),
        TaskUpdate::Applied,
        "the claim is intact"
    );
}
