//! A worker: claim tasks from a queue and run a job for each — a command
//! under supervision ([`crate::supervise`]) or a Rust closure — while a
//! [`ClaimKeeper`] heartbeats the claim, then report. What `leasehold work`
//! stands on, usable from any program.
//!
//! # Model
//!
//! [`WorkerOptions::concurrency`] threads share one [`Store`] and loop:
//!
//! ```text
//!   claim ──► nothing claimable ──► stop (Until::Empty / Until::Drained and drained)
//!     │                        └──► wait for the queue (NOTIFY or a poll), claim again
//!     ▼
//!   keep the claim (ClaimKeeper) ─► run the job ─► report: done | fail | hand back
//! ```
//!
//! Each step is an event ([`WorkEvent`]): claimed, started, finished with
//! an [`Outcome`], or the store unavailable; the caller's `on_event` sees
//! them in order per task (a progress bar, a log line).
//!
//! | the job… | the task |
//! |---|---|
//! | succeeds (a command exits 0, a handler returns `Ok`) | `done`, with the result (a command's stdout: JSON if it parses, else a string; cut at [`CommandJob::result_limit`]) |
//! | fails (non-zero exit, cannot start, stalls; a handler's `Err` or panic) | `fail`, with the error (a command's exit code and the tail of its stderr); retried with backoff until its attempts are used up |
//! | loses its claim (renewal refused, or the store down until the holder-side deadline) | nothing is reported: a command is stopped (SIGTERM, SIGKILL after the grace period) before the claim can pass on, a handler is told ([`TaskContext::should_stop`]); the task comes back by expiry ([`LostWhen`], [`ClaimLost`]) |
//! | is running at shutdown ([`WorkerHandle::shutdown`]) | may finish within [`WorkerOptions::shutdown_timeout`]; then a command is stopped and its claim handed back without charging an attempt (a handler is told, and handed back if it then fails) |
//!
//! # Failure handling
//!
//! - The store unavailable while claiming: [`WorkEvent::StoreUnavailable`],
//!   then the worker tries again with backoff (up to 30 s). Any other store
//!   error while claiming or reporting ends the run with a [`WorkerError`].
//! - A report refused by the store (the claim expired or was taken
//!   meanwhile): [`Outcome::Lost`] with [`LostWhen::Reporting`].
//! - A guard that cannot be started ends the run with a [`WorkerError`].
//!
//! Signal handling is opt-in: [`WorkerHandle::shutdown_on_signals`]
//! installs process-wide handlers; nothing else in this module does.

use std::ffi::OsString;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

mod outcome;

pub use outcome::{LostWhen, Outcome, TaskFailure};

use crate::supervise::{self, Ending, Finished, GuardProgram, GuardSlot, Output, Spec, Stop, StopHandle, Timing};
use crate::{
    Claim, ClaimKeeper, ClaimLost, Error, Loss, LossHandle, QueueName, Retry, Store, TaskFail, TaskId, TaskLost,
    TaskRef, TaskUpdate, Token, host,
};

/// The tail of a failed command's stderr kept as the task's error.
pub const STDERR_TAIL: usize = 2048;

/// When a worker stops claiming (besides a shutdown and `max_tasks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Never: wait for new tasks.
    Stopped,
    /// As soon as nothing is claimable now — even while a failed task
    /// waits for its retry, or another worker's task runs.
    Empty,
    /// Once the queue has no pending task (delayed ones and retries
    /// included) and no running one. Dead tasks do not count.
    Drained,
}

/// How to work a queue.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub queue: QueueName,
    /// The claims' TTL, heartbeat and grace ([`Timing::new`]).
    pub timing: Timing,
    /// The claims' owner label (default `host:pid`).
    pub owner: Option<String>,
    /// How many tasks run at once (threads sharing one store).
    pub concurrency: usize,
    pub until: Until,
    /// Claim at most this many tasks.
    pub max_tasks: Option<u64>,
    /// After [`WorkerHandle::shutdown`], how long running tasks may finish
    /// before they are stopped.
    pub shutdown_timeout: Duration,
}

