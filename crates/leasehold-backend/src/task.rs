//! Task queue types of the seam: a task's claim is a lease.
//!
//! States and transitions (every arrow is one transaction):
//!
//! ```text
//!  add ──► pending ──claim──► running ──complete──► done
//!            ▲  ▲               │  │
//!            │  └──fail(retry)──┘  ├──fail(no retry, or attempts used up)──► dead
//!            │  └──claim expired───┘  (attempts used up: dead)
//!            └──────────── retry ◄──────────────────────────────────────── dead
//! ```
//!
//! - Each claim counts an attempt and issues a new **token**, strictly
//!   greater than every earlier token of the task (a retry of a dead task
//!   resets the attempt count, never the token).
//! - heartbeat, complete, fail and release need the current token of a
//!   live claim; anything else is `Lost` and changes nothing — a late
//!   worker's result is refused.
//! - A claim whose lease expired is claimable again (its attempt is
//!   counted as an expiry); a release hands a claim back without charging
//!   the attempt.
//! - Claim order: priority (higher first), then available-at, then
//!   insertion order.
//! - When a task becomes claimable — at once, after a delay, after a
//!   failure's retry delay — is measured on the store's clock, the one its
//!   claims use, never the adder's ([`Available`]): a host whose wall clock
//!   is ahead must not add tasks that no one can claim until it is right.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::{LeaseName, Token};

/// A task id: 1–255 bytes of UTF-8 without control characters (the same
/// rule as lease names).
pub type TaskId = LeaseName;

/// A queue name: the same rule as lease names.
pub type QueueName = LeaseName;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Running,
    Done,
    Dead,
}

impl TaskState {
    pub const ALL: [TaskState; 4] = [TaskState::Pending, TaskState::Running, TaskState::Done, TaskState::Dead];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Dead => "dead",
        }
    }

    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub queue: QueueName,
    pub id: TaskId,
    pub payload: serde_json::Value,
    pub priority: i64,
    pub state: TaskState,
    /// Claims made since the task was added (or last revived).
    pub attempts: u32,
    pub max_attempts: u32,
    /// The token of the newest claim (0 before the first).
    pub token: Token,
    /// Owner of the newest claim.
    pub owner: Option<String>,
    /// When the task may next be claimed (the store's wall clock;
    /// scheduling only).
    #[serde(with = "crate::unix_ms")]
    pub available_at: SystemTime,
    /// Time left on the current claim (running tasks), as of the read.
    #[serde(with = "opt_millis")]
    pub lease_remaining: Option<Duration>,
    /// Claims that ended by expiry (the worker died or hung).
    pub expirations: u32,
    /// Claims that ended by a reported failure.
    pub failures: u32,
    pub last_error: Option<String>,
    pub result: Option<serde_json::Value>,
    #[serde(with = "crate::unix_ms")]
    pub created_at: SystemTime,
    /// When the task last changed: added, claimed, finished, handed back
    /// or revived. A heartbeat only extends the claim and does not count,
    /// so a running task's is the time of its claim ([`Task::claimed_at`]).
    #[serde(with = "crate::unix_ms")]
    pub updated_at: SystemTime,
    /// The TTL the newest claim asked for (the default for its heartbeats).
    #[serde(with = "opt_millis")]
    pub claim_ttl: Option<Duration>,
}

impl Task {
    /// When the current claim was taken (a running task), on the store's
    /// wall clock: however often it heartbeats since, the claim is this
    /// old.
    #[must_use]
    pub fn claimed_at(&self) -> Option<SystemTime> {
        (self.state == TaskState::Running).then_some(self.updated_at)
    }
}

#[derive(Debug, Clone)]
pub struct TaskAddParams {
    pub queue: QueueName,
    pub id: TaskId,
    pub payload: serde_json::Value,
    pub priority: i64,
    /// When it becomes claimable.
    pub available: Available,
    pub max_attempts: u32,
}

/// When an added task becomes claimable. `Now` and `After` are measured on
/// the store's clock, read in the transaction that adds the task (the
/// clock its claims compare with), so the adder's wall clock does not
/// matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Available {
    /// At once: the store's now.
    #[default]
    Now,
    /// This long after the store's now (at most [`crate::limits::DELAY`]).
    After(Duration),
    /// At this wall time, as the caller chose it (at most
    /// [`crate::limits::DELAY`] ahead of the caller's clock).
    At(SystemTime),
}

