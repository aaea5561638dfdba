//! Token scoping: "heartbeat, complete, fail and release need the current
//! token of a live claim; anything else is `Lost` and changes nothing — a
//! late worker's result is refused."

use std::time::Duration;

use leasehold_backend::{Retry, TaskFail, TaskLost, TaskState, TaskUpdate, Token};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref, stable};
use crate::params::{self, CLAIM_TTL};
use crate::{Case, Harness, assert_fresh};

const STALE: TaskUpdate = TaskUpdate::Lost(TaskLost::Stale);

/// The seed scenario: A claims, A's lease lapses, B claims. A's late
/// completion is refused and changes nothing; B's is applied (the task is
/// done with B's result); any completion after that is refused.
pub fn task_complete_late_worker_is_refused<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim_by("q", "worker-a"));
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    let b = t.task_claimed(&params::claim_by("q", "worker-b"));
    assert_eq!(b.id.as_str(), "a");
    assert!(b.token > a.token);

    let before = stable(t.task("q", "a"));
    assert_eq!(
        t.task_complete(&claim_ref(&a), Some(&json!("from A"))),
        STALE,
        "A's completion after its lease lapsed and B claimed"
    );
    assert_eq!(
        stable(t.task("q", "a")),
        before,
        "A's refused completion changed the task"
    );

    assert_eq!(
        t.task_complete(&claim_ref(&b), Some(&json!("from B"))),
        TaskUpdate::Applied
    );
    let done = t.task("q", "a");
    assert_eq!(done.state, TaskState::Done);
    assert_eq!(done.result, Some(json!("from B")), "the done task's result");
    assert_eq!(done.token, b.token);
    assert_eq!(done.lease_remaining, None, "a done task has no lease");

    let done = stable(done);
    assert_eq!(
        t.task_complete(&claim_ref(&b), Some(&json!("B again"))),
        STALE,
        "a second completion by B"
    );
    assert_eq!(
        t.task_complete(&claim_ref(&a), Some(&json!("A again"))),
        STALE,
        "A's completion of a done task"
    );
    assert_eq!(
        stable(t.task("q", "a")),
        done,
        "a refused completion changed the done task"
    );
    t.task_claim_none(&params::claim("q"), "the only task is done");
}

/// heartbeat, fail and release with a superseded token, or with a token
/// never issued, are `Lost(Stale)` and change nothing; the live claim is
/// unaffected.
pub fn task_stale_token_changes_nothing<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim_by("q", "worker-a"));
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    let b = t.task_claimed(&params::claim_by("q", "worker-b"));
    let before = stable(t.task("q", "a"));
    let unissued = params::task_ref("q", "a", Token(b.token.0 + 1));
    for (what, stale) in [("superseded", claim_ref(&a)), ("never issued", unissued)] {
        assert_eq!(
            t.task_heartbeat(&stale, CLAIM_TTL),
            STALE,
            "heartbeat with a {what} token"
        );
        assert_eq!(stable(t.task("q", "a")), before, "heartbeat with a {what} token");
        assert_eq!(
            t.task_fail(&stale, "late failure", Retry::Never),
            TaskFail::Lost(TaskLost::Stale),
            "fail with a {what} token"
        );
        assert_eq!(stable(t.task("q", "a")), before, "fail with a {what} token");
        assert_eq!(t.task_release(&stale), STALE, "release with a {what} token");
        assert_eq!(stable(t.task("q", "a")), before, "release with a {what} token");
        assert_eq!(t.task_complete(&stale, None), STALE, "complete with a {what} token");
        assert_eq!(stable(t.task("q", "a")), before, "complete with a {what} token");
    }
    // B's claim is intact.
    assert_eq!(t.task_heartbeat(&claim_ref(&b), CLAIM_TTL), TaskUpdate::Applied);
    assert_eq!(t.task("q", "a").owner.as_deref(), Some("worker-b"));
    t.task_claim_none(&params::claim("q"), "B's claim is live");
}

