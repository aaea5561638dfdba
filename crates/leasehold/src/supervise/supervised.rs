//! [`Supervised`]: one command under its guard — the process tree, the
//! output pumps, the stall watcher and the event loop that stops it. The
//! life of a supervised command is told in [`crate::supervise`].

use std::ffi::OsString;
use std::io::{BufRead, BufReader, IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::io::Errno;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use rustix::process::{Pid, Signal};

use super::guard::protocol::{Control, Env, Report, Streams};
use super::{CommandEnv, GuardProgram, SuperviseError};
use crate::{Keeper, Loss, LostReason, Overdue, Refusal, host};

/// Why the supervisor stopped the command. `L` is the refusal of the kept
/// kind: [`LostReason`] for a lease, [`crate::ClaimLost`] for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop<L = LostReason> {
    /// The lease (or claim) was lost.
    Lost(Loss<L>),
    /// Nothing was written (or touched) for this long.
    Stalled(Duration),
    /// The supervisor is shutting down (a worker on SIGTERM).
    Shutdown,
}

/// Why, in a few words, for a log event (a front end words the outcome
/// whole: [`super::RunError`]).
impl<L: Refusal> std::fmt::Display for Stop<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Lost(loss) => write!(f, "lost: {loss}"),
            Stop::Stalled(limit) => write!(f, "stalled: nothing written for {}", crate::format_duration(*limit)),
            Stop::Shutdown => f.write_str("asked to shut down"),
        }
    }
}

/// What the supervisor reacts to.
#[derive(Debug)]
enum Event<L> {
    /// A once-guard's command process leads this group.
    Group(Pid),
    /// A slot's guard is up.
    Ready,
    Started(Pid),
    SpawnError(u8, String),
    Exited(u8),
    /// The guard found the trust window closed and stopped the command.
    GuardDeadline,
    GuardGone,
    Stop(Stop<L>),
    Signal(i32),
}

/// Stops a supervised command, or passes it a signal, from any thread.
#[derive(Debug)]
pub struct StopHandle<L = LostReason>(mpsc::Sender<Event<L>>);

impl<L> Clone for StopHandle<L> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<L: Refusal> StopHandle<L> {
    /// Stop the command (SIGTERM, then SIGKILL after the grace period);
    /// the first reason is the one reported. False once it has finished.
    #[allow(clippy::must_use_candidate, reason = "stopping is the point")]
    pub fn stop(&self, reason: Stop<L>) -> bool {
        self.0.send(Event::Stop(reason)).is_ok()
    }

    /// Send `signal` to the command's process group. False once it has
    /// finished.
    #[allow(clippy::must_use_candidate, reason = "signalling is the point")]
    pub fn signal(&self, signal: i32) -> bool {
        self.0.send(Event::Signal(signal)).is_ok()
    }

    /// Opt in: install process-wide handlers for SIGINT, SIGTERM and SIGHUP
    /// (signal-hook) that forward each to the command's group, until it has
    /// finished. The library installs none unless asked.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn forward_signals(&self) -> Result<(), SuperviseError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals =
            signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|error| SuperviseError::Io {
                what: "cannot install the signal handlers",
                error,
            })?;
        let this = self.clone();
        thread::spawn(move || {
            for sig in signals.forever() {
                if !this.signal(sig) {
                    return;
                }
            }
        });
        Ok(())
    }
}

/// What the command's output does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Inherited: the command writes straight to our stdout and stderr.
    Inherit,
    /// Piped through us (to watch for stalls), unchanged.
    Forward,
    /// stdout collected (up to `stdout_limit` bytes; more is an error the
    /// caller reports), stderr forwarded and its last `stderr_tail` bytes
    /// kept.
    Collect { stdout_limit: usize, stderr_tail: usize },
    /// stdout and stderr both collected whole ([`Finished::stdout`],
    /// [`Finished::stderr`]), nothing forwarded: Python's
    /// `store.run(capture_output=True)`, as `subprocess.run`'s.
    Capture,
}

/// How to run the command.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The program and its arguments, run directly (no shell).
    pub command: Vec<OsString>,
    /// The guard program ([`GuardProgram::find`] for the default).
    pub guard: GuardProgram,
    /// SIGTERM to SIGKILL ([`super::Timing::grace`]).
    pub grace: Duration,
    /// Bytes for the command's stdin (then closed); `None`: inherited.
    pub stdin: Option<Vec<u8>>,
    pub output: Output,
    /// Stop the command after this long without output (or a touch of the
    /// progress file).
    pub stall: Option<(Duration, Option<PathBuf>)>,
}

impl Spec {
    /// A command as `leasehold run` runs one: stdin inherited, output
    /// inherited — or, with a stall limit (and optionally a progress file
    /// whose touch counts as output), forwarded through the supervisor,
    /// which must see the output to notice that there is none.
    #[must_use]
    pub fn watched(
        command: Vec<OsString>,
        guard: GuardProgram,
        grace: Duration,
        stall: Option<(Duration, Option<PathBuf>)>,
    ) -> Self {
        Self {
            command,
            guard,
            grace,
            stdin: None,
            output: if stall.is_some() {
                Output::Forward
            } else {
                Output::Inherit
            },
            stall,
        }
    }
}