impl Available {
    /// The time the task becomes claimable, given the store's `now`.
    ///
    /// # Examples
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use leasehold_backend::task::Available;
    /// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    /// assert_eq!(Available::Now.at(now), now);
    /// assert_eq!(Available::After(Duration::from_secs(30)).at(now), now + Duration::from_secs(30));
    /// assert_eq!(Available::At(SystemTime::UNIX_EPOCH).at(now), SystemTime::UNIX_EPOCH);
    /// ```
    #[must_use]
    pub fn at(self, now: SystemTime) -> SystemTime {
        match self {
            Available::Now => now,
            Available::After(delay) => crate::later(now, delay),
            Available::At(at) => at,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TaskAdd {
    Added,
    /// The same task already exists under the id (the same payload,
    /// priority and max attempts: [`TaskAddParams::differences`]): a no-op.
    Exists,
    /// Another task exists under the id: refused (the batch, if any, adds
    /// nothing). `differences` says how it differs from the one added.
    Conflict {
        existing: Box<Task>,
        differences: Vec<TaskDifference>,
    },
}

impl TaskAdd {
    /// The outcome of adding `added` where `existing` already has its id:
    /// [`TaskAdd::Exists`] for the same task, else a conflict.
    #[must_use]
    pub fn again(added: &TaskAddParams, existing: Task) -> Self {
        let differences = added.differences(&existing);
        if differences.is_empty() {
            TaskAdd::Exists
        } else {
            TaskAdd::Conflict {
                existing: Box::new(existing),
                differences,
            }
        }
    }
}

/// Add `tasks` one after the other, each through the store's
/// `insert_or_read`: it inserts the task unless its id is taken, and then
/// reads the task stored under that id (`Some`). Returns what each add did
/// ([`TaskAdd::again`] for a taken id) and whether to commit: a conflict
/// refuses the whole batch.
///
/// # Errors
/// The first error of `insert_or_read`.
pub fn add_each<E>(
    tasks: &[TaskAddParams],
    mut insert_or_read: impl FnMut(&TaskAddParams) -> Result<Option<Task>, E>,
) -> Result<(Vec<TaskAdd>, bool), E> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    let mut clean = true;
    for t in tasks {
        let outcome = match insert_or_read(t)? {
            None => TaskAdd::Added,
            Some(existing) => TaskAdd::again(t, existing),
        };
        clean &= !matches!(outcome, TaskAdd::Conflict { .. });
        outcomes.push(outcome);
    }
    Ok((outcomes, clean))
}

/// One way a task added under an existing id differs from the task stored
/// under it: the field (`payload`, `priority`, `max attempts`), its value
/// as stored and as given (JSON and numbers as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDifference {
    pub field: &'static str,
    pub stored: String,
    pub given: String,
}

impl std::fmt::Display for TaskDifference {
    /// `priority 0, not 5`: the stored value, then the one given.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}, not {}", self.field, self.stored, self.given)
    }
}

