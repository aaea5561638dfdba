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
//!
//! What `subprocess.run` users reach for is here too, each through the
//! supervisor: `env` is added to this process's environment (as `leasehold
//! run`'s command inherits it and gets `LEASEHOLD_*` on top — not replaced,
//! as `subprocess.run`'s `env` is), `cwd` is where the guard starts and so
//! the command, `input` is fed to its stdin then closed, `capture_output`
//! collects stdout and stderr ([`Output::Capture`]) into a
//! `subprocess.CompletedProcess`, and `timeout` stops the command with the
//! supervisor's stop sequence (the guard's SIGTERM to the tree, SIGKILL
//! after the grace period) and raises `lh.RunTimeout` once the whole tree
//! is gone and the lease released.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use leasehold::supervise::{self, LeaseRun, Output, RunError, RunOutcome, Spec, Stop, StopHandle, Supervised, Timing};
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
    /// Added to (or overriding) this process's environment.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Fed to stdin, then closed; `None`: stdin inherited.
    pub input: Option<Vec<u8>>,
    /// From the command's start.
    pub timeout: Option<Duration>,
    /// Collect stdout and stderr: return a `CompletedProcess`.
    pub capture: bool,
    /// Captured output as str (UTF-8), not bytes.
    pub text: bool,
}

/// Whether the command may go on, as the caller last said.
enum Control {
    NotStarted,
    Started(StopHandle),
    /// Stop it as soon as it starts.
    Cancelled,
}

/// What `store.run` returns: the exit code, or with `capture_output` a
/// `subprocess.CompletedProcess`.
pub fn run(py: Python<'_>, store: Arc<leasehold::Store>, args: &RunArgs) -> PyResult<Py<PyAny>> {
    if args.argv.is_empty() {
        return Err(errors::invalid("argv is empty: give the command and its arguments"));
    }
    check_cwd(args.cwd.as_deref())?;
    let timing = Timing::new(args.ttl, args.heartbeat, args.grace)
        .map_err(|e| errors::invalid(e.worded(&leasehold::spelling::Keywords)))?;
    let grace = timing.grace;
    let mut spec = Spec::watched(
        args.argv.clone(),
        crate::guard::program(py)?,
        grace,
        args.stall.map(|limit| (limit, args.progress_file.clone())),
    );
    spec.stdin.clone_from(&args.input);
    if args.capture {
        spec.output = Output::Capture;
    }
    let cwd = args.cwd.clone();
    let cancel = Cancel::new();
    let lease = LeaseRun {
        name: args.name.clone(),
        timing,
        owner: args.owner.clone(),
        mode: args.mode,
        wait: args.wait.timeout(),
        // A ^C while waiting ends the wait: the waiter leaves the queue.
        cancel: cancel.clone(),
        // The host process's signals and terminal are its own.
        forward_signals: false,
        hand_terminal: false,
        env: args.env.clone(),
        start_by: None,
    };
    let timed_out = Arc::new(AtomicBool::new(false));
    let control = Arc::new(Mutex::new(Control::NotStarted));
    let call = {
        let control = control.clone();
        let cancel = cancel.clone();
        let (timeout, timed_out) = (args.timeout, timed_out.clone());
        Background::spawn(move || {
            // A wait for the lease ends, out of the queue, if the interpreter exits.
            let _watched = crate::exiting::watch(&cancel);
            // Dropped when the run is over: the timer ends with it.
            let (over, timer) = std::sync::mpsc::channel::<()>();
            let supervised = Supervised::launch_in(spec, cwd.as_deref()).map_err(leasehold::Error::from)?;
            let outcome = supervise::run_spawned(
                &store,
                &lease,
                supervised,
                |_| {},
                move |_, handle| {
                    if let Some(limit) = timeout {
                        stop_after(limit, timer, handle.clone(), timed_out);
                    }
                    let mut control = control.lock().unwrap_or_else(PoisonError::into_inner);
                    if matches!(*control, Control::Cancelled) {
                        handle.stop(Stop::Shutdown);
                    }
                    *control = Control::Started(handle);
                },
            );
            drop(over);
            outcome
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
    returned(py, args, ran.ended, &ran.finished, timed_out.load(Ordering::SeqCst))
}

/// What `run` returns for a command that ran: its exit code, or a
/// `CompletedProcess` with what it wrote; `RunTimeout` when the timeout
/// stopped it (`timed_out`), the exception of its outcome otherwise.
fn returned(
    py: Python<'_>,
    args: &RunArgs,
    ended: Result<u8, RunError>,
    finished: &supervise::Finished,
    timed_out: bool,
) -> PyResult<Py<PyAny>> {
    let output = |bytes: &[u8]| -> Py<PyAny> {
        match (args.capture, args.text) {
            (false, _) => py.None(),
            (true, false) => pyo3::types::PyBytes::new(py, bytes).into_any().unbind(),
            (true, true) => pyo3::types::PyString::new(py, &String::from_utf8_lossy(bytes))
                .into_any()
                .unbind(),
        }
    };
    let code = match ended {
        Err(RunError::Interrupted { grace }) if timed_out => {
            let limit = args.timeout.unwrap_or_default();
            let message = format!(
                "{} ran past its timeout of {}: it was stopped (SIGTERM, then SIGKILL after {}) and the lease {} \
                 released once the command and every process it started were gone; its work may be incomplete",
                args.argv[0].to_string_lossy(),
                leasehold::format_duration(limit),
                leasehold::format_duration(grace),
                args.name,
            );
            let class = py.import("pyleasehold")?.getattr("RunTimeout")?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("cmd", argv_list(py, &args.argv)?)?;
            kwargs.set_item("timeout", limit.as_secs_f64())?;
            kwargs.set_item("output", output(&finished.stdout))?;
            kwargs.set_item("stderr", output(&finished.stderr))?;
            return Err(PyErr::from_value(class.call((message,), Some(&kwargs))?));
        }
        ended => ended.map_err(|e| errors::run(&e))?,
    };
    if !args.capture {
        return Ok(code.into_pyobject(py)?.into_any().unbind());
    }
    let completed = py.import("subprocess")?.getattr("CompletedProcess")?;
    Ok(completed
        .call1((
            argv_list(py, &args.argv)?,
            code,
            output(&finished.stdout),
            output(&finished.stderr),
        ))?
        .unbind())
}

/// The command as `subprocess` names one in `CompletedProcess.args`.
fn argv_list<'py>(py: Python<'py>, argv: &[std::ffi::OsString]) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    pyo3::types::PyList::new(py, argv)
}

/// `cwd` refused before anything starts, as `subprocess.run` refuses it:
/// the guard would otherwise fail to start, blamed on the guard program.
fn check_cwd(cwd: Option<&std::path::Path>) -> PyResult<()> {
    let Some(cwd) = cwd else { return Ok(()) };
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(pyo3::exceptions::PyNotADirectoryError::new_err(format!(
            "cwd {} is not a directory; nothing was run",
            cwd.display()
        ))),
        Err(e) => Err(pyo3::exceptions::PyOSError::new_err((
            e.raw_os_error().unwrap_or(0),
            format!("cwd {}: {e}; nothing was run", cwd.display()),
        ))),
    }
}

