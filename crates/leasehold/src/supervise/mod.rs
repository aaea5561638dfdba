//! Supervision: run a command under a kept grant (or task claim), and stop
//! it before the grant could pass on — what `leasehold run` and `leasehold
//! work` stand on, usable from any program.
//!
//! # Shape
//!
//! ```text
//! this process (the supervisor)       holds the lease, keeper, event loop
//!   └─ guard (leasehold-guard __guard)   child subreaper; keeps the window too
//!        └─ CMD (leader of its group G)  and everything CMD starts
//! ```
//!
//! The guard is a separate program ([`GuardProgram`]; see [`guard`] for
//! why, and for how the default is found: `$LEASEHOLD_GUARD`, else
//! `leasehold-guard` beside the current executable, else on `$PATH`). It
//! runs one command ([`Supervised::spawn`]: a lease's, whose grant records
//! G) or, as a [`GuardSlot`], the same command once per task, one run
//! after another (a worker's: a claim records no group, so one guard
//! serves every task of a worker thread).
//!
//! # Life of a supervised command (states)
//!
//! 1. *spawned* — [`Supervised::spawn`] starts the guard, which forks the
//!    command's process as the leader of a new process group G (it waits
//!    there for its environment) and reports G. The caller now takes its
//!    lease bound to G. Not taken: [`Supervised::abort`] (closing the
//!    control socket ends the guard, and the waiting process with it). A
//!    slot's run ([`GuardSlot::next`]) has no G yet: the guard starts it in
//!    a new group when it gets its environment.
//! 2. *followed* — [`Supervised::follow`] ties the command to the keeper
//!    of its lease (or claim): a loss becomes a [`Stop`], and every move of
//!    the trust window is passed on to the guard, which stops the command
//!    by itself when the window closes with no newer one — so the command
//!    is gone in time even while this process is stopped, swapped out or
//!    starved. Call it before starting, so the guard knows the window
//!    before the command runs.
//! 3. *running* — [`Supervised::start_with`] hands the guard the command's
//!    environment (and, for a slot's run, its stdin, stdout and stderr);
//!    the command starts in G (its streams as chosen in [`Spec`]). Whoever else may stop the command — a
//!    stall watcher, a shutdown — stops it through a [`StopHandle`], which
//!    also passes signals on.
//! 4. *stopping* — [`Supervised::wait`] runs the event loop: on the first
//!    [`Stop`] it tells the guard to stop the tree — SIGTERM to G and to
//!    what left it, each process once (were both to signal, a member that
//!    outlives its leader would get a second SIGTERM from the guard's
//!    sweep) — and sends SIGKILL to G itself after the grace period. A
//!    guard that cannot be told (gone, or stopped with its socket full)
//!    leaves the SIGTERM to G to the supervisor; one that is stopped but
//!    told sends it when it runs again, and the supervisor's SIGKILL comes
//!    at the end of the grace whatever the guard does.
//! 5. *finished* — the guard reports the command's exit (after sweeping
//!    whatever the command left in its tree): [`Finished`]. A once-guard
//!    exits; a slot's waits for the next run.
//!
//! [`run`] does all of this for a lease, from acquiring to releasing.
//!
//! # Stopping before the lease can pass on
//!
//! With `sent` the boot-clock time the last successful acquire/renew was
//! sent, the store cannot expire the grant before `sent + ttl`. The keeper
//! stops trusting it at
//!
//! ```text
//! stop_at = sent + ttl - (grace + slack),   slack = max(500ms, ttl/20)
//! ```
//!
//! where the supervisor — or, if the supervisor is stopped or starved, the
//! guard — sends SIGTERM to G; SIGKILL follows at
//! `stop_at + grace = sent + ttl - slack`, so the command is gone before
//! the store could hand the lease to anyone else. The slack covers signal
//! delivery and scheduling. For a first renewal to happen inside the
//! window, `heartbeat + grace + slack < ttl` — [`Timing::new`] refuses
//! anything else.
//!
//! # Failure handling
//!
//! - The grant is lost (renewal refused, or the store down until the
//!   holder-side deadline): the command is stopped, [`Finished::stopped`]
//!   says why ([`Stop::Lost`]).
//! - This process dies, however: the guard reads EOF on its control socket
//!   and stops the tree.
//! - This process is stopped or starved: the guard stops the command at
//!   the last window it heard of.
//! - The guard dies: the supervisor sees its report pipe close and kills G
//!   itself ([`Finished::code`] is `None`); a slot whose guard died is
//!   replaced ([`GuardSlot::is_alive`]). What had left G is beyond its
//!   reach — unless this process adopted the guard's orphans
//!   ([`Supervised::adopt_orphans`], `leasehold run`): then it stops them
//!   too and knows when none is left. Otherwise [`Finished::tree_may_live`]
//!   is set and [`run`] does not release the lease: it stops renewing and
//!   returns once the store has expired the grant (the grant is bound to
//!   this process, so no one takes it over at once meanwhile).
//! - The command is stopped (SIGTSTP, SIGSTOP): every SIGTERM to it —
//!   forwarded, or a stop's — is followed by SIGCONT, so it acts on it.
//! - The command cannot start: [`Finished::spawn_error`] (127 not found,
//!   126 otherwise, as shells say).
//!
//! # Signals and the terminal (opt-in)
//!
//! The library installs no process-wide signal handler unless asked:
//! [`StopHandle::forward_signals`] (or [`LeaseRun::forward_signals`])
//! forwards SIGINT, SIGTERM and SIGHUP sent to this process to G. With
//! [`LeaseRun::forward_signals`], a signal that comes while the lease is
//! still waited for cancels the wait instead ([`LeaseRun::cancel`]): the
//! waiter leaves the queue and [`run`] returns `Held` — a waiter told to
//! stop never keeps its place. The
//! command runs in its own group, so a terminal's ^C would not reach it;
//! [`child::Terminal::hand_to`] (or [`LeaseRun::hand_terminal`]) hands the
//! terminal to G when this process is its foreground, as a shell does for
//! a job, and takes it back at the end.