/// The differences of a conflict in words, for every front end's message:
/// `payload {"n":1}, not {"n":2}; priority 0, not 5`.
#[must_use]
pub fn differences_text(differences: &[TaskDifference]) -> String {
    differences
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl TaskAddParams {
    /// How this task differs from `existing`, stored under the same id, in
    /// what adding it again must repeat to be a no-op: its payload,
    /// priority and max attempts. Its availability is not compared: a
    /// delay is measured anew by each call (a retried `task add --delay 1m`
    /// is the same task), and a claimed or failed task has moved its own.
    /// Empty: the same task.
    ///
    /// # Examples
    /// ```
    /// # use leasehold_backend::{Available, TaskAddParams, LeaseName};
    /// let task = TaskAddParams {
    ///     queue: LeaseName::new("q").unwrap(),
    ///     id: LeaseName::new("a").unwrap(),
    ///     payload: serde_json::json!(1),
    ///     priority: 0,
    ///     available: Available::Now,
    ///     max_attempts: 5,
    /// };
    /// let urgent = TaskAddParams { priority: 9, ..task.clone() };
    /// // As a store would hold `task`:
    /// # let stored = leasehold_backend::Task { queue: task.queue.clone(), id: task.id.clone(), payload: task.payload.clone(),
    /// #     priority: 0, state: leasehold_backend::TaskState::Pending, attempts: 0, max_attempts: 5, token: leasehold_backend::Token(0),
    /// #     owner: None, available_at: std::time::SystemTime::UNIX_EPOCH, lease_remaining: None, expirations: 0, failures: 0,
    /// #     last_error: None, result: None, created_at: std::time::SystemTime::UNIX_EPOCH,
    /// #     updated_at: std::time::SystemTime::UNIX_EPOCH, claim_ttl: None };
    /// assert!(task.differences(&stored).is_empty());
    /// assert_eq!(urgent.differences(&stored)[0].field, "priority");
    /// ```
    #[must_use]
    pub fn differences(&self, existing: &Task) -> Vec<TaskDifference> {
        let differs = [
            // Payloads compare as JSON values (maps by content, whatever
            // the key order of their text), and show as text.
            (existing.payload != self.payload)
                .then(|| ("payload", existing.payload.to_string(), self.payload.to_string())),
            (existing.priority != self.priority)
                .then(|| ("priority", existing.priority.to_string(), self.priority.to_string())),
            (existing.max_attempts != self.max_attempts).then(|| {
                (
                    "max attempts",
                    existing.max_attempts.to_string(),
                    self.max_attempts.to_string(),
                )
            }),
        ];
        differs
            .into_iter()
            .flatten()
            .map(|(field, stored, given)| TaskDifference { field, stored, given })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct TaskClaimParams {
    pub queue: QueueName,
    pub owner: String,
    pub ttl: Duration,
}

/// Extend the claim `task` to the store's now + `ttl`.
#[derive(Debug, Clone)]
pub struct TaskHeartbeatParams {
    pub task: TaskRef,
    pub ttl: Duration,
}

/// Mark the claimed `task` done with its `result`.
#[derive(Debug, Clone)]
pub struct TaskCompleteParams {
    pub task: TaskRef,
    pub result: Option<serde_json::Value>,
}

/// Mark the claimed `complete.task` done (as [`TaskCompleteParams`]), then
/// claim the next task (as [`TaskClaimParams`]) — a worker's report and its
/// next claim, in the transaction of
/// [`TaskBackend::task_complete_and_claim`](crate::TaskBackend::task_complete_and_claim).
#[derive(Debug, Clone)]
pub struct TaskCompleteAndClaimParams {
    pub complete: TaskCompleteParams,
    pub claim: TaskClaimParams,
}

/// What [`TaskCompleteAndClaimParams`] did: the completion's outcome, and
/// the next claim (`None` when nothing was claimable). The claim is made
/// whatever the completion's outcome: a refused report does not stop a
/// worker from taking its next task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCompleteAndClaim {
    pub completed: TaskUpdate,
    pub claim: Option<Claim>,
}

/// Record a failed attempt of the claimed `task`.
#[derive(Debug, Clone)]
pub struct TaskFailParams {
    pub task: TaskRef,
    /// What went wrong (kept as the task's last error).
    pub error: String,
    pub retry: Retry,
}

/// One task by its id.
#[derive(Debug, Clone)]
pub struct TaskIdParams {
    pub queue: QueueName,
    pub id: TaskId,
}

/// Counts of one queue, or of every queue (`None`).
#[derive(Debug, Clone, Default)]
pub struct TaskStatsParams {
    pub queue: Option<QueueName>,
}

/// Delete the tasks of `queue` in `state` last updated more than
/// `older_than` ago.
#[derive(Debug, Clone)]
pub struct TaskPurgeParams {
    pub queue: QueueName,
    pub state: TaskState,
    pub older_than: Duration,
}

/// A claimed task: run it, heartbeat it, complete or fail it with `token`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub queue: QueueName,
    pub id: TaskId,
    pub payload: serde_json::Value,
    pub attempt: u32,
    pub max_attempts: u32,
    pub token: Token,
    #[serde(with = "crate::millis")]
    pub ttl: Duration,
}

impl Claim {
    /// The reference token-scoped operations on this claim need.
    #[must_use]
    pub fn task_ref(&self) -> TaskRef {
        TaskRef {
            queue: self.queue.clone(),
            id: self.id.clone(),
            token: self.token,
        }
    }
}

/// Which claim a token-scoped task operation acts on.
#[derive(Debug, Clone)]
pub struct TaskRef {
    pub queue: QueueName,
    pub id: TaskId,
    pub token: Token,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskLost {
    /// No such task.
    NotFound,
    /// A newer claim exists, or the task is no longer running, or the claim
    /// expired.
    Stale,
}

/// The outcome of a token-scoped task operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskUpdate {
    Applied,
    Lost(TaskLost),
}

/// What `task_fail` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Retry after the default backoff for the attempt ([`backoff`]).
    Backoff,
    /// Retry after this delay (unless attempts are used up).
    After(Duration),
    /// Do not retry: the task is dead.
    Never,
}

