//! Reading and tidying the queue: `task_get` (None for an unknown task),
//! `task_list` ("Tasks in claim order (pending first), optionally of one
//! state"), `task_stats` ("Counts per state, per queue (ordered by queue
//! name)") and `task_purge` ("Delete tasks of `state` (done or dead) last
//! updated more than `older_than` ago; returns how many").

use std::time::{Duration, SystemTime};

use leasehold_backend::{
    Available, ErrorKind, QueueStats, Retry, Task, TaskAddParams, TaskClaimParams, TaskFail, TaskKey, TaskListParams,
    TaskPage, TaskState, TaskUpdate,
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

/// One page of `queue`'s tasks in `state` by key.
fn page<H: Harness>(t: &Case<H>, queue: &str, state: TaskState, page: TaskPage, limit: u32) -> Vec<Task> {
    let what = format!("task_list({queue}, {state:?}, {page:?}, {limit})");
    let listed = t
        .tasks()
        .task_list(&TaskListParams {
            queue: Some(params::queue(queue)),
            state: Some(state),
            limit,
            page: Some(page),
        })
        .unwrap_or_else(|e| panic!("{what} failed: {e}"));
    assert!(listed.len() <= limit as usize, "{what}: {} tasks", listed.len());
    listed
}

/// Walk every page of `queue`'s tasks in `state`, `limit` at a time, forward
/// from the first page and backward from the last: each walk lists every
/// task exactly once, in the order of one unpaged list.
fn walk<H: Harness>(t: &Case<H>, queue: &str, state: TaskState, limit: u32) {
    let whole = t.task_list(Some(queue), Some(state), 10_000);
    let mut forward = t.task_list(Some(queue), Some(state), limit);
    let mut pages = 1;
    while let Some(last) = forward.last().filter(|_| pages < 200) {
        let next = page(t, queue, state, TaskPage::After(TaskKey::of(last)), limit);
        if next.is_empty() {
            break;
        }
        forward.extend(next);
        pages += 1;
    }
    assert_eq!(
        ids(&forward),
        ids(&whole),
        "{state:?} tasks of {queue}, {limit} a page forward by key"
    );
    let mut backward = page(t, queue, state, TaskPage::Last, limit);
    let mut pages = 1;
    while let Some(first) = backward.first().filter(|_| pages < 200) {
        let mut before = page(t, queue, state, TaskPage::Before(TaskKey::of(first)), limit);
        if before.is_empty() {
            break;
        }
        before.extend(backward);
        backward = before;
        pages += 1;
    }
    assert_eq!(
        ids(&backward),
        ids(&whole),
        "{state:?} tasks of {queue}, {limit} a page backward by key from the last page"
    );
}

/// A page by key (`TaskListParams::page`) lists what the unpaged list
/// lists in the same order, every task once, whether the page goes
/// forward, backward or starts at the end — across priorities, times and
/// tasks added in one batch (same priority, same time: insertion order
/// decides). A key whose task is gone lists every task tying with it (a
/// repeat, never a skip); a page without one queue and one state is
/// refused.
pub fn task_list_pages_by_key_in_list_order<H: Harness>(t: &mut Case<H>) {
    let now = SystemTime::now();
    let mut batch = Vec::new();
    for i in 0..9 {
        batch.push(TaskAddParams {
            priority: [0, 5, -3][i % 3],
            ..params::task("q", &format!("batch-{i}"), json!(i))
        });
    }
    t.task_add(&batch);
    for i in 0..7 {
        t.task_added(TaskAddParams {
            priority: [0, 5][i % 2],
            available: Available::At(now - Duration::from_secs(60 + i as u64)),
            ..params::task("q", &format!("early-{i}"), json!(i))
        });
        t.task_added(params::task("q", &format!("one-{i}"), json!(i)));
    }
    t.task_added(params::task("other", "elsewhere", json!(0)));
    for limit in [1, 2, 4, 7, 100] {
        walk(t, "q", TaskState::Pending, limit);
    }
    assert_eq!(
        ids(&page(t, "q", TaskState::Pending, TaskPage::Last, 2)),
        ids(&t.task_list(Some("q"), Some(TaskState::Pending), 100)[21..]),
        "the last page"
    );
    for _ in 0..6 {
        let c = t.task_claimed(&params::claim("q"));
        assert_eq!(t.task_complete(&claim_ref(&c), None), TaskUpdate::Applied);
    }
    for limit in [1, 4] {
        walk(t, "q", TaskState::Done, limit);
        walk(t, "q", TaskState::Pending, limit);
    }

    // A key whose task is gone, tying with the batch's priority-0 tasks.
    let tied: Vec<String> = t
        .task_list(Some("q"), Some(TaskState::Pending), 100)
        .into_iter()
        .filter(|task| task.id.as_str().starts_with("batch-") && task.priority == 0)
        .map(|task| task.id.as_str().to_owned())
        .collect();
    assert!(!tied.is_empty(), "priority-0 batch tasks still pending");
    let gone = TaskKey {
        id: params::task_id("q", "never-added").id,
        ..TaskKey::of(&t.task("q", &tied[0]))
    };
    let after = page(t, "q", TaskState::Pending, TaskPage::After(gone.clone()), 100);
    for id in &tied {
        assert!(
            ids(&after).contains(&id.as_str()),
            "a page after a key whose task is gone lists {id}, which ties with it: {:?}",
            ids(&after)
        );
    }
    let before = page(t, "q", TaskState::Pending, TaskPage::Before(gone), 100);
    for id in &tied {
        assert!(
            ids(&before).contains(&id.as_str()),
            "a page before a key whose task is gone lists {id}, which ties with it: {:?}",
            ids(&before)
        );
    }

    let refused = t.tasks().task_list(&TaskListParams {
        queue: Some(params::queue("q")),
        state: None,
        limit: 10,
        page: Some(TaskPage::Last),
    });
    assert_eq!(
        refused.map(|l| l.len()).map_err(|e| e.kind()),
        Err(ErrorKind::InvalidInput),
        "a page by key without a state"
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
