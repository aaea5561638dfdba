//! A command under a lease run by a program that hosts the library —
//! Python's and Node.js's `store.run` — rather than by `leasehold run`.
//! What differs is only what a library may not do to its host process: no
//! process-wide signal handlers and no terminal hand-over (the host's
//! own). Instead the host stops the run from wherever it learns it must
//! (a `KeyboardInterrupt`, an `AbortSignal`, its own exit) through a
//! [`RunControl`], and what `subprocess.run` users reach for is here, each
//! through the supervisor: a working directory ([`check_cwd`] first),
//! variables added to the environment ([`env_refusal`]), input, captured
//! output (in the [`Spec`]) and a timeout.
//!
//! # States of a [`RunControl`]
//!
//! ```text
//! not started ─ the command starts ─► started(StopHandle) ─ stop() ─► stopped: SIGTERM, SIGKILL after grace
//!      └─ stop() ─► stopped: the wait for the lease ends (out of the queue);
//!                   a grant that came anyway has its command stopped as soon as it starts
//! ```
//!
//! A timeout stops the command as a lost lease does (the guard's SIGTERM
//! to its whole tree, SIGKILL after the grace period); the run returns
//! once every process of it is gone and the lease is released, its
//! ending [`RunError::TimedOut`].

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{CommandEnv, LeaseRun, RunError, RunOutcome, Spec, Stop, StopHandle, Supervised, run_spawned};
use crate::{Cancel, Result, Store};

/// Stops a hosted run from any thread: the wait for its lease, or its
/// command. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct RunControl {
    cancel: Cancel,
    state: Arc<Mutex<Control>>,
}

/// Whether the command may go on, as the host last said.
#[derive(Debug, Default)]
enum Control {
    #[default]
    NotStarted,
    Started(StopHandle),
    /// Stop it as soon as it starts.
    Stopped,
}