pub mod child;
mod env;
pub mod guard;
mod hosted;
mod outcome;
mod supervised;
mod timing;

use std::sync::Arc;
use std::time::Duration;

pub use env::CommandEnv;
pub use guard::{GUARD_BUILD, GUARD_ENV, GUARD_NAME, GuardProgram};
pub use hosted::{CwdRefused, RunControl, check_cwd, env_refusal, run_hosted};
pub use outcome::{Ran, ReleaseFailed, RunError, RunOutcome};
pub use supervised::{Ending, Finished, GuardSlot, Output, Spec, Stop, StopHandle, Supervised};
pub use timing::{RENEWAL_ROOM, Timing, TimingError, TimingProblem, TimingRemedy, default_grace, slack};

use crate::{AcquireOptions, Binding, Cancel, Error, Grant, Held, Kept, LeaseName, Loss, Mode, Result, Store};

/// What can go wrong starting or talking to a guard.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// No guard program where [`GuardProgram::find`] looks.
    #[error(
        "cannot find the guard program {GUARD_NAME} ({searched}); install it beside this program or on PATH, or set {GUARD_ENV} to its path"
    )]
    GuardNotFound { searched: String },
    /// The guard program could not be started.
    #[error("cannot start the guard process ({program}): {error}")]
    GuardSpawn { program: String, error: std::io::Error },
    /// The guard started but did not report its process group.
    #[error("the guard process ({program}) did not start; run with LEASEHOLD_LOG=debug to see why")]
    GuardSilent { program: String },
    /// The guard program is another build of leasehold than this program
    /// ([`GUARD_BUILD`]), which may speak another protocol: it started
    /// nothing.
    #[error(
        "the guard program ({program}) is another build of leasehold ({theirs}; this program is {ours}) and started nothing; install the {GUARD_NAME} that came with this program, or set {GUARD_ENV} to it"
    )]
    GuardOtherBuild {
        program: String,
        theirs: String,
        ours: String,
    },
    /// A pipe to the guard, or the signal handlers, failed.
    #[error("{what}: {error}")]
    Io { what: &'static str, error: std::io::Error },
}

impl SuperviseError {
    /// What kind of failure this is: a helper process failed.
    #[must_use]
    pub fn kind(&self) -> leasehold_backend::ErrorKind {
        leasehold_backend::ErrorKind::Failed
    }
}