/// After `limit` from the command's start — unless the run is over first
/// (`over` closes) — stop it as a ^C does (the guard's SIGTERM to the
/// tree, SIGKILL after the grace period), marked as the timeout's doing.
fn stop_after(limit: Duration, over: std::sync::mpsc::Receiver<()>, handle: StopHandle, timed_out: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = over.recv_timeout(limit) {
            timed_out.store(true, Ordering::SeqCst);
            handle.stop(Stop::Shutdown);
        }
    });
}

/// A release that failed is a warning: the grant expires by its TTL.
fn warn_release(
    py: Python<'_>,
    name: &leasehold::LeaseName,
    grant: &leasehold::Grant,
    error: Option<leasehold::Error>,
) -> PyResult<()> {
    let Some(e) = error else { return Ok(()) };
    let message = supervise::ReleaseFailed {
        name,
        token: grant.token,
        error: &errors::library(&e),
    }
    .to_string();
    PyErr::warn(
        py,
        &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
        &std::ffi::CString::new(message).unwrap_or_default(),
        1,
    )
}

/// `env=`: a mapping of str to str, added to this process's environment.
/// The grant's own variables are refused: a command told another token
/// than its grant's would fence its writes with it.
pub fn env(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let mapping = value.cast::<pyo3::types::PyMapping>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "env must be a mapping of str to str (as os.environ), not {}",
            value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    let mut env = Vec::new();
    for item in mapping.items()?.iter() {
        let (key, val): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let (Ok(key), Ok(val)) = (key.extract::<String>(), val.extract::<String>()) else {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "env must map str to str: {}: {} is not",
                key.repr()?,
                val.repr()?
            )));
        };
        if key.is_empty() || key.contains(['=', '\0']) || val.contains('\0') {
            return Err(errors::invalid(format!(
                "env {key:?}: {val:?} cannot be an environment variable (a name is not empty and holds no '=' \
                 nor NUL; a value holds no NUL); nothing was run"
            )));
        }
        if GRANT_VARS.contains(&key.as_str()) {
            return Err(errors::invalid(format!(
                "env sets {key}, which run sets to the lease's grant (LEASEHOLD_NAME, LEASEHOLD_TOKEN, \
                 LEASEHOLD_GRANT, LEASEHOLD_OWNER, LEASEHOLD_STORE); leave it out; nothing was run"
            )));
        }
        env.push((key, val));
    }
    Ok(env)
}

/// What `run` sets in the command's environment for its grant.
const GRANT_VARS: [&str; 5] = [
    "LEASEHOLD_NAME",
    "LEASEHOLD_TOKEN",
    "LEASEHOLD_GRANT",
    "LEASEHOLD_OWNER",
    "LEASEHOLD_STORE",
];

/// `input=`: bytes, or str as UTF-8; `None`: stdin inherited.
pub fn input(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(text) = value.cast::<pyo3::types::PyString>() {
        return Ok(Some(text.to_cow()?.as_bytes().to_vec()));
    }
    if let Ok(bytes) = value.cast::<pyo3::types::PyBytes>() {
        return Ok(Some(bytes.as_bytes().to_vec()));
    }
    if let Ok(bytes) = value.cast::<pyo3::types::PyByteArray>() {
        return Ok(Some(bytes.to_vec()));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "input must be bytes or str (fed to the command's stdin), not {}",
        value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
    )))
}