impl WorkerOptions {
    /// One at a time, until stopped, with a 10 s shutdown timeout.
    #[must_use]
    pub fn new(queue: QueueName, timing: Timing) -> Self {
        Self {
            queue,
            timing,
            owner: None,
            concurrency: 1,
            until: Until::Stopped,
            max_tasks: None,
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

/// A command run for each task: the payload (JSON, one line) on its stdin,
/// `LEASEHOLD_QUEUE`, `LEASEHOLD_TASK_ID`, `LEASEHOLD_TASK_TOKEN`,
/// `LEASEHOLD_TASK_ATTEMPT` and `LEASEHOLD_STORE` in its environment.
#[derive(Debug, Clone)]
pub struct CommandJob {
    pub command: Vec<OsString>,
    pub guard: GuardProgram,
    /// Largest result kept from its stdout; more is kept as a string, cut.
    pub result_limit: usize,
}

/// What a handler returns: the task's result (done), or its error (fail;
/// the task records the error and its causes, as [`TaskFailure::Handler`]
/// words them). A string is an error too: `Err("it broke".into())`.
pub type HandlerResult = std::result::Result<Option<serde_json::Value>, Box<dyn std::error::Error + Send + Sync>>;

/// A closure run for each task, on a worker thread.
pub type Handler = Arc<dyn Fn(&Claim, &TaskContext) -> HandlerResult + Send + Sync>;

/// What to run for each task.
#[derive(Clone)]
pub enum Job {
    Command(CommandJob),
    /// A handler cannot be stopped from outside: it should return soon
    /// after [`TaskContext::should_stop`] turns true.
    Handler(Handler),
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Command(c) => f.debug_tuple("Command").field(c).finish(),
            Job::Handler(_) => f.write_str("Handler(..)"),
        }
    }
}

/// What a handler can ask about its task while it runs.
#[derive(Debug, Clone)]
pub struct TaskContext {
    loss: LossHandle<ClaimLost>,
    stop: Arc<AtomicBool>,
}

impl TaskContext {
    /// The claim's loss, if it is lost: a result reported now would be
    /// refused.
    #[must_use]
    pub fn loss(&self) -> Option<Loss<ClaimLost>> {
        self.loss.loss()
    }

    /// Whether to stop now: the claim is lost, or the worker is shutting
    /// down and the shutdown timeout has passed.
    #[must_use]
    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.loss.is_lost()
    }
}

/// A claimed task, as events name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub queue: QueueName,
    pub id: TaskId,
    pub token: Token,
    pub attempt: u32,
    pub max_attempts: u32,
}

impl From<&Claim> for TaskInfo {
    fn from(claim: &Claim) -> Self {
        Self {
            queue: claim.queue.clone(),
            id: claim.id.clone(),
            token: claim.token,
            attempt: claim.attempt,
            max_attempts: claim.max_attempts,
        }
    }
}

/// One step of a worker.
#[derive(Debug, Clone)]
pub enum WorkEvent {
    Claimed(TaskInfo),
    /// The job started (a command: handed to its guard).
    Started(TaskInfo),
    Finished {
        task: TaskInfo,
        outcome: Outcome,
        took: Duration,
    },
    /// Claiming failed because the store is unavailable; the worker tries
    /// again after `retry_in`.
    StoreUnavailable {
        error: Arc<Error>,
        retry_in: Duration,
    },
}

/// Tasks by outcome so far, and how many run now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub done: u64,
    pub failed: u64,
    pub dead: u64,
    pub lost: u64,
    pub handed_back: u64,
    pub running: usize,
}

/// A store error that ended a worker, with what it was doing.
#[derive(Debug, thiserror::Error)]
#[error("{}{error}", context.as_ref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct WorkerError {
    pub context: Option<String>,
    pub error: Error,
}