impl Retry {
    /// How long after a failure of attempt `attempts` (of `max_attempts`)
    /// the task is claimable again; `None`: it is dead (no retry asked, or
    /// its attempts used up). `entropy` spreads the [`backoff`].
    #[must_use]
    pub fn delay(self, attempts: u32, max_attempts: u32, entropy: u64) -> Option<Duration> {
        match self {
            Retry::Never => None,
            _ if attempts >= max_attempts => None,
            Retry::After(d) => Some(d),
            Retry::Backoff => Some(backoff(attempts, entropy)),
        }
    }
}

/// The default retry delay after failed attempt `attempt` (1-based):
/// exponential from 1 s, doubling, capped at 1 h, with ±25% jitter from
/// `entropy` (any varying number, e.g. the clock's nanoseconds) so that
/// tasks failed together do not all come back together.
#[must_use]
pub fn backoff(attempt: u32, entropy: u64) -> Duration {
    const BASE_MS: u64 = 1000;
    const CAP_MS: u64 = 3_600_000;
    let exp = BASE_MS
        .saturating_mul(1u64 << attempt.saturating_sub(1).min(32))
        .min(CAP_MS);
    // A splitmix64 step spreads even nearby entropy values.
    let mut z = entropy.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let jitter = exp / 2;
    Duration::from_millis(exp - jitter / 2 + z % (jitter + 1))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRetry {
    Revived,
    NotFound,
    /// Only dead tasks can be revived.
    NotDead(TaskState),
}

#[derive(Debug, Clone, PartialEq)]
pub enum TaskFail {
    /// Back to pending, claimable at `available_at`.
    Retrying {
        available_at: SystemTime,
    },
    Dead,
    Lost(TaskLost),
}

#[derive(Debug, Clone, Default)]
pub struct TaskListParams {
    pub queue: Option<QueueName>,
    pub state: Option<TaskState>,
    pub limit: u32,
    /// A page by key ([`TaskPage`]; `None`: from the first task). Only
    /// with one `queue` and one `state` ([`TaskListParams::paged`]).
    pub page: Option<TaskPage>,
}

impl TaskListParams {
    /// The queue, state and page of a paged list (`None` when no page is
    /// asked for).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a
    /// page is asked for without one queue and one state: list order pages
    /// by key only within them.
    pub fn paged(&self) -> Result<Option<(&QueueName, TaskState, &TaskPage)>, crate::BackendError> {
        match (&self.page, &self.queue, self.state) {
            (None, _, _) => Ok(None),
            (Some(page), Some(queue), Some(state)) => Ok(Some((queue, state, page))),
            (Some(_), _, _) => Err(crate::BackendError::new(
                crate::ErrorKind::InvalidInput,
                String::new(),
                "a page of tasks by key needs one queue and one state",
            )
            .hint("name the queue and the state, or list from the first task without a page")),
        }
    }
}

/// Where a page of one queue's tasks of one state starts, by key rather
/// than by offset: the store seeks to the key in its index, so the
/// millionth task is listed as fast as the first. The tasks come in list
/// order (claim order) whichever way the page goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskPage {
    /// The tasks that come after this one.
    After(TaskKey),
    /// The tasks that come just before this one.
    Before(TaskKey),
    /// The last tasks.
    Last,
}

/// A task's place in list order: priority (higher first), then
/// available-at, then insertion order — which the store finds from the
/// id. The priority and time are the ones the page was drawn with, so a
/// task that moved since (a retry delayed it) does not move the page. If
/// the task is gone (purged), the tasks that tie with it on priority and
/// time are all listed: a page may repeat one, never skip one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskKey {
    pub priority: i64,
    /// Exactly as the store keeps it (SQLite: milliseconds; PostgreSQL:
    /// microseconds): a page link must carry it to the microsecond.
    pub available_at: SystemTime,
    pub id: TaskId,
}

impl TaskKey {
    /// Where `task` stands in list order.
    #[must_use]
    pub fn of(task: &Task) -> Self {
        Self {
            priority: task.priority,
            available_at: task.available_at,
            id: task.id.clone(),
        }
    }
}

/// Counts per state of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queue: QueueName,
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub dead: u64,
}