/// How [`run`] runs a command under a lease.
#[derive(Debug, Clone)]
pub struct LeaseRun {
    pub name: LeaseName,
    /// TTL, heartbeat and grace ([`Timing::new`]).
    pub timing: Timing,
    /// The grant's owner label (default `host:pid`, as
    /// [`AcquireOptions::owner`](crate::AcquireOptions::owner)).
    pub owner: Option<String>,
    pub mode: Mode,
    /// `None`: try once. `Some(timeout)`: wait in FIFO order up to the
    /// timeout (forever when `None`), as [`Store::acquire_wait`].
    pub wait: Option<Option<Duration>>,
    /// Ends the wait for the lease early (as [`Store::acquire_wait`]):
    /// [`run`] then returns [`RunOutcome::Held`], nothing having run. With
    /// `forward_signals`, the signals cancel it too ([`Cancel::signal`]
    /// says which). A cancel that comes after the lease was granted stops
    /// the command as soon as it starts ([`Stop::Shutdown`]; a signal is
    /// passed on to it instead).
    pub cancel: Cancel,
    /// Process-wide handlers for SIGINT, SIGTERM and SIGHUP (opt-in):
    /// while the lease is waited for, they cancel the wait (`cancel`: the
    /// waiter leaves the queue); once the lease is granted, they forward
    /// each signal to the command.
    pub forward_signals: bool,
    /// Hand the terminal to the command while it runs, when this process
    /// is the terminal's foreground.
    pub hand_terminal: bool,
    /// More variables for the command's environment, beside the lease's
    /// (`leasehold cron` adds `LEASEHOLD_SLOT`).
    pub env: Vec<(String, String)>,
    /// Start the command only if the lease is granted by then, else
    /// release it ([`RunError::TooLate`]): a slot's `--deadline`, which a
    /// wait of the store for the lease must not exceed.
    pub start_by: Option<std::time::Instant>,
}

impl LeaseRun {
    /// Try `name` once, exclusively; no signals, no terminal.
    #[must_use]
    pub fn new(name: LeaseName, timing: Timing) -> Self {
        Self {
            name,
            timing,
            owner: None,
            mode: Mode::Exclusive,
            wait: None,
            cancel: Cancel::new(),
            forward_signals: false,
            hand_terminal: false,
            env: Vec::new(),
            start_by: None,
        }
    }
}

/// Release `grant` — unless the store refused a renewal: then it is gone.
fn release_unless_refused(store: &Store, grant: &Grant, loss: &Loss) -> Option<Error> {
    if matches!(loss, Loss::Refused(_)) {
        return None;
    }
    release(store, grant)
}

fn release(store: &Store, grant: &Grant) -> Option<Error> {
    store.release(grant).err()
}

/// Run `spec` under the lease `lease.name`, from acquiring to releasing:
/// start the guard, acquire bound to this process and the command's group
/// (`on_held` is called after each refused attempt while waiting), keep
/// the grant, start the command with `LEASEHOLD_NAME`, `LEASEHOLD_TOKEN`,
/// `LEASEHOLD_GRANT` (the grant's identity, which fenced writes record:
/// [`crate::files::Fence::with_grant_from_env`]), `LEASEHOLD_OWNER` and
/// `LEASEHOLD_STORE` in its environment, wait for it
/// and release (unless the store refused a renewal: then it is gone). A
/// grant whose trust window had closed by the time the store answered is
/// released without starting anything ([`RunError::LostBeforeStart`]).
///
/// # Errors
/// [`Error::Store`] when acquiring fails; [`Error::Supervise`] when the
/// guard cannot be started or told.
///
/// # Examples
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold::supervise::{self, GuardProgram, LeaseRun, Output, RunOutcome, Spec, Timing};
/// use leasehold::{LeaseName, Store};
///
/// let store = Arc::new(Store::open_sqlite("/tmp/leasehold.db".as_ref())?);
/// let timing = Timing::new(Duration::from_secs(30), None, None).unwrap();
/// let spec = Spec {
///     command: vec!["sh".into(), "-c".into(), "echo $LEASEHOLD_TOKEN".into()],
///     guard: GuardProgram::find()?,
///     grace: timing.grace,
///     stdin: None,
///     output: Output::Inherit,
///     stall: None,
/// };
/// let lease = LeaseRun::new(LeaseName::new("nightly").unwrap(), timing);
/// match supervise::run(&store, &lease, spec, |_| {})? {
///     RunOutcome::Held(held) => eprintln!("already running: {held}"),
///     RunOutcome::Ran(ran) => match ran.ended {
///         Ok(code) => println!("exit {code}"),
///         Err(why) => eprintln!("{why}"),
///     },
/// }
/// # Ok::<(), leasehold::Error>(())
/// ```
pub fn run(store: &Arc<Store>, lease: &LeaseRun, spec: Spec, on_held: impl FnMut(&Held)) -> Result<RunOutcome> {
    run_with(store, lease, spec, on_held, |_, _| {})
}

