//! `async with`: a blocking library call (acquire, wait, release) runs on a
//! thread of its own — never on the event loop's default executor, whose
//! few threads a crowd of waiters would fill (then releases queue behind
//! the waiters they were to wake, and unrelated `to_thread` calls with
//! them) — and wakes the loop when it is done: `loop.call_soon_threadsafe`
//! completes an `asyncio.Future` on the loop's own thread.
//!
//! Cancelling the awaiting task calls `on_cancel` at once, on the loop's
//! thread (a wait for a lease is told to stop: it leaves the store's queue
//! at its next poll). What the call got is handed to `finish` on the loop's
//! thread, told whether anyone still awaits it. Nobody does when the
//! awaiting task was cancelled, or when the loop closed meanwhile (then
//! `finish` runs on the call's thread): `finish` must then let go of what
//! the call got (a grant taken for nobody is released at once).
//!
//! Once the interpreter exits, the call's thread does not call into Python
//! at all (`exiting`): `abandon` lets go of what the call got, without
//! Python, on the call's thread.

use std::sync::Mutex;

use pyo3::prelude::*;

/// What runs when the call is done: `true` on the loop's thread.
type Job = Box<dyn FnOnce(Python<'_>, bool) + Send>;

/// The callback the loop runs.
#[pyclass(frozen, module = "leasehold")]
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

/// The future's done-callback: `on_cancel`, if the future was cancelled.
#[pyclass(frozen, module = "leasehold")]
struct OnCancel {
    on_cancel: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[pymethods]
impl OnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            // Only the loop's thread calls it, once.
            let on_cancel = self.on_cancel.try_lock().ok().and_then(|mut f| f.take());
            if let Some(on_cancel) = on_cancel {
                on_cancel();
            }
        }
        Ok(())
    }
}

/// Run `work` on a thread of its own; return a future of the running loop
/// that gets `finish`'s value (or exception). `on_cancel` runs if the future
/// is cancelled first (it must not block: the loop's thread runs it).
/// `finish` is told whether the future is still awaited; when it is not,
/// what it returns is dropped. `abandon` gets what the call got instead
/// when the interpreter exits first (it runs without the GIL).
///
/// # Errors
/// Outside a running loop (`asyncio.get_running_loop` raises), or when no
/// thread can be started.
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
    on_cancel: impl FnOnce() + Send + 'static,
    finish: impl FnOnce(Python<'_>, T, bool) -> PyResult<Py<PyAny>> + Send + 'static,
    abandon: impl FnOnce(T) + Send + 'static,
) -> PyResult<Bound<'_, PyAny>> {
    let running = py.import("asyncio")?.call_method0("get_running_loop")?;
    let fut = running.call_method0("create_future")?;
    let on_cancel = OnCancel {
        on_cancel: Mutex::new(Some(Box::new(on_cancel))),
    };
    fut.call_method1("add_done_callback", (Py::new(py, on_cancel)?,))?;
    let (running, theirs) = (running.unbind(), fut.clone().unbind());
    std::thread::Builder::new()
        .name("leasehold-async".into())
        .spawn(move || {
            let out = work();
            // `out` goes to `finish` through Python, or to `abandon` when the
            // interpreter exits (then no Python is touched on this thread).
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
        })
        .map_err(|e| crate::errors::of_kind(leasehold::ErrorKind::Failed, format!("cannot start a thread: {e}")))?;
    Ok(fut)
}

/// A future of the running loop that is already done with `value`: what
/// an `async with` exit awaits when there is nothing to wait for.
pub fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let fut = py
        .import("asyncio")?
        .call_method0("get_running_loop")?
        .call_method0("create_future")?;
    fut.call_method1("set_result", (value,))?;
    Ok(fut)
}
