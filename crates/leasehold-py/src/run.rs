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
use std::sync::Arc;
use std::time::Duration;

use leasehold::supervise::{self, LeaseRun, Output, RunControl, RunError, RunOutcome, Spec, Timing};
use leasehold::{LeaseName, Mode};
use pyo3::prelude::*;

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

/// What `store.run` returns: the exit code, or with `capture_output` a
/// `subprocess.CompletedProcess`.
pub fn run(py: Python<'_>, store: Arc<leasehold::Store>, args: &RunArgs) -> PyResult<Py<PyAny>> {
    if args.argv.is_empty() {
        return Err(errors::invalid("argv is empty: give the command and its arguments"));
    }
    if let Some(cwd) = &args.cwd {
        supervise::check_cwd(cwd).map_err(|e| match &e {
            supervise::CwdRefused::NotADirectory(_) => pyo3::exceptions::PyNotADirectoryError::new_err(e.to_string()),
            supervise::CwdRefused::Unusable(_, io) => {
                pyo3::exceptions::PyOSError::new_err((io.raw_os_error().unwrap_or(0), e.to_string()))
            }
        })?;
    }
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
    let lease = LeaseRun {
        owner: args.owner.clone(),
        mode: args.mode,
        wait: args.wait.timeout(),
        env: args.env.clone(),
        ..LeaseRun::new(args.name.clone(), timing)
    };
    let (cwd, timeout) = (args.cwd.clone(), args.timeout);
    // A ^C while waiting ends the wait (the waiter leaves the queue); while
    // the command runs, it stops it.
    let control = RunControl::new();
    let call = {
        let control = control.clone();
        Background::spawn(move || {
            // A wait for the lease ends, out of the queue, if the interpreter exits.
            let _watched = crate::exiting::watch(control.cancel());
            supervise::run_hosted(&store, lease, spec, cwd.as_deref(), timeout, &control)
        })
    };
    let outcome = match call.wait(py) {
        Ok(outcome) => outcome,
        Err(interrupted) => {
            control.stop();
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
    returned(py, args, ran.ended, &ran.finished)
}

/// What `run` returns for a command that ran: its exit code, or a
/// `CompletedProcess` with what it wrote; `RunTimeout` when the timeout
/// stopped it, the exception of its outcome otherwise.
fn returned(
    py: Python<'_>,
    args: &RunArgs,
    ended: Result<u8, RunError>,
    finished: &supervise::Finished,
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
        Err(e @ RunError::TimedOut { limit, .. }) => {
            let class = py.import("pyleasehold")?.getattr("RunTimeout")?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("cmd", argv_list(py, &args.argv)?)?;
            kwargs.set_item("timeout", limit.as_secs_f64())?;
            kwargs.set_item("output", output(&finished.stdout))?;
            kwargs.set_item("stderr", output(&finished.stderr))?;
            return Err(PyErr::from_value(class.call((e.to_string(),), Some(&kwargs))?));
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
        if let Some(refusal) = supervise::env_refusal(&key, &val) {
            return Err(errors::invalid(refusal));
        }
        env.push((key, val));
    }
    Ok(env)
}

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
