//! `pyleasehold._native`: the Python package's core, over the `leasehold`
//! library. It converts types and errors and calls the library — leases,
//! the queue, supervision, state files and locks are the library's, with
//! no logic of their own here. The Python side (`python/pyleasehold/`)
//! re-exports it, defines the exception classes, and holds what is
//! Python's own: the `os.register_at_fork` hook and the main-thread
//! interrupt of `on_lost="interrupt"`.
//!
//! | module | what |
//! |---|---|
//! | `store` | `lh.Store`: open by URL (or `$LEASEHOLD_STORE`, or the embedded default) |
//! | `lease` | `lh.Lease`: acquire (wait), keep (the library's keeper), push loss, release |
//! | `leadership` | `store.campaign`: `lh.Leadership` (the library's, resigned on exit); `store.observe`: `lh.Observer` of leader changes (`for`, `async for`) |
//! | `queue` | `lh.Queue`, `lh.Task`: add, claim (kept), done / fail / hand back |
//! | `run`, `guard` | `store.run`: a command under a lease; the guard shipped in the package |
//! | `files`, `lock` | state files; `flock` single-instance locks |
//! | `convert`, `errors` | durations, names, paths, JSON; error kinds to exception classes |
//! | `fork`, `background` | what a forked child may not touch; interruptible waits |
//! | `aio` | `async with`: waits on threads of their own that wake the event loop |
//! | `exiting` | no thread re-enters Python once the interpreter exits: every `detach`/`attach` goes through it |
//! | `logs` | the library's events to Python's `logging` (logger `pyleasehold`), through a queue a Python thread reads |
//!
//! Every blocking call runs without the GIL; heartbeats run on the
//! keeper's threads and take the GIL only to call an `on_lost` callable.
//! No Python call waits for a Rust lock with the GIL held: the state locks
//! of leases, tasks and stores are held for a few instructions only, never
//! across a store call, and taken with `lock_py_attached`.

#![allow(
    clippy::too_many_arguments,
    reason = "a Python function's keyword arguments are one Rust argument each"
)]

mod aio;
mod background;
mod convert;
mod errors;
mod exiting;
mod files;
mod fork;
mod guard;
mod hold;
mod leadership;
mod lease;
mod lock;
mod logs;
mod pool;
mod queue;
mod run;
mod store;
mod task;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::Store>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<leadership::Leadership>()?;
    m.add_class::<leadership::Observer>()?;
    m.add_class::<queue::Queue>()?;
    m.add_class::<task::Task>()?;
    m.add_class::<queue::TaskIter>()?;
    m.add_class::<lock::FileLock>()?;
    m.add_function(wrap_pyfunction!(lock::lock_path, m)?)?;
    m.add_function(wrap_pyfunction!(lock::alock, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_atomic, m)?)?;
    m.add_function(wrap_pyfunction!(files::write_json, m)?)?;
    m.add_function(wrap_pyfunction!(files::update_json, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(guard::guard_main, m)?)?;
    m.add_function(wrap_pyfunction!(exiting::at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(logs::log_pipe, m)?)?;
    m.add_function(wrap_pyfunction!(logs::log_take, m)?)?;
    m.add_function(wrap_pyfunction!(logs::log_close, m)?)?;
    logs::install();
    m.add("ETCD", cfg!(feature = "etcd"))?;
    // The workspace's version: the same as `leasehold --version` of the
    // command a wheel installs beside the module.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