/// What the command produced and how it ended.
#[derive(Debug)]
pub struct Finished<L = LostReason> {
    /// Its exit code (128+N for signal N); `None` if the guard died.
    pub code: Option<u8>,
    /// Why we stopped it, if we did.
    pub stopped: Option<Stop<L>>,
    /// It could not be started: the shell's code (127/126) and why.
    pub spawn_error: Option<(u8, String)>,
    /// With `Output::Collect`: stdout, and whether it exceeded the limit.
    pub stdout: Vec<u8>,
    pub stdout_overflow: bool,
    /// With `Output::Collect`: the end of stderr.
    pub stderr_tail: Vec<u8>,
    /// With `Output::Capture`: all of stderr (stdout is in `stdout`).
    pub stderr: Vec<u8>,
    /// The guard died, and processes of the command's tree that had left
    /// its process group may still run where nothing can find them (this
    /// process did not adopt the guard's orphans:
    /// [`Supervised::adopt_orphans`]). A lease must then not be released.
    pub tree_may_live: bool,
}

/// How a command ended, as [`Finished::ending`] reads the guard's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a, L = LostReason> {
    /// We stopped it, for this reason (its exit code is then the
    /// signal's, not its own).
    Stopped(&'a Stop<L>),
    /// It could not be started: the shell's code (127/126) and why.
    CouldNotStart { code: u8, message: &'a str },
    /// It exited by itself with this code (128+N for signal N).
    Exited(u8),
    /// The guard died; the command's group was killed.
    GuardDied,
}

impl<L> Finished<L> {
    /// How the command ended, in the order that decides it — a stop of
    /// ours, then a start that failed, then its own exit, else a dead
    /// guard: the one reading of the report for every supervisor
    /// ([`run`](super::run), the worker).
    #[must_use]
    pub fn ending(&self) -> Ending<'_, L> {
        if let Some(stop) = &self.stopped {
            Ending::Stopped(stop)
        } else if let Some((code, message)) = &self.spawn_error {
            Ending::CouldNotStart { code: *code, message }
        } else {
            self.code.map_or(Ending::GuardDied, Ending::Exited)
        }
    }
}

impl<L> Default for Finished<L> {
    fn default() -> Self {
        Self {
            code: None,
            stopped: None,
            spawn_error: None,
            stdout: Vec::new(),
            stdout_overflow: false,
            stderr_tail: Vec::new(),
            stderr: Vec::new(),
            tree_may_live: false,
        }
    }
}

/// The guard process, and where its reports go: shared by a
/// [`GuardSlot`] and the commands it runs one after another, or owned by
/// one [`Supervised`] command.
#[derive(Debug)]
struct Guard<L> {
    program: String,
    child: Mutex<Child>,
    /// Our end of the control socket: the command's environment, then
    /// trust windows (from keeper threads, hence shared); closing it (or
    /// our death) tells the guard we are gone.
    control: Arc<Mutex<Option<OwnedFd>>>,
    /// The event loop of the command that runs now, fed by the thread
    /// reading the guard's reports.
    sink: Arc<Mutex<Sink<L>>>,
}

#[derive(Debug)]
struct Sink<L> {
    tx: Option<mpsc::Sender<Event<L>>>,
    /// The report pipe closed: the guard is gone.
    gone: bool,
}

impl<L> Guard<L> {
    fn close_control(&self) {
        drop(lock(&self.control).take());
    }
}

impl<L> Drop for Guard<L> {
    fn drop(&mut self) {
        // The guard ends on EOF, after stopping whatever still runs.
        self.close_control();
        let _ = lock(&self.child).wait();
    }
}

/// Spawning a guard hands it the child ends of a socket and a pipe;
/// serializing the spawns (and so the moments those ends are inheritable)
/// keeps one guard from inheriting another's ends, which would keep them
/// open after its guard died.
static SPAWN: Mutex<()> = Mutex::new(());

