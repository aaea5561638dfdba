//! No thread of this package's re-enters Python once the interpreter has
//! begun to exit.
//!
//! Why. When the interpreter finalizes (the main thread returned, or `sys.exit`),
//! a thread other than the finalizing one that takes the GIL — the
//! re-attach at the end of `py.detach` (`PyEval_RestoreThread`), or
//! `Python::attach` (`PyGILState_Ensure`) on a thread of our own — is ended
//! with `pthread_exit` (3.9–3.13; 3.14 hangs it instead). `pthread_exit`
//! unwinds the thread's stack by force, and a forced unwind through Rust
//! frames is undefined behaviour: the release wheel crashed at exit (139)
//! whenever a daemon thread was in a blocking call (each one polls its
//! result every 50 ms, so it re-attaches during a finalization that lasts
//! longer) and whenever an `async with` thread was still inside
//! `call_soon_threadsafe` (which lets go of the GIL to write to the loop's
//! socket). `pyo3`'s own guard does not cover it: its `Py_IsFinalizing`
//! check in `attach` is compiled for 3.13+ builds only (this is an
//! `abi3-py39` one), is not made when `detach` re-attaches, and is
//! check-then-act — a thread that checked before finalization began can
//! still take the GIL after.
//!
//! So there is a gate. The package registers [`at_exit`] with `atexit`
//! (`leasehold/__init__.py`), and `atexit` hooks run while every thread
//! may still take the GIL, before the interpreter begins finalizing. The hook
//! closes the gate, cancels the lease waits and campaigns in flight (so
//! they leave the store's queue rather than stay registered there until
//! they expire), and then waits, without the GIL, until no thread is
//! between taking a pass and giving it back. From then on:
//!
//! - a thread that would take the GIL back at the end of a blocking call
//!   ([`detach`]: a Python thread, a daemon one — the main thread is the
//!   one finalizing) never does: it parks for good, which is what Python
//!   3.14 does to it anyway, and the process exits around it. It holds no
//!   lock of ours while parked (what it got is dropped with the process;
//!   a grant it held expires by its TTL, or by the holder's death where the
//!   store sees that);
//! - a thread of our own that would call into Python ([`attach`]: waking
//!   an event loop, an `on_lost` callable) does not, and says so with
//!   `None`: its caller lets go of what it got without Python.
//!
//! A pass covers the whole time a thread holds the GIL with our frames
//! below it when it took it from outside (the Python work of an
//! `async with` thread or an `on_lost` callable, which may let go of the
//! GIL and take it again inside), and the moment a Python thread takes the
//! GIL back after a blocking call: the hook waits for those to finish, so
//! none of them can meet a finalizing interpreter. The thread that closed
//! the gate (the one finalizing) always passes. An `on_lost` callable
//! running when the interpreter exits delays the exit until it returns.
//!
//! What is not covered: the state mutexes taken with `lock_py_attached`
//! let go of the GIL only when contended, for the few instructions another
//! thread holds them (lib.rs); and Python code a blocking call runs on its
//! own thread between two passes (a `__del__` run by a collection there).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::Cancel;
use pyo3::prelude::*;

/// How long the hook waits for cancelled waits to leave the store's
/// queue: they do at their next poll.
const CANCELLED_WAITS: Duration = Duration::from_secs(2);

// The gate is two atomics, not a mutex: it is passed without the GIL, and
// a mutex held by another thread when `os.fork()` copies the process would
// stay locked in the child for good. Taking a pass adds to INSIDE and then
// reads CLOSED; closing sets CLOSED and then reads INSIDE (all SeqCst):
// either the thread sees the gate closed and backs out, or the closer sees
// it inside and waits for it.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Threads holding a pass now.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// The waits in flight (their ids and cancels), to cancel when it closes.
/// Touched for an instant when a wait starts and ends; never waited for
/// (`try_waits`), so a copy locked at a fork costs only the cancel.
static WAITS: Mutex<Waits> = Mutex::new((0, Vec::new()));

/// The last id given, and the waits by id.
type Waits = (u64, Vec<(u64, Cancel)>);

thread_local! {
    /// How many passes this thread holds (passes nest).
    static PASSES: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread closed the gate: the one finalizing.
    static CLOSER: Cell<bool> = const { Cell::new(false) };
}

