//! `task_add`: "Add tasks in one transaction. If any id exists with another
//! task (payload, priority or max attempts), nothing is added and that
//! outcome is `Conflict`. Each task's `Available` is resolved on the
//! store's clock, in that transaction." A task is idempotent by id (README,
//! "Task queue": the same task again under its id is a no-op).

use std::time::{Duration, SystemTime};

use leasehold_backend::{Available, TaskAdd, TaskAddParams, TaskState, Token};
use serde_json::json;

use super::task_support::{ROUNDING, TaskCalls, apart, claimed_when_due, since, stable};
use crate::params::{self, MAX_ATTEMPTS};
use crate::{Case, Harness};

/// A new task is stored as given: pending, no attempt, token 0 ("0 before
/// the first" claim), no owner, error, result or lease.
pub fn task_add_stores_a_pending_task<H: Harness>(t: &mut Case<H>) {
    let at = SystemTime::now();
    t.task_added(TaskAddParams {
        priority: 7,
        available: Available::At(at),
        max_attempts: 3,
        ..params::task("q", "a", json!({"n": 1, "s": "x"}))
    });
    let task = t.task("q", "a");
    assert_eq!(task.payload, json!({"n": 1, "s": "x"}), "payload as added");
    assert_eq!(task.priority, 7);
    assert_eq!(task.state, TaskState::Pending);
    assert_eq!(task.attempts, 0, "attempts before any claim");
    assert_eq!(task.max_attempts, 3);
    assert_eq!(task.token, Token(0), "token before the first claim");
    assert_eq!(task.owner, None);
    assert_eq!(task.lease_remaining, None, "a pending task has no lease");
    assert_eq!((task.expirations, task.failures), (0, 0));
    assert_eq!(task.last_error, None);
    assert_eq!(task.result, None);
    assert!(
        apart(task.available_at, at) <= ROUNDING,
        "available_at stored as {:?}, added as {at:?}",
        task.available_at
    );
}

/// How far the cases below move the store's clock ahead of this process's
/// wall clock: an adder whose clock is this far behind the store's (or a
/// store whose clock is this far ahead of the adder's).
const SKEW: Duration = Duration::from_secs(3600);

/// `Available::Now` is the store's now, not the adder's (issue 13: an adder
/// whose wall clock was two hours ahead added tasks no one could claim for
/// two hours). With the store's clock an hour ahead of this process's, a
/// task added `Now` is available from its own `created_at`, and is claimed
/// after a task due half an hour earlier on the store's clock — which, on
/// this process's clock, is still half an hour away.
pub fn task_add_now_is_on_the_store_clock<H: Harness>(t: &mut Case<H>) {
    t.advance(SKEW);
    t.task_added(TaskAddParams {
        available: Available::At(SystemTime::now() + SKEW / 2),
        ..params::task("q", "due-earlier", json!(1))
    });
    t.task_added(params::task("q", "now", json!(2)));
    let task = t.task("q", "now");
    assert!(
        apart(task.available_at, task.created_at) <= ROUNDING,
        "a task added Now is available at {:?}, created at {:?} on the store's clock: \
         Now must be the store's now, not the adder's",
        task.available_at,
        task.created_at
    );
    let first = t.task_claimed(&params::claim("q"));
    let second = t.task_claimed(&params::claim("q"));
    assert_eq!(
        [first.id.as_str(), second.id.as_str()],
        ["due-earlier", "now"],
        "claim order by available-at on the store's clock (a task added Now is due at the store's now)"
    );
}

/// `Available::After(d)` is `d` after the store's now, not the adder's:
/// with the store's clock an hour ahead of this process's, a task delayed
/// 30 s is not claimable at once (measured on this process's clock it
/// would be long due), nor 28 s later, and is 31 s later.
pub fn task_add_delay_is_on_the_store_clock<H: Harness>(t: &mut Case<H>) {
    t.advance(SKEW);
    let delay = Duration::from_secs(30);
    t.task_added(TaskAddParams {
        available: Available::After(delay),
        ..params::task("q", "later", json!(1))
    });
    let task = t.task("q", "later");
    let delayed = since(task.available_at, task.created_at);
    assert!(
        delayed.abs_diff(delay) <= ROUNDING,
        "a task delayed 30s is available {delayed:?} after it was created (on the store's clock)"
    );
    let claim = claimed_when_due(t, "q", delay, "a 30s delay");
    assert_eq!((claim.id.as_str(), claim.attempt), ("later", 1));
}

