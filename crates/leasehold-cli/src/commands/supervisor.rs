//! Supervising one command through its guard: what `run` and `work` share.
//!
//! # Life of a supervised command
//!
//! 1. [`Supervised::spawn`] starts the guard ([`crate::commands::run::guard`]),
//!    which founds the command's process group G and reports it. The caller
//!    now takes its lease (or task claim) bound to G.
//! 2. [`Supervised::start`] hands the guard the command's environment; the
//!    guard starts the command in G (stdin, stdout and stderr as chosen in
//!    [`Spec`]).
//! 3. [`Supervised::follow`] ties the command to the keeper of its lease
//!    (or claim): a loss becomes a [`Stop`], and every move of the trust
//!    window is passed on to the guard, which stops the command by itself
//!    when the window closes with no newer one — so the command is gone in
//!    time even while this process is stopped, swapped out or starved.
//!    Whoever else may stop the command — a stall watcher, a shutdown —
//!    sends [`Stop`] through [`Supervised::sender`]; signals for the command
//!    arrive as [`Event::Signal`].
//! 4. [`Supervised::wait`] runs the event loop: on the first `Stop` it sends
//!    SIGTERM to G and SIGKILL after the grace period; it returns when the
//!    guard reports the command's exit (the guard first sweeps whatever
//!    the command left in its tree).
//!
//! Or, when the lease is not taken: [`Supervised::abort`] (closing the
//! control pipe ends the guard and its anchor).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::{Keeper, KeeperOptions, Loss, format_duration, host};
use rustix::process::{Pid, Signal};

use crate::commands::child;

/// Slack between SIGKILL and the earliest store-side expiry: covers signal
/// delivery and scheduling. The keeper stops trusting a grant (and the
/// command gets SIGTERM) at `sent + ttl - grace - slack`; SIGKILL follows
/// at `sent + ttl - slack`.
pub fn slack(ttl: Duration) -> Duration {
    (ttl / 20).max(Duration::from_millis(500))
}

/// The grace period when none is given: a fifth of the TTL, at most 10 s.
pub fn default_grace(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(10))
}

/// How a command is kept under a grant of `ttl`: the renewal period and
/// the grace period (SIGTERM to SIGKILL), with the keeper's options.
#[derive(Debug, Clone)]
pub struct Timing {
    pub grace: Duration,
    pub keeper: KeeperOptions,
}

/// Fill in what the user left out so that the command can always be
/// stopped in time: `heartbeat + grace + slack < ttl`, with room for the
/// first renewal's round trip. Defaults scale with the TTL — grace TTL/5
/// (at most 10 s), heartbeat TTL/3 or half of what room is left, whichever
/// is shorter — so that every TTL of 1 s or more works with defaults
/// (TTL 60 s: 20 s and 10 s, as always; TTL 1 s: 150 ms and 200 ms). Only a
/// combination the user spelled out that cannot work is refused.
///
/// # Errors
/// The message for a usage error, naming the values.
pub fn timing(
    ttl: Duration,
    heartbeat: Option<Duration>,
    grace: Option<Duration>,
    owner: Option<String>,
) -> Result<Timing, String> {
    let slack = slack(ttl);
    let grace_given = grace.is_some();
    let grace = match (grace, heartbeat) {
        (Some(grace), _) => grace,
        (None, None) => default_grace(ttl),
        // Leave half of what the given heartbeat leaves for the renewal.
        (None, Some(heartbeat)) => default_grace(ttl).min(ttl.saturating_sub(slack + heartbeat) / 2),
    };
    let heartbeat_given = heartbeat.is_some();
    let heartbeat = heartbeat.unwrap_or_else(|| (ttl / 3).min(ttl.saturating_sub(grace + slack) / 2));
    let keeper = KeeperOptions {
        ttl,
        heartbeat: Some(heartbeat),
        margin: grace + slack,
        owner,
    };
    if heartbeat.is_zero() {
        return Err(format!(
            "--grace {}{} + slack {} leave no time to renew within --ttl {}: the command could not be stopped \
             before the lease expires in the store. Raise --ttl{}",
            format_duration(grace),
            if grace_given { "" } else { " (default)" },
            format_duration(slack),
            format_duration(ttl),
            if grace_given { ", or lower --grace" } else { "" },
        ));
    }
    if keeper.problem().is_some() {
        let given = |yes: bool| if yes { "" } else { " (default)" };
        let mut fix = vec!["raise --ttl"];
        if grace_given {
            fix.push("lower --grace");
        }
        if heartbeat_given {
            fix.push("lower --heartbeat");
        }
        return Err(format!(
            "--heartbeat {}{} + --grace {}{} + slack {} must be shorter than --ttl {}: otherwise the command could \
             not be stopped before the lease expires in the store. {}",
            format_duration(heartbeat),
            given(heartbeat_given),
            format_duration(grace),
            given(grace_given),
            format_duration(slack),
            format_duration(ttl),
            capitalise(&fix.join(", or ")),
        ));
    }
    Ok(Timing { grace, keeper })
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// Why the supervisor stopped the command.
#[derive(Debug, Clone)]
pub enum Stop {
    /// The lease (or claim) was lost.
    Lost(Loss),
    /// Nothing was written (or touched) for this long.
    Stalled(Duration),
    /// The supervisor is shutting down (`work` on SIGTERM).
    Shutdown,
}

/// What the supervisor reacts to.
#[derive(Debug)]
pub enum Event {
    Anchor(u32),
    Started,
    SpawnError(u8, String),
    Exited(u8),
    /// The guard found the trust window closed and stopped the command.
    GuardDeadline,
    GuardGone,
    Stop(Stop),
    Signal(i32),
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
    pub command: Vec<OsString>,
    pub grace: Duration,
    /// Bytes for the command's stdin (then closed); `None`: inherited.
    pub stdin: Option<Vec<u8>>,
    pub output: Output,
    /// Stop the command after this long without output (or a touch of the
    /// progress file).
    pub stall: Option<(Duration, Option<PathBuf>)>,
}

/// What the command produced and how it ended.
#[derive(Debug, Default)]
pub struct Finished {
    /// Its exit code (128+N for signal N); `None` if the guard died.
    pub code: Option<u8>,
    /// Why we stopped it, if we did.
    pub stopped: Option<Stop>,
    /// It could not be started: the shell's code (127/126) and why.
    pub spawn_error: Option<(u8, String)>,
    /// With `Output::Collect`: stdout, and whether it exceeded the limit.
    pub stdout: Vec<u8>,
    pub stdout_overflow: bool,
    /// With `Output::Collect`: the end of stderr.
    pub stderr_tail: Vec<u8>,
}

/// A command under supervision.
#[derive(Debug)]
pub struct Supervised {
    spec: Spec,
    guard: Child,
    /// Our end of the control pipe: the command's environment, then trust
    /// windows (from keeper threads, hence shared); closing it (or our
    /// death) tells the guard we are gone.
    control: Arc<Mutex<Option<std::fs::File>>>,
    group: Pid,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
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
fn pipe_for_child(child_reads: bool) -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).context("cannot create a pipe")?;
    let (ours, theirs) = if child_reads { (w, r) } else { (r, w) };
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    Ok((ours, theirs))
}