/// As [`run`], handing `on_start` the grant and the command's
/// [`StopHandle`] just before the command starts — for a caller that stops it from elsewhere without
/// process-wide signal handlers (the Python package, on a
/// `KeyboardInterrupt`). A stop asked for before the command has started
/// takes effect as soon as it has.
///
/// # Errors
/// As [`run`].
pub fn run_with(
    store: &Arc<Store>,
    lease: &LeaseRun,
    spec: Spec,
    on_held: impl FnMut(&Held),
    on_start: impl FnOnce(&Grant, StopHandle),
) -> Result<RunOutcome> {
    run_spawned(store, lease, Supervised::spawn(spec)?, on_held, on_start)
}

/// [`run_with`], with the guard already started ([`Supervised::launch`]
/// or [`Supervised::spawn`]): a program that launches the guard before it
/// opens its store has the two overlap (the guard's start-up is a
/// process's start-up; `leasehold run` does this).
///
/// # Errors
/// As [`run`].
pub fn run_spawned(
    store: &Arc<Store>,
    lease: &LeaseRun,
    mut supervised: Supervised,
    on_held: impl FnMut(&Held),
    on_start: impl FnOnce(&Grant, StopHandle),
) -> Result<RunOutcome> {
    if let Err(e) = supervised.await_group() {
        supervised.abort();
        return Err(e.into());
    }
    // One set of handlers for the whole run: a signal cancels the wait,
    // then, once the command exists, goes to the command.
    let signals = if lease.forward_signals {
        match lease.cancel.on_signals() {
            Ok(watch) => Some(watch),
            Err(error) => {
                supervised.abort();
                return Err(SuperviseError::Io {
                    what: "cannot install the signal handlers",
                    error,
                }
                .into());
            }
        }
    } else {
        None
    };
    let (grant, keeper) = match acquire_and_keep(store, lease, &supervised, on_held) {
        Ok(Kept::Acquired(grant, keeper)) => (grant, keeper),
        Ok(Kept::Held(held)) => {
            supervised.abort();
            return Ok(RunOutcome::Held(held));
        }
        Err(e) => {
            supervised.abort();
            return Err(e);
        }
    };
    // A grant answered after its window closed is already no grant to work
    // under: the store may expire it any moment (or has), and someone else
    // may hold it by the time the command would start.
    if let Some(loss) = keeper.check() {
        supervised.abort();
        keeper.stop();
        return Ok(lost_before_start(store, lease, grant, loss));
    }
    if let Some(late) = lease
        .start_by
        .and_then(|by| std::time::Instant::now().checked_duration_since(by))
        .filter(|late| !late.is_zero())
    {
        supervised.abort();
        keeper.stop();
        let release_error = release(store, &grant);
        return Ok(RunOutcome::Ran(Ran {
            grant,
            ended: Err(RunError::TooLate {
                name: lease.name.clone(),
                late,
            }),
            finished: Finished::default(),
            release_error,
        }));
    }
    let stall = supervised.stall().cloned();
    let terminal = lease
        .hand_terminal
        .then(|| supervised.group_pid().and_then(child::Terminal::hand_to))
        .flatten();
    supervised.follow(&keeper);
    if let Some(signals) = &signals {
        let handle = supervised.stop_handle();
        signals.forward_to(move |sig| {
            let _ = handle.signal(sig);
        });
    } else if lease.cancel.is_cancelled() {
        // Cancelled too late to end the wait (the lease came first): the
        // command is stopped as soon as it starts.
        let _ = supervised.stop_handle().stop(Stop::Shutdown);
    }
    on_start(&grant, supervised.stop_handle());
    let started = supervised.start_with(&CommandEnv::of_grant(store, &lease.name, &grant, &lease.env));
    let finished = match started {
        Ok(()) => Ok(supervised.wait()),
        Err(e) => {
            supervised.abort();
            Err(e)
        }
    };
    let tree_may_live = finished.as_ref().is_ok_and(|f| f.tree_may_live);
    let renewed = keeper.last_renewed();
    let release_error = match keeper.stop() {
        // What the guard kept may run on unseen: no release, and no exit
        // (the grant is bound to this process) before the store expires it.
        _ if tree_may_live => {
            outlast(store, lease, &grant, renewed);
            None
        }
        Some(loss) => release_unless_refused(store, &grant, &loss),
        None => release(store, &grant),
    };
    drop(terminal);
    drop(signals);
    let finished = finished?;
    Ok(RunOutcome::Ran(Ran {
        ended: ended(lease, &grant, &finished, stall),
        grant,
        finished,
        release_error,
    }))
}

