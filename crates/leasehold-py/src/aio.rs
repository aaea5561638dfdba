//! `async with` and the other awaitables: a blocking library call runs off
//! the event loop, on leasehold's own threads — never on the loop's
//! default executor — and wakes the loop when it is done:
//! `loop.call_soon_threadsafe` completes an `asyncio.Future` on the loop's
//! own thread. Starting a call costs the loop a future and a queue push,
//! never a thread (issue 41: 2,000 `async with` started at once, each
//! starting a thread from the loop, blocked it for ~600 ms).
//!
//! Two kinds of threads, so that a crowd of waiters never holds up the
//! calls that would end its wait:
//!
//! - **The pool** ([`call`], `pool.rs`) runs calls that end in a store
//!   round trip or two — an acquire that does not wait, a release, a
//!   report. Never a wait: a pool that waits fills up with waiters, and
//!   the release that would wake them queues behind them (why the loop's
//!   default executor was refused: issue 23).
//! - **Lines** ([`wait`]): the waits of this process for one name of one
//!   store (or one lock file, or one queue) take turns in a line of their
//!   own, first come first served. A line nobody drives yet tries its head
//!   once on the pool (a free name needs no thread); the first wait that
//!   must wait gets the line a thread of its own, which drives it until it
//!   is empty. Only the head of the line waits in the store's queue; when
//!   it is granted (or gives up) the next one starts. A crowd of 500
//!   tasks on one name is one thread and one waiter in the store, not 500
//!   threads all registered and polling there (issue 41: 300 waiters took
//!   75 s of CPU to grant 94). Waits for different names never share a
//!   thread, so a wait never holds up another name's (a task holding one
//!   name while waiting for another cannot deadlock against a crowd).
//!   A wait's timeout counts from the call: one whose time runs out while
//!   it stands in line behind the head (a timer of the loop's) leaves the
//!   line and tries once, on the pool — `Held` as a wait that timed out.
//!   The timer is cancelled once the wait is done.
//!
//! Cancelling the awaiting task calls `on_cancel` at once, on the loop's
//! thread (a wait for a lease is told to stop: it leaves the store's queue
//! at its next poll); a wait still standing in line leaves it, having
//! taken nothing. What the call got is handed to `finish` on the loop's
//! thread, told whether anyone still awaits it. Nobody does when the
//! awaiting task was cancelled, or when the loop closed meanwhile (then
//! `finish` runs on the call's thread): `finish` must then let go of what
//! the call got (a grant taken for nobody is released at once).
//!
//! Once the interpreter exits, no thread of ours calls into Python at all
//! (`exiting`): `abandon` lets go of what the call got, without Python, on
//! the call's thread; waits still in line are dropped without running.
//!
//! After `os.fork()` the child has none of the parent's threads: the pool
//! and the lines are started afresh there (they remember whose they are).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// What runs when the call is done: `true` on the loop's thread.
type Job = Box<dyn FnOnce(Python<'_>, bool) + Send>;

/// The callback the loop runs.
#[pyclass(frozen, module = "pyleasehold")]
struct Wake {
    job: Mutex<Option<Job>>,
}

impl Wake {
    fn run(&self, py: Python<'_>, on_loop: bool) {
        // Never waits: it runs once, on the loop's thread — or on the
        // call's thread when the loop is gone, and then never on the loop.
        let job = self.job.try_lock().ok().and_then(|mut job| job.take());
        if let Some(job) = job {
            job(py, on_loop);
        }
    }
}

#[pymethods]
impl Wake {
    fn __call__(&self, py: Python<'_>) {
        self.run(py, true);
    }
}

type CancelFn = Box<dyn FnOnce(Python<'_>) + Send>;

/// The future's done-callback: `on_cancel`, if the future was cancelled;
/// and the wait's timer, if it has one, is cancelled once the future is
/// done (else each timer would stay in the loop until its time).
#[pyclass(frozen, module = "pyleasehold")]
struct OnCancel {
    on_cancel: Mutex<Option<CancelFn>>,
    timer: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl OnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        let timer = self.timer.try_lock().ok().and_then(|mut t| t.take());
        if let Some(timer) = timer {
            timer.bind(fut.py()).call_method0("cancel")?;
        }
        if fut.call_method0("cancelled")?.is_truthy()? {
            // Only the loop's thread calls it, once.
            let on_cancel = self.on_cancel.try_lock().ok().and_then(|mut f| f.take());
            if let Some(on_cancel) = on_cancel {
                on_cancel(fut.py());
            }
        }
        Ok(())
    }
}

/// A future of the running loop, and the loop.
fn future(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Bound<'_, PyAny>)> {
    let running = py.import("asyncio")?.call_method0("get_running_loop")?;
    let fut = running.call_method0("create_future")?;
    Ok((running, fut))
}

/// Hand `out` to `finish` on the loop's thread (woken through
/// `call_soon_threadsafe`), which completes the future `theirs` with what
/// `finish` returns while it is awaited; or to `abandon` on this thread,
/// without Python, once the interpreter exits.
fn deliver<T: Send + 'static>(
    running: &Py<PyAny>,
    theirs: Py<PyAny>,
    out: T,
    finish: impl FnOnce(Python<'_>, T, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    abandon: impl FnOnce(T),
) {
    let mut out = Some(out);
    crate::exiting::attach(|py| {
        let Some(out) = out.take() else { return };
        let job: Job = Box::new(move |py, on_loop| {
            let fut = theirs.bind(py);
            let cancelled = || {
                fut.call_method0("cancelled")
                    .and_then(|c| c.is_truthy())
                    .unwrap_or(true)
            };
            let awaited = on_loop && !cancelled();
            let result = finish(py, out, awaited);
            if awaited {
                let set = match result {
                    Ok(value) => fut.call_method1("set_result", (value,)),
                    Err(e) => fut.call_method1("set_exception", (e.value(py),)),
                };
                if let Err(e) = set {
                    e.write_unraisable(py, Some(fut));
                }
            }
        });
        let wake = match Py::new(
            py,
            Wake {
                job: Mutex::new(Some(job)),
            },
        ) {
            Ok(wake) => wake,
            Err(e) => return e.write_unraisable(py, None),
        };
        let scheduled = running
            .bind(py)
            .call_method1("call_soon_threadsafe", (wake.clone_ref(py),));
        if scheduled.is_err() {
            // The loop is closed: nobody awaits. End it here.
            wake.get().run(py, false);
        }
    });
    if let Some(out) = out {
        abandon(out);
    }
}

fn no_thread(e: &std::io::Error) -> PyErr {
    crate::errors::of_kind(leasehold::ErrorKind::Failed, format!("cannot start a thread: {e}"))
}

/// Run `work` — a call that ends in bounded time, no wait — on a pool
/// thread; return a future of the running loop that gets `finish`'s value
/// (or exception). `finish` is told whether the future is still awaited;
/// when it is not (the task was cancelled: the call goes on, it is not cut
/// short), what it returns is dropped. `abandon` gets what the call got
/// instead when the interpreter exits first.
///
/// # Errors
/// Outside a running loop (`asyncio.get_running_loop` raises), or when no
/// thread can be started.
pub fn call<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
    finish: impl FnOnce(Python<'_>, T, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    abandon: impl FnOnce(T) + Send + 'static,
) -> PyResult<Bound<'_, PyAny>> {
    let (running, fut) = future(py)?;
    let (running, theirs) = (running.unbind(), fut.clone().unbind());
    crate::pool::submit(move || deliver(&running, theirs, work(), finish, abandon)).map_err(|e| no_thread(&e))?;
    Ok(fut)
}