/// The waits, if they can be had within a moment.
fn try_waits() -> Option<MutexGuard<'static, Waits>> {
    for _ in 0..100 {
        match WAITS.try_lock() {
            Ok(waits) => return Some(waits),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => thread::sleep(Duration::from_micros(100)),
        }
    }
    None
}

/// Take a pass: `false` once the gate is closed, except on the thread
/// that closed it (or one holding a pass already).
fn enter() -> bool {
    let held = PASSES.with(Cell::get);
    if held == 0 {
        INSIDE.fetch_add(1, SeqCst);
        if CLOSED.load(SeqCst) && !CLOSER.with(Cell::get) {
            INSIDE.fetch_sub(1, SeqCst);
            return false;
        }
    }
    PASSES.with(|p| p.set(held + 1));
    true
}

fn leave() {
    let held = PASSES.with(Cell::get);
    PASSES.with(|p| p.set(held.saturating_sub(1)));
    if held == 1 {
        INSIDE.fetch_sub(1, SeqCst);
    }
}

/// Never return: this thread may not take the GIL again.
fn park() -> ! {
    loop {
        thread::park();
    }
}

/// `py.detach(f)`, but once the interpreter exits the thread parks for
/// good after `f` instead of taking the GIL back (see the module docs).
/// Every blocking call of the package goes through here.
pub fn detach<T: Send, F: Send + FnOnce() -> T>(py: Python<'_>, f: F) -> T {
    #[allow(clippy::disallowed_methods, reason = "the one place it is called")]
    let out = py.detach(move || {
        let out = f();
        if !enter() {
            park();
        }
        out
    });
    leave();
    out
}

/// `Python::attach(f)` on a thread of our own (not attached already):
/// `None`, with nothing run, once the interpreter exits.
pub fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    if !enter() {
        return None;
    }
    #[allow(clippy::disallowed_methods, reason = "the one place it is called")]
    let out = Python::attach(f);
    leave();
    Some(out)
}

/// Whether the interpreter has begun to exit (the gate is closed): a wait
/// not started yet is then not started at all.
pub fn closed() -> bool {
    CLOSED.load(SeqCst)
}

/// A wait in flight (a lease wait, a campaign): cancelled if the
/// interpreter exits while it waits. Ended when dropped.
pub struct Watched(Option<u64>);

/// Watch `cancel`'s wait until the returned guard is dropped; cancelled
/// at once if the interpreter already exits.
pub fn watch(cancel: &Cancel) -> Watched {
    if CLOSED.load(SeqCst) {
        cancel.cancel();
    }
    Watched(try_waits().map(|mut waits| {
        waits.0 += 1;
        let id = waits.0;
        waits.1.push((id, cancel.clone()));
        id
    }))
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let (Some(id), Some(mut waits)) = (self.0, try_waits()) {
            waits.1.retain(|(w, _)| *w != id);
        }
    }
}

/// The `atexit` hook (`leasehold/__init__.py`): close the gate, cancel the
/// waits in flight and wait for them to end (up to [`CANCELLED_WAITS`]),
/// and for every pass to be given back.
#[pyfunction]
pub fn at_exit(py: Python<'_>) {
    CLOSER.with(|c| c.set(true));
    CLOSED.store(true, SeqCst);
    if let Some(waits) = try_waits() {
        for (_, cancel) in &waits.1 {
            cancel.cancel();
        }
    }
    // This thread may take the GIL back: it is the one finalizing. A pass
    // is held for an instant (a thread taking the GIL back) or while a
    // thread of ours calls into Python (waking a loop, an `on_lost`).
    detach(py, || {
        let deadline = Instant::now() + CANCELLED_WAITS;
        loop {
            let waiting = Instant::now() < deadline && try_waits().is_some_and(|w| !w.1.is_empty());
            if INSIDE.load(SeqCst) == 0 && !waiting {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
    });
}

/// In a child made by `os.fork()` (`fork.rs`): the parent's threads, their
/// passes and waits are not here; the child exits on its own.
pub fn after_fork_in_child() {
    INSIDE.store(PASSES.with(Cell::get), SeqCst);
    CLOSED.store(false, SeqCst);
    CLOSER.with(|c| c.set(false));
    if let Some(mut waits) = try_waits() {
        waits.1.clear();
    }
}
