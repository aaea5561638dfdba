//! [`Supervised`]: one command under its guard — started, followed by
//! its keeper, and the event loop that stops it and says how it ended.
//! The life of a supervised command is told in [`crate::supervise`]; its
//! parts are here: how to run it ([`spec`]), how it is stopped ([`stop`]),
//! how it ended ([`finished`]), its guard's process ([`guard_process`])
//! and its streams ([`streams`]).

mod finished;
mod guard_process;
mod spec;
mod stop;
mod streams;

pub use finished::{Ending, Finished};
pub use guard_process::GuardSlot;
pub use spec::{Output, Spec};
pub use stop::{Stop, StopHandle};

use guard_process::{Channel, Guard, next_program, pipe, send, start_guard};
use stop::Event;
use streams::{Collected, feed, watch_stall};

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use super::guard::protocol::{Control, Env, Streams};
use super::{CommandEnv, GuardProgram, SuperviseError};
use crate::{Keeper, Loss, LostReason, Overdue, Refusal, host};

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
    /// A once-guard whose program has a fallback, before its first report.
    relaunch: Option<Relaunch>,
}

/// What it takes to start a once-guard's fallback program in its place.
#[derive(Debug)]
struct Relaunch {
    /// The command's spec, its guard the program that runs now.
    spec: Spec,
    cwd: Option<PathBuf>,
}

impl Relaunch {
    /// What to keep while `program`, started for `spec`'s command in
    /// `cwd`, has not yet shown it is this build's guard: nothing when it
    /// has no fallback.
    fn keep(spec: &Spec, program: GuardProgram, cwd: Option<PathBuf>) -> Option<Self> {
        program.fallback().is_some().then(|| Self {
            spec: Spec {
                guard: program,
                ..spec.clone()
            },
            cwd,
        })
    }
}

/// Which of a once-command's stdin, stdout and stderr are piped through
/// the supervisor: stdin when it has bytes to feed, the output when it is
/// collected or watched for a stall.
fn once_streams(spec: &Spec) -> [bool; 3] {
    let pipe_output = spec.output != Output::Inherit || spec.stall.is_some();
    [spec.stdin.is_some(), pipe_output, pipe_output]
}

impl<L: Refusal> Supervised<L> {
    /// Start a guard for this one command and wait until it reports the
    /// command's process group (the command's process is forked, leading
    /// the group, and waits for [`Supervised::start_with`]).
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
    pub fn launch_in(mut spec: Spec, cwd: Option<&std::path::Path>) -> Result<Self, SuperviseError> {
        let (tx, rx) = mpsc::channel();
        let (guard, program) = start_guard(&spec, cwd, &[], once_streams(&spec), &tx)?;
        // Whether this is this build's guard shows only in its first
        // report; until then, what it takes to start its fallback.
        let relaunch = Relaunch::keep(&spec, program, cwd.map(std::path::Path::to_path_buf));
        let stdin = spec.stdin.take();
        let mut this = Self::of_guard(Arc::new(guard), true, &spec, stdin, (tx, rx));
        this.relaunch = relaunch;
        Ok(this)
    }

    /// The guard is not this build's (`error` says how): start its
    /// program's fallback in its place, or return the error when there is
    /// none. Only before the group is known: the command's process is the
    /// guard's, and nothing of it has run.
    fn relaunch(&mut self, error: SuperviseError) -> Result<(), SuperviseError> {
        let Some(mut again) = self.relaunch.take() else {
            return Err(error);
        };
        again.spec.guard = next_program(&again.spec.guard, error)?;
        self.guard.mute();
        // What that guard said is its own; a stop or a signal sent to the
        // command meanwhile is kept for the one that takes its place.
        while let Ok(event) = self.rx.try_recv() {
            if matches!(event, Event::Stop(_) | Event::Signal(_)) {
                self.early.push(event);
            }
        }
        let (guard, program) = start_guard(
            &again.spec,
            again.cwd.as_deref(),
            &[],
            once_streams(&again.spec),
            &self.tx,
        )?;
        self.relaunch = Relaunch::keep(&again.spec, program, again.cwd);
        // The guard that was not ours ends by itself (it started nothing);
        // dropping it reaps it.
        self.guard = Arc::new(guard);
        Ok(())
    }

    /// A command of `guard` (`once`: the guard's only one), not started,
    /// with `spec`'s grace, output and stall watch and `stdin`, its events
    /// on `channel`.
    fn of_guard(guard: Arc<Guard<L>>, once: bool, spec: &Spec, stdin: Option<Vec<u8>>, (tx, rx): Channel<L>) -> Self {
        Self {
            guard,
            once,
            grace: spec.grace,
            stdin,
            output: spec.output,
            stall: spec.stall.clone(),
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
            relaunch: None,
        }
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
                Ok(Event::Group(group)) => {
                    self.group = Some(group);
                    // This build's guard: no fallback will be needed.
                    self.relaunch = None;
                }
                Ok(Event::OtherBuild(theirs)) => {
                    let error = self.guard.other_build(theirs);
                    self.relaunch(error)?;
                }
                Ok(Event::GuardGone) | Err(_) => {
                    let error = self.guard.silent();
                    self.relaunch(error)?;
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
        self.guard.mute();
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
    /// [`Supervised::start_with`], so the guard knows the window before the
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
                Event::Group(_) | Event::Ready | Event::OtherBuild(_) | Event::Started(_) => {}
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
                Event::Exited(exit) => {
                    if let (true, Some((reason, _))) = (stopped_by_guard, &mut stop) {
                        // The command went at the guard's SIGTERM before
                        // the keeper — which sees the same deadline on the
                        // same clock within its POLL — said why: wait for
                        // its word rather than guess at a cause.
                        if let Some(word) = self.keeper_word() {
                            *reason = word;
                        }
                    }
                    finished.signal = exit.signal();
                    break Some(exit.shell_code());
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
            self.guard.mute();
            self.guard.close_control();
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
