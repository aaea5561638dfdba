//! `store.run(name, command, args, options)`: a command under a lease
//! through the library's supervision for a host program
//! ([`leasehold::supervise::run_hosted`], as Python's `store.run`): its own
//! process group, the guard that stops it before the lease could pass on
//! even if this process is stopped or killed, the grant bound to this
//! process and the command's group. The whole run — the wait, the
//! command, the release — happens on a thread of the package's own; the
//! promise settles once the command and every process it started are
//! gone and the lease is released.
//!
//! An `AbortSignal` (lib/run.js) reaches the run through a
//! [`NativeRunControl`]: it ends the wait (out of the queue) or stops the
//! command (SIGTERM to its tree, SIGKILL after the grace period). So does
//! the end of the JavaScript environment that started it (a Worker that
//! ends, the process's exit: envs.rs).
//!
//! The guard program: `$LEASEHOLD_GUARD`, else `leasehold-guard` (or the
//! `leasehold` command, its own guard) beside the addon — where the
//! platform package installs them — else the library's default places
//! ([`GuardProgram::find_beside`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leasehold::supervise::{self, GuardProgram, LeaseRun, Output, RunControl, RunOutcome, Spec, Timing};
use leasehold::{LeaseName, Mode};
use napi::bindgen_prelude::{Buffer, Object};
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls::on_thread_then;
use crate::convert::DEFAULT_TTL;
use crate::convert::{self, Wait};
use crate::envs::{self, LetGo};
use crate::errors;
use crate::lease::{HeldFacts, held_facts};
use crate::store::NativeStore;

/// `store.run`'s options, as lib/run.js passes them (checked there for
/// their kinds).
#[allow(missing_debug_implementations, reason = "napi's Buffer has no Debug")]
#[napi(object)]
pub struct RunArgs {
    pub ttl: Option<Either<f64, String>>,
    pub heartbeat: Option<Either<f64, String>>,
    pub grace: Option<Either<f64, String>>,
    pub wait: Option<Either<bool, Either<f64, String>>>,
    pub shared: Option<Either<bool, f64>>,
    pub owner: Option<String>,
    pub stall_timeout: Option<Either<f64, String>>,
    pub progress_file: Option<String>,
    pub env: Option<HashMap<String, String>>,
    pub cwd: Option<String>,
    pub input: Option<Buffer>,
    pub capture_output: Option<bool>,
    pub timeout: Option<Either<f64, String>>,
}

/// How a run ended, for lib/run.js: the lease was held (`held`), or the
/// command ran — to its own end (`code`, `signal`) or not (`failure`: the
/// error, `CLASS: message`); `stdout`/`stderr` when captured; `warning`
/// when the release failed (the grant expires by its TTL).
#[napi(object)]
pub struct RunEnded {
    pub held: Option<HeldFacts>,
    pub code: Option<u32>,
    /// The number of the signal that ended the command, when one did.
    pub signal: Option<u32>,
    pub failure: Option<String>,
    /// The failure is the run's stop (an abort, or the environment's end).
    pub interrupted: bool,
    /// The failure is the timeout's: its limit in ms.
    pub timeout_ms: Option<f64>,
    pub stdout: Option<Buffer>,
    pub stderr: Option<Buffer>,
    pub warning: Option<String>,
}

/// [`RunEnded`] before it reaches the JavaScript thread (where the
/// buffers are made).
struct Ended {
    held: Option<HeldFacts>,
    code: Option<u8>,
    signal: Option<u8>,
    failure: Option<String>,
    interrupted: bool,
    timeout_ms: Option<f64>,
    output: Option<(Vec<u8>, Vec<u8>)>,
    warning: Option<String>,
}

/// Stops a run from JavaScript (an `AbortSignal`'s abort): the wait for
/// the lease ends, out of the queue, or the command is stopped.
#[derive(Debug)]
#[napi]
pub struct NativeRunControl {
    control: Arc<StopAtEnd>,
}

/// A run's control, stopped when its environment ends.
#[derive(Debug, Default)]
struct StopAtEnd(RunControl);

impl LetGo for StopAtEnd {
    fn let_go(&self) {
        self.0.stop();
    }
}

#[napi]
impl NativeRunControl {
    #[napi(constructor)]
    #[allow(clippy::new_without_default, reason = "a JavaScript constructor")]
    pub fn new() -> Self {
        Self {
            control: Arc::default(),
        }
    }

    #[napi]
    pub fn stop(&self) {
        self.control.0.stop();
    }
}

/// The guard program, the addon being in `addon_dir`.
fn guard(addon_dir: &Path) -> napi::Result<GuardProgram> {
    GuardProgram::find_beside(addon_dir).map_err(|e| errors::library(&leasehold::Error::from(e)))
}

/// The caller's variables, each refused as the library refuses it.
fn extra_env(env: Option<HashMap<String, String>>) -> napi::Result<Vec<(String, String)>> {
    let mut pairs: Vec<(String, String)> = env.unwrap_or_default().into_iter().collect();
    pairs.sort();
    for (key, value) in &pairs {
        if let Some(refusal) = supervise::env_refusal(key, value) {
            return Err(errors::invalid(refusal));
        }
    }
    Ok(pairs)
}