/// Each queue's counts from `(queue, state, count)` rows that come queue by
/// queue (as `GROUP BY queue, state ORDER BY queue` returns them).
#[must_use]
pub fn queue_stats(counts: impl IntoIterator<Item = (QueueName, TaskState, u64)>) -> Vec<QueueStats> {
    let mut out: Vec<QueueStats> = Vec::new();
    for (queue, state, n) in counts {
        if out.last().is_none_or(|s| s.queue != queue) {
            out.push(QueueStats {
                queue,
                pending: 0,
                running: 0,
                done: 0,
                dead: 0,
            });
        }
        let s = out.last_mut().expect("pushed above");
        match state {
            TaskState::Pending => s.pending = n,
            TaskState::Running => s.running = n,
            TaskState::Done => s.done = n,
            TaskState::Dead => s.dead = n,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_a_cap() {
        for attempt in 1..=40 {
            let exp = (1000u64 << (attempt - 1).min(32)).min(3_600_000);
            for entropy in 0..50 {
                let d = crate::duration_millis(backoff(attempt, entropy));
                assert!(d >= exp * 3 / 4 && d <= exp * 5 / 4, "attempt {attempt}: {d} vs {exp}");
            }
        }
        let spread: std::collections::HashSet<_> = (0..20).map(|e| backoff(3, e)).collect();
        assert!(spread.len() > 10, "jitter spreads retries");
    }

    fn params(id: &str, priority: i64) -> TaskAddParams {
        TaskAddParams {
            queue: LeaseName::new("q").unwrap(),
            id: LeaseName::new(id).unwrap(),
            payload: serde_json::json!(1),
            priority,
            available: Available::Now,
            max_attempts: 5,
        }
    }

    fn stored(p: &TaskAddParams) -> Task {
        Task {
            queue: p.queue.clone(),
            id: p.id.clone(),
            payload: p.payload.clone(),
            priority: p.priority,
            state: TaskState::Pending,
            attempts: 0,
            max_attempts: p.max_attempts,
            token: Token(0),
            owner: None,
            available_at: SystemTime::UNIX_EPOCH,
            lease_remaining: None,
            expirations: 0,
            failures: 0,
            last_error: None,
            result: None,
            created_at: SystemTime::UNIX_EPOCH,
            updated_at: SystemTime::UNIX_EPOCH,
            claim_ttl: None,
        }
    }

    #[test]
    fn a_batch_commits_unless_one_of_its_tasks_conflicts() {
        let (new, same, other) = (params("new", 0), params("same", 0), params("other", 0));
        let add = |tasks: &[TaskAddParams]| {
            add_each(tasks, |t| {
                Ok::<_, ()>(match t.id.as_str() {
                    "new" => None,
                    "same" => Some(stored(t)),
                    _ => Some(stored(&params("other", 9))),
                })
            })
            .unwrap()
        };
        assert_eq!(
            add(&[new.clone(), same.clone()]),
            (vec![TaskAdd::Added, TaskAdd::Exists], true)
        );
        let (outcomes, commit) = add(&[new, other, same]);
        assert!(!commit);
        assert!(matches!(&outcomes[1], TaskAdd::Conflict { differences, .. } if differences[0].field == "priority"));
        assert_eq!(outcomes[2], TaskAdd::Exists);
    }

    #[test]
    fn a_failed_task_retries_until_its_attempts_are_used_up() {
        let later = Duration::from_secs(7);
        assert_eq!(Retry::After(later).delay(1, 3, 0), Some(later));
        assert_eq!(Retry::After(later).delay(3, 3, 0), None);
        assert_eq!(Retry::Never.delay(1, 3, 0), None);
        assert_eq!(Retry::Backoff.delay(2, 3, 5), Some(backoff(2, 5)));
    }

    #[test]
    fn stats_count_each_queue_once() {
        let q = |n: &str| LeaseName::new(n).unwrap();
        let stats = queue_stats([
            (q("a"), TaskState::Pending, 2),
            (q("a"), TaskState::Dead, 1),
            (q("b"), TaskState::Done, 4),
        ]);
        assert_eq!(stats.len(), 2);
        assert_eq!((stats[0].pending, stats[0].dead, stats[0].done), (2, 1, 0));
        assert_eq!((stats[1].queue.as_str(), stats[1].done), ("b", 4));
    }
}

/// `Duration` option as whole milliseconds, in JSON.
mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option, reason = "serde's `with` passes a reference")]
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&crate::duration_millis(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