// The lines.

/// Which line a wait stands in: waits with equal keys take turns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Line {
    /// The store (its address), or 0 for a lock file.
    store: usize,
    kind: &'static str,
    name: String,
}

impl Line {
    /// The line of `name` (of `kind`: "lease", "queue") in `store`.
    pub fn of<S>(store: &Arc<S>, kind: &'static str, name: impl Into<String>) -> Self {
        Self {
            store: Arc::as_ptr(store) as usize,
            kind,
            name: name.into(),
        }
    }

    /// The line of a lock file.
    pub fn lock(path: &std::path::Path) -> Self {
        Self {
            store: 0,
            kind: "lock",
            name: path.display().to_string(),
        }
    }
}

/// What a wait standing in line is told to do.
enum Turn<'py> {
    /// Its turn came: wait (what is left of its timeout).
    Wait,
    /// Its time ran out in line: try once.
    Try,
    /// Cancelled in line (on the loop's thread): it never ran.
    Dropped(Python<'py>),
}

/// A wait in a line.
trait Waiting: Send {
    /// Try once, at the head of a line nobody drives yet (on the pool):
    /// `true` when that settled it (and it was handed on).
    fn attempt(&mut self) -> bool;
    fn run(self: Box<Self>, turn: Turn<'_>);
}

struct Waiter<T, W, F, A> {
    work: W,
    settled: fn(&T) -> bool,
    /// What it must hand its outcome on with: taken once.
    ends: Option<(Py<PyAny>, Py<PyAny>, F, A)>,
    started: Instant,
    timeout: Option<Duration>,
}

impl<T, W, F, A> Waiter<T, W, F, A>
where
    T: Send + 'static,
    W: Fn(Option<Duration>) -> T + Send + 'static,
    F: FnOnce(Python<'_>, Option<T>, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    A: FnOnce(T) + Send + 'static,
{
    fn hand_on(&mut self, out: T) {
        if let Some((running, theirs, finish, abandon)) = self.ends.take() {
            deliver(
                &running,
                theirs,
                out,
                move |py, out, awaited| finish(py, Some(out), awaited),
                abandon,
            );
        }
    }
}

impl<T, W, F, A> Waiting for Waiter<T, W, F, A>
where
    T: Send + 'static,
    W: Fn(Option<Duration>) -> T + Send + 'static,
    F: FnOnce(Python<'_>, Option<T>, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    A: FnOnce(T) + Send + 'static,
{
    fn attempt(&mut self) -> bool {
        let out = (self.work)(Some(Duration::ZERO));
        if !(self.settled)(&out) {
            return false;
        }
        self.hand_on(out);
        true
    }

    fn run(mut self: Box<Self>, turn: Turn<'_>) {
        let budget = match turn {
            Turn::Dropped(py) => {
                if let Some((_, _, finish, _)) = self.ends.take()
                    && let Err(e) = finish(py, None, false)
                {
                    e.write_unraisable(py, None);
                }
                return;
            }
            Turn::Try => Some(Duration::ZERO),
            Turn::Wait => self.timeout.map(|t| t.saturating_sub(self.started.elapsed())),
        };
        let out = (self.work)(budget);
        self.hand_on(out);
    }
}

type Entry = (u64, Box<dyn Waiting>);

struct Lines {
    /// The lines being driven (by a pool thread trying the head, or by
    /// the line's own thread), and the waits standing in each.
    waiting: HashMap<Line, VecDeque<Entry>>,
    last_id: u64,
    pid: u32,
}

static LINES: Mutex<Option<Lines>> = Mutex::new(None);

fn lines() -> MutexGuard<'static, Option<Lines>> {
    let mut lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if lines.as_ref().is_none_or(|l| l.pid != pid) {
        // New, or forked: the parent's lines have no thread here.
        *lines = Some(Lines {
            waiting: HashMap::new(),
            last_id: 0,
            pid,
        });
    }
    lines
}

/// Take the wait `id` out of `line`, if it still stands there.
fn leave(line: &Line, id: u64) -> Option<Entry> {
    let mut lines = lines();
    let queue = lines.as_mut()?.waiting.get_mut(line)?;
    let at = queue.iter().position(|(i, _)| *i == id)?;
    queue.remove(at)
}

/// The next wait of `line`; `None` (and the line ends) when it is empty.
fn next(line: &Line) -> Option<Entry> {
    let mut lines = lines();
    let lines = lines.as_mut()?;
    let next = lines.waiting.get_mut(line).and_then(VecDeque::pop_front);
    if next.is_none() {
        lines.waiting.remove(line);
    }
    next
}

/// A line nobody drove (on the pool): its head tries once, and most often
/// that settles it (a free name) — no thread of its own is needed. The
/// first that must wait gets the line a thread, which drives it from then.
fn start(line: &Line) {
    while let Some((_, mut head)) = next(line) {
        if crate::exiting::closed() {
            // Nobody will hear of it: it never runs (drops without Python).
            continue;
        }
        if head.attempt() {
            continue;
        }
        let driven = line.clone();
        let head = Arc::new(Mutex::new(Some(head)));
        let theirs = head.clone();
        let spawned = std::thread::Builder::new()
            .name("leasehold-line".into())
            .spawn(move || {
                if let Some(head) = theirs.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    head.run(Turn::Wait);
                }
                drive(&driven);
            });
        if spawned.is_err() {
            // No thread to be had: this one drives the line.
            if let Some(head) = head.lock().unwrap_or_else(PoisonError::into_inner).take() {
                head.run(Turn::Wait);
            }
            drive(line);
        }
        return;
    }
}

/// The line's thread: each wait in turn, until the line is empty.
fn drive(line: &Line) {
    while let Some((_, next)) = next(line) {
        if crate::exiting::closed() {
            continue;
        }
        next.run(Turn::Wait);
    }
}

/// The loop's timer for a wait whose time may run out in line.
#[pyclass(frozen, module = "pyleasehold")]
struct Expire {
    line: Line,
    id: u64,
}

#[pymethods]
impl Expire {
    fn __call__(&self) {
        if let Some((_, waiter)) = leave(&self.line, self.id) {
            // If no thread can be had, it stays unanswered: as if it hung.
            let _ = crate::pool::submit(move || waiter.run(Turn::Try));
        }
    }
}

/// Wait in `line`: `work` runs when its turn comes, told how long it may
/// wait (`None`: as long as it takes; `Some(ZERO)`: try once) — `timeout`
/// less the time spent in line. At the head of a line nobody drives, it
/// is first tried once on the pool, and waits only when `settled` says
/// that try did not settle it. Returns a future of the running loop that
/// gets `finish`'s value (or exception). `on_cancel` runs if the future is
/// cancelled first (it must not block: the loop's thread runs it), and
/// `work` should then end soon; `finish` gets `None` when the wait was
/// cancelled before its turn (it never ran), and is told whether the
/// future is still awaited — as [`call`]'s. `abandon` gets what `work` got
/// when the interpreter exits first.
///
/// # Errors
/// Outside a running loop, or when no thread can be started.
#[allow(clippy::too_many_arguments, reason = "each part of a wait")]
pub fn wait<T: Send + 'static>(
    py: Python<'_>,
    line: Line,
    timeout: Option<Duration>,
    work: impl Fn(Option<Duration>) -> T + Send + 'static,
    settled: fn(&T) -> bool,
    on_cancel: impl FnOnce() + Send + 'static,
    finish: impl FnOnce(Python<'_>, Option<T>, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    abandon: impl FnOnce(T) + Send + 'static,
) -> PyResult<Bound<'_, PyAny>> {
    let (running, fut) = future(py)?;
    let waiter = Waiter {
        work,
        settled,
        ends: Some((running.clone().unbind(), fut.clone().unbind(), finish, abandon)),
        started: Instant::now(),
        timeout,
    };
    let (id, first) = {
        let mut lines = lines();
        let lines = lines.as_mut().expect("made by lines()");
        lines.last_id += 1;
        let id = lines.last_id;
        // A line is in the map from its first wait until its driver finds
        // it empty: a wait that finds none starts one.
        let first = !lines.waiting.contains_key(&line);
        lines
            .waiting
            .entry(line.clone())
            .or_default()
            .push_back((id, Box::new(waiter)));
        (id, first)
    };
    if first {
        let driven = line.clone();
        if let Err(e) = crate::pool::submit(move || start(&driven)) {
            drop(leave(&line, id));
            return Err(no_thread(&e));
        }
    }
    let left = line.clone();
    let timer = match timeout {
        // Its time may run out while it stands in line.
        Some(timeout) => Some(
            running
                .call_method1("call_later", (timeout.as_secs_f64(), Py::new(py, Expire { line, id })?))?
                .unbind(),
        ),
        None => None,
    };
    let on_cancel = OnCancel {
        on_cancel: Mutex::new(Some(Box::new(move |py| {
            on_cancel();
            if let Some((_, waiter)) = leave(&left, id) {
                waiter.run(Turn::Dropped(py));
            }
        }))),
        timer: Mutex::new(timer),
    };
    fut.call_method1("add_done_callback", (Py::new(py, on_cancel)?,))?;
    Ok(fut)
}

