//! `store.run(name, argv)`: a command under a lease through
//! `leasehold::supervise` — its own process group, the guard (see
//! `guard.rs`) that stops it before the lease could pass on even if this
//! process is stopped or killed, the grant bound to this process and the
//! command's group for fast takeover. What differs from `leasehold run` is
//! only what a library may not do to its host process: no process-wide
//! signal handlers and no terminal hand-over. A ^C (`KeyboardInterrupt`)
//! while the command runs stops it (SIGTERM, SIGKILL after the grace
//! period), releases the lease and is raised once it has; while it waits
//! for the lease, the wait ends and leaves the queue.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::supervise::{self, LeaseRun, RunOutcome, Spec, Stop, StopHandle, Timing};
use leasehold::{Cancel, LeaseName, Mode};
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;

use crate::background::Background;
use crate::convert::Wait;
use crate::errors::{self, OrRaise as _};

pub struct RunArgs {
    pub name: LeaseName,
    pub argv: Vec<std::ffi::OsString>,
    pub ttl: Duration,
    pub heartbeat: Option<Duration>,
    pub grace: Option<Duration>,
    pub wait: Wait,
    pub mode: Mode,
    pub owner: Option<String>,
    pub stall: Option<Duration>,
    pub progress_file: Option<PathBuf>,
}

/// Whether the command may go on, as the caller last said.
enum Control {
    NotStarted,
    Started(StopHandle),
    /// Stop it as soon as it starts.
    Cancelled,
}

pub fn run(py: Python<'_>, store: Arc<leasehold::Store>, args: RunArgs) -> PyResult<u8> {
    if args.argv.is_empty() {
        return Err(errors::invalid("argv is empty: give the command and its arguments"));
    }
    let timing = Timing::new(args.ttl, args.heartbeat, args.grace, args.owner)
        .map_err(|e| errors::invalid(format!("{e} (ttl=, heartbeat=, grace=)")))?;
    let grace = timing.grace;
    let spec = Spec::watched(
        args.argv,
        crate::guard::program(py)?,
        grace,
        args.stall.map(|limit| (limit, args.progress_file.clone())),
    );
    let cancel = Cancel::new();
    let lease = LeaseRun {
        name: args.name.clone(),
        timing,
        mode: args.mode,
        wait: args.wait.timeout(),
        // A ^C while waiting ends the wait: the waiter leaves the queue.
        cancel: cancel.clone(),
        // The host process's signals and terminal are its own.
        forward_signals: false,
        hand_terminal: false,
        env: Vec::new(),
        start_by: None,
    };
    let control = Arc::new(Mutex::new(Control::NotStarted));
    let call = {
        let control = control.clone();
        let cancel = cancel.clone();
        Background::spawn(move || {
            // A wait for the lease ends, out of the queue, if the interpreter exits.
            let _watched = crate::exiting::watch(&cancel);
            supervise::run_with(
                &store,
                &lease,
                spec,
                |_| {},
                move |_, handle| {
                    let mut control = control.lock().unwrap_or_else(PoisonError::into_inner);
                    if matches!(*control, Control::Cancelled) {
                        handle.stop(Stop::Shutdown);
                    }
                    *control = Control::Started(handle);
                },
            )
        })
    };
    let outcome = match call.wait(py) {
        Ok(outcome) => outcome,
        Err(interrupted) => {
            cancel.cancel();
            let was = std::mem::replace(
                &mut *control.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner),
                Control::Cancelled,
            );
            match was {
                Control::Started(handle) => {
                    handle.stop(Stop::Shutdown);
                }
                Control::NotStarted | Control::Cancelled => {}
            }
            // Until the command is gone and the lease released: the grace
            // period, and some slack. A wait for the lease ends at its next
            // poll, out of the queue.
            if call
                .wait_for(py, grace + supervise::slack(args.ttl) + Duration::from_secs(1))
                .is_none()
            {
                call.give_up(py, drop);
            }
            return Err(interrupted);
        }
    };
    let ran = match outcome.or_raise()? {
        RunOutcome::Held(held) => return Err(crate::lease::held_error(&args.name, &held, args.mode, args.wait)),
        RunOutcome::Ran(ran) => ran,
    };
    warn_release(py, &args.name, &ran.grant, ran.release_error)?;
    ran.ended.map_err(|e| errors::run(&e))
}

/// A release that failed is a warning: the grant expires by its TTL.
fn warn_release(
    py: Python<'_>,
    name: &leasehold::LeaseName,
    grant: &leasehold::Grant,
    error: Option<leasehold::Error>,
) -> PyResult<()> {
    let Some(e) = error else { return Ok(()) };
    let message = format!(
        "could not release {name} (token {}): {}; it expires by its TTL",
        grant.token,
        errors::library(&e)
    );
    PyErr::warn(
        py,
        &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
        &std::ffi::CString::new(message).unwrap_or_default(),
        1,
    )
}
