//! `lh.Queue` (and `lh.TaskIter`): the library's task queue; a claim is an
//! `lh.Task` ([`crate::task`]). A claim is a lease
//! on the task, kept by a [`ClaimKeeper`] (heartbeats on its own threads,
//! without the GIL); `with task:` reports `done` when the block succeeds,
//! `fail` with the traceback when it raises, and hands the claim back
//! (no attempt charged) on `KeyboardInterrupt`/`SystemExit`. A report the
//! store refuses — the claim expired or was taken meanwhile — raises
//! `LeaseLost`: the result was not recorded, so a task is never done twice.
//! A claim is reported once: a second report (`done` twice, `fail` after
//! `done`, `done` after `release`, `release` after `with task:`) raises
//! `InvalidInput` at once, saying how it was already reported; nothing is
//! recorded. The claim's state lock is held for a few instructions only,
//! never across a store call, and taken from Python threads without the
//! GIL while waiting for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use leasehold::{Available, Claim, ClaimKeeper, NewTask, QueueName, TaskRetry, TaskState};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use crate::convert::{self, Wait};
use crate::errors::{self, OrRaise as _, Other};
use crate::hold::{HoldOptions, notify};
use crate::store::Store;
use crate::task::{Hold, Task};

/// The longest an idle claimer sleeps between two claims, as the
/// library's worker does; waits are cut in slices of [`SLICE`] so that ^C
/// gets through.
const IDLE_MAX: Duration = Duration::from_secs(2);
const SLICE: Duration = Duration::from_millis(100);

/// `max_attempts=5` in the signatures of `add` and `add_many` is the
/// library's default, written out so that `help()` shows it.
const _: () = assert!(leasehold::DEFAULT_MAX_ATTEMPTS == 5);

/// A task queue of a store (``store.queue(name)``): ``add``/``add_many``
/// tasks, ``claim`` them (a claim is a lease on the task, heartbeated),
/// ``list``, ``get``, ``retry``, ``purge`` and ``stats``.
#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct Queue {
    store: Py<Store>,
    name: QueueName,
}

impl Queue {
    pub fn new(store: Py<Store>, name: QueueName) -> Self {
        Self { store, name }
    }

    /// Claim the next task, waiting as `wait` says; `None` when nothing
    /// became claimable in time.
    fn claim_next(&self, py: Python<'_>, hold: &HoldOptions, wait: Wait) -> PyResult<Option<Task>> {
        let store = self.store.get().handle(py)?;
        let deadline = match wait {
            Wait::Upto(d) => Some(Instant::now() + d),
            _ => None,
        };
        let mut idle = SLICE;
        // One for the whole wait: it keeps what the store has shown it.
        let topic = Arc::new(leasehold::WaitTopic::queue(&self.name));
        loop {
            let claimed = {
                let (store, queue, keep) = (store.clone(), self.name.clone(), hold.keep.clone());
                let owner = hold.owner.clone();
                crate::exiting::detach(py, move || store.claim_and_keep(&queue, owner.as_deref(), keep)).or_raise()?
            };
            if let Some((claim, keeper)) = claimed {
                let what = leasehold::described_claim(&claim);
                notify(py, &keeper, what, hold.on_lost.as_ref());
                let on_lost = hold.on_lost.as_ref().map(|f| f.clone_ref(py));
                return Task::new(py, claim, Hold { store, keeper }, on_lost).map(Some);
            }
            let until = match (wait, deadline) {
                (Wait::No, _) => return Ok(None),
                (_, Some(deadline)) if Instant::now() >= deadline => return Ok(None),
                (_, deadline) => deadline.map_or(Instant::now() + idle, |d| d.min(Instant::now() + idle)),
            };
            // Wake on the store's announcement (PostgreSQL's NOTIFY) or
            // after `idle`, looking at signals every slice.
            while Instant::now() < until {
                let (store, topic) = (store.clone(), topic.clone());
                let slice = until.saturating_duration_since(Instant::now()).min(SLICE);
                crate::exiting::detach(py, move || store.wait_for_tasks(&topic, slice)).or_raise()?;
                py.check_signals()?;
            }
            idle = (idle * 2).min(IDLE_MAX);
        }
    }
}

