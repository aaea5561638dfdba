//! The guard: a small process between the supervisor (a
//! [`Supervised`](super::Supervised) command: `leasehold run`, `leasehold
//! work`, or any program using [`crate::supervise`]) and its command that
//! makes sure no process of the command's tree outlives the supervisor by
//! more than the grace period — even when the supervisor is killed with
//! SIGKILL.
//!
//! # Which program is the guard
//!
//! Any program whose `main` hands its arguments to [`main`]: the
//! `leasehold-guard` binary (crate `leasehold-guard`) does nothing else,
//! and the `leasehold` binary does it for `leasehold __guard`. The
//! supervisor starts [`GuardProgram`] — a path and optional leading
//! arguments, then `__guard` and the guard's own arguments; the guard
//! starts its anchor as its own executable with the same leading
//! arguments, then `__anchor`. [`GuardProgram::find`] is the default
//! lookup, for a program that does not configure one:
//!
//! 1. `$LEASEHOLD_GUARD`, the path of the guard program, when set;
//! 2. `leasehold-guard` in the directory of the current executable — or
//!    its parent, when that directory is Cargo's `deps` or `examples` (so
//!    tests and examples find the workspace's build) — which is where an
//!    installer puts it beside an interpreter too (a Python virtualenv's
//!    `bin/`);
//! 3. `leasehold-guard` on `$PATH`.
//!
//! # Why a separate process
//!
//! `PR_SET_PDEATHSIG` fires when the parent *thread* exits, not the parent
//! process, and a kill -9 of the supervisor gives it no chance to act. So
//! the guard watches a pipe instead: the supervisor holds the only write end
//! of the *control* pipe (close-on-exec, so the command never inherits it);
//! the guard reads it, and end-of-file means the supervisor is gone, however
//! it died.
//!
//! # Shape
//!
//! ```text
//! supervisor (leasehold run)          holds the lease, heartbeats, signals
//!   └─ guard (PROGRAM [ARGS] __guard) child subreaper; ignores INT/TERM/HUP
//!        ├─ anchor (PROGRAM [ARGS] __anchor)  leader of a new process group G
//!        └─ CMD ... (joins G)             and everything CMD starts
//! ```
//!
//! # The trust window, kept here too
//!
//! The supervisor stops the command before its lease could pass on — but a
//! supervisor can be stopped (SIGSTOP, a debugger), swapped out or starved
//! without dying, and then it stops nothing. So the guard keeps the same
//! deadline: the supervisor tells it the trust window's end (`trusted_until`
//! on the boot clock, shared by every process of the host) before the
//! command starts and each time a renewal moves it. When the boot clock
//! passes the last window it heard of, the guard reports `deadline` and
//! stops the tree exactly as the supervisor would — SIGTERM at
//! `trusted_until = sent + ttl - grace - slack`, SIGKILL at `trusted_until +
//! grace = sent + ttl - slack`. It sleeps in slices of at most 100 ms, as
//! the keeper does, because timeouts run on a clock that stops during
//! suspend. What this cannot cover: the guard stopped too (then only a
//! fenced sink refuses the command's late writes; docs/RELIABILITY.md,
//! case 25).
//!
//! The group must exist *before* the lease is acquired, because the grant
//! records it (fast takeover checks that G is empty), and the command can
//! only start *after* (it gets the token in its environment). The anchor
//! bridges that: it founds G and waits; the command joins G; then the anchor
//! exits. The kernel does not reuse G's number while any member lives.
//!
//! The guard is a child subreaper: every orphaned descendant of the command
//! is re-parented to it, not to PID 1 (which reaps late on some machines and
//! would leave zombies that keep G "non-empty"). It reaps them all.
//!
//! # States
//!
//! - *waiting*: anchor up, `anchor PID` reported; waiting for the command's
//!   environment (`env JSON`) on the control pipe; `window NS` lines may
//!   come before and after it. EOF here: end the anchor, exit.
//! - *running*: command spawned (`started PID`). Reaps children as they die.
//! - *stopping*: entered when the command exits, on EOF of the control
//!   pipe, or when the trust window closes (`deadline` reported first):
//!   SIGTERM to G and to every other descendant (a descendant that
//!   called `setsid()` has left G but is still ours to reap and kill), SIGKILL
//!   after the grace period, again every second while any remain.
//! - *done*: no children left: report `exited code N` / `exited signal N`
//!   and exit.
//!
//! What escapes: a process that leaves the tree entirely — handed to
//! another supervisor (systemd-run, at, a daemon started over IPC), or in
//! another pid namespace. If the guard itself is killed with SIGKILL, the supervisor
//! sees the report pipe close and kills G itself; if both die at once
//! (a kill -9 of the supervisor's whole process group), nothing is left to
//! act and the lease lives out its TTL.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