#[napi]
impl NativeStore {
    /// Run `argv` under the lease `name`: a promise of how it ended
    /// ([`RunEnded`]), `argv` the program and its arguments. `addon_dir`:
    /// where to look for the guard.
    #[napi]
    pub fn run<'env>(
        &self,
        env: &'env Env,
        name: String,
        argv: Vec<String>,
        options: RunArgs,
        control: &NativeRunControl,
        addon_dir: String,
    ) -> napi::Result<Object<'env>> {
        let name = convert::lease_name(&name)?;
        if argv.first().is_none_or(String::is_empty) {
            return Err(errors::invalid(
                "run: the command is empty: give a program (and its arguments as an array)",
            ));
        }
        let cwd = options.cwd.map(PathBuf::from);
        if let Some(cwd) = &cwd {
            supervise::check_cwd(cwd).map_err(|e| errors::invalid(e.to_string()))?;
        }
        let ttl = convert::opt_duration(options.ttl.as_ref(), "ttl")?.unwrap_or(DEFAULT_TTL);
        let timing = Timing::new(
            ttl,
            convert::opt_duration(options.heartbeat.as_ref(), "heartbeat")?,
            convert::opt_duration(options.grace.as_ref(), "grace")?,
        )
        .map_err(|e| errors::invalid(e.worded(&leasehold::spelling::Options)))?;
        let wait = convert::wait(options.wait.as_ref())?;
        if let Some(Some(limit)) = wait.timeout() {
            leasehold::limits::WAIT
                .check(limit)
                .map_err(|e| errors::library(&leasehold::Error::from(e)))?;
        }
        let mode = convert::mode(options.shared.as_ref())?;
        let stall = convert::opt_duration(options.stall_timeout.as_ref(), "stallTimeout")?;
        let timeout = convert::opt_duration(options.timeout.as_ref(), "timeout")?;
        let capture = options.capture_output == Some(true);
        let mut spec = Spec::watched(
            argv.into_iter().map(Into::into).collect(),
            guard(Path::new(&addon_dir))?,
            timing.grace,
            stall.map(|limit| (limit, options.progress_file.map(PathBuf::from))),
        );
        spec.stdin = options.input.map(|b| b.to_vec());
        if capture {
            spec.output = Output::Capture;
        }
        let lease = LeaseRun {
            owner: options.owner,
            mode,
            wait: wait.timeout(),
            env: extra_env(options.env)?,
            ..LeaseRun::new(name.clone(), timing)
        };
        // Registered now: a Worker that ends while this runs stops it.
        let stopper = control.control.clone();
        envs::register(*env, Arc::downgrade(&stopper) as std::sync::Weak<dyn LetGo>)?;
        let opener = self.opener();
        let work = move || -> napi::Result<Ended> {
            let store = opener.handle()?;
            let outcome = supervise::run_hosted(&store, lease, spec, cwd.as_deref(), timeout, &stopper.0)
                .map_err(|e| errors::library(&e))?;
            ended(&name, mode, wait, capture, outcome)
        };
        on_thread_then(env, work, |_, ended| {
            let (stdout, stderr) = match ended.output {
                Some((out, err)) => (Some(out.into()), Some(err.into())),
                None => (None, None),
            };
            Ok(RunEnded {
                held: ended.held,
                code: ended.code.map(u32::from),
                signal: ended.signal.map(u32::from),
                failure: ended.failure,
                interrupted: ended.interrupted,
                timeout_ms: ended.timeout_ms,
                stdout,
                stderr,
                warning: ended.warning,
            })
        })
    }
}

/// What became of a run, in the terms lib/run.js turns into a result or
/// an error.
fn ended(name: &LeaseName, mode: Mode, wait: Wait, capture: bool, outcome: RunOutcome) -> napi::Result<Ended> {
    let ran = match outcome {
        RunOutcome::Held(held) => {
            return Ok(Ended {
                held: Some(held_facts(name, &held, mode, wait)?),
                code: None,
                signal: None,
                failure: None,
                interrupted: false,
                timeout_ms: None,
                output: None,
                warning: None,
            });
        }
        RunOutcome::Ran(ran) => ran,
    };
    let warning = ran.release_error.map(|e| {
        supervise::ReleaseFailed {
            name,
            token: ran.grant.token,
            error: &e,
        }
        .to_string()
    });
    let finished = ran.finished;
    let (code, failure, interrupted, timeout_ms) = match &ran.ended {
        Ok(code) => (Some(*code), None, false, None),
        Err(e) => (
            None,
            Some(errors::new(e.class_name(), e.to_string()).reason.clone()),
            matches!(e, supervise::RunError::Interrupted { .. }),
            match e {
                supervise::RunError::TimedOut { limit, .. } => Some(limit.as_secs_f64() * 1000.0),
                _ => None,
            },
        ),
    };
    Ok(Ended {
        held: None,
        code,
        signal: if ran.ended.is_ok() { finished.signal } else { None },
        failure,
        interrupted,
        timeout_ms,
        output: capture.then_some((finished.stdout, finished.stderr)),
        warning,
    })
}
