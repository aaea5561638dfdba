//! Helpers of the task-queue cases: the [`Case`] calls of the `task_*`
//! methods, which panic with the name of the call when the store fails.

use std::time::{Duration, SystemTime};

use leasehold_backend::{
    Claim, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskClaimParams, TaskCompleteAndClaim,
    TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskListParams,
    TaskPurgeParams, TaskRef, TaskRetry, TaskState, TaskStatsParams, TaskUpdate,
};

use crate::params;
use crate::{Case, Harness};

/// The token-scoped reference of a claim.
pub(crate) fn claim_ref(claim: &Claim) -> TaskRef {
    TaskRef {
        queue: claim.queue.clone(),
        id: claim.id.clone(),
        token: claim.token,
    }
}

/// A task without its `lease_remaining`, which is "as of the read": two
/// reads of an unchanged task compare equal.
pub(crate) fn stable(task: Task) -> Task {
    Task {
        lease_remaining: None,
        ..task
    }
}

/// The ids of `tasks`, in order.
pub(crate) fn ids(tasks: &[Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

/// How far two times a store computed from one reading of its clock may
/// be apart (timestamps are kept in milliseconds).
pub(crate) const ROUNDING: Duration = Duration::from_millis(2);

/// `later - earlier`, or zero if `later` is earlier.
pub(crate) fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// How far apart `a` and `b` are, whichever is first.
pub(crate) fn apart(a: SystemTime, b: SystemTime) -> Duration {
    since(a, b).max(since(b, a))
}

/// The claim of the one pending task of `queue`, due `delay` (over 2 s)
/// from the store's now: not claimable now, nor 2 s before it is due, but
/// 1 s after. `what` names the delay in messages ("a 30s retry delay").
pub(crate) fn claimed_when_due<H: Harness>(t: &Case<H>, queue: &str, delay: Duration, what: &str) -> Claim {
    let claim = params::claim(queue);
    t.task_claim_none(&claim, &format!("right after setting {what}"));
    let early = delay.checked_sub(Duration::from_secs(2)).expect("a delay over 2 s");
    t.advance(early);
    t.task_claim_none(&claim, &format!("{early:?} into {what}"));
    t.advance(Duration::from_secs(3));
    t.task_claimed(&claim)
}

/// The `task_*` calls of a case.
pub(crate) trait TaskCalls {
    fn task_add(&self, tasks: &[TaskAddParams]) -> Vec<TaskAdd>;
    /// `task_add` of one new task, which must be `Added`.
    fn task_added(&self, task: TaskAddParams);
    fn task_claim(&self, params: &TaskClaimParams) -> Option<Claim>;
    /// `task_claim`, which must claim something.
    fn task_claimed(&self, params: &TaskClaimParams) -> Claim;
    /// `task_claim`, which must find nothing claimable.
    fn task_claim_none(&self, params: &TaskClaimParams, why: &str);
    fn task_heartbeat(&self, task: &TaskRef, ttl: Duration) -> TaskUpdate;
    fn task_complete(&self, task: &TaskRef, result: Option<&serde_json::Value>) -> TaskUpdate;
    /// `task_complete_and_claim` of one: complete `task`, then claim by
    /// `claim`.
    fn task_complete_and_claim(
        &self,
        task: &TaskRef,
        result: Option<&serde_json::Value>,
        claim: &TaskClaimParams,
    ) -> TaskCompleteAndClaim;
    /// `task_complete_and_claim` of several, in one call.
    fn task_complete_and_claim_all(
        &self,
        each: &[(TaskRef, Option<serde_json::Value>, TaskClaimParams)],
    ) -> Vec<TaskCompleteAndClaim>;
    fn task_fail(&self, task: &TaskRef, error: &str, retry: Retry) -> TaskFail;
    fn task_release(&self, task: &TaskRef) -> TaskUpdate;
    fn task_retry(&self, queue: &str, id: &str) -> TaskRetry;
    fn task_get(&self, queue: &str, id: &str) -> Option<Task>;
    /// `task_get` of a task that must exist.
    fn task(&self, queue: &str, id: &str) -> Task;
    fn task_list(&self, queue: Option<&str>, state: Option<TaskState>, limit: u32) -> Vec<Task>;
    fn task_stats(&self, queue: Option<&str>) -> Vec<QueueStats>;
    fn task_purge(&self, queue: &str, state: TaskState, older_than: Duration) -> u64;
}

impl<H: Harness> TaskCalls for Case<H> {
    fn task_add(&self, tasks: &[TaskAddParams]) -> Vec<TaskAdd> {
        let ids: Vec<String> = tasks.iter().map(|t| format!("{}/{}", t.queue, t.id)).collect();
        let outcomes = self
            .tasks()
            .task_add(tasks)
            .unwrap_or_else(|e| panic!("task_add({ids:?}) failed: {e}"));
        assert_eq!(
            outcomes.len(),
            tasks.len(),
            "task_add({ids:?}) must return one outcome per task: {outcomes:#?}"
        );
        outcomes
    }

    fn task_added(&self, task: TaskAddParams) {
        let what = format!("task_add({}/{})", task.queue, task.id);
        assert_eq!(self.task_add(&[task]), vec![TaskAdd::Added], "{what} of a new id");
    }

    fn task_claim(&self, params: &TaskClaimParams) -> Option<Claim> {
        let claim = self
            .tasks()
            .task_claim(params)
            .unwrap_or_else(|e| panic!("task_claim({:?}) failed: {e}", params.queue))?;
        assert_eq!(claim.queue, params.queue, "task_claim returned a task of another queue");
        assert_eq!(claim.ttl, params.ttl, "task_claim reports another ttl than asked");
        Some(claim)
    }

    fn task_claimed(&self, params: &TaskClaimParams) -> Claim {
        self.task_claim(params).unwrap_or_else(|| {
            panic!(
                "task_claim({:?}) by {:?} must claim a task, but found nothing claimable",
                params.queue, params.owner
            )
        })
    }

    fn task_claim_none(&self, params: &TaskClaimParams, why: &str) {
        if let Some(claim) = self.task_claim(params) {
            panic!(
                "task_claim({:?}) must find nothing claimable ({why}), but claimed {claim:#?}",
                params.queue
            );
        }
    }

    fn task_heartbeat(&self, task: &TaskRef, ttl: Duration) -> TaskUpdate {
        self.tasks()
            .task_heartbeat(&TaskHeartbeatParams {
                task: task.clone(),
                ttl,
            })
            .unwrap_or_else(|e| panic!("task_heartbeat({}/{}, {}) failed: {e}", task.queue, task.id, task.token))
    }

    fn task_complete(&self, task: &TaskRef, result: Option<&serde_json::Value>) -> TaskUpdate {
        self.tasks()
            .task_complete(&TaskCompleteParams {
                task: task.clone(),
                result: result.cloned(),
            })
            .unwrap_or_else(|e| panic!("task_complete({}/{}, {}) failed: {e}", task.queue, task.id, task.token))
    }

    fn task_complete_and_claim(
        &self,
        task: &TaskRef,
        result: Option<&serde_json::Value>,
        claim: &TaskClaimParams,
    ) -> TaskCompleteAndClaim {
        self.task_complete_and_claim_all(&[(task.clone(), result.cloned(), claim.clone())])
            .remove(0)
    }

    fn task_complete_and_claim_all(
        &self,
        each: &[(TaskRef, Option<serde_json::Value>, TaskClaimParams)],
    ) -> Vec<TaskCompleteAndClaim> {
        let params: Vec<TaskCompleteAndClaimParams> = each
            .iter()
            .map(|(task, result, claim)| TaskCompleteAndClaimParams {
                complete: TaskCompleteParams {
                    task: task.clone(),
                    result: result.clone(),
                },
                claim: claim.clone(),
            })
            .collect();
        let names: Vec<String> = each
            .iter()
            .map(|(t, _, _)| format!("{}/{} {}", t.queue, t.id, t.token))
            .collect();
        let all = self
            .tasks()
            .task_complete_and_claim(&params)
            .unwrap_or_else(|e| panic!("task_complete_and_claim({names:?}) failed: {e}"));
        assert_eq!(
            all.len(),
            each.len(),
            "task_complete_and_claim({names:?}) must return one outcome per params: {all:#?}"
        );
        for (both, (_, _, claim)) in all.iter().zip(each) {
            if let Some(next) = &both.claim {
                assert_eq!(
                    next.queue, claim.queue,
                    "task_complete_and_claim claimed from another queue"
                );
                assert_eq!(
                    next.ttl, claim.ttl,
                    "task_complete_and_claim reports another ttl than asked"
                );
            }
        }
        all
    }

    fn task_fail(&self, task: &TaskRef, error: &str, retry: Retry) -> TaskFail {
        self.tasks()
            .task_fail(&TaskFailParams {
                task: task.clone(),
                error: error.to_owned(),
                retry,
            })
            .unwrap_or_else(|e| panic!("task_fail({}/{}, {}) failed: {e}", task.queue, task.id, task.token))
    }

    fn task_release(&self, task: &TaskRef) -> TaskUpdate {
        self.tasks()
            .task_release(task)
            .unwrap_or_else(|e| panic!("task_release({}/{}, {}) failed: {e}", task.queue, task.id, task.token))
    }

    fn task_retry(&self, queue: &str, id: &str) -> TaskRetry {
        self.tasks()
            .task_retry(&params::task_id(queue, id))
            .unwrap_or_else(|e| panic!("task_retry({queue}/{id}) failed: {e}"))
    }

    fn task_get(&self, queue: &str, id: &str) -> Option<Task> {
        let task = self
            .tasks()
            .task_get(&params::task_id(queue, id))
            .unwrap_or_else(|e| panic!("task_get({queue}/{id}) failed: {e}"))?;
        assert_eq!(
            (task.queue.as_str(), task.id.as_str()),
            (queue, id),
            "task_get returned another task"
        );
        Some(task)
    }

    fn task(&self, queue: &str, id: &str) -> Task {
        self.task_get(queue, id)
            .unwrap_or_else(|| panic!("task_get({queue}/{id}) is None, but the task was added"))
    }

    fn task_list(&self, queue: Option<&str>, state: Option<TaskState>, limit: u32) -> Vec<Task> {
        self.tasks()
            .task_list(&TaskListParams {
                queue: queue.map(params::queue),
                state,
                limit,
                page: None,
            })
            .unwrap_or_else(|e| panic!("task_list({queue:?}, {state:?}, {limit}) failed: {e}"))
    }

    fn task_stats(&self, queue: Option<&str>) -> Vec<QueueStats> {
        self.tasks()
            .task_stats(&TaskStatsParams {
                queue: queue.map(params::queue),
            })
            .unwrap_or_else(|e| panic!("task_stats({queue:?}) failed: {e}"))
    }

    fn task_purge(&self, queue: &str, state: TaskState, older_than: Duration) -> u64 {
        self.tasks()
            .task_purge(&TaskPurgeParams {
                queue: params::queue(queue),
                state,
                older_than,
            })
            .unwrap_or_else(|e| panic!("task_purge({queue}, {state:?}, {older_than:?}) failed: {e}"))
    }
}