impl WorkerError {
    fn new(context: impl Into<String>, error: impl Into<Error>) -> Self {
        Self {
            context: Some(context.into()),
            error: error.into(),
        }
    }
}

impl From<Error> for WorkerError {
    fn from(error: Error) -> Self {
        Self { context: None, error }
    }
}

/// Something running that a shutdown stops.
#[derive(Debug)]
enum Running {
    Command(StopHandle<ClaimLost>),
    Handler(Arc<AtomicBool>),
}

#[derive(Debug, Default)]
struct Counters {
    done: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
    lost: AtomicU64,
    handed_back: AtomicU64,
    claimed: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    /// Set at shutdown (or when done): stop claiming.
    stopping: AtomicBool,
    shutdown_started: AtomicBool,
    shutdown_timeout: Duration,
    max_tasks: Option<u64>,
    counters: Counters,
    running: Mutex<Vec<(u64, Running)>>,
    next_run: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn count(&self, outcome: &Outcome) {
        let c = &self.counters;
        let counter = match outcome {
            Outcome::Done { .. } => &c.done,
            Outcome::Failed { .. } => &c.failed,
            Outcome::Dead { .. } => &c.dead,
            Outcome::Lost(_) => &c.lost,
            Outcome::HandedBack => &c.handed_back,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    fn counts(&self) -> Counts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        Counts {
            done: get(&c.done),
            failed: get(&c.failed),
            dead: get(&c.dead),
            lost: get(&c.lost),
            handed_back: get(&c.handed_back),
            running: lock(&self.running).len(),
        }
    }

    fn take_slot(&self) -> bool {
        match self.max_tasks {
            None => true,
            Some(max) => self.counters.claimed.fetch_add(1, Ordering::SeqCst) < max,
        }
    }

    fn give_slot_back(&self) {
        if self.max_tasks.is_some() {
            self.counters.claimed.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn register(&self, running: Running) -> u64 {
        let id = self.next_run.fetch_add(1, Ordering::SeqCst);
        lock(&self.running).push((id, running));
        id
    }

    fn unregister(&self, id: u64) {
        lock(&self.running).retain(|(r, _)| *r != id);
    }

    /// Stop claiming; true the first time.
    fn begin_shutdown(&self) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        !self.shutdown_started.swap(true, Ordering::SeqCst)
    }

    /// Give running tasks the shutdown timeout, then stop them.
    fn finish_shutdown(&self) {
        let deadline = Instant::now() + self.shutdown_timeout;
        while Instant::now() < deadline {
            if lock(&self.running).is_empty() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        for (_, running) in lock(&self.running).iter() {
            match running {
                Running::Command(handle) => {
                    let _ = handle.stop(Stop::Shutdown);
                }
                Running::Handler(stop) => stop.store(true, Ordering::SeqCst),
            }
        }
    }
}

/// Shuts a worker down, or reads its counts, from any thread.
#[derive(Debug, Clone)]
pub struct WorkerHandle(Arc<Shared>);

impl WorkerHandle {
    /// Stop claiming; running tasks get the shutdown timeout, then are
    /// stopped and their claims handed back. Returns at once.
    pub fn shutdown(&self) {
        if self.0.begin_shutdown() {
            let shared = self.0.clone();
            thread::spawn(move || shared.finish_shutdown());
        }
    }

    /// Opt in: the first SIGINT, SIGTERM or SIGHUP sent to this process
    /// shuts the worker down (process-wide handlers, removed once the
    /// running tasks are stopped: a second signal then has its default
    /// effect).
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn shutdown_on_signals(&self) -> Result<(), supervise::SuperviseError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|error| {
            supervise::SuperviseError::Io {
                what: "cannot install the signal handlers",
                error,
            }
        })?;
        let shared = self.0.clone();
        thread::spawn(move || {
            if signals.forever().next().is_none() {
                return;
            }
            if shared.begin_shutdown() {
                shared.finish_shutdown();
            }
        });
        Ok(())
    }

    /// Tasks by outcome so far, and how many run now.
    #[must_use]
    pub fn counts(&self) -> Counts {
        self.0.counts()
    }
}

/// Works a queue; see the module docs.
///
/// # Examples
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold::supervise::Timing;
/// use leasehold::worker::{Job, Until, Worker, WorkerOptions};
/// use leasehold::{LeaseName, NewTask, Store};
///
/// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
/// let queue = LeaseName::new("resize").unwrap();
/// store.task_add(&queue, vec![NewTask::new(serde_json::json!({"w": 640}))])?;
/// let mut options = WorkerOptions::new(queue, Timing::new(Duration::from_secs(30), None, None).unwrap());
/// options.until = Until::Empty;
/// let job = Job::Handler(Arc::new(|claim, _ctx| Ok(Some(claim.payload["w"].clone()))));
/// let counts = Worker::new(store, options, job).run(|event| println!("{event:?}")).unwrap();
/// assert_eq!(counts.done, 1);
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug)]
pub struct Worker {
    store: Arc<Store>,
    options: WorkerOptions,
    job: Job,
    shared: Arc<Shared>,
}

