//! [`Supervised`]: one command under its guard — the process tree, the
//! output pumps, the stall watcher and the event loop that stops it. The
//! life of a supervised command is told in [`crate::supervise`].

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::{GuardProgram, SuperviseError};
use crate::{Keeper, Loss, LostReason, Refusal, host};

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

/// What the supervisor reacts to.
#[derive(Debug)]
enum Event<L> {
    Anchor(u32),
    Started,
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
        }
    }
}

/// A command under supervision; see the module docs for its life.
#[derive(Debug)]
pub struct Supervised<L = LostReason> {
    spec: Spec,
    guard: Child,
    /// Our end of the control pipe: the command's environment, then trust
    /// windows (from keeper threads, hence shared); closing it (or our
    /// death) tells the guard we are gone.
    control: Arc<Mutex<Option<std::fs::File>>>,
    group: Pid,
    tx: mpsc::Sender<Event<L>>,
    rx: mpsc::Receiver<Event<L>>,
    pumps: Vec<thread::JoinHandle<()>>,
    collected: Arc<Mutex<Collected>>,
}

#[derive(Debug, Default)]
struct Collected {
    stdout: Vec<u8>,
    stdout_overflow: bool,
    stderr_tail: Vec<u8>,
}

/// Spawning a guard hands it the child ends of two pipes; serializing the
/// spawns (and so the moments those ends are inheritable) keeps one
/// guard from inheriting another's ends, which would keep a pipe open
/// after its guard died.
static SPAWN: Mutex<()> = Mutex::new(());

/// A pipe whose `child_end` survives exec (inherited by the guard) while
/// `ours` stays close-on-exec.
fn pipe_for_child(child_reads: bool) -> Result<(OwnedFd, OwnedFd), SuperviseError> {
    let io = |e: rustix::io::Errno| SuperviseError::Io {
        what: "cannot create a pipe to the guard",
        error: e.into(),
    };
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io)?;
    let (ours, theirs) = if child_reads { (w, r) } else { (r, w) };
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).map_err(io)?;
    Ok((ours, theirs))
}