impl Supervised {
    /// Start the guard and wait until it reports the process group.
    pub fn spawn(spec: Spec) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let exe = std::env::current_exe().context("cannot find the leasehold binary to start the guard")?;
        let piped = |yes: bool| if yes { Stdio::piped() } else { Stdio::inherit() };
        let pipe_output = spec.output != Output::Inherit || spec.stall.is_some();
        let (guard, control, report) = {
            let _one_at_a_time = lock(&SPAWN);
            let (control, control_child) = pipe_for_child(true)?;
            let (report, report_child) = pipe_for_child(false)?;
            let guard = Command::new(exe)
                .arg("__guard")
                .arg(format!("--control-fd={}", control_child.as_raw_fd()))
                .arg(format!("--report-fd={}", report_child.as_raw_fd()))
                .arg(format!("--grace={}ms", spec.grace.as_millis()))
                .arg("--")
                .args(&spec.command)
                .stdin(piped(spec.stdin.is_some()))
                .stdout(piped(pipe_output))
                .stderr(piped(pipe_output))
                .spawn()
                .context("cannot start the guard process (leasehold __guard)")?;
            drop((control_child, report_child));
            // Never block on a guard that does not read (it is stopped):
            // a window line that does not fit is dropped, and the guard,
            // when it runs again, stops the command at the last window it
            // heard of — early, never late. Lines are shorter than
            // PIPE_BUF, so each is written whole or not at all.
            rustix::fs::fcntl_setfl(&control, rustix::fs::OFlags::NONBLOCK)?;
            (guard, control, report)
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
        if let Ok(Event::Anchor(group)) = this.rx.recv() {
            this.group = i32::try_from(group)
                .ok()
                .and_then(Pid::from_raw)
                .context("anchor pid")?;
            return Ok(this);
        }
        this.abort();
        anyhow::bail!("the guard process (leasehold __guard) did not start; run with LEASEHOLD_LOG=debug to see why")
    }

    /// The command's process group (to record with the grant).
    pub fn group(&self) -> u32 {
        self.group.as_raw_nonzero().get() as u32
    }

    pub fn group_pid(&self) -> Pid {
        self.group
    }