impl Worker {
    #[must_use]
    pub fn new(store: Arc<Store>, options: WorkerOptions, job: Job) -> Self {
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            shutdown_started: AtomicBool::new(false),
            shutdown_timeout: options.shutdown_timeout,
            max_tasks: options.max_tasks,
            counters: Counters::default(),
            running: Mutex::new(Vec::new()),
            next_run: AtomicU64::new(0),
        });
        Self {
            store,
            options,
            job,
            shared,
        }
    }

    /// A handle to shut the worker down or read its counts.
    #[must_use]
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle(self.shared.clone())
    }

    /// Work until the options say to stop (or a shutdown); `on_event` is
    /// called on the worker threads for every [`WorkEvent`]. Returns the
    /// final counts.
    ///
    /// # Errors
    /// [`WorkerError`]: a store error other than unavailability, or a
    /// guard that cannot be started. The other threads finish their tasks
    /// first.
    pub fn run(self, on_event: impl Fn(&WorkEvent) + Send + Sync) -> Result<Counts, WorkerError> {
        // Every event is logged (and counted) here, then the caller's.
        let on_event = &move |event: &WorkEvent| {
            match event {
                WorkEvent::Claimed(task) => crate::telemetry::task_claimed(task),
                WorkEvent::Finished { task, outcome, took } => crate::telemetry::task_finished(task, outcome, *took),
                WorkEvent::StoreUnavailable { error, retry_in } => {
                    crate::telemetry::store_unavailable(error, *retry_in);
                }
                WorkEvent::Started(_) => {}
            }
            on_event(event);
        };
        let this = &self;
        let results: Vec<_> = thread::scope(|scope| {
            let workers: Vec<_> = (0..self.options.concurrency.max(1))
                .map(|i| {
                    thread::Builder::new()
                        .name(format!("worker-{i}"))
                        .spawn_scoped(scope, move || this.work(on_event))
                        .expect("spawn a worker thread")
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join().unwrap_or_else(|panic| {
                        Err(WorkerError::from(Error::Panicked {
                            what: "worker",
                            message: panic_message(&*panic),
                        }))
                    })
                })
                .collect()
        });
        results.into_iter().find(Result::is_err).transpose()?;
        Ok(self.shared.counts())
    }

    /// One worker thread's loop. A command job keeps one guard for the
    /// thread's whole run ([`GuardSlot`]); a task done with a claim to
    /// follow is reported together with the next claim
    /// ([`Store::complete_and_claim_and_keep`]).
    fn work(&self, on_event: &(impl Fn(&WorkEvent) + Send + Sync)) -> Result<(), WorkerError> {
        let (store, queue, shared) = (&self.store, &self.options.queue, &self.shared);
        let mut slot: Option<GuardSlot<ClaimLost>> = None;
        let mut next = Next::Claim;
        let mut idle = Duration::from_millis(100);
        let topic = leasehold_backend::WaitTopic::queue(queue);
        loop {
            let stopping = shared.stopping.load(Ordering::SeqCst);
            let claimed = match std::mem::replace(&mut next, Next::Claim) {
                Next::Claimed(claim, keeper) if stopping => {
                    // Claimed with the last report, as the shutdown began:
                    // handed back unstarted.
                    let task = TaskInfo::from(&claim);
                    on_event(&WorkEvent::Claimed(task.clone()));
                    let report = Report::new(store, &claim, &keeper, self.options.timing.ttl());
                    keeper.stop();
                    let outcome = report.hand_back()?;
                    shared.count(&outcome);
                    on_event(&WorkEvent::Finished {
                        task,
                        outcome,
                        took: Duration::ZERO,
                    });
                    break;
                }
                Next::Claim if stopping => break,
                Next::Claimed(claim, keeper) => Some((claim, keeper)),
                Next::Empty => None,
                Next::Claim => {
                    if !shared.take_slot() {
                        break;
                    }
                    let claimed =
                        store.claim_and_keep(queue, self.options.owner.as_deref(), self.options.timing.keeper.clone());
                    match claimed {
                        Ok(claimed) => {
                            if claimed.is_none() {
                                shared.give_slot_back();
                            }
                            claimed
                        }
                        Err(e) => {
                            if !e.kind().is_store_unusable() {
                                return Err(WorkerError::new(format!("cannot claim from queue {queue}"), e));
                            }
                            // The store may come back: say so, and try again later.
                            on_event(&WorkEvent::StoreUnavailable {
                                error: Arc::new(e),
                                retry_in: idle,
                            });
                            shared.counters.claimed.fetch_sub(1, Ordering::SeqCst);
                            thread::sleep(idle);
                            idle = (idle * 2).min(Duration::from_secs(30));
                            continue;
                        }
                    }
                }
            };
            let Some((claim, keeper)) = claimed else {
                match self.options.until {
                    Until::Empty => break,
                    Until::Drained if drained(store, queue)? => break,
                    _ => {}
                }
                // Idle: wake on the store's announcement that the queue got
                // a claimable task (PostgreSQL's NOTIFY), or poll after `idle`.
                if store.wait_for_tasks(&topic, idle).is_err() {
                    thread::sleep(idle);
                }
                idle = (idle * 2).min(Duration::from_secs(2));
                continue;
            };
            idle = Duration::from_millis(100);
            let started = Instant::now();
            let task = TaskInfo::from(&claim);
            on_event(&WorkEvent::Claimed(task.clone()));
            let outcome = match &self.job {
                Job::Command(job) => self.run_command(
                    job,
                    &mut slot,
                    &claim,
                    keeper,
                    || on_event(&WorkEvent::Started(task.clone())),
                    &mut next,
                )?,
                Job::Handler(handler) => {
                    on_event(&WorkEvent::Started(task.clone()));
                    self.run_handler(handler, &claim, keeper, &mut next)?
                }
            };
            shared.count(&outcome);
            on_event(&WorkEvent::Finished {
                task,
                outcome,
                took: started.elapsed(),
            });
        }
        Ok(())
    }

    /// Whether to claim the next task with this report: not shutting down,
    /// and under `max_tasks` (a slot taken here is given back when nothing
    /// is claimed).
    fn wants_next(&self) -> bool {
        !self.shared.stopping.load(Ordering::SeqCst) && self.shared.take_slot()
    }

    fn run_command(
        &self,
        job: &CommandJob,
        slot: &mut Option<GuardSlot<ClaimLost>>,
        claim: &Claim,
        keeper: ClaimKeeper,
        on_started: impl FnOnce(),
        next: &mut Next,
    ) -> Result<Outcome, WorkerError> {
        let store = &self.store;
        let mut payload = serde_json::to_vec(&claim.payload).expect("a JSON value always serializes");
        payload.push(b'\n');
        if !slot.as_ref().is_some_and(GuardSlot::is_alive) {
            // No guard yet, or it died (it was killed): a new one.
            *slot = Some(
                GuardSlot::spawn(Spec {
                    command: job.command.clone(),
                    guard: job.guard.clone(),
                    grace: self.options.timing.grace,
                    stdin: None,
                    output: Output::Collect {
                        stdout_limit: job.result_limit,
                        stderr_tail: STDERR_TAIL,
                    },
                    stall: None,
                })
                .map_err(Error::from)?,
            );
        }
        let mut supervised = slot
            .as_mut()
            .expect("a guard, from above")
            .next(Some(payload))
            .map_err(Error::from)?;
        // A claim answered after its window closed may be anyone's by now.
        if let Some(loss) = keeper.check() {
            supervised.abort();
            keeper.stop();
            return Ok(Outcome::Lost(LostWhen::Starting(loss)));
        }
        supervised.follow(&keeper);
        let run_id = self.shared.register(Running::Command(supervised.stop_handle()));
        let started = supervised.start_with(&crate::supervise::CommandEnv::of_claim(store, claim));
        let finished = match started {
            Ok(()) => {
                on_started();
                supervised.wait()
            }
            Err(e) => {
                supervised.abort();
                Finished {
                    spawn_error: Some((126, e.to_string())),
                    ..Finished::default()
                }
            }
        };
        self.shared.unregister(run_id);
        let report = Report::new(store, claim, &keeper, self.options.timing.ttl());
        let loss = keeper.stop();
        let ending = finished.ending();
        if !matches!(ending, Ending::Stopped(_))
            && let Some(loss) = loss
        {
            // Lost just as the command finished: its report would be refused.
            return Ok(Outcome::Lost(LostWhen::Finishing(loss)));
        }
        match ending {
            Ending::Stopped(Stop::Lost(loss)) => Ok(Outcome::Lost(LostWhen::Running(loss.clone()))),
            Ending::Stopped(Stop::Shutdown) => report.hand_back(),
            Ending::Stopped(Stop::Stalled(limit)) => report.fail(TaskFailure::Stalled(*limit)),
            Ending::CouldNotStart { code, message } => report.fail(TaskFailure::CouldNotStart {
                code,
                message: message.to_owned(),
            }),
            Ending::Exited(0) => self.report_done(
                &report,
                result_of(&finished).as_ref(),
                finished.stdout_overflow.then_some(job.result_limit),
                next,
            ),
            Ending::Exited(code) => report.fail(TaskFailure::Exited {
                code,
                stderr_tail: String::from_utf8_lossy(&finished.stderr_tail).trim().to_owned(),
            }),
            Ending::GuardDied => report.fail(TaskFailure::GuardDied),
        }
    }

    fn run_handler(
        &self,
        handler: &Handler,
        claim: &Claim,
        keeper: ClaimKeeper,
        next: &mut Next,
    ) -> Result<Outcome, WorkerError> {
        let store = &self.store;
        if let Some(loss) = keeper.check() {
            keeper.stop();
            return Ok(Outcome::Lost(LostWhen::Starting(loss)));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = TaskContext {
            loss: keeper.handle(),
            stop: stop.clone(),
        };
        let run_id = self.shared.register(Running::Handler(stop.clone()));
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| handler(claim, &ctx)));
        self.shared.unregister(run_id);
        let report = Report::new(store, claim, &keeper, self.options.timing.ttl());
        if let Some(loss) = keeper.stop() {
            return Ok(Outcome::Lost(LostWhen::Running(loss)));
        }
        match result {
            Ok(Ok(value)) => self.report_done(&report, value.as_ref(), None, next),
            Ok(Err(_)) if stop.load(Ordering::SeqCst) => report.hand_back(),
            Ok(Err(error)) => report.fail(TaskFailure::handler(&*error)),
            Err(panic) => report.fail(TaskFailure::Panicked(panic_message(&*panic))),
        }
    }
}