use super::SuperviseError;
use super::child;
use crate::{host, limits};

/// The word that makes a guard program act as the guard.
pub const GUARD_ARG: &str = "__guard";
/// The word that makes a guard program act as the anchor.
pub const ANCHOR_ARG: &str = "__anchor";
/// The environment variable [`GuardProgram::find`] reads first.
pub const GUARD_ENV: &str = "LEASEHOLD_GUARD";
/// The guard program's file name ([`GuardProgram::find`]).
pub const GUARD_NAME: &str = "leasehold-guard";

/// How a supervisor starts its guard: a program and leading arguments,
/// followed by `__guard` and the guard's own arguments. See the module
/// docs for the default lookup.
///
/// # Examples
/// ```
/// use leasehold::supervise::GuardProgram;
/// // A program that is its own guard (as `leasehold` is: `leasehold __guard ...`).
/// let guard = GuardProgram::new("/usr/bin/leasehold");
/// // One that needs leading arguments to get there.
/// let guard = GuardProgram::new("/usr/bin/python3").with_args(["-m", "myapp.guard"]);
/// assert_eq!(guard.to_string(), "/usr/bin/python3 -m myapp.guard __guard");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardProgram {
    program: PathBuf,
    args: Vec<OsString>,
}

impl GuardProgram {
    /// The program at `program`, with no leading arguments.
    #[must_use]
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// Arguments that go before `__guard` (and before `__anchor` when the
    /// guard starts its anchor).
    #[must_use]
    pub fn with_args<A: Into<OsString>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The default guard program: `$LEASEHOLD_GUARD`, else
    /// `leasehold-guard` beside the current executable (or one directory
    /// up from Cargo's `deps`/`examples`), else on `$PATH`.
    ///
    /// # Errors
    /// [`SuperviseError::GuardNotFound`], naming every place looked at.
    pub fn find() -> Result<Self, SuperviseError> {
        let mut searched = Vec::new();
        if let Some(path) = std::env::var_os(GUARD_ENV).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            if is_program(&path) {
                return Ok(Self::new(path));
            }
            return Err(SuperviseError::GuardNotFound {
                searched: format!("${GUARD_ENV} is {}, which is not an executable file", path.display()),
            });
        }
        let mut candidates = Vec::new();
        if let Some(dir) = std::env::current_exe().ok().as_deref().and_then(Path::parent) {
            candidates.push(dir.join(GUARD_NAME));
            if matches!(dir.file_name().and_then(OsStr::to_str), Some("deps" | "examples"))
                && let Some(up) = dir.parent()
            {
                candidates.push(up.join(GUARD_NAME));
            }
        }
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path).map(|dir| dir.join(GUARD_NAME)));
        }
        for candidate in candidates {
            if is_program(&candidate) {
                return Ok(Self::new(candidate));
            }
            searched.push(candidate.display().to_string());
        }
        Err(SuperviseError::GuardNotFound {
            searched: format!("${GUARD_ENV} is not set; looked at {}", searched.join(", ")),
        })
    }

    #[must_use]
    pub fn program(&self) -> &Path {
        &self.program
    }

    #[must_use]
    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// The command that starts the guard, before its own arguments.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args).arg(GUARD_ARG);
        command
    }
}

impl fmt::Display for GuardProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.args {
            write!(f, " {}", arg.to_string_lossy())?;
        }
        write!(f, " {GUARD_ARG}")
    }
}

fn is_program(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The guard program's entry point: `args` are this process's arguments
/// after its program name and leading arguments — `__guard
/// --control-fd=N --report-fd=N --grace=DUR -- CMD...` or `__anchor`.
/// Returns the exit code, or `None` when `args` do not start with either
/// word (the program is not being asked to guard).
///
/// # Examples
/// The whole `main` of a guard program:
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let args: Vec<_> = std::env::args_os().skip(1).collect();
///     let code = leasehold::supervise::guard::main(&args).unwrap_or(2);
///     std::process::ExitCode::from(code)
/// }
/// ```
#[must_use]
pub fn main(args: &[OsString]) -> Option<u8> {
    match args.first().and_then(|a| a.to_str()) {
        Some(ANCHOR_ARG) => Some(anchor()),
        Some(GUARD_ARG) => Some(match parse(&args[1..]).and_then(|parsed| run(&parsed, args.len())) {
            Ok(code) => code,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "leasehold: {e}");
                1
            }
        }),
        _ => None,
    }
}