/// Make `fd` survive exec (inherited by the guard).
fn inheritable(fd: &OwnedFd) -> Result<(), SuperviseError> {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(|e| SuperviseError::Io {
        what: "cannot pass a descriptor to the guard",
        error: e.into(),
    })
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> Result<(OwnedFd, OwnedFd), SuperviseError> {
    host::pipe(false).map_err(|error| SuperviseError::Io {
        what: "cannot create a pipe for the command",
        error,
    })
}

/// Start the guard program with `extra` arguments and wait for its first
/// report (`group PID` or `ready`).
fn spawn_guard<L: Refusal>(
    spec: &Spec,
    cwd: Option<&std::path::Path>,
    extra: &[&str],
    stdin: Stdio,
    output: Stdio,
    errput: Stdio,
) -> Result<(Guard<L>, Channel<L>), SuperviseError> {
    let program = spec.guard.to_string();
    let (child, control, report) = {
        let _one_at_a_time = lock(&SPAWN);
        let (control, control_child) = host::control_socket_pair().map_err(|error| SuperviseError::Io {
            what: "cannot create the guard's control socket",
            error,
        })?;
        let (report, report_child) = host::pipe(false).map_err(|error| SuperviseError::Io {
            what: "cannot create a pipe to the guard",
            error,
        })?;
        inheritable(&control_child)?;
        inheritable(&report_child)?;
        let mut command = match cwd {
            // A relative path to the guard is this process's, not the
            // command's directory's.
            Some(_) if spec.guard.program().is_relative() && spec.guard.program().components().count() > 1 => {
                GuardProgram::new(
                    std::path::absolute(spec.guard.program()).map_err(|error| SuperviseError::Io {
                        what: "cannot find the guard program's absolute path",
                        error,
                    })?,
                )
                .with_args(spec.guard.args().to_vec())
                .command()
            }
            _ => spec.guard.command(),
        };
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let child = command
            .arg(format!("--control-fd={}", control_child.as_raw_fd()))
            .arg(format!("--report-fd={}", report_child.as_raw_fd()))
            .arg(format!("--grace={}ms", spec.grace.as_millis()))
            .args(extra)
            .arg("--")
            .args(&spec.command)
            .stdin(stdin)
            .stdout(output)
            .stderr(errput)
            // A group of its own: a kill -9 of the supervisor's whole
            // process group (a shell's `kill -9 %1`, a process manager
            // killing what it started) leaves the guard alive to see the
            // control socket close and stop the command — in the
            // supervisor's group, both died at once and the command ran
            // on past the lease's TTL.
            .process_group(0)
            .spawn()
            .map_err(|error| SuperviseError::GuardSpawn {
                program: program.clone(),
                error,
            })?;
        (child, control, report)
    };
    let (tx, rx) = mpsc::channel();
    let sink = Arc::new(Mutex::new(Sink {
        tx: Some(tx.clone()),
        gone: false,
    }));
    read_reports(report, sink.clone());
    let guard = Guard {
        program,
        child: Mutex::new(child),
        control: Arc::new(Mutex::new(Some(control))),
        sink,
    };
    Ok((guard, (tx, rx)))
}

/// A command's event channel: the guard's reports (and stops, signals)
/// go in, the event loop takes them out.
type Channel<L> = (mpsc::Sender<Event<L>>, mpsc::Receiver<Event<L>>);

/// A guard that runs the same command once per [`GuardSlot::next`], each
/// run in a new process group of its own, one run at a time — what a
/// worker keeps per slot, so that a task pays for no process but its
/// command. Each run is supervised as a [`Supervised`] command is: tied to
/// its own claim's keeper ([`Supervised::follow`]), stopped by the guard
/// when its trust window closes, its whole tree gone before it is
/// reported finished. Dropping the slot ends the guard.
#[derive(Debug)]
pub struct GuardSlot<L: Refusal = LostReason> {
    guard: Arc<Guard<L>>,
    spec: Spec,
}

impl<L: Refusal> GuardSlot<L> {
    /// Start a guard for `spec`'s command, grace, output and stall watch
    /// (its `stdin` is ignored: each run gets its own, from
    /// [`GuardSlot::next`]).
    ///
    /// # Errors
    /// [`SuperviseError`] when the guard cannot be started or does not
    /// report.
    pub fn spawn(spec: Spec) -> Result<Self, SuperviseError> {
        let (guard, (_, rx)) = spawn_guard(
            &spec,
            None,
            &["--slot"],
            Stdio::inherit(),
            Stdio::inherit(),
            Stdio::inherit(),
        )?;
        if !matches!(rx.recv(), Ok(Event::Ready)) {
            return Err(SuperviseError::GuardSilent {
                program: guard.program.clone(),
            });
        }
        lock(&guard.sink).tx = None;
        Ok(Self {
            guard: Arc::new(guard),
            spec,
        })
    }

    /// Whether the guard is still there (a slot whose guard died must be
    /// replaced).
    #[must_use]
    pub fn is_alive(&self) -> bool {
        !lock(&self.guard.sink).gone
    }

    /// The next run, with `stdin` as its input (`None`: this process's
    /// stdin). Follow, start and wait for it as for [`Supervised::spawn`];
    /// one run at a time.
    ///
    /// # Errors
    /// [`SuperviseError::GuardSilent`] when the guard is gone (replace the
    /// slot), [`SuperviseError::Io`] when a run is still in progress.
    pub fn next(&mut self, stdin: Option<Vec<u8>>) -> Result<Supervised<L>, SuperviseError> {
        let (tx, rx) = mpsc::channel();
        {
            let mut sink = lock(&self.guard.sink);
            if sink.gone {
                return Err(SuperviseError::GuardSilent {
                    program: self.guard.program.clone(),
                });
            }
            if sink.tx.is_some() {
                return Err(SuperviseError::Io {
                    what: "the guard is still running the previous command",
                    error: std::io::ErrorKind::ResourceBusy.into(),
                });
            }
            sink.tx = Some(tx.clone());
        }
        Ok(Supervised {
            guard: self.guard.clone(),
            once: false,
            grace: self.spec.grace,
            stdin,
            output: self.spec.output,
            stall: self.spec.stall.clone(),
            group: None,
            tx,
            rx,
            early: Vec::new(),
            pump: None,
            collected: Arc::default(),
            done: false,
            adopts: false,
            under: std::sync::OnceLock::new(),
            started: None,
        })
    }
}

/// A command under supervision; see the module docs for its life.
#[derive(Debug)]
pub struct Supervised<L: Refusal = LostReason> {
    guard: Arc<Guard<L>>,
    /// The guard runs this command only ([`Supervised::spawn`]), and ends
    /// with it; otherwise it is a [`GuardSlot`]'s.
    once: bool,
    grace: Duration,
    stdin: Option<Vec<u8>>,
    output: Output,
    stall: Option<(Duration, Option<PathBuf>)>,
    /// The command's process group: known at spawn for a once-guard, at
    /// start for a slot's run.
    group: Option<Pid>,
    tx: mpsc::Sender<Event<L>>,
    rx: mpsc::Receiver<Event<L>>,
    /// Events that came while [`Supervised::start`] waited for a slot's
    /// run to start, for [`Supervised::wait`].
    early: Vec<Event<L>>,
    /// Copies the command's output ([`Supervised::pump_output`]).
    pump: Option<crate::pool::Handle>,
    collected: Arc<Mutex<Collected>>,
    /// Waited for or aborted: nothing left to clean up on drop.
    done: bool,
    /// This process is a child subreaper: when the guard dies, its orphans
    /// come here ([`Supervised::adopt_orphans`]).
    adopts: bool,
    /// What the command runs under, for its events (the keeper it
    /// follows).
    under: std::sync::OnceLock<crate::telemetry::Under>,
    /// When it was started ([`Supervised::start`]).
    started: Option<Instant>,
}

#[derive(Debug, Default)]
struct Collected {
    stdout: Vec<u8>,
    stdout_overflow: bool,
    stderr_tail: Vec<u8>,
    stderr: Vec<u8>,
}

impl<L: Refusal> Supervised<L> {
    /// Start a guard for this one command and wait until it reports the
    /// command's process group (the command's process is forked, leading
    /// the group, and waits for [`Supervised::start`]).
    ///
    /// # Errors
    /// [`SuperviseError`] when the guard cannot be started or does not
    /// report.
    pub fn spawn(spec: Spec) -> Result<Self, SuperviseError> {
        let mut this = Self::launch(spec)?;
        this.await_group()?;
        Ok(this)
    }

    /// Start a guard for this one command and return at once: the guard
    /// starts (a process's start-up) while the caller does something else
    /// — opens its store — and [`Supervised::await_group`] then waits for
    /// the command's group ([`run_spawned`](super::run_spawned) does).
    ///
    /// # Errors
    /// [`SuperviseError`] when the guard cannot be started.
    pub fn launch(spec: Spec) -> Result<Self, SuperviseError> {
        Self::launch_in(spec, None)
    }

    /// As [`Supervised::launch`], the command's working directory `cwd`
    /// (`None`: this process's): the guard starts there, and the command,
    /// which it forks, with it — a relative program path is found from
    /// there, as `subprocess.run(cwd=)` finds one (Python's `store.run`).
    ///
    /// # Errors
    /// As [`Supervised::launch`]; a `cwd` that cannot be entered fails the
    /// guard's start ([`SuperviseError::GuardSpawn`]): check it first.
    pub fn launch_in(spec: Spec, cwd: Option<&std::path::Path>) -> Result<Self, SuperviseError> {
        let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::inherit() };
        let pipe_output = spec.output != Output::Inherit || spec.stall.is_some();
        let (guard, (tx, rx)) = spawn_guard(
            &spec,
            cwd,
            &[],
            piped(spec.stdin.is_some()),
            piped(pipe_output),
            piped(pipe_output),
        )?;
        Ok(Self {
            group: None,
            guard: Arc::new(guard),
            once: true,
            grace: spec.grace,
            stdin: spec.stdin,
            output: spec.output,
            stall: spec.stall,
            tx,
            rx,
            early: Vec::new(),
            pump: None,
            collected: Arc::default(),
            done: false,
            adopts: false,
            under: std::sync::OnceLock::new(),
            started: None,
        })
    }

    /// Wait until the guard reports the command's process group (at once
    /// when it has already), and return it.
    ///
    /// # Errors
    /// [`SuperviseError::GuardSilent`] when the guard ends without
    /// reporting it (it could not start; `LEASEHOLD_LOG=debug` says why).
    pub fn await_group(&mut self) -> Result<u32, SuperviseError> {
        while self.group.is_none() {
            match self.rx.recv() {
                Ok(Event::Group(group)) => self.group = Some(group),
                Ok(Event::GuardGone) | Err(_) => {
                    return Err(SuperviseError::GuardSilent {
                        program: self.guard.program.clone(),
                    });
                }
                Ok(other) => self.early.push(other),
            }
        }
        Ok(self.group().expect("set above"))
    }

    /// The command's process group (to record with the grant): known from
    /// [`Supervised::spawn`] (or [`Supervised::await_group`]); for a slot's
    /// run, once started.
    #[must_use]
    pub fn group(&self) -> Option<u32> {
        self.group.map(|g| g.as_raw_nonzero().get() as u32)
    }

    /// The guard's pid (a once-guard's grant records it: the guard lives
    /// as long as any process of the command's tree).
    #[must_use]
    pub fn guard_pid(&self) -> u32 {
        lock(&self.guard.child).id()
    }

    #[must_use]
    pub fn group_pid(&self) -> Option<Pid> {
        self.group
    }

    /// Where stops and signals for this command go.
    #[must_use]
    pub fn stop_handle(&self) -> StopHandle<L> {
        StopHandle(self.tx.clone())
    }

    /// The stall limit this command is watched for, and its progress file.
    #[must_use]
    pub fn stall(&self) -> Option<&(Duration, Option<PathBuf>)> {
        self.stall.as_ref()
    }

    /// The lease was not taken (or the command cannot be handed over):
    /// start nothing. A once-guard ends; a slot's guard waits for the next
    /// run.
    pub fn abort(mut self) {
        self.finish();
    }

    /// Let go of the guard: a once-guard is told we are gone (EOF) and
    /// waited for; a slot's guard is left for its next run.
    fn finish(&mut self) {
        self.done = true;
        lock(&self.guard.sink).tx = None;
        if self.once {
            self.guard.close_control();
            let _ = lock(&self.guard.child).wait();
        }
    }

    /// Opt in: make this process a child subreaper
    /// ([`host::adopt_orphans`]), so that if the guard dies, what it kept —
    /// also the processes that left the command's group — is re-parented
    /// here: [`Supervised::wait`] then stops it (SIGTERM, SIGKILL after the
    /// grace period) and waits until this process has no child left, which
    /// proves the tree gone. Without it, a dead guard leaves
    /// [`Finished::tree_may_live`] set. Only for a program that runs this
    /// one command and starts no other child (`leasehold run`): every
    /// child of this process is then taken for part of the tree, stopped
    /// and reaped. Never done silently: a library's caller (the Python
    /// package's interpreter) is not made a subreaper.
    ///
    /// # Errors
    /// Where the platform has no subreaper (macOS): the run goes on
    /// without it.
    pub fn adopt_orphans(&mut self) -> Result<(), SuperviseError> {
        host::adopt_orphans().map_err(|error| SuperviseError::Io {
            what: "cannot adopt the guard's orphans",
            error,
        })?;
        self.adopts = true;
        Ok(())
    }

    /// Tie the command to `keeper` (which must keep time on the boot
    /// clock, as the guard does): its loss stops the command, and each
    /// trust window it reports goes to the guard. Call before
    /// [`Supervised::start`], so the guard knows the window before the
    /// command runs.
    pub fn follow(&self, keeper: &Keeper<L>) {
        let _ = self.under.set(keeper.under());
        let tx = self.tx.clone();
        keeper.on_loss(move |loss| {
            let _ = tx.send(Event::Stop(Stop::Lost(loss)));
        });
        let control = self.guard.control.clone();
        keeper.on_window(move |until| {
            let _ = send(&control, &Control::Window(until));
        });
    }

    /// Start the command with `env`'s variables added to its environment.
    ///
    /// # Errors
    /// When the guard cannot be told (it is gone).
    pub fn start_with(&mut self, env: &CommandEnv) -> Result<(), SuperviseError> {
        self.start_env(env.protocol())
    }

    /// [`Supervised::start_with`] for an environment given as a JSON
    /// object of strings — the worker's task environment, until it builds
    /// a [`CommandEnv::Task`].
    ///
    /// # Errors
    /// When `env` is not a JSON object of strings, or the guard cannot be
    /// told (it is gone).
    pub fn start(&mut self, env: &serde_json::Value) -> Result<(), SuperviseError> {
        let env: Env = serde_json::from_value(env.clone()).map_err(|e| SuperviseError::Io {
            what: "the command's environment is not a JSON object of strings",
            error: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        self.start_env(env)
    }

    fn start_env(&mut self, env: Env) -> Result<(), SuperviseError> {
        self.started = Some(Instant::now());
        let activity = Arc::new(AtomicU64::new(0));
        let pipe_output = self.output != Output::Inherit || self.stall.is_some();
        let mut passed: Streams = [None, None, None];
        let (input, out, err) = if self.once {
            let mut child = lock(&self.guard.child);
            (
                child.stdin.take().map(OwnedFd::from),
                child.stdout.take().map(OwnedFd::from),
                child.stderr.take().map(OwnedFd::from),
            )
        } else {
            // A slot's run gets its own streams, passed with the message.
            let input = match self.stdin {
                Some(_) => {
                    let (r, w) = pipe()?;
                    passed[0] = Some(r);
                    Some(w)
                }
                None => None,
            };
            let (mut out, mut err) = (None, None);
            if pipe_output {
                for (i, ours) in [(1, &mut out), (2, &mut err)] {
                    let (r, w) = pipe()?;
                    passed[i] = Some(w);
                    *ours = Some(r);
                }
            }
            (input, out, err)
        };
        self.pump_output(&activity, out, err);
        if let Some((limit, progress)) = self.stall.clone() {
            watch_stall(limit, progress, activity, self.tx.clone());
        }
        if let (Some(bytes), Some(input)) = (self.stdin.take(), input) {
            feed(input, bytes);
        }
        // The message goes once sent, and with it our copies of the streams
        // it passed (the guard has its own).
        send(&self.guard.control, &Control::Env(env, passed)).map_err(|error| SuperviseError::Io {
            what: "cannot hand the command to the guard process",
            error,
        })?;
        if !self.once {
            // Its group is known once the guard started it.
            loop {
                match self.rx.recv() {
                    Ok(Event::Started(pid)) => {
                        self.group = Some(pid);
                        break;
                    }
                    Ok(ended @ (Event::Exited(_) | Event::GuardGone)) => {
                        self.early.push(ended);
                        break;
                    }
                    Ok(other) => self.early.push(other),
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }

    /// Copy the command's stdout and stderr as `output` says, on one
    /// pooled thread (a blocked write to our own stdout or stderr must not
    /// hold up the event loop, which may have to stop the command).
    fn pump_output(&mut self, activity: &Arc<AtomicU64>, out: Option<OwnedFd>, err: Option<OwnedFd>) {
        stamp(activity);
        if out.is_none() && err.is_none() {
            return;
        }
        let collect = match self.output {
            Output::Collect {
                stdout_limit,
                stderr_tail,
            } => Some((stdout_limit, stderr_tail)),
            _ => None,
        };
        let capture = self.output == Output::Capture;
        let (activity, collected) = (activity.clone(), self.collected.clone());
        self.pump = Some(crate::pool::spawn(move || {
            let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
            pump([out, err], &activity, |stream, chunk| {
                if capture {
                    let mut c = lock(&collected);
                    let whole = if stream == 0 { &mut c.stdout } else { &mut c.stderr };
                    whole.extend_from_slice(chunk);
                    return true;
                }
                if stream == 0 {
                    return match collect {
                        Some((limit, _)) => {
                            let mut c = lock(&collected);
                            let room = limit.saturating_sub(c.stdout.len());
                            c.stdout.extend_from_slice(&chunk[..chunk.len().min(room)]);
                            c.stdout_overflow |= chunk.len() > room;
                            true
                        }
                        None => stdout.write_all(chunk).and_then(|()| stdout.flush()).is_ok(),
                    };
                }
                if let Some((_, tail)) = collect {
                    let mut c = lock(&collected);
                    c.stderr_tail.extend_from_slice(chunk);
                    let excess = c.stderr_tail.len().saturating_sub(tail);
                    c.stderr_tail.drain(..excess);
                }
                stderr.write_all(chunk).and_then(|()| stderr.flush()).is_ok()
            });
        }));
    }

    /// Run the event loop until the command has exited; see the module docs.
    #[must_use]
    pub fn wait(mut self) -> Finished<L> {
        let group = self.group;
        let kill = |sig: Signal| {
            if let Some(group) = group {
                let _ = rustix::process::kill_process_group(group, sig);
            }
        };
        let grace = self.grace;
        let under = self.under.get().cloned().unwrap_or_default();
        // Only stop handles and keeper callbacks keep the channel open now.
        let (dead_tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, dead_tx));
        let mut early = std::mem::take(&mut self.early).into_iter();
        let mut stop: Option<(Stop<L>, Instant)> = None;
        // The guard stopped the command at the window's end; the keeper's
        // own word on the loss, when it comes, says more.
        let mut stopped_by_guard = false;
        let mut killed = false;
        let mut finished = Finished::<L>::default();
        finished.code = loop {
            let event = if let Some(e) = early.next() {
                e
            } else {
                match &stop {
                    Some((_, kill_at)) if !killed => {
                        match self.rx.recv_timeout(kill_at.saturating_duration_since(Instant::now())) {
                            Ok(e) => e,
                            Err(mpsc::RecvTimeoutError::Timeout) => {
                                kill(Signal::KILL);
                                killed = true;
                                continue;
                            }
                            Err(mpsc::RecvTimeoutError::Disconnected) => Event::GuardGone,
                        }
                    }
                    _ => self.rx.recv().unwrap_or(Event::GuardGone),
                }
            };
            match event {
                Event::Group(_) | Event::Ready | Event::Started(_) => {}
                Event::SpawnError(code, message) => finished.spawn_error = Some((code, message)),
                Event::Stop(reason) => match &mut stop {
                    None => {
                        // The guard stops the tree: SIGTERM to the group and
                        // to what left it, each process once, then SIGCONT.
                        // Were we to signal the group too, a member that
                        // outlives its leader would get a second SIGTERM
                        // from the guard stopping what the command left
                        // behind. Our SIGKILL timer below is the backstop.
                        // Only a guard that cannot be told (gone, or its
                        // socket full while it is stopped) leaves the
                        // SIGTERM to us.
                        if send(&self.guard.control, &Control::Stop).is_err() {
                            kill(Signal::TERM);
                            // A stopped command (^Z, SIGTSTP, SIGSTOP) acts
                            // on SIGTERM only once continued.
                            kill(Signal::CONT);
                        }
                        stop = Some(self.stopping(&under, reason));
                    }
                    Some((first, _)) if stopped_by_guard && matches!(reason, Stop::Lost(_)) => {
                        *first = reason;
                        stopped_by_guard = false;
                    }
                    Some(_) => {}
                },
                Event::GuardDeadline => {
                    if stop.is_none() {
                        // The guard sent SIGTERM and keeps the SIGKILL
                        // timer; ours is a second one. Why the window
                        // closed is the keeper's to say (below).
                        stop = Some(self.stopping(&under, Stop::Lost(Loss::Deadline(Overdue::default()))));
                        stopped_by_guard = true;
                    }
                }
                Event::Signal(sig) => {
                    if let Some(sig) = Signal::from_named_raw(sig) {
                        kill(sig);
                        if !matches!(sig, Signal::STOP | Signal::TSTP | Signal::TTIN | Signal::TTOU) {
                            // A stopped group keeps the signal pending
                            // until continued: SIGTERM to a stopped command
                            // would wait forever, and `run` with it.
                            kill(Signal::CONT);
                        }
                    }
                }
                Event::Exited(code) => {
                    if let (true, Some((reason, _))) = (stopped_by_guard, &mut stop) {
                        // The command went at the guard's SIGTERM before
                        // the keeper — which sees the same deadline on the
                        // same clock within its POLL — said why: wait for
                        // its word rather than guess at a cause.
                        if let Some(word) = self.keeper_word() {
                            *reason = word;
                        }
                    }
                    break Some(code);
                }
                Event::GuardGone => {
                    // The guard died without reporting: do its job (unless
                    // the command never started, and the group is gone).
                    if finished.spawn_error.is_none() {
                        if self.adopts && self.once {
                            finished.tree_may_live = !stop_orphans(group, grace);
                        } else {
                            // What left the group is beyond reach.
                            kill(Signal::KILL);
                            finished.tree_may_live = true;
                        }
                    }
                    break None;
                }
            }
        };
        finished.stopped = stop.map(|(reason, _)| reason);
        self.log_exit(&under, &finished);
        self.finish();
        // The tree is gone, so EOF is near — unless a process that escaped
        // it holds a stream: then what came so far is what we keep.
        if let Some(pump) = self.pump.take() {
            pump.join_until(Instant::now() + Duration::from_secs(1));
        }
        let collected = std::mem::take(&mut *lock(&self.collected));
        finished.stdout = collected.stdout;
        finished.stdout_overflow = collected.stdout_overflow;
        finished.stderr_tail = collected.stderr_tail;
        finished.stderr = collected.stderr;
        finished
    }
}

impl<L: Refusal> Supervised<L> {
    /// A stop begun for `reason` (logged), and when its SIGKILL is due.
    fn stopping(&self, under: &crate::telemetry::Under, reason: Stop<L>) -> (Stop<L>, Instant) {
        crate::telemetry::stopping(under, self.group(), &reason);
        (reason, Instant::now() + self.grace)
    }

    fn log_exit(&self, under: &crate::telemetry::Under, finished: &Finished<L>) {
        crate::telemetry::exited(
            under,
            self.group(),
            finished.code,
            self.started.map_or(Duration::ZERO, |s| s.elapsed()),
            finished.stopped.as_ref().map(|s| s as &dyn std::fmt::Display),
        );
    }
}

/// How long after SIGKILL a supervisor whose guard died waits for the
/// orphans it adopted to be gone, before it gives up proving the tree gone.
const ORPHANS_GONE_WITHIN: Duration = Duration::from_secs(10);

/// The guard died in a process that adopts orphans: stop what it kept —
/// `group`, and every descendant of this process (the guard's orphans are
/// re-parented here) — with SIGTERM and SIGCONT, SIGKILL after `grace`
/// (again every second), reaping, until this process has no child left:
/// then the tree is gone (`true`). `false` when some are still there
/// [`ORPHANS_GONE_WITHIN`] after the first SIGKILL.
fn stop_orphans(group: Option<Pid>, grace: Duration) -> bool {
    let signal = |sig: Signal| {
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, sig);
        }
        for pid in host::descendants() {
            let _ = rustix::process::kill_process(pid, sig);
        }
    };
    signal(Signal::TERM);
    signal(Signal::CONT);
    let kill_at = Instant::now() + grace;
    let give_up = kill_at + ORPHANS_GONE_WITHIN;
    let mut next_kill = kill_at;
    loop {
        loop {
            match rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
                Ok(Some(_)) | Err(Errno::INTR) => {}
                Ok(None) => break,
                // No child at all: a subreaper's whole tree is gone.
                Err(_) => return true,
            }
        }
        let now = Instant::now();
        if now >= give_up {
            return false;
        }
        if now >= next_kill {
            signal(Signal::KILL);
            next_kill = now + Duration::from_secs(1);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// How long a supervisor whose guard stopped the command waits for the
/// keeper's own word on the loss: the keeper looks every [`crate::POLL`],
/// and then asks the store who holds its lock; generous for a loaded
/// machine.
const KEEPER_WORD: Duration = Duration::from_secs(2);

impl<L: Refusal> Supervised<L> {
    /// The keeper's loss, if it comes within [`KEEPER_WORD`].
    fn keeper_word(&self) -> Option<Stop<L>> {
        let until = Instant::now() + KEEPER_WORD;
        loop {
            match self.rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Event::Stop(lost @ Stop::Lost(_))) => return Some(lost),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl<L: Refusal> Drop for Supervised<L> {
    fn drop(&mut self) {
        if !self.done {
            // Neither waited for nor aborted: whatever runs must not
            // outlive us. The guard stops it on EOF (a slot's guard then
            // ends too; its slot reports it gone).
            self.done = true;
            lock(&self.guard.sink).tx = None;
            self.guard.close_control();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Send one message to the guard, with `fds`, never blocking: a message
/// that does not fit (the guard is stopped and does not read) is an error
/// — for a trust window, dropped, and the guard, when it runs again, stops
/// the command at the last window it heard of: early, never late.
fn send(control: &Mutex<Option<OwnedFd>>, message: &Control) -> std::io::Result<()> {
    let (message, fds) = message.encode();
    let control = lock(control);
    let socket = control
        .as_ref()
        .ok_or_else(|| std::io::Error::other("the guard was already released"))?;
    if message.len() > host::CONTROL_MESSAGE_MAX {
        // The guard would read it cut short (and start nothing).
        return Err(std::io::Error::other(format!(
            "a message to the guard of {} bytes is longer than the {} its control socket carries (a command's environment that large is refused)",
            message.len(),
            host::CONTROL_MESSAGE_MAX
        )));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("too many descriptors for one message"));
    }
    let sent = sendmsg(
        socket,
        &[IoSlice::new(message.as_bytes())],
        &mut ancillary,
        SendFlags::DONTWAIT | host::SEND_NO_SIGNAL,
    )?;
    if sent == message.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the guard's control socket took part of a message",
        ))
    }
}

/// Write `bytes` to the command's stdin and close it. Up to a page fits
/// in a new pipe at once; more is written by a pooled thread, so that a command
/// that does not read its input cannot block us.
fn feed(input: OwnedFd, bytes: Vec<u8>) {
    const PAGE: usize = 4096;
    if bytes.len() <= PAGE {
        let _ = rustix::io::write(&input, &bytes);
        return;
    }
    crate::pool::spawn(move || {
        let _ = std::fs::File::from(input).write_all(&bytes);
    });
}

/// Turn the guard's report lines into events for the command that runs
/// now; when the pipe closes, the guard is gone.
fn read_reports<L: Refusal>(report: OwnedFd, sink: Arc<Mutex<Sink<L>>>) {
    thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(report)).lines() {
            let Ok(line) = line else { break };
            let event = match Report::decode(&line) {
                Ok(Report::Group(group)) => Event::Group(group),
                Ok(Report::Ready) => Event::Ready,
                Ok(Report::Started(pid)) => Event::Started(pid),
                Ok(Report::SpawnError { code, message }) => Event::SpawnError(code, message),
                Ok(Report::Deadline) => Event::GuardDeadline,
                Ok(Report::Exited(exit)) => Event::Exited(exit.shell_code()),
                Err(e) => {
                    tracing::debug!("ignored: {e}");
                    continue;
                }
            };
            if let Some(tx) = &lock(&sink).tx {
                let _ = tx.send(event);
            }
        }
        let mut sink = lock(&sink);
        sink.gone = true;
        if let Some(tx) = &sink.tx {
            let _ = tx.send(Event::GuardGone);
        }
    });
}

fn stamp(activity: &AtomicU64) {
    activity.store(crate::duration_nanos(host::boot_clock()), Ordering::SeqCst);
}

/// Copy the open `streams` chunk by chunk to `to` (with the stream's
/// index), stamping activity, until each has reached EOF or `to` said
/// stop for it.
fn pump(streams: [Option<OwnedFd>; 2], activity: &AtomicU64, mut to: impl FnMut(usize, &[u8]) -> bool) {
    let mut streams = streams;
    let mut buf = [0u8; 8192];
    loop {
        let open: Vec<usize> = (0..streams.len()).filter(|i| streams[*i].is_some()).collect();
        if open.is_empty() {
            return;
        }
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .filter_map(|i| streams[*i].as_ref())
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        match poll(&mut fds, None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return,
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        for (i, ready) in open.into_iter().zip(ready) {
            let Some(fd) = streams[i].as_ref().filter(|_| ready) else {
                continue;
            };
            let keep = match rustix::io::read(fd, &mut buf) {
                Ok(0) => false,
                Ok(n) => {
                    stamp(activity);
                    to(i, &buf[..n])
                }
                Err(Errno::INTR | Errno::AGAIN) => true,
                Err(_) => false,
            };
            if !keep {
                streams[i] = None;
            }
        }
    }
}

fn watch_stall<L: Refusal>(
    limit: Duration,
    progress: Option<PathBuf>,
    activity: Arc<AtomicU64>,
    tx: mpsc::Sender<Event<L>>,
) {
    thread::spawn(move || {
        let tick = (limit / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mtime = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let mut seen = progress.as_ref().and_then(mtime);
        loop {
            thread::sleep(tick);
            if let Some(p) = &progress {
                let now = mtime(p);
                if now != seen {
                    seen = now;
                    stamp(&activity);
                }
            }
            let last = Duration::from_nanos(activity.load(Ordering::SeqCst));
            if host::boot_clock().saturating_sub(last) >= limit {
                let _ = tx.send(Event::Stop(Stop::Stalled(limit)));
                return;
            }
        }
    });
}