/// The guard died and processes of the command's tree may live on where
/// nothing can find them ([`Finished::tree_may_live`]): the grant is not
/// released, and this process — which the grant is bound to, so nobody
/// takes it over at once — stays until the store has expired it: until
/// `sent + TTL` (`sent`: when the last successful renewal was sent, on the
/// boot clock; the store cannot expire the grant before), and then for as
/// long as the store still lists it live (a few looks; a store that does
/// not answer ends the wait).
fn outlast(store: &Store, lease: &LeaseRun, grant: &Grant, sent: Duration) {
    let ttl = lease.timing.ttl();
    let until = sent + ttl;
    // In slices: sleep runs on a clock that stops during suspend.
    while let Some(left) = until.checked_sub(crate::host::boot_clock()).filter(|l| !l.is_zero()) {
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    for _ in 0..3 {
        let left = match store.status(&lease.name) {
            Ok(Some(state)) => state
                .grants
                .iter()
                .find(|g| g.token == grant.token)
                .map(|g| g.expires_in),
            _ => None,
        };
        match left {
            Some(left) if !left.is_zero() => std::thread::sleep(left.min(ttl) + Duration::from_millis(10)),
            _ => return,
        }
    }
}

/// Acquire the lease for the `supervised` command — bound to this process,
/// the command's process group and its guard (waiting if the run says so)
/// — and start keeping it.
fn acquire_and_keep(
    store: &Arc<Store>,
    lease: &LeaseRun,
    supervised: &Supervised,
    on_held: impl FnMut(&Held),
) -> Result<Kept> {
    let options = AcquireOptions {
        ttl: lease.timing.ttl(),
        owner: lease.owner.clone(),
        mode: lease.mode,
        binding: Binding::Process {
            pid: std::process::id(),
            pgid: supervised.group(),
            guard: Some(supervised.guard_pid()),
        },
    };
    let keep = lease.timing.keeper.clone();
    match lease.wait {
        None => store.acquire_and_keep(&lease.name, &options, keep),
        Some(timeout) => store.acquire_wait_and_keep(&lease.name, &options, timeout, &lease.cancel, on_held, keep),
    }
}

/// The outcome of a run whose grant was lost before the command started
/// (its keeper already stopped): the command never ran.
fn lost_before_start(store: &Store, lease: &LeaseRun, grant: Grant, loss: Loss) -> RunOutcome {
    let release_error = release_unless_refused(store, &grant, &loss);
    let ended = Err(RunError::LostBeforeStart {
        name: lease.name.clone(),
        token: grant.token,
        loss,
    });
    RunOutcome::Ran(Ran {
        grant,
        ended,
        finished: Finished::default(),
        release_error,
    })
}

/// How the command ended, read from what the guard reported.
#[allow(clippy::result_large_err, reason = "once per run, like the outcome it goes into")]
fn ended(
    lease: &LeaseRun,
    grant: &Grant,
    finished: &Finished,
    stall: Option<(Duration, Option<std::path::PathBuf>)>,
) -> std::result::Result<u8, RunError> {
    let grace = lease.timing.grace;
    Err(match finished.ending() {
        Ending::Exited(code) => return Ok(code),
        Ending::Stopped(Stop::Lost(loss)) => RunError::Lost {
            name: lease.name.clone(),
            token: grant.token,
            loss: loss.clone(),
            grace,
        },
        Ending::Stopped(Stop::Stalled(limit)) => RunError::Stalled {
            limit: *limit,
            progress_file: stall.and_then(|(_, file)| file),
            grace,
        },
        Ending::Stopped(Stop::Shutdown) => RunError::Interrupted { grace },
        Ending::CouldNotStart { code, message } => RunError::CouldNotStart {
            code,
            message: message.to_owned(),
        },
        Ending::GuardDied => RunError::GuardDied {
            name: lease.name.clone(),
            tree_stopped: !finished.tree_may_live,
        },
    })
}