impl Worker {
    /// Report a task done — with the next claim in the same call when
    /// [`Worker::wants_next`]; that claim goes to `next` (or
    /// [`Next::Empty`] when there was nothing to claim).
    fn report_done(
        &self,
        report: &Report<'_>,
        result: Option<&serde_json::Value>,
        result_cut: Option<usize>,
        next: &mut Next,
    ) -> Result<Outcome, WorkerError> {
        if !self.wants_next() {
            return report.done(result, result_cut);
        }
        let both = self.store.complete_and_claim_and_keep(
            &report.task,
            result,
            self.options.owner.as_deref(),
            self.options.timing.keeper.clone(),
        );
        let (completed, claimed) = match both {
            Ok(both) => both,
            Err(e) => {
                self.shared.give_slot_back();
                return Err(WorkerError::new("cannot report the task done", e));
            }
        };
        *next = if let Some((claim, keeper)) = claimed {
            Next::Claimed(claim, keeper)
        } else {
            self.shared.give_slot_back();
            Next::Empty
        };
        Ok(report.done_outcome(completed, result_cut))
    }
}

/// What a worker thread does next: claim, run what was claimed with the
/// last report, or — that claim found nothing — act on an empty queue.
enum Next {
    Claim,
    Claimed(Claim, ClaimKeeper),
    Empty,
}