/// What an async claim got: a claim and its keeper (and the store), or
/// nothing claimable in time.
type Claimed = leasehold::Result<Option<(Claim, ClaimKeeper, Arc<leasehold::Store>)>>;

/// `NothingToClaim`, worded once for `claim` and `aclaim`.
fn nothing_to_claim(queue: &QueueName) -> PyErr {
    errors::other(Other::NothingToClaim, format!("nothing to claim in queue {queue}"))
}

/// A claim got for nobody (its awaiter was cancelled, or the interpreter
/// exits): handed back, no attempt charged.
fn hand_back(claimed: Claimed) {
    if let Ok(Some((claim, keeper, store))) = claimed {
        let _ = leasehold::report_kept(&store, &claim.task_ref(), keeper, leasehold::ClaimReport::HandBack);
    }
}

/// `claim_next`'s wait without Python, for `aclaim`: the library's
/// ([`leasehold::Store::claim_wait_and_keep`]), `left` as long as it takes
/// when `None`, once when `Some(ZERO)` — ended by `cancel`, which the
/// interpreter's exit cancels too.
fn claim_waiting(
    store: &Arc<leasehold::Store>,
    queue: &QueueName,
    keep: &leasehold::KeeperOptions,
    owner: Option<&str>,
    left: Option<Duration>,
    cancel: &leasehold::Cancel,
) -> Claimed {
    let _watched = crate::exiting::watch(cancel);
    let claimed = store.claim_wait_and_keep(queue, owner, keep, left, cancel)?;
    Ok(claimed.map(|(claim, keeper)| (claim, keeper, store.clone())))
}

#[pymethods]
impl Queue {
    #[getter]
    fn name(&self) -> String {
        self.name.to_string()
    }

    /// Add a task with ``payload`` (any JSON value); returns its id.
    ///
    /// ``id``: the task's id (generated when None); the same id again is a
    /// no-op with the same payload, and refused (``InvalidInput``) with
    /// another. ``priority``: higher is claimed first. ``delay`` (a
    /// duration) or ``at`` (a ``datetime``): when it becomes claimable, not
    /// both. ``max_attempts``: claims before it is dead.
    #[pyo3(signature = (payload, *, id=None, priority=0, delay=None, at=None, max_attempts=5))]
    fn add(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        id: Option<&str>,
        priority: i64,
        delay: Option<&Bound<'_, PyAny>>,
        at: Option<&Bound<'_, PyAny>>,
        max_attempts: u32,
    ) -> PyResult<String> {
        let task = NewTask {
            id: id.map(convert::task_id).transpose()?,
            payload: convert::to_json(payload)?,
            priority,
            available: available(delay, at)?,
            max_attempts: attempts(max_attempts)?,
        };
        let mut ids = self.add_tasks(py, vec![task])?;
        Ok(ids.pop().expect("one task in, one id out"))
    }

    /// Add many tasks in one transaction (one durable write, not one per
    /// task); returns their ids, in order.
    ///
    /// ``payloads``: an iterable of JSON values, one task each. ``ids``: an
    /// iterable of as many ids (generated when None). ``priority``,
    /// ``delay``, ``at`` and ``max_attempts`` apply to every task, as in
    /// ``add``. If any id exists as another task, nothing is added
    /// (``InvalidInput`` names them).
    #[pyo3(signature = (payloads, *, ids=None, priority=0, delay=None, at=None, max_attempts=5))]
    fn add_many(
        &self,
        py: Python<'_>,
        payloads: &Bound<'_, PyAny>,
        ids: Option<&Bound<'_, PyAny>>,
        priority: i64,
        delay: Option<&Bound<'_, PyAny>>,
        at: Option<&Bound<'_, PyAny>>,
        max_attempts: u32,
    ) -> PyResult<Vec<String>> {
        let (available, max_attempts) = (available(delay, at)?, attempts(max_attempts)?);
        not_one_value(payloads, "payloads", "for one task, use add()")?;
        let payloads = payloads
            .try_iter()?
            .map(|p| convert::to_json(&p?))
            .collect::<PyResult<Vec<_>>>()?;
        let ids: Vec<Option<leasehold::TaskId>> = match ids.filter(|i| !i.is_none()) {
            None => vec![None; payloads.len()],
            Some(ids) => not_one_value(ids, "ids", "give one id per payload")?
                .try_iter()?
                .map(|id| convert::task_id(&id?.extract::<String>()?).map(Some))
                .collect::<PyResult<_>>()?,
        };
        if ids.len() != payloads.len() {
            return Err(errors::invalid(format!(
                "add_many got {} payloads and {} ids: give one id per payload (or none); nothing was added",
                payloads.len(),
                ids.len()
            )));
        }
        let tasks = payloads
            .into_iter()
            .zip(ids)
            .map(|(payload, id)| NewTask {
                id,
                payload,
                priority,
                available,
                max_attempts,
            })
            .collect();
        self.add_tasks(py, tasks)
    }

