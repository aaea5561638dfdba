//! The task queue, as users call it: tasks whose claims are leases. The
//! rules (states, tokens, claim order) are in `leasehold_backend::task`;
//! this module adds the defaults — generated ids, owner labels, the
//! default backoff — and nothing that touches storage.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{
    Available, BackendError, Claim, ErrorKind, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskBackend,
    TaskClaimParams, TaskCompleteAndClaim, TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams,
    TaskHeartbeatParams, TaskId, TaskIdParams, TaskListParams, TaskPage, TaskPurgeParams, TaskRef, TaskRetry,
    TaskState, TaskStatsParams, TaskUpdate, WaitTopic,
};
use leasehold_host as host;

use crate::{Cancel, ClaimKeeper, KeeperOptions, Result, Store, identity};

/// Attempts a task gets unless told otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// A task to add.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The task's id; generated (unique) when `None`. Adding the same id
    /// again is a no-op when the payload is the same, an error otherwise.
    pub id: Option<TaskId>,
    pub payload: serde_json::Value,
    /// Higher first.
    pub priority: i64,
    /// When it becomes claimable: at once (the default), after a delay
    /// (both on the store's clock), or at a wall time; at most
    /// [`crate::limits::DELAY`] ahead.
    pub available: Available,
    pub max_attempts: u32,
}