/// A command's stdout as the task's result: none when blank, JSON when it
/// parses, else a string (cut at the limit: `stdout_overflow`).
fn result_of(finished: &Finished<ClaimLost>) -> Option<serde_json::Value> {
    let stdout = &finished.stdout;
    let as_text = || serde_json::Value::String(String::from_utf8_lossy(stdout).into_owned());
    if stdout.iter().all(u8::is_ascii_whitespace) {
        None
    } else if finished.stdout_overflow {
        Some(as_text())
    } else {
        Some(serde_json::from_slice(stdout).unwrap_or_else(|_| as_text()))
    }
}

/// Whether the queue has nothing left to work on: no pending task (a
/// retry waiting for its backoff is pending) and none running.
fn drained(store: &Store, queue: &QueueName) -> Result<bool, WorkerError> {
    let stats = store.task_stats(Some(queue))?;
    Ok(stats.first().is_none_or(|s| s.pending + s.running == 0))
}

/// Reports one task's end with its claim's token. A refusal says whether
/// the claim could have expired by then (`expiry`: the last successful
/// heartbeat's send time + TTL, on the boot clock) or was taken.
struct Report<'a> {
    store: &'a Store,
    task: TaskRef,
    expiry: Duration,
}

impl<'a> Report<'a> {
    fn new(store: &'a Store, claim: &Claim, keeper: &ClaimKeeper, ttl: Duration) -> Self {
        Self {
            store,
            task: claim.task_ref(),
            expiry: keeper.last_renewed().saturating_add(ttl),
        }
    }