    /// Claim the next task, highest priority first; raises
    /// ``NothingToClaim`` when there is none (within ``wait``).
    ///
    /// ``ttl``: how long the claim lasts without a heartbeat (default 60 s);
    /// its keeper renews it every ``heartbeat`` (default ttl/3) and stops
    /// trusting it ``margin`` (default ttl/10) before it could lapse.
    /// ``wait``: as for ``Store.lease``. ``owner``: the claim's label
    /// (default ``host:pid``). ``on_lost``: a callable, or ``"interrupt"``,
    /// as for ``Store.lease``.
    #[pyo3(signature = (*, ttl=None, wait=None, owner=None, heartbeat=None, margin=None, on_lost=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn claim(
        &self,
        py: Python<'_>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Task> {
        let hold = HoldOptions::from_py(ttl, owner, heartbeat, margin, on_lost)?;
        self.claim_next(py, &hold, convert::wait(wait)?)?
            .ok_or_else(|| nothing_to_claim(&self.name))
    }

    /// The async ``claim``: awaited (``task = await q.aclaim(...)``), or
    /// entered (``async with q.aclaim(...) as task:``, which reports as
    /// ``with task:`` does), it claims without blocking the event loop — a
    /// wait stands in this process's line for the queue and waits there as
    /// ``claim`` does (woken by PostgreSQL's NOTIFY, else polling) — and
    /// returns the ``Task``. ``ttl``, ``wait``, ``owner``, ``heartbeat``,
    /// ``margin`` and ``on_lost``: as for ``claim()``; nothing claimable in
    /// time raises ``NothingToClaim``. Cancelling the awaiting task ends
    /// the wait; a claim it got meanwhile is handed back at once.
    #[pyo3(signature = (*, ttl=None, wait=None, owner=None, heartbeat=None, margin=None, on_lost=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn aclaim<'py>(
        slf: &Bound<'py, Self>,
        ttl: Option<&Bound<'py, PyAny>>,
        wait: Option<&Bound<'py, PyAny>>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'py, PyAny>>,
        margin: Option<&Bound<'py, PyAny>>,
        on_lost: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let hold = HoldOptions::from_py(ttl, owner, heartbeat, margin, on_lost)?;
        let wait = convert::wait(wait)?;
        let queue = slf.clone().unbind();
        crate::aio::pending(slf.py(), move |py| {
            let this = queue.get();
            let store = this.store.get().handle(py)?;
            let name = this.name.clone();
            let finish = {
                let name = name.clone();
                move |py: Python<'_>, claimed: Option<Claimed>, awaited: bool| {
                    let claimed = match claimed {
                        None => return Ok(py.None()),
                        Some(claimed) if !awaited => {
                            hand_back(claimed);
                            return Ok(py.None());
                        }
                        Some(claimed) => claimed.or_raise()?,
                    };
                    let Some((claim, keeper, store)) = claimed else {
                        return Err(nothing_to_claim(&name));
                    };
                    let what = leasehold::described_claim(&claim);
                    notify(py, &keeper, what, hold.on_lost.as_ref());
                    let on_lost = hold.on_lost.as_ref().map(|f| f.clone_ref(py));
                    let task = Task::new(py, claim, Hold { store, keeper }, on_lost)?;
                    Ok(Py::new(py, task)?.into_any())
                }
            };
            let (keep, owner) = (hold.keep.clone(), hold.owner.clone());
            let Some(timeout) = wait.timeout() else {
                let cancel = leasehold::Cancel::new();
                return crate::aio::call(
                    py,
                    move || claim_waiting(&store, &name, &keep, owner.as_deref(), Some(Duration::ZERO), &cancel),
                    move |py, claimed, awaited| finish(py, Some(claimed), awaited),
                    hand_back,
                );
            };
            let cancel = leasehold::Cancel::new();
            let theirs = cancel.clone();
            let line = crate::aio::Line::of(&store, "queue", name.as_str());
            crate::aio::wait(
                py,
                line,
                timeout,
                move |left| claim_waiting(&store, &name, &keep, owner.as_deref(), left, &theirs),
                |claimed| !matches!(claimed, Ok(None)),
                move || cancel.cancel(),
                finish,
                hand_back,
            )
        })
    }

    /// An iterator that claims task after task: it waits for new ones (woken
    /// by PostgreSQL's NOTIFY), or stops as soon as nothing is claimable with
    /// ``until_empty=True``, or after ``max_tasks`` claims. ``ttl``,
    /// ``owner``, ``heartbeat``, ``margin`` and ``on_lost``: as for
    /// ``claim()``.
    #[pyo3(signature = (*, ttl=None, until_empty=false, max_tasks=None, owner=None, heartbeat=None, margin=None, on_lost=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn claim_iter(
        slf: &Bound<'_, Self>,
        ttl: Option<&Bound<'_, PyAny>>,
        until_empty: bool,
        max_tasks: Option<u64>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<TaskIter> {
        Ok(TaskIter {
            queue: slf.clone().unbind(),
            hold: HoldOptions::from_py(ttl, owner, heartbeat, margin, on_lost)?,
            wait: if until_empty { Wait::No } else { Wait::Forever },
            max_tasks,
            claimed: AtomicU64::new(0),
        })
    }

    /// Tasks of this queue as dicts (the documents of ``task show``:
    /// docs/JSON.md, with times as ``datetime`` and durations as
    /// ``timedelta``), in the store's order; ``state``: only ``"pending"``,
    /// ``"running"``, ``"done"`` or ``"dead"`` ones; ``limit``: at most this
    /// many.
    #[pyo3(signature = (*, state=None, limit=100))]
    fn list<'py>(&self, py: Python<'py>, state: Option<&str>, limit: u32) -> PyResult<Bound<'py, PyList>> {
        let state = state.map(task_state).transpose()?;
        let store = self.store.get().handle(py)?;
        let queue = self.name.clone();
        let tasks = crate::exiting::detach(py, move || store.task_list(Some(&queue), state, limit)).or_raise()?;
        convert::documents(py, &tasks.iter().map(leasehold::json::task).collect::<Vec<_>>())
    }

    /// Delete this queue's finished tasks — ``state`` ``"done"`` or
    /// ``"dead"`` — last updated longer than ``older_than`` (a duration)
    /// ago; returns how many.
    #[pyo3(signature = (state, *, older_than))]
    fn purge(&self, py: Python<'_>, state: &str, older_than: &Bound<'_, PyAny>) -> PyResult<u64> {
        let state = task_state(state)?;
        if !matches!(state, TaskState::Done | TaskState::Dead) {
            return Err(errors::invalid(format!(
                "purge deletes finished tasks only: state must be \"done\" or \"dead\", not {:?}",
                state.as_str()
            )));
        }
        let older_than = convert::duration(older_than, "older_than")?;
        let store = self.store.get().handle(py)?;
        let queue = self.name.clone();
        crate::exiting::detach(py, move || store.task_purge(&queue, state, older_than)).or_raise()
    }

    /// Counts by state: pending, running, done, dead.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.get().handle(py)?;
        let queue = self.name.clone();
        let stats = crate::exiting::detach(py, move || store.task_stats(Some(&queue))).or_raise()?;
        let (pending, running, done, dead) = stats
            .first()
            .map_or((0, 0, 0, 0), |s| (s.pending, s.running, s.done, s.dead));
        convert::from_json(
            py,
            &serde_json::json!({"pending": pending, "running": running, "done": done, "dead": dead}),
        )
    }

    /// The task ``id`` as a dict (as ``list()`` gives each), or None.
    fn get<'py>(&self, py: Python<'py>, id: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let id = convert::task_id(id)?;
        let store = self.store.get().handle(py)?;
        let queue = self.name.clone();
        let task = crate::exiting::detach(py, move || store.task_get(&queue, &id)).or_raise()?;
        task.map(|t| convert::document(py, &leasehold::json::task(&t)))
            .transpose()
    }

    /// Revive the dead task ``id``. Raises ``NoSuchTask``, or
    /// ``InvalidInput`` when it is not dead.
    fn retry(&self, py: Python<'_>, id: &str) -> PyResult<()> {
        let id = convert::task_id(id)?;
        let store = self.store.get().handle(py)?;
        let (queue, task) = (self.name.clone(), id.clone());
        match crate::exiting::detach(py, move || store.task_retry(&queue, &task)).or_raise()? {
            TaskRetry::Revived => Ok(()),
            TaskRetry::NotFound => Err(errors::other(
                Other::NoSuchTask,
                format!("no task {id} in queue {}", self.name),
            )),
            TaskRetry::NotDead(state) => Err(errors::invalid(format!(
                "task {id} of queue {} is {state:?}, not dead; only dead tasks can be retried",
                self.name
            ))),
        }
    }

    fn __repr__(&self) -> String {
        format!("<lh.Queue {:?}>", self.name.as_str())
    }
}