/// The same id with the same payload, priority and max attempts again is
/// `Exists` and changes nothing, whatever state the task is in.
pub fn task_add_is_idempotent_by_id<H: Harness>(t: &mut Case<H>) {
    t.task_added(TaskAddParams {
        priority: 9,
        ..params::task("q", "a", json!({"n": 1}))
    });
    let before = stable(t.task("q", "a"));
    // Another schedule does not make it another task (a delay is measured
    // anew by each call), nor does the key order of the payload's text.
    let again = TaskAddParams {
        priority: 9,
        available: Available::After(Duration::from_secs(60)),
        ..params::task("q", "a", serde_json::from_str(r#"{ "n": 1 }"#).unwrap())
    };
    assert_eq!(
        t.task_add(std::slice::from_ref(&again)),
        vec![TaskAdd::Exists],
        "the same id and payload again"
    );
    assert_eq!(stable(t.task("q", "a")), before, "an `Exists` add changed the task");
    assert_eq!(
        t.task_list(Some("q"), None, 100).len(),
        1,
        "the same id was added twice"
    );

    let claim = t.task_claimed(&params::claim("q"));
    assert_eq!(claim.id.as_str(), "a");
    let running = stable(t.task("q", "a"));
    assert_eq!(t.task_add(&[again]), vec![TaskAdd::Exists], "re-adding a running task");
    assert_eq!(
        stable(t.task("q", "a")),
        running,
        "re-adding a running task changed it (it must stay claimed)"
    );
    assert_eq!(running.state, TaskState::Running);
}

/// The same id with another priority, or other max attempts, is another
/// task: `Conflict`, naming what differs, and the existing task is left as
/// it was — never silently kept with the priority the caller did not ask
/// for (issue 22).
pub fn task_add_another_priority_or_attempts_is_a_conflict<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!({"n": 1})));
    let before = stable(t.task("q", "a"));
    for (again, field, given) in [
        (
            TaskAddParams {
                priority: before.priority + 5,
                ..params::task("q", "a", json!({"n": 1}))
            },
            "priority",
            (before.priority + 5).to_string(),
        ),
        (
            TaskAddParams {
                max_attempts: before.max_attempts + 1,
                ..params::task("q", "a", json!({"n": 1}))
            },
            "max attempts",
            (before.max_attempts + 1).to_string(),
        ),
    ] {
        match &t.task_add(std::slice::from_ref(&again))[..] {
            [TaskAdd::Conflict { existing, differences }] => {
                assert_eq!(stable((**existing).clone()), before, "the existing task as stored");
                let named: Vec<_> = differences.iter().map(|d| (d.field, d.given.as_str())).collect();
                assert_eq!(named, vec![(field, given.as_str())], "what differs: {differences:?}");
            }
            other => panic!("adding {field} {given} under an existing id must be a conflict, was {other:?}"),
        }
        assert_eq!(stable(t.task("q", "a")), before, "a conflicting add changed the task");
    }
    // Priority decides claim order: the task keeps its own.
    t.task_added(TaskAddParams {
        priority: before.priority + 1,
        ..params::task("q", "b", json!(2))
    });
    assert_eq!(t.task_claimed(&params::claim("q")).id.as_str(), "b");
}

/// The same id with another payload is `Conflict`, carrying the existing
/// task; the call adds nothing at all, not even its fresh ids.
pub fn task_add_conflict_adds_nothing_of_the_call<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!({"n": 1})));
    let before = stable(t.task("q", "a"));
    let outcomes = t.task_add(&[
        params::task("q", "fresh-1", json!(1)),
        params::task("q", "a", json!({"n": 2})),
        params::task("q", "fresh-2", json!(2)),
    ]);
    match &outcomes[1] {
        TaskAdd::Conflict { existing, differences } => {
            assert_eq!(
                stable((**existing).clone()),
                before,
                "Conflict must carry the existing task as stored"
            );
            assert_eq!(
                differences.iter().map(|d| d.field).collect::<Vec<_>>(),
                ["payload"],
                "{differences:?}"
            );
        }
        other => panic!("the same id with another payload must be Conflict, was {other:?} (all: {outcomes:#?})"),
    }
    assert_eq!(
        t.task_get("q", "fresh-1"),
        None,
        "a task of a conflicting add call was added (before the conflict)"
    );
    assert_eq!(
        t.task_get("q", "fresh-2"),
        None,
        "a task of a conflicting add call was added (after the conflict)"
    );
    assert_eq!(
        stable(t.task("q", "a")),
        before,
        "a conflicting add changed the existing task"
    );
    assert_eq!(t.task_list(Some("q"), None, 100).len(), 1);
    // Nothing was added: the fresh ids are still new.
    t.task_added(params::task("q", "fresh-1", json!(1)));
}

/// Ids are per queue: the same id in two queues is two tasks, each claimed
/// only from its own queue.
pub fn task_add_ids_are_per_queue<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q1", "a", json!("one")));
    t.task_added(params::task("q2", "a", json!("two")));
    assert_eq!(t.task("q1", "a").payload, json!("one"));
    assert_eq!(t.task("q2", "a").payload, json!("two"));

    let claim = t.task_claimed(&params::claim("q1"));
    assert_eq!((claim.id.as_str(), &claim.payload), ("a", &json!("one")));
    t.task_claim_none(&params::claim("q1"), "q1's only task is claimed");
    assert_eq!(
        t.task("q2", "a").state,
        TaskState::Pending,
        "claiming q1/a touched q2/a"
    );
    let claim = t.task_claimed(&params::claim("q2"));
    assert_eq!((claim.id.as_str(), &claim.payload), ("a", &json!("two")));
    assert_eq!(claim.attempt, 1, "q2/a has its own attempts");
    assert_eq!(claim.max_attempts, MAX_ATTEMPTS);
}