    fn refused(&self, lost: TaskLost) -> ClaimLost {
        ClaimLost::new(lost, host::boot_clock() >= self.expiry)
    }

    fn hand_back(&self) -> Result<Outcome, WorkerError> {
        Ok(match self.store.task_release(&self.task)? {
            TaskUpdate::Applied => Outcome::HandedBack,
            TaskUpdate::Lost(lost) => Outcome::Lost(LostWhen::HandingBack(self.refused(lost))),
        })
    }

    fn done(&self, result: Option<&serde_json::Value>, result_cut: Option<usize>) -> Result<Outcome, WorkerError> {
        let completed = self
            .store
            .task_complete(&self.task, result)
            .map_err(|e| WorkerError::new("cannot report the task done", e))?;
        Ok(self.done_outcome(completed, result_cut))
    }

    fn done_outcome(&self, completed: TaskUpdate, result_cut: Option<usize>) -> Outcome {
        match completed {
            TaskUpdate::Applied => Outcome::Done { result_cut },
            TaskUpdate::Lost(lost) => Outcome::Lost(LostWhen::Reporting(self.refused(lost))),
        }
    }

    fn fail(&self, error: TaskFailure) -> Result<Outcome, WorkerError> {
        Ok(
            match self
                .store
                .task_fail(&self.task, &error.to_string(), Retry::Backoff)
                .map_err(|e| WorkerError::new("cannot report the task failed", e))?
            {
                TaskFail::Retrying { available_at } => Outcome::Failed {
                    error,
                    retry_at: available_at,
                },
                TaskFail::Dead => Outcome::Dead { error },
                TaskFail::Lost(lost) => Outcome::Lost(LostWhen::Reporting(self.refused(lost))),
            },
        )
    }
}