impl Queue {
    /// Add `tasks` in one transaction; their ids.
    fn add_tasks(&self, py: Python<'_>, tasks: Vec<NewTask>) -> PyResult<Vec<String>> {
        let store = self.store.get().handle(py)?;
        let queue = self.name.clone();
        let added = crate::exiting::detach(py, move || store.task_add(&queue, tasks)).or_raise()?;
        if let Some(refusal) = leasehold::add_refusal(&self.name, &added) {
            return Err(errors::invalid(refusal));
        }
        Ok(added.into_iter().map(|(id, _)| id.to_string()).collect())
    }
}

/// When a task becomes claimable: `delay=` (a duration) or `at=` (a
/// `datetime`), not both; at once by default.
fn available(delay: Option<&Bound<'_, PyAny>>, at: Option<&Bound<'_, PyAny>>) -> PyResult<Available> {
    Ok(
        match (convert::opt_duration(delay, "delay")?, at.filter(|a| !a.is_none())) {
            (Some(_), Some(_)) => return Err(errors::invalid("give delay= or at=, not both")),
            (Some(delay), None) => Available::After(delay),
            (None, Some(at)) => {
                let seconds: f64 = at.call_method0("timestamp")?.extract()?;
                Available::At(
                    SystemTime::UNIX_EPOCH
                        .checked_add(
                            Duration::try_from_secs_f64(seconds).map_err(|e| errors::invalid(format!("at: {e}")))?,
                        )
                        .ok_or_else(|| errors::invalid("at: too far ahead"))?,
                )
            }
            (None, None) => Available::Now,
        },
    )
}