impl<L: Refusal> Supervised<L> {
    /// Start the guard and wait until it reports the process group.
    ///
    /// # Errors
    /// [`SuperviseError`] when the guard cannot be started or does not
    /// report.
    pub fn spawn(spec: Spec) -> Result<Self, SuperviseError> {
        let (tx, rx) = mpsc::channel();
        let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::inherit() };
        let pipe_output = spec.output != Output::Inherit || spec.stall.is_some();
        let (guard, control, report, nonblocking) = {
            let _one_at_a_time = lock(&SPAWN);
            let (control, control_child) = pipe_for_child(true)?;
            let (report, report_child) = pipe_for_child(false)?;
            let guard = spec
                .guard
                .command()
                .arg(format!("--control-fd={}", control_child.as_raw_fd()))
                .arg(format!("--report-fd={}", report_child.as_raw_fd()))
                .arg(format!("--grace={}ms", spec.grace.as_millis()))
                .arg("--")
                .args(&spec.command)
                .stdin(piped(spec.stdin.is_some()))
                .stdout(piped(pipe_output))
                .stderr(piped(pipe_output))
                .spawn()
                .map_err(|error| SuperviseError::GuardSpawn {
                    program: spec.guard.to_string(),
                    error,
                })?;
            drop((control_child, report_child));
            // Never block on a guard that does not read (it is stopped):
            // a window line that does not fit is dropped, and the guard,
            // when it runs again, stops the command at the last window it
            // heard of — early, never late. Lines are shorter than
            // PIPE_BUF, so each is written whole or not at all.
            let nonblocking = rustix::fs::fcntl_setfl(&control, rustix::fs::OFlags::NONBLOCK);
            (guard, control, report, nonblocking)
        };
        read_reports(report, tx.clone());
        let mut this = Self {
            spec,
            guard,
            control: Arc::new(Mutex::new(Some(std::fs::File::from(control)))),
            group: Pid::from_raw(1).expect("1 is a valid pid"),
            tx,
            rx,
            pumps: Vec::new(),
            collected: Arc::default(),
        };
        if let Err(e) = nonblocking {
            this.abort();
            return Err(SuperviseError::Io {
                what: "cannot set up the guard's control pipe",
                error: e.into(),
            });
        }
        if let Ok(Event::Anchor(group)) = this.rx.recv()
            && let Some(group) = i32::try_from(group).ok().and_then(Pid::from_raw)
        {
            this.group = group;
            return Ok(this);
        }
        let program = this.spec.guard.to_string();
        this.abort();
        Err(SuperviseError::GuardSilent { program })
    }

    /// The command's process group (to record with the grant).
    #[must_use]
    pub fn group(&self) -> u32 {
        self.group.as_raw_nonzero().get() as u32
    }

    #[must_use]
    pub fn group_pid(&self) -> Pid {
        self.group
    }

    /// Where stops and signals for this command go.
    #[must_use]
    pub fn stop_handle(&self) -> StopHandle<L> {
        StopHandle(self.tx.clone())
    }

    /// The lease was not taken: end the guard without starting anything.
    pub fn abort(mut self) {
        self.close_control();
        let _ = self.guard.wait();
    }

    fn close_control(&self) {
        drop(lock(&self.control).take());
    }

    /// Tie the command to `keeper` (which must keep time on the boot
    /// clock, as the guard does): its loss stops the command, and each
    /// trust window it reports goes to the guard. Call before
    /// [`Supervised::start`], so the guard knows the window before the
    /// command runs.
    pub fn follow(&self, keeper: &Keeper<L>) {
        let tx = self.tx.clone();
        keeper.on_loss(move |loss| {
            let _ = tx.send(Event::Stop(Stop::Lost(loss)));
        });
        let control = self.control.clone();
        keeper.on_window(move |until| {
            let _ = send_line(&control, &format!("window {}", until.as_nanos()));
        });
    }

    /// Start the command with `env` (a JSON object of strings) added to
    /// its environment.
    ///
    /// # Errors
    /// When the guard cannot be told (it is gone).
    pub fn start(&mut self, env: &serde_json::Value) -> Result<(), SuperviseError> {
        let activity = Arc::new(AtomicU64::new(0));
        self.pump_output(&activity);
        if let Some((limit, progress)) = self.spec.stall.clone() {
            watch_stall(limit, progress, activity, self.tx.clone());
        }
        if let (Some(bytes), Some(mut stdin)) = (self.spec.stdin.take(), self.guard.stdin.take()) {
            // A command that does not read its input must not block us.
            thread::spawn(move || {
                let _ = stdin.write_all(&bytes);
            });
        }
        send_line(&self.control, &format!("env {env}")).map_err(|error| SuperviseError::Io {
            what: "cannot hand the command to the guard process",
            error,
        })
    }

    fn pump_output(&mut self, activity: &Arc<AtomicU64>) {
        stamp(activity);
        let collect = match self.spec.output {
            Output::Collect {
                stdout_limit,
                stderr_tail,
            } => Some((stdout_limit, stderr_tail)),
            _ => None,
        };
        if let Some(out) = self.guard.stdout.take() {
            let (activity, collected) = (activity.clone(), self.collected.clone());
            self.pumps.push(thread::spawn(move || {
                let mut stdout = std::io::stdout();
                pump(out, &activity, |chunk| match collect {
                    Some((limit, _)) => {
                        let mut c = lock(&collected);
                        let room = limit.saturating_sub(c.stdout.len());
                        c.stdout.extend_from_slice(&chunk[..chunk.len().min(room)]);
                        c.stdout_overflow |= chunk.len() > room;
                        true
                    }
                    None => stdout.write_all(chunk).and_then(|()| stdout.flush()).is_ok(),
                });
            }));
        }
        if let Some(err) = self.guard.stderr.take() {
            let (activity, collected) = (activity.clone(), self.collected.clone());
            self.pumps.push(thread::spawn(move || {
                let mut stderr = std::io::stderr();
                pump(err, &activity, |chunk| {
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
    }

    /// Run the event loop until the command has exited; see the module docs.
    #[must_use]
    pub fn wait(mut self) -> Finished<L> {
        let group = self.group;
        let grace = self.spec.grace;
        drop(self.tx);
        let mut stop: Option<(Stop<L>, Instant)> = None;
        // The guard stopped the command at the window's end; the keeper's
        // own word on the loss, when it comes, says more.
        let mut stopped_by_guard = false;
        let mut killed = false;
        let mut finished = Finished::<L>::default();
        finished.code = loop {
            let event = match &stop {
                Some((_, kill_at)) if !killed => {
                    match self.rx.recv_timeout(kill_at.saturating_duration_since(Instant::now())) {
                        Ok(e) => e,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let _ = rustix::process::kill_process_group(group, Signal::KILL);
                            killed = true;
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => Event::GuardGone,
                    }
                }
                _ => self.rx.recv().unwrap_or(Event::GuardGone),
            };
            match event {
                Event::Anchor(_) | Event::Started => {}
                Event::SpawnError(code, message) => finished.spawn_error = Some((code, message)),
                Event::Stop(reason) => match &mut stop {
                    None => {
                        let _ = rustix::process::kill_process_group(group, Signal::TERM);
                        stop = Some((reason, Instant::now() + grace));
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
                        // timer; ours is a second one.
                        stop = Some((Stop::Lost(Loss::Deadline { last_error: None }), Instant::now() + grace));
                        stopped_by_guard = true;
                    }
                }
                Event::Signal(sig) => {
                    if let Some(sig) = Signal::from_named_raw(sig) {
                        let _ = rustix::process::kill_process_group(group, sig);
                    }
                }
                Event::Exited(code) => break Some(code),
                Event::GuardGone => {
                    // The guard died without reporting: do its job (unless
                    // the command never started, and the group is gone).
                    if finished.spawn_error.is_none() {
                        let _ = rustix::process::kill_process_group(group, Signal::KILL);
                    }
                    break None;
                }
            }
        };
        finished.stopped = stop.map(|(reason, _)| reason);
        drop(lock(&self.control).take());
        let _ = self.guard.wait();
        join_bounded(std::mem::take(&mut self.pumps), Duration::from_secs(1));
        let collected = std::mem::take(&mut *lock(&self.collected));
        finished.stdout = collected.stdout;
        finished.stdout_overflow = collected.stdout_overflow;
        finished.stderr_tail = collected.stderr_tail;
        finished
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write one line to the guard in a single `write` (see `spawn` on why it
/// never blocks).
fn send_line(control: &Mutex<Option<std::fs::File>>, line: &str) -> std::io::Result<()> {
    let mut control = lock(control);
    let file = control
        .as_mut()
        .ok_or_else(|| std::io::Error::other("the guard was already released"))?;
    let line = format!("{line}\n");
    match file.write(line.as_bytes())? {
        n if n == line.len() => Ok(()),
        _ => Err(std::io::Error::other("the guard's control pipe took part of a line")),
    }
}

/// Turn the guard's report lines into events.
fn read_reports<L: Refusal>(report: OwnedFd, tx: mpsc::Sender<Event<L>>) {
    thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(report)).lines() {
            let Ok(line) = line else { break };
            let (kind, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            let event = match kind {
                "anchor" => rest.parse().map(Event::Anchor).ok(),
                "started" => Some(Event::Started),
                "deadline" => Some(Event::GuardDeadline),
                "spawn-error" => {
                    let (code, msg) = rest.split_once(' ').unwrap_or(("126", rest));
                    Some(Event::SpawnError(code.parse().unwrap_or(126), msg.to_owned()))
                }
                "exited" => match rest.split_once(' ') {
                    Some(("code", n)) => n.parse::<i32>().ok().map(|c| Event::Exited(c as u8)),
                    Some(("signal", n)) => n.parse::<u8>().ok().map(|s| Event::Exited(128u8.saturating_add(s))),
                    _ => None,
                },
                _ => None,
            };
            if let Some(event) = event
                && tx.send(event).is_err()
            {
                return;
            }
        }
        let _ = tx.send(Event::GuardGone);
    });
}

fn stamp(activity: &AtomicU64) {
    activity.store(crate::duration_nanos(host::boot_clock()), Ordering::SeqCst);
}

/// Copy `from` chunk by chunk to `to`, stamping activity; stop when `to`
/// says so.
fn pump(mut from: impl Read, activity: &AtomicU64, mut to: impl FnMut(&[u8]) -> bool) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                stamp(activity);
                if !to(&buf[..n]) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
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

fn join_bounded(threads: Vec<thread::JoinHandle<()>>, limit: Duration) {
    let deadline = Instant::now() + limit;
    for t in threads {
        while !t.is_finished() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
}