/// The guard's arguments.
struct GuardArgs {
    control_fd: i32,
    report_fd: i32,
    grace: Duration,
    command: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<GuardArgs, String> {
    let (mut control_fd, mut report_fd, mut grace) = (None, None, None);
    let mut rest = args.iter();
    for arg in rest.by_ref() {
        let arg = arg.to_str().ok_or("a guard argument is not UTF-8")?;
        if arg == "--" {
            break;
        }
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("unknown guard argument {arg}"))?;
        let fd = || value.parse::<i32>().map_err(|e| format!("{key}: {e}"));
        match key {
            "--control-fd" => control_fd = Some(fd()?),
            "--report-fd" => report_fd = Some(fd()?),
            "--grace" => grace = Some(crate::parse_duration_within(value, limits::GRACE)?),
            _ => return Err(format!("unknown guard argument {arg}")),
        }
    }
    let command: Vec<OsString> = rest.cloned().collect();
    match (control_fd, report_fd, grace) {
        (Some(control_fd), Some(report_fd), Some(grace)) if !command.is_empty() => Ok(GuardArgs {
            control_fd,
            report_fd,
            grace,
            command,
        }),
        _ => Err("usage: __guard --control-fd=N --report-fd=N --grace=DUR -- CMD...".into()),
    }
}

/// Signals aimed at the command (a ^C to the supervisor's group, a kill of
/// the supervisor's group) that must not kill the guard or the anchor. A
/// handler, unlike `SIG_IGN`, is reset by exec, so the command does not
/// inherit it.
fn survive_group_signals() {
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, Arc::new(AtomicBool::new(false)));
    }
}

/// The anchor: found a process group, hold it until stdin closes.
fn anchor() -> u8 {
    survive_group_signals();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    0
}

/// Take ownership of a descriptor the supervisor passed by number, and
/// mark it close-on-exec so the anchor and the command do not inherit it.
#[allow(
    unsafe_code,
    reason = "adopting an inherited descriptor by number has no safe std API"
)]
fn adopt(fd: i32) -> Result<File, String> {
    let flags = rustix::io::fcntl_getfd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .map_err(|e| format!("descriptor {fd} passed by the supervisor is not open: {e}"))?;
    // SAFETY: the supervisor passed `fd` open (checked just above) and this
    // process has done nothing yet that could have opened or closed
    // descriptors; nothing else in this process refers to it, so the
    // OwnedFd is its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, flags | rustix::io::FdFlags::CLOEXEC).map_err(|e| e.to_string())?;
    Ok(File::from(owned))
}

enum Event {
    Env(HashMap<String, String>),
    /// The trust window now ends at this boot-clock time.
    Window(Duration),
    ControlClosed,
    Reaped(Pid, WaitStatus),
    NoChildren,
}

fn pid_of(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Every process whose parent chain leads to this one (read from /proc).
fn descendants() -> Vec<Pid> {
    let me = std::process::id();
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let parent_pid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_ascii_whitespace().nth(1))
                .and_then(|p| p.parse().ok());
            if let Some(parent_pid) = parent_pid {
                parent.insert(pid, parent_pid);
            }
        }
    }
    let mut ours = HashSet::new();
    for &pid in parent.keys() {
        let mut chain = Vec::new();
        let mut p = pid;
        let mine = loop {
            if p == me || ours.contains(&p) {
                break true;
            }
            chain.push(p);
            match parent.get(&p) {
                Some(&pp) if pp != 0 && chain.len() < 4096 => p = pp,
                _ => break false,
            }
        };
        if mine {
            ours.extend(chain);
        }
    }
    ours.into_iter().filter_map(pid_of).collect()
}

