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
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use leasehold::Cancel;
use pyo3::prelude::*;

/// How long the hook waits for cancelled waits to leave the store's
/// queue: they do at their next poll.
const CANCELLED_WAITS: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Gate {
    closed: bool,
    /// The thread that closed it: the one finalizing.
    closer: Option<ThreadId>,
    /// Threads holding a pass now.
    inside: usize,
    /// The waits in flight, to cancel when it closes.
    waits: Vec<(u64, Cancel)>,
    next_wait: u64,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    closed: false,
    closer: None,
    inside: 0,
    waits: Vec::new(),
    next_wait: 0,
});
/// Signalled when the last pass is given back, or a wait ends.
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// How many passes this thread holds (passes nest).
    static PASSES: Cell<usize> = const { Cell::new(0) };
}

fn gate() -> MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Take a pass: `false` once the gate is closed, except on the thread
/// that closed it (or one holding a pass already).
fn enter() -> bool {
    let held = PASSES.with(Cell::get);
    if held == 0 {
        let mut gate = gate();
        if gate.closed && gate.closer != Some(thread::current().id()) {
            return false;
        }
        gate.inside += 1;
    }
    PASSES.with(|p| p.set(held + 1));
    true
}

fn leave() {
    let held = PASSES.with(Cell::get);
    PASSES.with(|p| p.set(held.saturating_sub(1)));
    if held == 1 {
        let mut gate = gate();
        gate.inside -= 1;
        if gate.inside == 0 {
            CHANGED.notify_all();
        }
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

/// A wait in flight (a lease wait, a campaign): cancelled if the
/// interpreter exits while it waits. Ended when dropped.
pub struct Watched(u64);

/// Watch `cancel`'s wait until the returned guard is dropped; cancelled
/// at once if the interpreter already exits.
pub fn watch(cancel: &Cancel) -> Watched {
    let mut gate = gate();
    if gate.closed {
        cancel.cancel();
    }
    gate.next_wait += 1;
    let id = gate.next_wait;
    gate.waits.push((id, cancel.clone()));
    Watched(id)
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut gate = gate();
        gate.waits.retain(|(id, _)| *id != self.0);
        CHANGED.notify_all();
    }
}

/// The `atexit` hook (`leasehold/__init__.py`): close the gate, cancel the
/// waits in flight and wait for them to end (up to [`CANCELLED_WAITS`]),
/// and for every pass to be given back.
#[pyfunction]
pub fn at_exit(py: Python<'_>) {
    {
        let mut gate = gate();
        gate.closed = true;
        gate.closer = Some(thread::current().id());
        for (_, cancel) in &gate.waits {
            cancel.cancel();
        }
    }
    // This thread may take the GIL back: it is the one finalizing.
    detach(py, || {
        let deadline = Instant::now() + CANCELLED_WAITS;
        let mut gate = gate();
        while gate.inside > 0 || !gate.waits.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if gate.inside == 0 && left.is_zero() {
                break;
            }
            let slice = if gate.waits.is_empty() {
                Duration::from_secs(3600)
            } else {
                left.max(Duration::from_millis(1))
            };
            gate = CHANGED
                .wait_timeout(gate, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    });
}
