//! Reading and tidying the queue: `task_get` (None for an unknown task),
//! `task_list` ("Tasks in claim order (pending first), optionally of one
//! state"), `task_stats` ("Counts per state, per queue (ordered by queue
//! name)") and `task_purge` ("Delete tasks of `state` (done or dead) last
//! updated more than `older_than` ago; returns how many").

use std::time::{Duration, SystemTime};

use leasehold_backend::{
    Available, QueueStats, Retry, TaskAddParams, TaskClaimParams, TaskFail, TaskState, TaskUpdate,
};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref, ids};
use crate::params;
use crate::{Case, Harness};

/// A claim TTL that outlives every clock move of these cases.
const LONG: Duration = Duration::from_secs(100 * 3600);

/// Fill `queue` with one task in each state: `<queue>-done`,
/// `<queue>-dead`, `<queue>-running` (claimed for [`LONG`]) and
/// `<queue>-pending`, added in that order.
fn one_of_each<H: Harness>(t: &Case<H>, queue: &str) {
    let id = |state: &str| format!("{queue}-{state}");
    for state in ["done", "dead", "running"] {
        t.task_added(params::task(queue, &id(state), json!(state)));
    }
    let claim = |t: &Case<H>, want: &str| {
        let c = t.task_claimed(&TaskClaimParams {
            ttl: LONG,
            ..params::claim(queue)
        });
        assert_eq!(c.id.as_str(), id(want), "claims in insertion order");
        c
    };
    let done = claim(t, "done");
    assert_eq!(
        t.task_complete(&claim_ref(&done), Some(&json!("ok"))),
        TaskUpdate::Applied
    );
    let dead = claim(t, "dead");
    assert_eq!(t.task_fail(&claim_ref(&dead), "broken", Retry::Never), TaskFail::Dead);
    claim(t, "running");
    t.task_added(params::task(queue, &id("pending"), json!("pending")));
}

fn stats(queue: &str, pending: u64, running: u64, done: u64, dead: u64) -> QueueStats {
    QueueStats {
        queue: params::queue(queue),
        pending,
        running,
        done,
        dead,
    }
}

/// `task_get` of an unknown id, of an id of another queue, or in an unknown
/// queue is `None`.
pub fn task_get_unknown_is_none<H: Harness>(t: &mut Case<H>) {
    assert_eq!(t.task_get("q", "a"), None, "an empty store");
    t.task_added(params::task("q", "a", json!(1)));
    assert_eq!(t.task_get("q", "b"), None, "an unknown id");
    assert_eq!(t.task_get("other", "a"), None, "the id in another queue");
    assert_eq!(t.task("q", "a").payload, json!(1));
}

/// Stats count each state, per queue, ordered by queue name; one queue's
/// stats are its own.
pub fn task_stats_counts_per_state_per_queue<H: Harness>(t: &mut Case<H>) {
    one_of_each(t, "b");
    t.task_added(params::task("a", "x", json!(1)));
    t.task_added(params::task("a", "y", json!(2)));
    assert_eq!(
        t.task_stats(None),
        vec![stats("a", 2, 0, 0, 0), stats("b", 1, 1, 1, 1)],
        "stats of every queue, ordered by name"
    );
    assert_eq!(
        t.task_stats(Some("b")),
        vec![stats("b", 1, 1, 1, 1)],
        "stats of queue b"
    );
    assert_eq!(
        t.task_stats(Some("a")),
        vec![stats("a", 2, 0, 0, 0)],
        "stats of queue a"
    );
    let unknown = t.task_stats(Some("c"));
    assert!(
        unknown.is_empty() || unknown == vec![stats("c", 0, 0, 0, 0)],
        "stats of an unknown queue: {unknown:#?}"
    );
}