impl RunControl {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The cancel of the wait for the lease ([`LeaseRun::cancel`]): a
    /// host that also ends waits some other way (Python's interpreter
    /// exit) cancels it.
    #[must_use]
    pub fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Stop the run: the wait for the lease ends (the waiter leaves the
    /// queue; the run returns [`RunOutcome::Held`]), or the command is
    /// stopped ([`Stop::Shutdown`]: SIGTERM to its tree, SIGKILL after
    /// the grace period; its ending [`RunError::Interrupted`]) — as soon
    /// as it starts, when the lease was granted as the stop came.
    pub fn stop(&self) {
        self.cancel.cancel();
        let was = std::mem::replace(&mut *self.state(), Control::Stopped);
        if let Control::Started(handle) = was {
            let _ = handle.stop(Stop::Shutdown);
        }
    }

    fn started(&self, handle: StopHandle) {
        let mut state = self.state();
        if matches!(*state, Control::Stopped) {
            let _ = handle.stop(Stop::Shutdown);
        }
        *state = Control::Started(handle);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Control> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Run `spec` under `lease` for a host: in `cwd` (`None`: this
/// process's), stopped after `timeout` from the command's start (its
/// ending then [`RunError::TimedOut`]), and by `control`. The lease's
/// `cancel` is `control`'s; the host's signals and terminal are left
/// alone whatever `lease` says.
///
/// # Errors
/// As [`super::run`]; a `cwd` that cannot be entered fails the guard's
/// start: check it first ([`check_cwd`]).
pub fn run_hosted(
    store: &Arc<Store>,
    mut lease: LeaseRun,
    spec: Spec,
    cwd: Option<&Path>,
    timeout: Option<Duration>,
    control: &RunControl,
) -> Result<RunOutcome> {
    lease.cancel = control.cancel.clone();
    lease.forward_signals = false;
    lease.hand_terminal = false;
    let program = spec
        .command
        .first()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let timed_out = Arc::new(AtomicBool::new(false));
    // Dropped when the run is over: the timer ends with it.
    let (over, timer) = mpsc::channel::<()>();
    let supervised = Supervised::launch_in(spec, cwd)?;
    let outcome = run_spawned(store, &lease, supervised, |_| {}, {
        let timed_out = timed_out.clone();
        move |_, handle| {
            if let Some(limit) = timeout {
                stop_after(limit, timer, handle.clone(), timed_out);
            }
            control.started(handle);
        }
    });
    drop(over);
    let mut outcome = outcome?;
    if let (RunOutcome::Ran(ran), Some(limit)) = (&mut outcome, timeout)
        && timed_out.load(Ordering::SeqCst)
        && let Err(RunError::Interrupted { grace }) = ran.ended
    {
        ran.ended = Err(RunError::TimedOut {
            program,
            name: lease.name.clone(),
            limit,
            grace,
        });
    }
    Ok(outcome)
}

/// After `limit` — unless the run is over first (`over` closes) — stop
/// the command as a shutdown does, marked as the timeout's doing.
fn stop_after(limit: Duration, over: mpsc::Receiver<()>, handle: StopHandle, timed_out: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = over.recv_timeout(limit) {
            timed_out.store(true, Ordering::SeqCst);
            let _ = handle.stop(Stop::Shutdown);
        }
    });
}

/// A working directory refused before anything starts (the guard, which
/// starts there, would otherwise fail, blamed on the guard program).
#[derive(Debug, thiserror::Error)]
pub enum CwdRefused {
    #[error("cwd {} is not a directory; nothing was run", .0.display())]
    NotADirectory(std::path::PathBuf),
    #[error("cwd {}: {}; nothing was run", .0.display(), .1)]
    Unusable(std::path::PathBuf, std::io::Error),
}

/// `cwd` as a hosted run's working directory: an existing directory.
///
/// # Errors
/// [`CwdRefused`], naming it.
pub fn check_cwd(cwd: &Path) -> std::result::Result<(), CwdRefused> {
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(CwdRefused::NotADirectory(cwd.to_owned())),
        Err(e) => Err(CwdRefused::Unusable(cwd.to_owned(), e)),
    }
}

/// Why `key=value` cannot be added to a hosted command's environment
/// (`None`: it can): a name that is empty or holds `=` or NUL, a value
/// holding NUL — or one of the variables the run sets to the lease's
/// grant: a command told another token than its grant's would fence its
/// writes with it.
#[must_use]
pub fn env_refusal(key: &str, value: &str) -> Option<String> {
    if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
        return Some(format!(
            "env {key:?}: {value:?} cannot be an environment variable (a name is not empty and holds no '=' nor \
             NUL; a value holds no NUL); nothing was run"
        ));
    }
    CommandEnv::LEASE_VARS.contains(&key).then(|| {
        format!(
            "env sets {key}, which run sets to the lease's grant ({}); leave it out; nothing was run",
            CommandEnv::LEASE_VARS.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grants_variables_and_impossible_ones_are_refused() {
        assert_eq!(env_refusal("A", "b"), None);
        assert_eq!(env_refusal("A", ""), None);
        for (key, value) in [("", "x"), ("A=B", "x"), ("A\0", "x"), ("A", "x\0y")] {
            let refusal = env_refusal(key, value).expect("refused");
            assert!(refusal.contains("cannot be an environment variable"), "{refusal}");
        }
        for key in CommandEnv::LEASE_VARS {
            let refusal = env_refusal(key, "9").expect("refused");
            assert!(
                refusal.starts_with(&format!(
                    "env sets {key}, which run sets to the lease's grant (LEASEHOLD_NAME,"
                )),
                "{refusal}"
            );
        }
    }

    #[test]
    fn a_cwd_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        check_cwd(dir.path()).unwrap();
        let file = dir.path().join("f");
        std::fs::File::create(&file).unwrap();
        assert!(matches!(check_cwd(&file), Err(CwdRefused::NotADirectory(_))));
        let missing = check_cwd(&dir.path().join("missing")).unwrap_err();
        assert!(missing.to_string().ends_with("; nothing was run"), "{missing}");
        assert!(matches!(&missing, CwdRefused::Unusable(_, e) if e.kind() == std::io::ErrorKind::NotFound));
    }
}