/// A claim whose lease lapsed is `Lost(Stale)` even before anyone else
/// claims: a lapsed claim is never revived by a late heartbeat or
/// completion.
pub fn task_expired_claim_is_stale_without_a_newer_claim<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim("q"));
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    assert_eq!(
        t.task_heartbeat(&claim_ref(&a), CLAIM_TTL),
        STALE,
        "heartbeat of a lapsed claim"
    );
    assert_eq!(
        t.task_complete(&claim_ref(&a), Some(&json!("late"))),
        STALE,
        "completion of a lapsed claim"
    );
    assert_eq!(t.task_release(&claim_ref(&a)), STALE, "release of a lapsed claim");
    assert_eq!(
        t.task_fail(&claim_ref(&a), "late", Retry::Never),
        TaskFail::Lost(TaskLost::Stale),
        "fail of a lapsed claim"
    );
    let task = t.task("q", "a");
    assert_ne!(task.state, TaskState::Done, "a lapsed claim completed its task");
    assert_ne!(
        task.state,
        TaskState::Dead,
        "a lapsed claim's fail(Never) killed its task"
    );
    assert_eq!(task.result, None);
    let b = t.task_claimed(&params::claim("q"));
    assert_eq!(b.attempt, 2, "the lapsed claim was not handed back (release refused)");
    assert!(b.token > a.token);
}

/// Every token-scoped operation on an unknown task (or queue) is
/// `Lost(NotFound)`.
pub fn task_unknown_task_is_not_found<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim("q"));
    let not_found = TaskUpdate::Lost(TaskLost::NotFound);
    for (queue, id) in [("q", "nope"), ("other", "a")] {
        let r = params::task_ref(queue, id, a.token);
        assert_eq!(t.task_heartbeat(&r, CLAIM_TTL), not_found, "heartbeat of {queue}/{id}");
        assert_eq!(t.task_complete(&r, None), not_found, "complete of {queue}/{id}");
        assert_eq!(
            t.task_fail(&r, "x", Retry::Never),
            TaskFail::Lost(TaskLost::NotFound),
            "fail of {queue}/{id}"
        );
        assert_eq!(t.task_release(&r), not_found, "release of {queue}/{id}");
        assert_eq!(
            t.task_get(queue, id),
            None,
            "{queue}/{id} was created by a token-scoped call"
        );
    }
    assert_eq!(t.task("q", "a").state, TaskState::Running, "q/a is untouched");
}

/// A heartbeat extends the claim to now + ttl: past the original expiry the
/// claim is still live (not claimable by others, the worker can complete
/// it), and it lapses at the new expiry.
pub fn task_heartbeat_extends_the_claim<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    t.task_added(params::task("q", "b", json!(2)));
    let a = t.task_claimed(&params::claim("q"));
    let b = t.task_claimed(&params::claim("q"));
    t.advance(Duration::from_secs(50)); // of 60
    assert_eq!(t.task_heartbeat(&claim_ref(&a), CLAIM_TTL), TaskUpdate::Applied);
    assert_eq!(t.task_heartbeat(&claim_ref(&b), CLAIM_TTL), TaskUpdate::Applied);
    let left = t
        .task("q", "a")
        .lease_remaining
        .expect("lease_remaining of a running task");
    assert_fresh(left, CLAIM_TTL, "lease_remaining after a heartbeat");

    t.advance(Duration::from_secs(20)); // 10s past the original expiry, 40s before the new one
    t.task_claim_none(&params::claim("q"), "both claims were extended by heartbeats");
    assert_eq!(
        t.task_complete(&claim_ref(&a), Some(&json!("a"))),
        TaskUpdate::Applied,
        "completion 10s past the original expiry, after a heartbeat"
    );
    t.advance(Duration::from_secs(38)); // 2s before b's new expiry
    t.task_claim_none(&params::claim("q"), "b's extended claim has 2s left");
    t.advance(Duration::from_secs(3));
    assert_eq!(
        t.task_heartbeat(&claim_ref(&b), CLAIM_TTL),
        STALE,
        "heartbeat after the new expiry"
    );
    let again = t.task_claimed(&params::claim("q"));
    assert_eq!((again.id.as_str(), again.attempt), ("b", 2));
    assert_eq!(t.task("q", "a").state, TaskState::Done);
}