    /// Where stops and signals for this command go.
    pub fn sender(&self) -> mpsc::Sender<Event> {
        self.tx.clone()
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
    pub fn follow(&self, keeper: &Keeper) {
        let tx = self.sender();
        keeper.on_loss(move |loss| {
            let _ = tx.send(Event::Stop(Stop::Lost(loss)));
        });
        let control = self.control.clone();
        keeper.on_window(move |until| {
            let _ = send_line(&control, &format!("window {}", until.as_nanos()));
        });
    }

    /// Start the command with `env` added to its environment.
    pub fn start(&mut self, env: &serde_json::Value) -> anyhow::Result<()> {
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
        send_line(&self.control, &format!("env {env}")).context("cannot hand the command to the guard process")
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
    pub fn wait(mut self) -> Finished {
        let group = self.group;
        let grace = self.spec.grace;
        drop(self.tx);
        let mut stop: Option<(Stop, Instant)> = None;
        // The guard stopped the command at the window's end; the keeper's
        // own word on the loss, when it comes, says more.
        let mut stopped_by_guard = false;
        let mut killed = false;
        let mut finished = Finished::default();
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
fn read_reports(report: OwnedFd, tx: mpsc::Sender<Event>) {
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
    activity.store(leasehold::duration_nanos(host::boot_clock()), Ordering::SeqCst);
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

fn watch_stall(limit: Duration, progress: Option<PathBuf>, activity: Arc<AtomicU64>, tx: mpsc::Sender<Event>) {
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

/// Forward SIGINT, SIGTERM and SIGHUP to `tx` as events.
pub fn forward_signals(tx: mpsc::Sender<Event>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    thread::spawn(move || {
        for sig in signals.forever() {
            if tx.send(Event::Signal(sig)).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// The terminal, while the command's group owns it.
pub struct Terminal {
    ours: Pid,
}

impl Terminal {
    /// Hand the terminal to `group` if we are its foreground.
    pub fn hand_to(group: Pid) -> Option<Self> {
        if !child::terminal_foreground() {
            return None;
        }
        let ours = rustix::process::getpgrp();
        rustix::termios::tcsetpgrp(std::io::stdin().as_fd(), group).ok()?;
        Some(Self { ours })
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // We are a background group now: tcsetpgrp would stop us with
        // SIGTTOU unless it is blocked for the call.
        block_sigttou(true);
        let _ = rustix::termios::tcsetpgrp(std::io::stdin().as_fd(), self.ours);
        block_sigttou(false);
    }
}

#[allow(unsafe_code, reason = "no safe API blocks a signal for one thread")]
fn block_sigttou(block: bool) {
    // SAFETY: sigemptyset/sigaddset initialise a local set; pthread_sigmask
    // changes only this thread's mask, with a valid set and no old set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGTTOU);
        let how = if block { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn defaults_fit_every_ttl_of_a_second_or_more() {
        for ms in (1000..=10_000)
            .step_by(100)
            .chain([30_000, 60_000, 90_000, 3_600_000, 86_400_000])
        {
            let ttl = ms * MS;
            let t = timing(ttl, None, None, None).unwrap_or_else(|e| panic!("{ttl:?}: {e}"));
            let heartbeat = t.keeper.heartbeat.unwrap();
            // Room for the first renewal's round trip: at least what the
            // heartbeat waits.
            assert!(
                ttl.saturating_sub(t.keeper.margin + heartbeat) >= heartbeat.min(ttl / 10),
                "{ttl:?}: {t:?}"
            );
        }
        let t = timing(Duration::from_secs(60), None, None, None).unwrap();
        assert_eq!(
            (t.keeper.heartbeat, t.grace),
            (Some(20_000 * MS), 10_000 * MS),
            "as before"
        );
        let t = timing(Duration::from_secs(1), None, None, None).unwrap();
        assert_eq!((t.keeper.heartbeat, t.grace), (Some(150 * MS), 200 * MS));
    }

    #[test]
    fn only_spelled_out_combinations_are_refused() {
        let s = Duration::from_secs(1);
        // A spelled heartbeat makes the default grace give way.
        let t = timing(10 * s, Some(7 * s), None, None).unwrap();
        assert!(t.grace < 2 * s, "{t:?}");
        // A spelled grace makes the default heartbeat shorter.
        let t = timing(5 * s, None, Some(3 * s), None).unwrap();
        assert!(t.keeper.heartbeat.unwrap() < 1500 * MS, "{t:?}");
        let e = timing(10 * s, Some(5 * s), Some(5 * s), None).unwrap_err();
        assert!(
            e.contains("lower --grace, or lower --heartbeat") && !e.contains("(default)"),
            "{e}"
        );
        let e = timing(10 * s, None, Some(10 * s), None).unwrap_err();
        assert!(
            e.contains("leave no time to renew") && e.ends_with("lower --grace"),
            "{e}"
        );
        let e = timing(10 * s, Some(9600 * MS), None, None).unwrap_err();
        assert!(
            e.contains("--grace 0ms (default)") && e.ends_with("lower --heartbeat"),
            "{e}"
        );
        assert!(
            timing(500 * MS, None, None, None).is_err(),
            "below a second the slack alone is too long"
        );
    }
}