/// Signal the command's group and every other descendant.
fn signal_tree(group: Pid, sig: Signal) {
    let _ = rustix::process::kill_process_group(group, sig);
    for pid in descendants() {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// The longest the guard sleeps before it looks at the boot clock again
/// (timeouts run on a clock that stops during suspend).
const POLL: Duration = Duration::from_millis(100);

fn report(out: &mut File, line: &str) {
    // The supervisor may be gone; then nobody is listening.
    let _ = writeln!(out, "{line}");
}

/// The guard; `ours` is how many of this process's arguments were handed
/// to [`main`] (the ones before them are the program's leading arguments,
/// which the anchor gets too).
fn run(args: &GuardArgs, ours: usize) -> Result<u8, String> {
    let control = adopt(args.control_fd)?;
    let mut out = adopt(args.report_fd)?;
    survive_group_signals();
    rustix::process::set_child_subreaper(Pid::from_raw(1))
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;

    let exe = std::env::current_exe().map_err(|e| format!("cannot find the guard program to start the anchor: {e}"))?;
    let whole: Vec<OsString> = std::env::args_os().collect();
    let leading = whole.get(1..whole.len().saturating_sub(ours)).unwrap_or_default();
    let mut anchor = Command::new(exe)
        .args(leading)
        .arg(ANCHOR_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the process-group anchor: {e}"))?;
    let group = pid_of(anchor.id()).ok_or("the anchor has no pid")?;
    let mut anchor_stdin = anchor.stdin.take();
    report(&mut out, &format!("anchor {}", anchor.id()));

    let (tx, rx) = mpsc::channel();
    let control_tx = tx.clone();
    thread::spawn(move || {
        // Until the supervisor closes its end (or dies).
        for line in BufReader::new(control).lines() {
            let Ok(line) = line else { break };
            let event = match line.split_once(' ') {
                Some(("env", json)) => serde_json::from_str(json).ok().map(Event::Env),
                Some(("window", ns)) => ns.parse().ok().map(Duration::from_nanos).map(Event::Window),
                _ => None,
            };
            if let Some(event) = event
                && control_tx.send(event).is_err()
            {
                return;
            }
        }
        let _ = control_tx.send(Event::ControlClosed);
    });
    thread::spawn(move || {
        loop {
            match rustix::process::wait(WaitOptions::empty()) {
                Ok(Some((pid, status))) => {
                    if tx.send(Event::Reaped(pid, status)).is_err() {
                        return;
                    }
                }
                Ok(None) | Err(Errno::INTR) => {}
                Err(_) => {
                    let _ = tx.send(Event::NoChildren);
                    return;
                }
            }
        }
    });

    let mut command: Option<Pid> = None;
    let mut status: Option<WaitStatus> = None;
    let mut spawn_failed = false;
    // The end of the trust window, as last heard (boot clock).
    let mut trusted_until: Option<Duration> = None;
    // While stopping: when SIGKILL goes out (boot clock).
    let mut kill_at: Option<Duration> = None;
    let begin_stop = |kill_at: &mut Option<Duration>, at: Duration| {
        if kill_at.is_none() {
            *kill_at = Some(at);
            signal_tree(group, Signal::TERM);
        }
    };
    loop {
        let now = host::boot_clock();
        let running = command.is_some() && status.is_none();
        if let Some(until) = trusted_until.filter(|until| running && kill_at.is_none() && now >= *until) {
            report(&mut out, "deadline");
            begin_stop(&mut kill_at, until + args.grace);
        }
        if let Some(at) = kill_at.filter(|at| now >= *at) {
            signal_tree(group, Signal::KILL);
            kill_at = Some(at.max(now) + Duration::from_secs(1));
        }
        let next = match kill_at {
            Some(at) => Some(at),
            None => trusted_until.filter(|_| running),
        };
        let event = match next {
            Some(next) => match rx.recv_timeout(next.saturating_sub(now).min(POLL)) {
                Ok(e) => e,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => break,
            },
        };
        match event {
            Event::Env(env) => match spawn(&args.command, &env, group) {
                Ok(pid) => {
                    command = Some(pid);
                    report(&mut out, &format!("started {}", pid.as_raw_nonzero()));
                    // The command holds the group now; let the anchor go.
                    anchor_stdin = None;
                }
                Err(e) => {
                    spawn_failed = true;
                    report(
                        &mut out,
                        &format!(
                            "spawn-error {} cannot run {}: {e}",
                            child::spawn_error_code(&e),
                            child::display(&args.command)
                        ),
                    );
                    anchor_stdin = None;
                }
            },
            Event::Window(until) => trusted_until = trusted_until.max(Some(until)),
            Event::ControlClosed => {
                if command.is_some() && status.is_none() {
                    // The supervisor is gone while the command runs.
                    begin_stop(&mut kill_at, host::boot_clock() + args.grace);
                }
                anchor_stdin = None;
            }
            Event::Reaped(pid, st) => {
                if Some(pid) == command && (st.exited() || st.signaled()) {
                    status = Some(st);
                    // Whatever the command left behind goes with it.
                    if !descendants().is_empty() {
                        begin_stop(&mut kill_at, host::boot_clock() + args.grace);
                    }
                }
            }
            Event::NoChildren => break,
        }
    }
    drop(anchor_stdin);
    if let Some(st) = status {
        let line = match (st.exit_status(), st.terminating_signal()) {
            (Some(code), _) => format!("exited code {code}"),
            (None, Some(sig)) => format!("exited signal {sig}"),
            _ => "exited code 1".into(),
        };
        report(&mut out, &line);
    }
    Ok(u8::from(spawn_failed))
}

fn spawn(argv: &[OsString], env: &HashMap<String, String>, group: Pid) -> std::io::Result<Pid> {
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env)
        .process_group(group.as_raw_nonzero().get())
        .spawn()?;
    pid_of(child.id()).ok_or_else(|| std::io::Error::other("the command has no pid"))
}