/// `task_list` filters by queue and state, respects its limit, and lists in
/// claim order with the pending tasks first.
pub fn task_list_filters_by_state_in_claim_order<H: Harness>(t: &mut Case<H>) {
    one_of_each(t, "b");
    let now = SystemTime::now();
    t.task_added(params::task("a", "low", json!(1)));
    t.task_added(TaskAddParams {
        priority: 5,
        ..params::task("a", "high", json!(2))
    });
    t.task_added(TaskAddParams {
        available: Available::At(now - Duration::from_secs(60)),
        ..params::task("a", "early", json!(3))
    });

    for (state, id) in [
        (TaskState::Pending, "b-pending"),
        (TaskState::Running, "b-running"),
        (TaskState::Done, "b-done"),
        (TaskState::Dead, "b-dead"),
    ] {
        let listed = t.task_list(Some("b"), Some(state), 100);
        assert_eq!(ids(&listed), [id], "list of queue b, state {state:?}");
        assert_eq!(listed[0].state, state);
    }
    assert_eq!(
        ids(&t.task_list(Some("a"), Some(TaskState::Pending), 100)),
        ["high", "early", "low"],
        "pending tasks of queue a, in claim order"
    );
    let mut pending_anywhere = ids(&t.task_list(None, Some(TaskState::Pending), 100))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    pending_anywhere.sort();
    assert_eq!(
        pending_anywhere,
        ["b-pending", "early", "high", "low"],
        "pending tasks of every queue"
    );
    assert_eq!(t.task_list(Some("a"), None, 2).len(), 2, "list of queue a limited to 2");

    let all_b = t.task_list(Some("b"), None, 100);
    let mut sorted = ids(&all_b);
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["b-dead", "b-done", "b-pending", "b-running"],
        "every task of queue b"
    );
    assert_eq!(
        all_b[0].id.as_str(),
        "b-pending",
        "task_list lists \"in claim order (pending first)\", but listed {:?}",
        ids(&all_b)
    );
}

/// Purge deletes only tasks of the given state, of that queue, last
/// updated more than `older_than` ago (on the store's clock), and returns
/// how many.
pub fn task_purge_deletes_old_finished_tasks_of_the_queue<H: Harness>(t: &mut Case<H>) {
    one_of_each(t, "q");
    one_of_each(t, "other");
    t.task_added(params::task("q", "q-done-2", json!(1)));
    t.task_added(params::task("q", "q-new-done", json!(1)));

    t.advance(Duration::from_secs(2 * 3600));
    // Complete q-done-2 now and q-new-done 2h later.
    let long = TaskClaimParams {
        ttl: LONG,
        ..params::claim("q")
    };
    let claimed: Vec<_> = (0..3).map(|_| t.task_claimed(&long)).collect();
    assert_eq!(
        claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["q-pending", "q-done-2", "q-new-done"],
        "claim order"
    );
    assert_eq!(t.task_release(&claim_ref(&claimed[0])), TaskUpdate::Applied);
    assert_eq!(t.task_complete(&claim_ref(&claimed[1]), None), TaskUpdate::Applied);
    t.advance(Duration::from_secs(2 * 3600));
    assert_eq!(t.task_complete(&claim_ref(&claimed[2]), None), TaskUpdate::Applied);

    // Now: q-done finished 4h ago, q-done-2 2h ago, q-new-done just now.
    assert_eq!(
        t.task_purge("q", TaskState::Done, Duration::from_secs(5 * 3600)),
        0,
        "nothing done 5h ago"
    );
    assert_eq!(
        t.task_purge("q", TaskState::Done, Duration::from_secs(3 * 3600)),
        1,
        "done more than 3h ago"
    );
    assert_eq!(t.task_get("q", "q-done"), None, "the purged task");
    assert!(
        t.task_get("q", "q-done-2").is_some(),
        "done 2h ago, purged by a 3h cutoff"
    );
    assert_eq!(
        t.task_purge("q", TaskState::Done, Duration::from_secs(3600)),
        1,
        "done more than 1h ago"
    );
    assert_eq!(t.task_get("q", "q-done-2"), None);
    assert_eq!(
        t.task_purge("q", TaskState::Done, Duration::from_secs(3600)),
        0,
        "a second purge"
    );
    assert_eq!(
        t.task("q", "q-new-done").state,
        TaskState::Done,
        "a recent done task survives"
    );
    for id in ["q-dead", "q-running", "q-pending"] {
        assert!(t.task_get("q", id).is_some(), "purging done tasks deleted {id}");
    }
    for id in ["other-done", "other-dead", "other-running", "other-pending"] {
        assert!(t.task_get("other", id).is_some(), "purging queue q deleted other/{id}");
    }
    assert_eq!(
        t.task_purge("q", TaskState::Dead, Duration::from_secs(3600)),
        1,
        "the old dead task"
    );
    assert_eq!(t.task_get("q", "q-dead"), None);
    assert_eq!(t.task_stats(Some("q")), vec![stats("q", 1, 1, 1, 0)]);
    assert_eq!(t.task_stats(Some("other")), vec![stats("other", 1, 1, 1, 1)]);
}