/// A collection argument given one value that Python would iterate
/// piece by piece (a str's characters, a dict's keys): refused.
fn not_one_value<'a, 'py>(value: &'a Bound<'py, PyAny>, what: &str, hint: &str) -> PyResult<&'a Bound<'py, PyAny>> {
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<pyo3::types::PyBytes>()
        || value.is_instance_of::<pyo3::types::PyDict>()
    {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be a list (or another iterable) of them, not a single {}: {hint}",
            value.get_type().name()?
        )));
    }
    Ok(value)
}

fn attempts(max_attempts: u32) -> PyResult<u32> {
    if max_attempts == 0 {
        return Err(errors::invalid("max_attempts must be at least 1"));
    }
    Ok(max_attempts)
}

fn task_state(state: &str) -> PyResult<TaskState> {
    TaskState::parse(state).ok_or_else(|| {
        errors::invalid(format!(
            "state must be \"pending\", \"running\", \"done\" or \"dead\", not {state:?}"
        ))
    })
}

#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct TaskIter {
    queue: Py<Queue>,
    hold: HoldOptions,
    wait: Wait,
    max_tasks: Option<u64>,
    claimed: AtomicU64,
}

#[pymethods]
impl TaskIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Task>> {
        if self
            .max_tasks
            .is_some_and(|max| self.claimed.load(Ordering::SeqCst) >= max)
        {
            return Ok(None);
        }
        let task = self.queue.get().claim_next(py, &self.hold, self.wait)?;
        if task.is_some() {
            self.claimed.fetch_add(1, Ordering::SeqCst);
        }
        Ok(task)
    }
}
