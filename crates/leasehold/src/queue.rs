//! The task queue, as users call it: tasks whose claims are leases. The
//! rules (states, tokens, claim order) are in `leasehold_backend::task`;
//! this module adds the defaults — generated ids, owner labels, the
//! default backoff — and nothing that touches storage.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use leasehold_backend::{
    Available, BackendError, Claim, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskBackend,
    TaskClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskId, TaskIdParams,
    TaskListParams, TaskPurgeParams, TaskRef, TaskRetry, TaskState, TaskStatsParams, TaskUpdate, WaitTopic, host,
};

use crate::{ClaimKeeper, KeeperOptions, Result, Store, identity};

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
    /// The reason, in words, when the line is not one task: not JSON, an
    /// unknown field, an invalid id, or `max_attempts` 0.
    ///
    /// # Examples
    /// ```
    /// use leasehold::NewTask;
    /// let t = NewTask::parse_batch_line(r#"{"id": "a", "payload": 1}"#, &NewTask::new(serde_json::Value::Null)).unwrap();
    /// assert_eq!(t.id.unwrap().as_str(), "a");
    /// assert!(NewTask::parse_batch_line(r#"{"url": 1}"#, &NewTask::new(serde_json::Value::Null)).is_err());
    /// ```
    pub fn parse_batch_line(line: &str, defaults: &NewTask) -> std::result::Result<NewTask, String> {
        let parsed: BatchLine = serde_json::from_str(line).map_err(|e| format!("not a task ({e})"))?;
        let id = match parsed.id {
            Some(id) => Some(TaskId::new(id).map_err(|e| format!("bad id: {e}"))?),
            None => None,
        };
        if parsed.max_attempts == Some(0) {
            return Err("max_attempts must be at least 1".into());
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

/// A unique task id: time, pid, a counter and random bits.
fn generate_id() -> TaskId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut random = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random));
    let ms = crate::unix_ms::to_ms(SystemTime::now());
    let id = format!(
        "{ms:x}-{:x}-{:x}-{:016x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        u64::from_le_bytes(random)
    );
    TaskId::new(id).expect("a generated id is a valid name")
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
    /// without one (etcd).
    pub fn tasks(&self) -> Result<&dyn TaskBackend> {
        self.backend().tasks().ok_or_else(|| {
            BackendError::unsupported(
                self.url().redacted(),
                "the task queue",
                "use a sqlite:// or postgres:// store for tasks",
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

    /// Wait up to `timeout` for `queue` to get a claimable task: a store
    /// that announces changes (PostgreSQL's NOTIFY) wakes the caller
    /// early, others sleep the whole timeout. Then claim again.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails to wait.
    pub fn wait_for_tasks(&self, queue: &QueueName, timeout: Duration) -> Result<()> {
        Ok(self.backend().wait_for_change(&WaitTopic::queue(queue), timeout)?)
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
        })?)
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