impl NewTask {
    /// A task with this payload and the defaults.
    #[must_use]
    pub fn new(payload: serde_json::Value) -> Self {
        Self {
            id: None,
            payload,
            priority: 0,
            available: Available::Now,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

/// The refusal of an add whose ids exist as other tasks in `queue`
/// (nothing was added: [`Store::task_add`] is one transaction), naming
/// each and what differs — one wording for the language packages; `None`
/// when every task was added or was there already.
#[must_use]
pub fn add_refusal(queue: &QueueName, added: &[(TaskId, TaskAdd)]) -> Option<String> {
    let conflicts: Vec<String> = added
        .iter()
        .filter_map(|(id, outcome)| match outcome {
            TaskAdd::Conflict { differences, .. } => Some(format!("{id} ({})", crate::differences_text(differences))),
            TaskAdd::Added | TaskAdd::Exists => None,
        })
        .collect();
    (!conflicts.is_empty()).then(|| {
        format!(
            "task {} of queue {queue} exists as another task; nothing was added — use another id, or add it as it was",
            conflicts.join(", task ")
        )
    })
}

/// One line of `task add --batch` input (JSON; unknown fields refused).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchLine {
    id: Option<String>,
    #[serde(default)]
    payload: serde_json::Value,
    priority: Option<i64>,
    max_attempts: Option<u32>,
}

impl NewTask {
    /// Parse one line of batch input, `{"id": ..., "payload": ..., "priority":
    /// ..., "max_attempts": ...}` (every field optional); `defaults` gives
    /// what the line leaves out. Untrusted input: never panics.
    ///
    /// # Errors
    /// [`BatchLineError`], when the line is not one task: not JSON, an
    /// unknown field, an invalid id, or `max_attempts` 0.
    ///
    /// # Examples
    /// ```
    /// use leasehold::NewTask;
    /// let t = NewTask::parse_batch_line(r#"{"id": "a", "payload": 1}"#, &NewTask::new(serde_json::Value::Null)).unwrap();
    /// assert_eq!(t.id.unwrap().as_str(), "a");
    /// assert!(NewTask::parse_batch_line(r#"{"url": 1}"#, &NewTask::new(serde_json::Value::Null)).is_err());
    /// ```
    pub fn parse_batch_line(line: &str, defaults: &NewTask) -> std::result::Result<NewTask, BatchLineError> {
        let parsed: BatchLine = serde_json::from_str(line).map_err(BatchLineError::NotATask)?;
        let id = match parsed.id {
            Some(id) => Some(TaskId::new(id).map_err(BatchLineError::BadId)?),
            None => None,
        };
        if parsed.max_attempts == Some(0) {
            return Err(BatchLineError::NoAttempts);
        }
        Ok(NewTask {
            id,
            payload: parsed.payload,
            priority: parsed.priority.unwrap_or(defaults.priority),
            available: defaults.available,
            max_attempts: parsed.max_attempts.unwrap_or(defaults.max_attempts),
        })
    }
}

/// Why a line of batch input is not one task
/// ([`NewTask::parse_batch_line`]).
#[derive(Debug, thiserror::Error)]
pub enum BatchLineError {
    /// Not JSON, or not a task's fields (an unknown one, a wrong type).
    #[error("not a task ({0})")]
    NotATask(serde_json::Error),
    /// The id is not a valid task id.
    #[error("bad id: {0}")]
    BadId(leasehold_backend::NameError),
    /// `max_attempts` is 0.
    #[error("max_attempts must be at least 1")]
    NoAttempts,
}

/// One report waiting for its transaction, and where its outcome goes.
type Waiting = (
    TaskCompleteAndClaimParams,
    Arc<Mutex<Option<Result<TaskCompleteAndClaim>>>>,
);

/// Group commit of [`Store::task_complete_and_claim`]: a report queues,
/// then takes the leader's turn; the first to get it commits everything
/// queued by then in one transaction and hands each its outcome. While it
/// commits (a durable write: the slow part), the next reports queue, and
/// the next leader takes them all.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Vec<Waiting>>,
    leader: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl GroupCommit {
    fn commit(&self, tasks: &dyn TaskBackend, params: TaskCompleteAndClaimParams) -> Result<TaskCompleteAndClaim> {
        let mine = Arc::new(Mutex::new(None));
        lock(&self.queue).push((params, mine.clone()));
        let _turn = lock(&self.leader);
        if let Some(done) = lock(&mine).take() {
            // An earlier leader committed it.
            return done;
        }
        let (params, outcomes): (Vec<_>, Vec<_>) = std::mem::take(&mut *lock(&self.queue)).into_iter().unzip();
        match tasks.task_complete_and_claim(&params) {
            Ok(all) if all.len() == params.len() => {
                for (outcome, one) in outcomes.iter().zip(all) {
                    *lock(outcome) = Some(Ok(one));
                }
            }
            // One report: its own error. Several: each again on its own
            // (nothing was committed), so that each gets its own error.
            Err(e) if params.len() == 1 => *lock(&outcomes[0]) = Some(Err(e.into())),
            _ => {
                for (outcome, one) in outcomes.iter().zip(&params) {
                    let alone = tasks
                        .task_complete_and_claim(std::slice::from_ref(one))
                        .map_err(Into::into)
                        .and_then(|mut all| match (all.pop(), all.is_empty()) {
                            (Some(one), true) => Ok(one),
                            _ => Err(miscounted()),
                        });
                    *lock(outcome) = Some(alone);
                }
            }
        }
        lock(&mine).take().expect("this report was in the batch")
    }
}

/// A store that answered a report with no outcome, or several: a bug in
/// that store, reported as bad data rather than guessed around.
fn miscounted() -> crate::Error {
    BackendError::new(
        ErrorKind::Corrupt,
        "the task queue",
        "it did not return one outcome per report",
    )
    .hint("this is a bug in the store's task_complete_and_claim")
    .into()
}

/// A unique task id: time, pid, a counter and random bits.
///
/// The random bits are this process's random seed mixed with the counter
/// (splitmix64), not a read of `/dev/urandom` per id: a batch of a million
/// tasks without ids opened and read the device a million times (issue
/// 28). The pid is read per id, so that a forked child, which inherits the
/// seed and the counter, still makes ids of its own.
fn generate_id() -> TaskId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        let mut random = [0u8; 8];
        let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random));
        u64::from_le_bytes(random)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = crate::unix_ms::to_ms(SystemTime::now());
    let id = format!(
        "{ms:x}-{:x}-{n:x}-{:016x}",
        std::process::id(),
        splitmix64(seed.wrapping_add(n))
    );
    TaskId::new(id).expect("a generated id is a valid name")
}