/// A heartbeat extends the claim but leaves the time of the claim as it
/// was: a running task's `claimed_at` (its `updated_at`) is when the claim
/// was taken however often it heartbeats, and a new claim after an expiry
/// has its own. (The status page's claim age reads it: a claim heartbeating
/// for an hour is an hour old, not as old as its last heartbeat.)
pub fn task_heartbeat_keeps_the_claim_time<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim("q"));
    let claimed = t.task("q", "a").claimed_at().expect("a running task has a claim time");
    for _ in 0..3 {
        t.advance(Duration::from_secs(40)); // of 60
        assert_eq!(t.task_heartbeat(&claim_ref(&a), CLAIM_TTL), TaskUpdate::Applied);
        let task = t.task("q", "a");
        assert_eq!(
            task.claimed_at(),
            Some(claimed),
            "claimed_at after a heartbeat 40s later (updated_at {:?})",
            task.updated_at
        );
    }
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    let again = t.task_claimed(&params::claim("q"));
    assert!(again.token > a.token);
    let reclaimed = t.task("q", "a").claimed_at().expect("claimed again");
    let moved = reclaimed.duration_since(claimed).unwrap_or_default();
    assert!(
        moved >= Duration::from_secs(180),
        "a new claim 181s of store time later has its own time: moved {moved:?}"
    );
    assert_eq!(t.task_complete(&claim_ref(&again), None), TaskUpdate::Applied);
    assert_eq!(t.task("q", "a").claimed_at(), None, "a done task has no claim");
}

/// `task_complete_and_claim` is a completion and a claim in one: the
/// claimed task is done with its result, and the next task in claim order
/// is claimed with a new token, a counted attempt and a live lease. A
/// refused completion (here: a second one) changes nothing, and the claim
/// is made all the same; with nothing left to claim, the completion stands
/// and the claim is `None`.
pub fn task_complete_and_claim_completes_then_claims<H: Harness>(t: &mut Case<H>) {
    for id in ["a", "b", "c"] {
        t.task_added(params::task("q", id, json!(id)));
    }
    let a = t.task_claimed(&params::claim_by("q", "worker-a"));
    assert_eq!(a.id.as_str(), "a");

    let both = t.task_complete_and_claim(&claim_ref(&a), Some(&json!("ra")), &params::claim_by("q", "worker-a"));
    assert_eq!(both.completed, TaskUpdate::Applied, "the completion of a live claim");
    let done = t.task("q", "a");
    assert_eq!(
        (done.state, done.result.clone(), done.token),
        (TaskState::Done, Some(json!("ra")), a.token),
        "the completed task"
    );
    let b = both.claim.expect("the next task is claimed with the completion");
    assert_eq!((b.id.as_str(), b.attempt, b.payload.clone()), ("b", 1, json!("b")));
    assert!(b.token > Token(0), "a claim's token is issued");
    let running = t.task("q", "b");
    assert_eq!(
        (running.state, running.owner.as_deref(), running.token),
        (TaskState::Running, Some("worker-a"), b.token),
        "the task claimed with the completion"
    );
    assert_eq!(
        t.task_heartbeat(&claim_ref(&b), CLAIM_TTL),
        TaskUpdate::Applied,
        "its claim is live"
    );

    let done = stable(done);
    let again = t.task_complete_and_claim(
        &claim_ref(&a),
        Some(&json!("again")),
        &params::claim_by("q", "worker-a"),
    );
    assert_eq!(again.completed, STALE, "a second completion of a done task");
    assert_eq!(
        stable(t.task("q", "a")),
        done,
        "a refused completion changed the done task"
    );
    let c = again.claim.expect("a refused completion still claims the next task");
    assert_eq!(c.id.as_str(), "c");

    let last = t.task_complete_and_claim(&claim_ref(&b), None, &params::claim("q"));
    assert_eq!(last.completed, TaskUpdate::Applied);
    assert_eq!(last.claim, None, "nothing is claimable: c is running");
    assert_eq!(
        t.task("q", "b").state,
        TaskState::Done,
        "the completion stands without a claim"
    );
    assert_eq!(t.task("q", "c").state, TaskState::Running, "c is untouched");
}