/// Run `work` on a thread of its own (a wait that is not a name's: the
/// next change an observer sees); as [`call`], with `on_cancel` run if
/// the future is cancelled first (on the loop's thread; it must not block).
///
/// # Errors
/// Outside a running loop, or when no thread can be started.
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
    on_cancel: impl FnOnce() + Send + 'static,
    finish: impl FnOnce(Python<'_>, T, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    abandon: impl FnOnce(T) + Send + 'static,
) -> PyResult<Bound<'_, PyAny>> {
    let (running, fut) = future(py)?;
    let on_cancel = OnCancel {
        on_cancel: Mutex::new(Some(Box::new(move |_| on_cancel()))),
        timer: Mutex::new(None),
    };
    fut.call_method1("add_done_callback", (Py::new(py, on_cancel)?,))?;
    let (running, theirs) = (running.unbind(), fut.clone().unbind());
    std::thread::Builder::new()
        .name("leasehold-async".into())
        .spawn(move || deliver(&running, theirs, work(), finish, abandon))
        .map_err(|e| no_thread(&e))?;
    Ok(fut)
}

/// A future of the running loop that is already done with `value`: what
/// an `async with` exit awaits when there is nothing to wait for.
pub fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let (_, fut) = future(py)?;
    fut.call_method1("set_result", (value,))?;
    Ok(fut)
}

/// A callable that, called once, starts what `start` starts (an awaitable):
/// what `pyleasehold._aio.Pending` is made with.
#[pyclass(frozen, module = "pyleasehold")]
pub struct Start {
    start: Mutex<Option<StartFn>>,
}

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Start")
    }
}

type StartFn = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send>;

#[pymethods]
impl Start {
    fn __call__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let start = self.start.try_lock().ok().and_then(|mut s| s.take());
        match start {
            Some(start) => start(py),
            None => Err(crate::errors::invalid(
                "this awaitable was awaited already: call aclaim()/alock() again for another",
            )),
        }
    }
}

/// `pyleasehold._aio.Pending(start)`: awaited, or entered with `async with`,
/// it runs `start` (once).
pub fn pending<'py>(
    py: Python<'py>,
    start: impl for<'a> FnOnce(Python<'a>) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    let start = Py::new(
        py,
        Start {
            start: Mutex::new(Some(Box::new(start))),
        },
    )?;
    py.import("pyleasehold._aio")?.getattr("Pending")?.call1((start,))
}