/// One step of splitmix64: distinct inputs give distinct, well-mixed outputs.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn task_id(queue: &QueueName, id: &TaskId) -> TaskIdParams {
    TaskIdParams {
        queue: queue.clone(),
        id: id.clone(),
    }
}

impl Store {
    /// The store's task queue.
    ///
    /// # Errors
    /// [`crate::Error::Store`] (kind [`crate::ErrorKind::Unsupported`]) for a store
    /// without one ([`crate::StoreKind::queue`]).
    pub fn tasks(&self) -> Result<&dyn TaskBackend> {
        self.backend().tasks().ok_or_else(|| {
            BackendError::unsupported(
                self.url().redacted(),
                "the task queue",
                format!("use {} for tasks", crate::stores_with(|k| k.queue)),
            )
            .into()
        })
    }

    /// Add tasks to `queue` in one transaction; returns each task's id and
    /// outcome. If any id exists with another payload, nothing is added.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails or has no task queue,
    /// or a task's availability lies further ahead than
    /// [`crate::limits::DELAY`] (nothing is added).
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::{LeaseName, NewTask, Store};
    /// let store = Store::open_sqlite(&dir.path().join("l.db"))?;
    /// let queue = LeaseName::new("crawl").unwrap();
    /// store.task_add(&queue, vec![NewTask::new(serde_json::json!({"url": "https://example.org"}))])?;
    /// let claim = store.task_claim(&queue, std::time::Duration::from_secs(60), None)?.unwrap();
    /// store.task_complete(&claim.task_ref(), None)?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn task_add(&self, queue: &QueueName, tasks: Vec<NewTask>) -> Result<Vec<(TaskId, TaskAdd)>> {
        let params: Vec<TaskAddParams> = tasks
            .into_iter()
            .map(|t| TaskAddParams {
                queue: queue.clone(),
                id: t.id.unwrap_or_else(generate_id),
                payload: t.payload,
                priority: t.priority,
                available: t.available,
                max_attempts: t.max_attempts,
            })
            .collect();
        let outcomes = self.tasks()?.task_add(&params)?;
        Ok(params.into_iter().map(|p| p.id).zip(outcomes).collect())
    }

    /// Claim the next task of `queue` for `ttl`; `None` when nothing is
    /// claimable. The owner defaults to `host:pid`.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails, or `ttl` is out of
    /// [`crate::limits::TTL`] (nothing is claimed).
    pub fn task_claim(&self, queue: &QueueName, ttl: Duration, owner: Option<&str>) -> Result<Option<Claim>> {
        Ok(self.tasks()?.task_claim(&TaskClaimParams {
            queue: queue.clone(),
            owner: owner.map_or_else(identity::default_owner, str::to_owned),
            ttl,
        })?)
    }

    /// Claim the next task of `queue` and keep the claim: the boot clock
    /// is read just before the claim goes out, and a [`ClaimKeeper`]
    /// heartbeats it from that send time (claiming for `keep.ttl`). `None`
    /// when nothing is claimable. Reporting (done, fail, hand back) stays
    /// the caller's: stop the keeper first.
    ///
    /// # Errors
    /// As [`Store::task_claim`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{KeeperOptions, LeaseName, NewTask, Store};
    /// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
    /// let queue = LeaseName::new("crawl").unwrap();
    /// store.task_add(&queue, vec![NewTask::new(serde_json::json!(1))])?;
    /// let (claim, keeper) = store.claim_and_keep(&queue, None, KeeperOptions::new(Duration::from_secs(60)))?.unwrap();
    /// // ... work, checking keeper.handle().is_lost() ...
    /// keeper.stop();
    /// store.task_complete(&claim.task_ref(), None)?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn claim_and_keep(
        self: &Arc<Self>,
        queue: &QueueName,
        owner: Option<&str>,
        keep: KeeperOptions,
    ) -> Result<Option<(Claim, ClaimKeeper)>> {
        let sent = host::boot_clock();
        Ok(self.task_claim(queue, keep.ttl, owner)?.map(|claim| {
            let keeper = ClaimKeeper::start_claim(self.clone(), &claim, sent, keep);
            (claim, keeper)
        }))
    }

    /// Claim the next task of `queue` and keep the claim
    /// ([`Store::claim_and_keep`]), waiting up to `wait` (`None`: as long as
    /// it takes) for one to become claimable: woken by the store's
    /// announcement ([`Store::wait_for_tasks`]), else after an idle pause
    /// that doubles up to 2 s. `None` when nothing became claimable in
    /// time, or `cancel` was cancelled (the wait ends at once).
    ///
    /// # Errors
    /// As [`Store::claim_and_keep`], and when the store fails to wait.
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{Cancel, ClaimReport, KeeperOptions, LeaseName, NewTask, Store, report_kept};
    /// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
    /// let queue = LeaseName::new("crawl").unwrap();
    /// store.task_add(&queue, vec![NewTask::new(serde_json::json!(1))])?;
    /// let keep = KeeperOptions::new(Duration::from_secs(60));
    /// let wait = Some(Duration::from_secs(5));
    /// let (claim, keeper) = store.claim_wait_and_keep(&queue, None, &keep, wait, &Cancel::new())?.unwrap();
    /// assert_eq!(report_kept(&store, &claim.task_ref(), keeper, ClaimReport::Done(None))?, Ok("done"));
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn claim_wait_and_keep(
        self: &Arc<Self>,
        queue: &QueueName,
        owner: Option<&str>,
        keep: &KeeperOptions,
        wait: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<Option<(Claim, ClaimKeeper)>> {
        const IDLE_MAX: Duration = Duration::from_secs(2);
        let deadline = wait.map(|wait| Instant::now() + wait);
        let mut idle = Duration::from_millis(100);
        // One for the whole wait: it keeps what the store has shown it.
        let topic = Arc::new(WaitTopic::queue(queue));
        cancel.interrupts(&topic);
        loop {
            if let Some(kept) = self.claim_and_keep(queue, owner, keep.clone())? {
                return Ok(Some(kept));
            }
            let now = Instant::now();
            if cancel.is_cancelled() || deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let until = deadline.map_or(now + idle, |d| d.min(now + idle));
            self.wait_for_tasks(&topic, until - now)?;
            idle = (idle * 2).min(IDLE_MAX);
        }
    }

    /// Wait up to `timeout` for the queue of `topic` ([`WaitTopic::queue`])
    /// to change: a store that announces changes (PostgreSQL's NOTIFY,
    /// SQLite's commits in this host's processes) wakes the caller early,
    /// others sleep the whole timeout. Then claim again.
    ///
    /// Keep one topic for a waiter's whole loop: it is where the store
    /// remembers what this waiter has seen. A new topic counts every
    /// change before it as new — an idle worker that made one per wait
    /// woke at once every time (SQLite: after a 50 ms look, polling each
    /// millisecond — a third of a core for three idle threads).
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails to wait.
    pub fn wait_for_tasks(&self, topic: &WaitTopic, timeout: Duration) -> Result<()> {
        Ok(self.backend().wait_for_change(topic, timeout)?)
    }

    /// Extend a live claim to now + `ttl`.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails, or `ttl` is out of
    /// [`crate::limits::TTL`]; a stale token is `Ok(Lost)`.
    pub fn task_heartbeat(&self, task: &TaskRef, ttl: Duration) -> Result<TaskUpdate> {
        Ok(self.tasks()?.task_heartbeat(&TaskHeartbeatParams {
            task: task.clone(),
            ttl,
        })?)
    }

    /// Mark the task done (only with the current token of a live claim).
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails; a stale token is `Ok(Lost)`.
    pub fn task_complete(&self, task: &TaskRef, result: Option<&serde_json::Value>) -> Result<TaskUpdate> {
        Ok(self.tasks()?.task_complete(&TaskCompleteParams {
            task: task.clone(),
            result: result.cloned(),
        })?)
    }

    /// Mark the task done and claim the next task of its queue for `ttl`,
    /// in one transaction where the store allows it (SQLite and
    /// PostgreSQL): what a worker does between two tasks, for one durable
    /// write instead of two. The claim is made whatever the completion's
    /// outcome (a refused report does not stop a worker). The owner
    /// defaults to `host:pid`.
    ///
    /// Threads sharing this store that report at the same time are
    /// committed together (group commit): while one transaction commits,
    /// the reports that arrive wait, and the next transaction takes them
    /// all — one durable write for several tasks, and no wait added when
    /// one thread reports alone.
    ///
    /// A crash right after it loses nothing: the claimed task is running
    /// under a claim nobody heartbeats, and comes back by expiry with that
    /// attempt counted.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails (then neither happened,
    /// in one transaction), or `ttl` is out of [`crate::limits::TTL`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::time::Duration;
    /// use leasehold::{LeaseName, NewTask, Store, TaskUpdate};
    /// let store = Store::open_sqlite(&dir.path().join("l.db"))?;
    /// let queue = LeaseName::new("crawl").unwrap();
    /// store.task_add(&queue, vec![NewTask::new(serde_json::json!(1)), NewTask::new(serde_json::json!(2))])?;
    /// let first = store.task_claim(&queue, Duration::from_secs(60), None)?.unwrap();
    /// let both = store.task_complete_and_claim(&first.task_ref(), None, Duration::from_secs(60), None)?;
    /// assert_eq!(both.completed, TaskUpdate::Applied);
    /// assert_eq!(both.claim.unwrap().payload, serde_json::json!(2));
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn task_complete_and_claim(
        &self,
        task: &TaskRef,
        result: Option<&serde_json::Value>,
        ttl: Duration,
        owner: Option<&str>,
    ) -> Result<TaskCompleteAndClaim> {
        let params = TaskCompleteAndClaimParams {
            complete: TaskCompleteParams {
                task: task.clone(),
                result: result.cloned(),
            },
            claim: TaskClaimParams {
                queue: task.queue.clone(),
                owner: owner.map_or_else(identity::default_owner, str::to_owned),
                ttl,
            },
        };
        self.reports.commit(self.tasks()?, params)
    }

    /// [`Store::task_complete_and_claim`], keeping the new claim as
    /// [`Store::claim_and_keep`] does (the boot clock read just before the
    /// call goes out, a [`ClaimKeeper`] heartbeating from then).
    ///
    /// # Errors
    /// As [`Store::task_complete_and_claim`].
    pub fn complete_and_claim_and_keep(
        self: &Arc<Self>,
        task: &TaskRef,
        result: Option<&serde_json::Value>,
        owner: Option<&str>,
        keep: KeeperOptions,
    ) -> Result<(TaskUpdate, Option<(Claim, ClaimKeeper)>)> {
        let sent = host::boot_clock();
        let both = self.task_complete_and_claim(task, result, keep.ttl, owner)?;
        Ok((
            both.completed,
            both.claim.map(|claim| {
                let keeper = ClaimKeeper::start_claim(self.clone(), &claim, sent, keep);
                (claim, keeper)
            }),
        ))
    }

    /// Record a failed attempt; `Retry::Backoff` is the default policy.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails, or a `Retry::After`
    /// delay is out of [`crate::limits::DELAY`]; a stale token is `Ok(Lost)`.
    pub fn task_fail(&self, task: &TaskRef, error: &str, retry: Retry) -> Result<TaskFail> {
        Ok(self.tasks()?.task_fail(&TaskFailParams {
            task: task.clone(),
            error: error.to_owned(),
            retry,
        })?)
    }

    /// Hand a claim back without charging its attempt.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails; a stale token is `Ok(Lost)`.
    pub fn task_release(&self, task: &TaskRef) -> Result<TaskUpdate> {
        Ok(self.tasks()?.task_release(task)?)
    }

    /// Revive a dead task.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_retry(&self, queue: &QueueName, id: &TaskId) -> Result<TaskRetry> {
        Ok(self.tasks()?.task_retry(&task_id(queue, id))?)
    }

    /// One task, or `None`.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_get(&self, queue: &QueueName, id: &TaskId) -> Result<Option<Task>> {
        Ok(self.tasks()?.task_get(&task_id(queue, id))?)
    }

    /// Tasks of a queue (or all queues), optionally of one state.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_list(&self, queue: Option<&QueueName>, state: Option<TaskState>, limit: u32) -> Result<Vec<Task>> {
        Ok(self.tasks()?.task_list(&TaskListParams {
            queue: queue.cloned(),
            state,
            limit,
            page: None,
        })?)
    }

    /// A page of `queue`'s tasks in `state`, in list order, by key:
    /// from the first (`page` `None`), after or before a task of an
    /// earlier page, or the last. The store seeks to the key, so a page
    /// deep in a long queue costs what the first does (a page by offset
    /// would read every task before it).
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_page(
        &self,
        queue: &QueueName,
        state: TaskState,
        page: Option<TaskPage>,
        limit: u32,
    ) -> Result<Vec<Task>> {
        Ok(self.tasks()?.task_list(&TaskListParams {
            queue: Some(queue.clone()),
            state: Some(state),
            limit,
            page,
        })?)
    }

    /// As [`Store::task_list`], and whether more tasks exist beyond the
    /// `limit` listed (one more is asked for): a list cut at its limit
    /// must say so, or it reads as the whole queue.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_list_page(
        &self,
        queue: Option<&QueueName>,
        state: Option<TaskState>,
        limit: u32,
    ) -> Result<(Vec<Task>, bool)> {
        let mut tasks = self.task_list(queue, state, limit.saturating_add(1))?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let more = tasks.len() > limit;
        tasks.truncate(limit);
        Ok((tasks, more))
    }

    /// Counts per state, per queue.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn task_stats(&self, queue: Option<&QueueName>) -> Result<Vec<QueueStats>> {
        Ok(self.tasks()?.task_stats(&TaskStatsParams { queue: queue.cloned() })?)
    }

    /// Delete finished tasks of `state` older than `older_than`.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails, or `older_than` is out
    /// of [`crate::limits::AGE`].
    pub fn task_purge(&self, queue: &QueueName, state: TaskState, older_than: Duration) -> Result<u64> {
        Ok(self.tasks()?.task_purge(&TaskPurgeParams {
            queue: queue.clone(),
            state,
            older_than,
        })?)
    }
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::{Duration, Instant};

    use leasehold_backend::{
        Backend as _, QueueStats, Task, TaskAdd, TaskAddParams, TaskClaimParams, TaskCompleteAndClaim,
        TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskIdParams, TaskListParams, TaskLost,
        TaskPurgeParams, TaskRef, TaskRetry, TaskStatsParams, TaskUpdate,
    };
    use leasehold_sqlite::{SqliteBackend, SqliteOptions};

    use super::*;
    use crate::{LeaseName, Token};

    /// A real SQLite store's queue, watched: each `task_complete_and_claim`
    /// records its batch size; the first waits until the others have queued
    /// behind it; batches of more than one fail (before reaching the store)
    /// when `fail_batches`. Everything else is the store's.
    struct Reports<'a> {
        store: &'a dyn TaskBackend,
        group: &'a GroupCommit,
        others: usize,
        batches: Mutex<Vec<usize>>,
        fail_batches: bool,
    }

    impl TaskBackend for Reports<'_> {
        fn task_complete_and_claim(
            &self,
            params: &[TaskCompleteAndClaimParams],
        ) -> std::result::Result<Vec<TaskCompleteAndClaim>, BackendError> {
            let first = {
                let mut batches = lock(&self.batches);
                batches.push(params.len());
                batches.len() == 1
            };
            if first {
                let begun = Instant::now();
                while lock(&self.group.queue).len() < self.others && begun.elapsed() < Duration::from_secs(20) {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            if self.fail_batches && params.len() > 1 {
                return Err(BackendError::new(ErrorKind::Unavailable, "test", "a batch"));
            }
            self.store.task_complete_and_claim(params)
        }

        fn task_add(&self, p: &[TaskAddParams]) -> std::result::Result<Vec<TaskAdd>, BackendError> {
            self.store.task_add(p)
        }
        fn task_claim(&self, p: &TaskClaimParams) -> std::result::Result<Option<Claim>, BackendError> {
            self.store.task_claim(p)
        }
        fn task_heartbeat(&self, p: &TaskHeartbeatParams) -> std::result::Result<TaskUpdate, BackendError> {
            self.store.task_heartbeat(p)
        }
        fn task_complete(&self, p: &TaskCompleteParams) -> std::result::Result<TaskUpdate, BackendError> {
            self.store.task_complete(p)
        }
        fn task_fail(&self, p: &TaskFailParams) -> std::result::Result<TaskFail, BackendError> {
            self.store.task_fail(p)
        }
        fn task_release(&self, t: &TaskRef) -> std::result::Result<TaskUpdate, BackendError> {
            self.store.task_release(t)
        }
        fn task_retry(&self, p: &TaskIdParams) -> std::result::Result<TaskRetry, BackendError> {
            self.store.task_retry(p)
        }
        fn task_get(&self, p: &TaskIdParams) -> std::result::Result<Option<Task>, BackendError> {
            self.store.task_get(p)
        }
        fn task_list(&self, p: &TaskListParams) -> std::result::Result<Vec<Task>, BackendError> {
            self.store.task_list(p)
        }
        fn task_stats(&self, p: &TaskStatsParams) -> std::result::Result<Vec<QueueStats>, BackendError> {
            self.store.task_stats(p)
        }
        fn task_purge(&self, p: &TaskPurgeParams) -> std::result::Result<u64, BackendError> {
            self.store.task_purge(p)
        }
    }

    fn queue() -> QueueName {
        LeaseName::new("q").unwrap()
    }

    fn claim_params() -> TaskClaimParams {
        TaskClaimParams {
            queue: queue(),
            owner: "w".into(),
            ttl: Duration::from_secs(60),
        }
    }

    /// Tasks `a`, `b`, `c` and `d` added to `store` and claimed (token 1
    /// each).
    fn claimed(store: &dyn TaskBackend) {
        let add: Vec<_> = ["a", "b", "c", "d"]
            .into_iter()
            .map(|id| TaskAddParams {
                queue: queue(),
                id: LeaseName::new(id).unwrap(),
                payload: serde_json::Value::Null,
                priority: 0,
                available: Available::Now,
                max_attempts: crate::DEFAULT_MAX_ATTEMPTS,
            })
            .collect();
        store.task_add(&add).unwrap();
        for _ in 0..4 {
            let claim = store.task_claim(&claim_params()).unwrap().expect("a pending task");
            assert_eq!(claim.token, Token(1));
        }
    }

    /// Completing task `id` with `token`, and claiming the next.
    fn report(id: &str, token: u64) -> TaskCompleteAndClaimParams {
        TaskCompleteAndClaimParams {
            complete: TaskCompleteParams {
                task: TaskRef {
                    queue: queue(),
                    id: LeaseName::new(id).unwrap(),
                    token: Token(token),
                },
                result: None,
            },
            claim: claim_params(),
        }
    }

    /// Four threads reporting at once: the first commits alone, the three
    /// that queued meanwhile go together in the next transaction, and each
    /// gets its own outcome (`b`'s token is stale: refused, the others
    /// done). When the batch fails, each is reported again alone.
    #[test]
    fn reports_that_arrive_during_a_commit_go_in_the_next_one_together() {
        for fail_batches in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let sqlite = SqliteBackend::open(&dir.path().join("q.db"), SqliteOptions::default()).unwrap();
            let store = sqlite.tasks().expect("SQLite has a task queue");
            claimed(store);
            let group = GroupCommit::default();
            let tasks = Reports {
                store,
                group: &group,
                others: 3,
                batches: Mutex::new(Vec::new()),
                fail_batches,
            };
            let outcomes: Vec<(&str, TaskUpdate)> = thread::scope(|s| {
                let first = s.spawn(|| ("a", group.commit(&tasks, report("a", 1)).unwrap().completed));
                while lock(&tasks.batches).is_empty() {
                    thread::yield_now();
                }
                let rest: Vec<_> = [("b", 0), ("c", 1), ("d", 1)]
                    .into_iter()
                    .map(|(id, token)| {
                        let (group, tasks) = (&group, &tasks);
                        s.spawn(move || (id, group.commit(tasks, report(id, token)).unwrap().completed))
                    })
                    .collect();
                std::iter::once(first).chain(rest).map(|h| h.join().unwrap()).collect()
            });
            for (id, completed) in outcomes {
                let expected = if id == "b" {
                    TaskUpdate::Lost(TaskLost::Stale)
                } else {
                    TaskUpdate::Applied
                };
                assert_eq!(completed, expected, "report of {id}");
            }
            let batches = tasks.batches.into_inner().unwrap();
            if fail_batches {
                assert_eq!(batches, [1, 3, 1, 1, 1], "the failed batch, then each alone");
            } else {
                assert_eq!(batches, [1, 3]);
            }
        }
    }

    /// A claim's wait ends at once when cancelled (with nothing claimed),
    /// ends empty after its limit, and claims a task added while it waits.
    #[test]
    fn a_claim_wait_ends_at_its_cancel_or_limit_and_takes_what_comes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_sqlite(&dir.path().join("q.db")).unwrap());
        let queue = LeaseName::new("q").unwrap();
        let keep = KeeperOptions::new(Duration::from_secs(60));
        let wait = |limit, cancel: &Cancel| store.claim_wait_and_keep(&queue, None, &keep, limit, cancel).unwrap();

        let cancel = Cancel::new();
        let begun = Instant::now();
        thread::scope(|s| {
            let theirs = cancel.clone();
            s.spawn(move || {
                thread::sleep(Duration::from_millis(200));
                theirs.cancel();
            });
            assert!(wait(None, &cancel).is_none());
        });
        assert!(begun.elapsed() < Duration::from_secs(5), "{:?}", begun.elapsed());
        assert!(wait(Some(Duration::from_millis(300)), &Cancel::new()).is_none());

        let (claim, keeper) = thread::scope(|s| {
            s.spawn(|| {
                thread::sleep(Duration::from_millis(200));
                store
                    .task_add(&queue, vec![NewTask::new(serde_json::json!("late"))])
                    .unwrap();
            });
            wait(Some(Duration::from_secs(30)), &Cancel::new()).expect("claimed what was added")
        });
        assert_eq!(claim.payload, serde_json::json!("late"));
        assert!(keeper.stop().is_none());
    }

    /// Generated ids are unique, and their random parts are not one
    /// value repeated (they are mixed from the counter since issue 28).
    #[test]
    fn generated_ids_are_unique_and_their_random_parts_differ() {
        let ids: Vec<TaskId> = (0..10_000).map(|_| generate_id()).collect();
        let unique: std::collections::HashSet<&str> = ids.iter().map(TaskId::as_str).collect();
        assert_eq!(unique.len(), ids.len());
        let random: std::collections::HashSet<&str> =
            ids.iter().map(|id| id.as_str().rsplit('-').next().unwrap()).collect();
        assert_eq!(random.len(), ids.len(), "{:?}", &ids[..3]);
        assert!(
            ids.iter()
                .all(|id| id.as_str().split('-').nth(3).is_some_and(|r| r.len() == 16))
        );
    }
}