/// Completion comes first: a late worker whose claim lapsed has its
/// completion refused, and the claim half of the same call returns the
/// lapsed task to the queue and takes it again, as a new attempt with a
/// greater token — the late result never lands.
pub fn task_complete_and_claim_late_completion_is_refused<H: Harness>(t: &mut Case<H>) {
    t.task_added(params::task("q", "a", json!(1)));
    let a = t.task_claimed(&params::claim_by("q", "worker-a"));
    t.advance(CLAIM_TTL + Duration::from_secs(1));
    let both = t.task_complete_and_claim(&claim_ref(&a), Some(&json!("late")), &params::claim_by("q", "worker-a"));
    assert_eq!(both.completed, STALE, "the completion of a lapsed claim");
    let again = both.claim.expect("the lapsed task is claimable again");
    assert_eq!((again.id.as_str(), again.attempt), ("a", 2));
    assert!(again.token > a.token);
    let task = t.task("q", "a");
    assert_eq!(
        (task.state, task.result),
        (TaskState::Running, None),
        "the late result was refused"
    );
}

/// Several completions with their next claims in one call (a worker's
/// threads reporting together) apply in order: each claimed task is done,
/// and the claims take the next tasks in claim order, one each, with
/// distinct tokens; a refused completion among them changes nothing and
/// still claims.
pub fn task_complete_and_claim_several_in_one_call<H: Harness>(t: &mut Case<H>) {
    for id in ["a", "b", "c", "d", "e"] {
        t.task_added(params::task("q", id, json!(id)));
    }
    let a = t.task_claimed(&params::claim_by("q", "w1"));
    let b = t.task_claimed(&params::claim_by("q", "w2"));
    let stale = params::task_ref("q", "a", Token(a.token.0 + 1));
    let all = t.task_complete_and_claim_all(&[
        (claim_ref(&a), Some(json!("ra")), params::claim_by("q", "w1")),
        (stale, Some(json!("never")), params::claim_by("q", "w3")),
        (claim_ref(&b), Some(json!("rb")), params::claim_by("q", "w2")),
    ]);
    let completed: Vec<TaskUpdate> = all.iter().map(|x| x.completed).collect();
    assert_eq!(completed, [TaskUpdate::Applied, STALE, TaskUpdate::Applied]);
    let next: Vec<&str> = all
        .iter()
        .map(|x| x.claim.as_ref().expect("each claims a task").id.as_str())
        .collect();
    assert_eq!(next, ["c", "d", "e"], "the claims take the next tasks in claim order");
    for (id, result) in [("a", "ra"), ("b", "rb")] {
        let task = t.task("q", id);
        assert_eq!(
            (task.state, task.result),
            (TaskState::Done, Some(json!(result))),
            "{id}"
        );
    }
    for (x, owner) in all.iter().zip(["w1", "w3", "w2"]) {
        let claim = x.claim.as_ref().unwrap();
        let task = t.task("q", claim.id.as_str());
        assert_eq!(
            (task.state, task.owner.as_deref(), task.token),
            (TaskState::Running, Some(owner), claim.token),
            "{}",
            claim.id
        );
    }
    t.task_claim_none(&params::claim("q"), "every task is done or claimed");
}