/// What a panic said (its `&str` or `String` payload; empty otherwise).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LeaseName, NewTask, TaskState};

    fn setup(n: usize) -> (tempfile::TempDir, Arc<Store>, QueueName) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db")).unwrap());
        let queue = LeaseName::new("q").unwrap();
        let tasks = (0..n).map(|i| NewTask::new(serde_json::json!(i))).collect();
        store.task_add(&queue, tasks).unwrap();
        (dir, store, queue)
    }

    fn options(queue: &QueueName, ttl: Duration) -> WorkerOptions {
        let mut o = WorkerOptions::new(queue.clone(), Timing::new(ttl, None, None).unwrap());
        o.until = Until::Empty;
        o
    }

    #[test]
    fn a_handler_is_done_on_ok_and_fails_on_err_or_panic() {
        let (_dir, store, queue) = setup(3);
        let job = Job::Handler(Arc::new(|claim: &Claim, _: &TaskContext| {
            match claim.payload.as_u64() {
                Some(0) => Ok(Some(serde_json::json!("zero"))),
                Some(1) => Err("one is odd".into()),
                _ => panic!("two"),
            }
        }));
        let outcomes = Mutex::new(Vec::new());
        let counts = Worker::new(store.clone(), options(&queue, Duration::from_secs(30)), job)
            .run(|e| {
                if let WorkEvent::Finished { outcome, .. } = e {
                    outcomes.lock().unwrap().push(outcome.clone());
                }
            })
            .unwrap();
        assert_eq!((counts.done, counts.failed), (1, 2));
        let outcomes = outcomes.into_inner().unwrap();
        assert!(matches!(&outcomes[1], Outcome::Failed { error, .. } if error.to_string() == "one is odd"));
        assert!(
            matches!(&outcomes[2], Outcome::Failed { error, .. } if error.to_string() == "the handler panicked: two")
        );
        let tasks = store.task_list(Some(&queue), Some(TaskState::Done), 10).unwrap();
        assert_eq!(tasks[0].result, Some(serde_json::json!("zero")));
    }

    /// A claim ended under the handler (here by the handler itself) is
    /// lost at the next heartbeat, as taken; the handler is told.
    #[test]
    fn a_claim_taken_while_the_handler_runs_is_lost_as_taken() {
        let (_dir, store, queue) = setup(1);
        let reporter = store.clone();
        let job = Job::Handler(Arc::new(move |claim: &Claim, ctx: &TaskContext| {
            reporter.task_complete(&claim.task_ref(), None).unwrap();
            let t = Instant::now();
            while !ctx.should_stop() && t.elapsed() < Duration::from_secs(10) {
                thread::sleep(Duration::from_millis(10));
            }
            Ok(None)
        }));
        let outcomes = Mutex::new(Vec::new());
        let counts = Worker::new(store, options(&queue, Duration::from_secs(1)), job)
            .run(|e| {
                if let WorkEvent::Finished { outcome, .. } = e {
                    outcomes.lock().unwrap().push(outcome.clone());
                }
            })
            .unwrap();
        assert_eq!(counts.lost, 1);
        assert_eq!(
            outcomes.into_inner().unwrap(),
            [Outcome::Lost(LostWhen::Running(Loss::Refused(ClaimLost::Taken)))]
        );
    }
}
