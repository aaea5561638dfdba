//! "No task is lost; each task's completion is accepted at most once"
//! (docs/ARCHITECTURE.md, "Invariants"), however claims, expiries and late workers interleave.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_backend::{
    Claim, TaskAddParams, TaskClaimParams, TaskCompleteParams, TaskLost, TaskState, TaskUpdate, Token,
};
use serde_json::json;

use super::task_support::{TaskCalls, claim_ref};
use crate::params;
use crate::{Case, Harness};

/// Three claims of one task interleaved with expiries and late calls: only
/// the newest live claim's completion is accepted, once; the done task
/// carries its result and token.
pub fn task_lifecycle_one_completion_with_interleaved_claims<H: Harness>(t: &mut Case<H>) {
    let ttl = Duration::from_secs(10);
    let claim = |owner: &str| {
        t.task_claimed(&TaskClaimParams {
            ttl,
            ..params::claim_by("q", owner)
        })
    };
    t.task_added(params::task("q", "a", json!(1)));
    let c1 = claim("w1");
    t.advance(ttl + Duration::from_secs(1));
    let c2 = claim("w2");
    assert_eq!(
        t.task_heartbeat(&claim_ref(&c1), ttl),
        TaskUpdate::Lost(TaskLost::Stale)
    );
    t.advance(ttl + Duration::from_secs(1));
    assert_eq!(
        t.task_complete(&claim_ref(&c2), Some(&json!("w2"))),
        TaskUpdate::Lost(TaskLost::Stale),
        "w2's claim lapsed"
    );
    let c3 = claim("w3");
    assert!(
        c1.token < c2.token && c2.token < c3.token,
        "tokens {} {} {}",
        c1.token,
        c2.token,
        c3.token
    );
    assert_eq!((c1.attempt, c2.attempt, c3.attempt), (1, 2, 3));
    for (old, who) in [(&c2, "w2"), (&c1, "w1")] {
        assert_eq!(
            t.task_complete(&claim_ref(old), Some(&json!(who))),
            TaskUpdate::Lost(TaskLost::Stale),
            "{who}'s completion while w3 holds the claim"
        );
    }
    assert_eq!(t.task_heartbeat(&claim_ref(&c3), ttl), TaskUpdate::Applied);
    assert_eq!(
        t.task_complete(&claim_ref(&c3), Some(&json!("w3"))),
        TaskUpdate::Applied
    );
    for (c, who) in [(&c1, "w1"), (&c2, "w2"), (&c3, "w3")] {
        assert_eq!(
            t.task_complete(&claim_ref(c), Some(&json!("again"))),
            TaskUpdate::Lost(TaskLost::Stale),
            "{who}'s completion of the done task"
        );
    }
    let task = t.task("q", "a");
    assert_eq!(task.state, TaskState::Done);
    assert_eq!(task.result, Some(json!("w3")));
    assert_eq!(task.token, c3.token);
    assert_eq!(task.owner.as_deref(), Some("w3"));
    assert_eq!((task.attempts, task.expirations, task.failures), (3, 2, 0));
    t.task_claim_none(&params::claim("q"), "the only task is done");
}

/// Worker threads race to claim and complete while the store's clock jumps
/// past their claims: every task ends done, exactly one completion per
/// task is accepted, and the done task holds that completion's result and
/// token.
pub fn task_lifecycle_racing_workers_complete_each_task_once<H: Harness>(t: &mut Case<H>) {
    const TASKS: usize = 30;
    const WORKERS: usize = 4;
    let ttl = Duration::from_secs(10);
    let adds: Vec<TaskAddParams> = (0..TASKS)
        .map(|i| TaskAddParams {
            max_attempts: 1000,
            ..params::task("q", &format!("t{i:02}"), json!(i))
        })
        .collect();
    assert_eq!(t.task_add(&adds).len(), TASKS);

    // (task id) -> the accepted completions: (token, result)
    let accepted: Mutex<HashMap<String, Vec<(Token, serde_json::Value)>>> = Mutex::new(HashMap::new());
    let claims = AtomicUsize::new(0);
    let working = AtomicUsize::new(WORKERS);
    let backend = t.tasks();
    let complete = |worker: &str, claim: &Claim| {
        let result = json!({"worker": worker, "token": claim.token.0});
        match backend.task_complete(&TaskCompleteParams {
            task: claim_ref(claim),
            result: Some(result.clone()),
        }) {
            Ok(TaskUpdate::Applied) => accepted
                .lock()
                .expect("no poisoned lock")
                .entry(claim.id.as_str().to_owned())
                .or_default()
                .push((claim.token, result)),
            Ok(TaskUpdate::Lost(TaskLost::Stale)) => {}
            other => panic!("task_complete({}, {}) by {worker}: {other:?}", claim.id, claim.token),
        }
    };
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (complete, claims, working) = (&complete, &claims, &working);
            s.spawn(move || {
                let worker = format!("worker-{w}");
                let params = TaskClaimParams {
                    ttl,
                    ..params::claim_by("q", &worker)
                };
                while let Some(claim) = backend
                    .task_claim(&params)
                    .unwrap_or_else(|e| panic!("task_claim by {worker} failed: {e}"))
                {
                    claims.fetch_add(1, Ordering::SeqCst);
                    complete(&worker, &claim);
                }
                working.fetch_sub(1, Ordering::SeqCst);
            });
        }
        // Jump past every live claim now and then while the workers run.
        let mut mark = 2;
        while working.load(Ordering::SeqCst) > 0 {
            if claims.load(Ordering::SeqCst) >= mark {
                t.advance(ttl + Duration::from_secs(1));
                mark += 3;
            } else {
                std::thread::yield_now();
            }
        }
    });
    // Whatever lapsed after the workers stopped is claimable again.
    while let Some(claim) = t.task_claim(&params::claim_by("q", "drain")) {
        complete("drain", &claim);
    }

    let accepted = accepted.into_inner().expect("no poisoned lock");
    for i in 0..TASKS {
        let id = format!("t{i:02}");
        let task = t.task("q", &id);
        assert_eq!(task.state, TaskState::Done, "{id} is not done: {task:#?}");
        let completions = accepted.get(&id).map_or(&[][..], Vec::as_slice);
        assert_eq!(completions.len(), 1, "{id}: accepted completions {completions:?}");
        let (token, result) = &completions[0];
        assert_eq!(
            task.token, *token,
            "{id}: the done task's token is the accepted completion's"
        );
        assert_eq!(task.result.as_ref(), Some(result), "{id}: the done task's result");
    }
    assert_eq!(accepted.len(), TASKS, "completions accepted for unknown tasks");
}
