//! The guard: a small process between the supervisor (a
//! [`Supervised`](super::Supervised) command: `leasehold run`, `leasehold
//! work`, or any program using [`crate::supervise`]) and its command that
//! makes sure no process of the command's tree outlives the supervisor by
//! more than the grace period — even when the supervisor is killed with
//! SIGKILL.
//!
//! # Which program is the guard
//!
//! Any program whose `main` hands its arguments to [`main`] first thing,
//! before it starts a thread: the `leasehold-guard` binary (crate
//! `leasehold-guard`) does nothing else, and the `leasehold` binary does it
//! for `leasehold __guard`. The supervisor starts [`GuardProgram`] — a path
//! and optional leading arguments, then `__guard` and the guard's own
//! arguments; [`GuardProgram::find`] is the default lookup (`program.rs`).
//!
//! A guard program is only trusted if it is this build's: the supervisor
//! passes [`GUARD_BUILD`] (`--build=`), and a guard of another build — one
//! found on `$PATH`, or left beside a program that was upgraded alone —
//! starts nothing and reports its own build. The supervisor then fails
//! with both named, or starts the program's fallback
//! ([`GuardProgram::or_else`]): `leasehold run` tries the small
//! `leasehold-guard` beside it first, and itself after.
//!
//! # Why a separate process
//!
//! `PR_SET_PDEATHSIG` fires when the parent *thread* exits, not the parent
//! process, and a kill -9 of the supervisor gives it no chance to act. So
//! the guard watches a socket instead: the supervisor holds the only other
//! end of the *control* socket (close-on-exec, so the command never
//! inherits it); end-of-file means the supervisor is gone, however it died.
//! (A socket rather than a pipe, so that a command's stdin, stdout and
//! stderr can be handed over with it: see *slot* below.)
//!
//! # Two ways to run: once, or one command after another
//!
//! ```text
//! supervisor (leasehold run)            holds the lease, heartbeats, signals
//!   └─ guard (PROGRAM [ARGS] __guard)   keeps the tree; ignores INT/TERM/HUP
//!        └─ CMD (leader of its group G) and everything CMD starts
//! ```
//!
//! - **Once** (`leasehold run`, [`Supervised::spawn`](super::Supervised::spawn)):
//!   the group G must exist *before* the lease is acquired, because the
//!   grant records it (fast takeover checks that G is empty), and the
//!   command can only start *after* (it gets the token in its
//!   environment). So the guard forks right away, while it is still one
//!   thread: the child makes itself the leader of a new group G, waits for
//!   its environment, and then executes the command in its own place. G is
//!   the command's pid from the start, and no extra process is spent on
//!   holding the group (the anchor of earlier versions).
//! - **Slot** (`--slot`; a worker's [`GuardSlot`](super::GuardSlot)): a
//!   task's claim records no process group, so nothing has to exist before
//!   the claim. The guard stays up and runs the same command once per
//!   `env` message, each run as the leader of a new group, with the stdin,
//!   stdout and stderr that came with the message (passed over the control
//!   socket). It reports `exited` only when the run's whole tree is gone,
//!   then waits for the next. A worker thus pays for the guard once, not
//!   once per task.
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
//! case 25). In a slot, the window is forgotten when a run's tree is gone:
//! each run is kept to the windows of its own claim (a window still in
//! flight from the previous claim is earlier, so it could only stop a run
//! early, never late).
//!
//! The guard keeps the command's tree together with
//! [`host::ProcessTree`]. On Linux it is a child
//! subreaper: every orphaned descendant of the command is re-parented to
//! it, not to PID 1 (which reaps late on some machines and would leave
//! zombies that keep G "non-empty"). It reaps them all; so the tree is gone
//! exactly when the guard has no child left. macOS has no subreaper: there
//! the guard watches every member it has seen with `kqueue` and the tree is
//! gone when it has no child left *and* no remembered member and nothing in
//! G remains (docs/PLATFORMS.md: what escapes there).
//!
//! # Protocol
//!
//! The supervisor tells the guard the trust window (`window`), the
//! command's environment (`env`, with a slot's streams) and when to stop
//! the run (`stop`: a lost lease, a shutdown, a stall) over the control
//! socket; the guard reports the group, the start, a spawn error, the
//! deadline and the exit on the report pipe. The messages and their
//! encoding: `protocol.rs`.
//!
//! # States (of one run)
//!
//! - *waiting*: for `env` on the control socket; `window` messages may
//!   come before and after it. EOF here: exit (a once-guard's forked child,
//!   never started, exits with it).
//! - *running*: command started (`started PID`). Reaps children as they die.
//! - *stopping*: entered when the command exits and left something behind,
//!   on `stop` or EOF of the control socket, or when the trust window
//!   closes (`deadline` reported first): SIGTERM to G and to every other
//!   member of the tree (a descendant that called `setsid()` has left G but
//!   is still ours to kill) — once: entered once per run, and a member
//!   still in G is not signalled again by pid — SIGKILL after the grace
//!   period, again every second while any remain.
//! - *done*: no children left: report `exited code N` / `exited signal N`;
//!   a once-guard exits, a slot waits for the next `env` (or EOF).
//!
//! What escapes: a process that leaves the tree entirely — handed to
//! another supervisor (systemd-run, launchd, at, a daemon started over
//! IPC), or in another pid namespace; on macOS also a process that calls
//! `setsid()` and whose parent exits before the guard has seen it. If the guard itself is killed with SIGKILL, the
//! supervisor sees the report pipe close and kills G itself, and — if it
//! adopted the guard's orphans (`leasehold run`, a child subreaper too) —
//! the rest of the tree; otherwise it leaves the lease to its TTL. The guard runs
//! in a process group of its own, so a kill -9 of the supervisor's whole
//! process group does not reach it: it sees end-of-file and stops G (fault
//! case 32 kills `leasehold cron`'s group so). Only a kill of both the
//! supervisor and the guard by pid leaves nothing to act.

mod program;
pub(crate) mod protocol;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::io::Errno;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

use super::child::{self, Exit};
use crate::{host, limits};
use program::is_program;
pub use program::{GUARD_ARG, GUARD_BUILD, GUARD_ENV, GUARD_NAME, GuardProgram};
use protocol::{Control, Env, Report, Streams};

/// The guard program's entry point: `args` are this process's arguments
/// after its program name and leading arguments — `__guard
/// --control-fd=N --report-fd=N --grace=DUR [--slot] [--build=BUILD] --
/// CMD...`. Returns
/// the exit code, or `None` when `args` do not start with `__guard` (the
/// program is not being asked to guard). Call it first thing in `main`,
/// before starting any thread: a guard that runs its command once forks
/// its command's process before anything else (see the module docs), and
/// refuses to when the process has more than one thread.
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
        Some(GUARD_ARG) => Some(match parse(&args[1..]).and_then(|parsed| run(&parsed)) {
            Ok(code) => code,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "leasehold: {e}");
                1
            }
        }),
        _ => None,
    }
}

/// Why a guard could not start or go on: printed on its stderr
/// ("leasehold: …") before it exits 1.
#[derive(Debug, thiserror::Error)]
enum GuardError {
    #[error("a guard argument is not UTF-8")]
    NotUtf8,
    #[error("unknown guard argument {0}")]
    UnknownArgument(String),
    #[error("{key}: {error}")]
    NotADescriptor {
        key: String,
        error: std::num::ParseIntError,
    },
    #[error(transparent)]
    Grace(#[from] crate::ParseError),
    #[error("usage: __guard --control-fd=N --report-fd=N --grace=DUR [--slot] [--build=BUILD] -- CMD...")]
    Usage,
    #[error("descriptor {fd} passed by the supervisor is not open: {error}")]
    NotOpen { fd: i32, error: Errno },
    #[error(transparent)]
    CloseOnExec(Errno),
    #[error("fork returned a bad pid")]
    BadPid,
    #[error(
        "the guard must start before any other thread of its program (call leasehold::supervise::guard::main first thing in main)"
    )]
    Threads,
    /// A system call failed: `what` could not be done.
    #[error("{what}: {error}")]
    System { what: &'static str, error: std::io::Error },
}

impl GuardError {
    fn system(what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |error| Self::System { what, error }
    }
}

/// The guard's arguments.
struct GuardArgs {
    control_fd: i32,
    report_fd: i32,
    grace: Duration,
    /// Run the command once per `env` message (see the module docs).
    slot: bool,
    /// The build of the library that started this guard (`--build`):
    /// another build's guard starts nothing.
    build: Option<String>,
    command: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<GuardArgs, GuardError> {
    let (mut control_fd, mut report_fd, mut grace, mut slot, mut build) = (None, None, None, false, None);
    let mut rest = args.iter();
    for arg in rest.by_ref() {
        let arg = arg.to_str().ok_or(GuardError::NotUtf8)?;
        if arg == "--" {
            break;
        }
        if arg == "--slot" {
            slot = true;
            continue;
        }
        let unknown = || GuardError::UnknownArgument(arg.to_owned());
        let (key, value) = arg.split_once('=').ok_or_else(unknown)?;
        let fd = || {
            value.parse::<i32>().map_err(|error| GuardError::NotADescriptor {
                key: key.to_owned(),
                error,
            })
        };
        match key {
            "--control-fd" => control_fd = Some(fd()?),
            "--report-fd" => report_fd = Some(fd()?),
            "--grace" => grace = Some(crate::parse_duration_within(value, limits::GRACE)?),
            "--build" => build = Some(value.to_owned()),
            _ => return Err(unknown()),
        }
    }
    let command: Vec<OsString> = rest.cloned().collect();
    match (control_fd, report_fd, grace) {
        (Some(control_fd), Some(report_fd), Some(grace)) if !command.is_empty() => Ok(GuardArgs {
            control_fd,
            report_fd,
            grace,
            slot,
            build,
            command,
        }),
        _ => Err(GuardError::Usage),
    }
}

/// Signals aimed at the command (a ^C to the supervisor's group, a kill of
/// the supervisor's group) that must not kill the guard. A handler, unlike
/// `SIG_IGN`, is reset by exec, so the command does not inherit it.
fn survive_group_signals() {
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let _ = signal_hook::flag::register(sig, Arc::new(AtomicBool::new(false)));
    }
}

/// Take ownership of a descriptor the supervisor passed by number, and
/// mark it close-on-exec so the command does not inherit it.
#[allow(
    unsafe_code,
    reason = "adopting an inherited descriptor by number has no safe std API"
)]
fn adopt(fd: i32) -> Result<OwnedFd, GuardError> {
    let flags = rustix::io::fcntl_getfd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .map_err(|error| GuardError::NotOpen { fd, error })?;
    // SAFETY: the supervisor passed `fd` open (checked just above) and this
    // process has done nothing yet that could have opened or closed
    // descriptors; nothing else in this process refers to it, so the
    // OwnedFd is its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, flags | rustix::io::FdFlags::CLOEXEC).map_err(GuardError::CloseOnExec)?;
    Ok(owned)
}

enum Event {
    /// A message from the supervisor.
    Control(Control),
    ControlClosed,
    Reaped(Pid, WaitStatus),
    /// No child left: a subreaper's descendants all hang from its
    /// children, so the whole tree is gone.
    NoChildren,
}

fn pid_of(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Signal the command's group and every other member of its tree — each
/// process once: a member still in the group had the group's signal, so
/// it is left out of the second pass. (The pass reads `/proc`, 0.5–4 ms
/// after the group's signal: a program that takes a second SIGTERM as
/// "stop now, skip the cleanup" lost its grace to it.) A member that
/// moves to another group between the two gets it twice; one forked into
/// the group after the group's signal gets none, and SIGKILL at the end of
/// the grace.
fn signal_tree(tree: &mut host::ProcessTree, group: Pid, sig: Signal) {
    let _ = rustix::process::kill_process_group(group, sig);
    for pid in tree.members() {
        if rustix::process::getpgid(Some(pid)).is_ok_and(|g| g == group) {
            continue;
        }
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// The guard's exit code once the command's whole tree is gone — its only
/// way out besides an error (1) or a signal. Not 0: where another user's
/// zombie guard cannot be read, its status shows as 0. A guard that exited
/// so but was not reaped yet (its supervisor died and PID 1 reaps late)
/// proves its tree gone (`identity::provably_gone`).
pub const TREE_GONE_EXIT: u8 = 3;

/// The longest the guard sleeps before it looks at the boot clock again
/// (timeouts run on a clock that stops during suspend).
const POLL: Duration = Duration::from_millis(100);

/// Write one report in one `write` (a line is at most
/// [`protocol::LINE_MAX`], within `PIPE_BUF`, so it lands whole): a
/// once-guard's command process writes its spawn error to the same pipe,
/// and must not land inside a line.
fn report(out: &mut File, report: &Report) {
    // The supervisor may be gone; then nobody is listening.
    let _ = out.write_all(report.encode().as_bytes());
}

/// The most of a command line a spawn error shows, in characters.
const COMMAND_SHOWN_MAX: usize = 200;

/// The report of a command that could not be started.
fn spawn_error(code: u8, command: &[OsString], error: &std::io::Error) -> Report {
    Report::SpawnError {
        code,
        // The command cut, so that the reason fits the report's line too.
        message: format!(
            "cannot run {}: {error}",
            crate::shorten(&child::display(command), COMMAND_SHOWN_MAX)
        ),
    }
}

/// A once-guard's command, forked but not yet executed: the leader of its
/// group, waiting for its environment on `env`.
struct Forked {
    pid: Pid,
    env: File,
}

/// Fork the command's process: the child leads a new group and waits for
/// its environment (a JSON object on a pipe), then executes the command in
/// its own place; EOF without one means it was never to start.
#[allow(
    unsafe_code,
    reason = "fork has no safe API; it is only called while this process has one thread"
)]
fn fork_command(command: &[OsString], report: &OwnedFd) -> Result<Forked, GuardError> {
    if host::thread_count().is_some_and(|n| n != 1) {
        return Err(GuardError::Threads);
    }
    let (env_rx, env_tx) =
        host::pipe(false).map_err(GuardError::system("cannot create a pipe to the command's process"))?;
    // SAFETY: this process has one thread (checked above), so the child is a
    // whole copy of it: it may allocate and run any code, as `child_main`
    // does, and it never returns here (it executes the command or exits).
    match unsafe { libc::fork() } {
        -1 => Err(GuardError::system("cannot fork the command's process")(
            std::io::Error::last_os_error(),
        )),
        0 => {
            drop(env_tx);
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child_main(command, env_rx, report)))
                .unwrap_or(1);
            // SAFETY: _exit ends this forked copy without running the
            // parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        raw => {
            let pid = Pid::from_raw(raw).ok_or(GuardError::BadPid)?;
            // Both sides set the group, so that it exists once either has
            // run: the group is reported (and recorded with the lease)
            // before the child may have been scheduled.
            let _ = rustix::process::setpgid(Some(pid), Some(pid));
            drop(env_rx);
            Ok(Forked {
                pid,
                env: File::from(env_tx),
            })
        }
    }
}

/// The forked command process, before exec: see [`fork_command`].
fn child_main(command: &[OsString], env_rx: OwnedFd, report: &OwnedFd) -> i32 {
    let _ = rustix::process::setpgid(None, None);
    let mut json = Vec::new();
    if File::from(env_rx).read_to_end(&mut json).is_err() || json.is_empty() {
        return 0;
    }
    let Ok(env) = serde_json::from_slice::<Env>(&json) else {
        return 1;
    };
    let error = Command::new(&command[0]).args(&command[1..]).envs(&env).exec();
    let code = child::spawn_error_code(&error);
    // One write of one short line: whole, as the guard's own lines are.
    let line = spawn_error(code, command, &error).encode();
    let _ = rustix::io::write(report, line.as_bytes());
    i32::from(code)
}

/// Where a slot's command is: a bare name is looked up on `$PATH` once,
/// as a shell remembers where it found a command, instead of on every run.
/// Not found now: looked up again on every run (and reported then).
fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_encoded_bytes().contains(&b'/') {
        return None;
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| is_program(path))
}

/// Start one run of a slot's command (`program`: where it was found, see
/// [`resolve`]): the leader of a new group, with the streams that came with
/// its `env` message (the guard's own otherwise).
fn spawn_run(argv: &[OsString], program: Option<&Path>, env: &Env, streams: Streams) -> std::io::Result<Pid> {
    let mut command = match program {
        Some(path) => {
            let mut command = Command::new(path);
            command.arg0(&argv[0]);
            command
        }
        None => Command::new(&argv[0]),
    };
    command.args(&argv[1..]).envs(env).process_group(0);
    let [stdin, stdout, stderr] = streams;
    if let Some(fd) = stdin {
        command.stdin(Stdio::from(fd));
    }
    if let Some(fd) = stdout {
        command.stdout(Stdio::from(fd));
    }
    if let Some(fd) = stderr {
        command.stderr(Stdio::from(fd));
    }
    let child = command.spawn()?;
    // `command` goes here, and with it this process's copies of the streams.
    pid_of(child.id()).ok_or_else(|| std::io::Error::other("the command has no pid"))
}

/// Read one control message (the socket is readable): an event, `None`
/// for a message that means nothing, or `ControlClosed` at EOF.
fn read_control(control: &OwnedFd, buf: &mut [u8]) -> Option<Event> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = match recvmsg(
        control,
        &mut [IoSliceMut::new(buf)],
        &mut ancillary,
        host::RECV_CLOEXEC | RecvFlags::DONTWAIT,
    ) {
        Ok(r) => r,
        Err(Errno::INTR | Errno::AGAIN) => return None,
        Err(_) => return Some(Event::ControlClosed),
    };
    let fds: Vec<OwnedFd> = ancillary
        .drain()
        .filter_map(|m| match m {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds.collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    // Where the platform cannot receive them close-on-exec (macOS), they
    // become so now: the guard is one thread, so nothing forks meanwhile.
    for fd in &fds {
        let _ = host::set_cloexec(fd);
    }
    if received.bytes == 0 {
        return Some(Event::ControlClosed);
    }
    // A message that does not decode is ignored: the guard has nowhere
    // to log it (its stderr is the command's).
    Control::decode(&buf[..received.bytes], fds).ok().map(Event::Control)
}

/// Reap every child that has ended: `Reaped` events, then `NoChildren`
/// when none is left at all.
fn reap(events: &mut Vec<Event>) {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => events.push(Event::Reaped(pid, status)),
            Err(Errno::INTR) => {}
            Ok(None) => return,
            Err(_) => {
                events.push(Event::NoChildren);
                return;
            }
        }
    }
}

/// The run in progress: its command (the leader of its group), how it
/// ended, and when SIGKILL goes out while it is being stopped.
#[derive(Default)]
struct Run {
    command: Option<Pid>,
    status: Option<WaitStatus>,
    /// The end of the trust window, as last heard (boot clock).
    trusted_until: Option<Duration>,
    /// While stopping: when SIGKILL goes out (boot clock).
    kill_at: Option<Duration>,
}

impl Run {
    fn running(&self) -> bool {
        self.command.is_some() && self.status.is_none()
    }

    /// SIGTERM to the tree now (once), SIGKILL at `at`. SIGCONT after the
    /// SIGTERM: a stopped process (^Z, SIGSTOP) acts on it only once
    /// continued.
    fn stop(&mut self, tree: &mut host::ProcessTree, at: Duration) {
        if let (Some(group), None) = (self.command, self.kill_at) {
            self.kill_at = Some(at);
            signal_tree(tree, group, Signal::TERM);
            signal_tree(tree, group, Signal::CONT);
        }
    }
}

/// The guard: one thread, waiting in `poll` on the control socket and on
/// SIGCHLD (a self-pipe) with the trust window's timeout — no hand-over
/// between threads on a run's way in or out.
fn run(args: &GuardArgs) -> Result<u8, GuardError> {
    if args.build.as_deref().is_some_and(|theirs| theirs != GUARD_BUILD) {
        // Another build's supervisor may speak another protocol: start
        // nothing, say which build this is (it may start another guard
        // program instead), and print nothing — the command's stderr is
        // ours.
        report(
            &mut File::from(adopt(args.report_fd)?),
            &Report::OtherBuild(GUARD_BUILD.to_owned()),
        );
        return Ok(1);
    }
    let mut guard = Guard::start(args)?;
    let mut events: Vec<Event> = Vec::new();
    // A once-guard's child may have ended before the handler was there.
    reap(&mut events);
    loop {
        let now = host::boot_clock();
        guard.keep_time(now);
        if events.is_empty() {
            events = guard.wait(now)?;
            if events.is_empty() {
                continue;
            }
        }
        for event in std::mem::take(&mut events) {
            if let Some(code) = guard.handle(event) {
                return Ok(code);
            }
        }
        guard.stop_leftovers();
    }
}

/// The guard between events.
struct Guard<'a> {
    args: &'a GuardArgs,
    control: OwnedFd,
    /// Where a control message is received.
    buf: Vec<u8>,
    /// Readable after SIGCHLD.
    chld: OwnedFd,
    /// The report pipe.
    out: File,
    tree: host::ProcessTree,
    /// A once-guard's command process, forked and waiting for its
    /// environment.
    forked: Option<Forked>,
    /// Where a slot's command is ([`resolve`]).
    program: Option<PathBuf>,
    run: Run,
    /// The control socket reached its end: the supervisor is gone.
    closed: bool,
    /// No child left, but the tree is not gone yet: orphans the guard cannot
    /// reap (macOS; see `host::ProcessTree`). Looked at again on each wake.
    orphans_left: bool,
}

impl<'a> Guard<'a> {
    /// Take the descriptors the supervisor passed, keep the tree, fork a
    /// once-guard's command process, watch SIGCHLD, and report `group` (or,
    /// for a slot, `ready`).
    fn start(args: &'a GuardArgs) -> Result<Self, GuardError> {
        let control = adopt(args.control_fd)?;
        let report_fd = adopt(args.report_fd)?;
        // Before the command's process exists: Linux makes this a subreaper.
        let tree = host::ProcessTree::keep().map_err(GuardError::system("cannot keep the command's tree"))?;
        // A once-guard forks its command's process while it is one thread.
        let forked = if args.slot {
            None
        } else {
            Some(fork_command(&args.command, &report_fd)?)
        };
        survive_group_signals();
        let (chld, chld_tx) = host::pipe(true).map_err(GuardError::system("cannot create the guard's signal pipe"))?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGCHLD, chld_tx)
            .map_err(GuardError::system("cannot watch for SIGCHLD"))?;
        let mut out = File::from(report_fd);
        match &forked {
            Some(f) => report(&mut out, &Report::Group(f.pid)),
            None => report(&mut out, &Report::Ready),
        }
        Ok(Self {
            args,
            control,
            buf: vec![0u8; host::CONTROL_MESSAGE_MAX],
            chld,
            out,
            tree,
            forked,
            program: if args.slot { resolve(&args.command[0]) } else { None },
            run: Run::default(),
            closed: false,
            orphans_left: false,
        })
    }

    /// At the end of the trust window: report `deadline` and stop the run.
    /// When its grace period is over: SIGKILL, again every second.
    fn keep_time(&mut self, now: Duration) {
        let run = &mut self.run;
        if let Some(until) = run
            .trusted_until
            .filter(|until| run.running() && run.kill_at.is_none() && now >= *until)
        {
            report(&mut self.out, &Report::Deadline);
            run.stop(&mut self.tree, until + self.args.grace);
        }
        if let (Some(at), Some(group)) = (run.kill_at.filter(|at| now >= *at), run.command) {
            // Planted bug (scripts/mutants): SIGKILL never sent.
            if !leasehold_backend::mutant::strikes(leasehold_backend::mutant::Mutant::GuardNeverKills, || true) {
                signal_tree(&mut self.tree, group, Signal::KILL);
            }
            run.kill_at = Some(at.max(now) + Duration::from_secs(1));
        }
    }

    /// Sleep until something happens — a child ends, the supervisor speaks
    /// or goes, the tree changes — or the clock needs looking at; then say
    /// what happened (nothing, when only the clock did).
    fn wait(&mut self, now: Duration) -> Result<Vec<Event>, GuardError> {
        let next = match self.run.kill_at {
            Some(at) => Some(at),
            None => self.run.trusted_until.filter(|_| self.run.running()),
        };
        let timeout = next.map(|next| {
            let wait = next.saturating_sub(now).min(POLL);
            rustix::time::Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: i64::from(wait.subsec_nanos()),
            }
        });
        // After EOF the control socket stays readable: left out.
        let wakeup = self.tree.wakeup();
        let mut fds = vec![PollFd::new(&self.chld, PollFlags::IN)];
        if let Some(fd) = &wakeup {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        let control_at = fds.len();
        if !self.closed {
            fds.push(PollFd::new(&self.control, PollFlags::IN));
        }
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(GuardError::system("cannot wait for events")(e.into())),
        }
        let chld_ready = !fds[0].revents().is_empty();
        let tree_ready = wakeup.is_some() && !fds[1].revents().is_empty();
        let control_ready = fds.get(control_at).is_some_and(|fd| !fd.revents().is_empty());
        drop(fds);
        let mut events = Vec::new();
        if tree_ready {
            self.tree.refresh();
            if self.tree.supervisor_gone() && !self.closed {
                // macOS: the control socket is a datagram pair, which
                // has no EOF; the supervisor's exit note stands for it.
                events.push(Event::ControlClosed);
            }
        }
        if chld_ready {
            let mut drain = [0u8; 64];
            while matches!(rustix::io::read(&self.chld, &mut drain), Ok(n) if n > 0) {}
            reap(&mut events);
        }
        if control_ready && !self.closed {
            events.extend(read_control(&self.control, &mut self.buf));
        }
        if self.orphans_left {
            events.push(Event::NoChildren);
        }
        Ok(events)
    }

    /// The command ended and left something behind (no `NoChildren` came
    /// with its reaping): it goes with it.
    fn stop_leftovers(&mut self) {
        if self.run.status.is_some() && self.run.kill_at.is_none() {
            self.run.stop(&mut self.tree, host::boot_clock() + self.args.grace);
        }
    }

    /// Act on one event; `Some(code)` when the guard is done.
    fn handle(&mut self, event: Event) -> Option<u8> {
        match event {
            Event::Control(Control::Env(env, streams)) => self.start_run(&env, streams),
            Event::Control(Control::Window(until)) => self.run.trusted_until = self.run.trusted_until.max(Some(until)),
            Event::Control(Control::Stop) => {
                if self.run.running() {
                    self.run.stop(&mut self.tree, host::boot_clock() + self.args.grace);
                }
            }
            Event::ControlClosed => {
                self.closed = true;
                if self.run.running() {
                    // The supervisor is gone while the command runs.
                    self.run.stop(&mut self.tree, host::boot_clock() + self.args.grace);
                }
                // Never started: the forked child reads EOF and exits.
                self.forked = None;
                if self.run.command.is_none() && self.args.slot {
                    return Some(0);
                }
            }
            Event::Reaped(pid, st) => {
                if Some(pid) == self.run.command && (st.exited() || st.signaled()) {
                    self.run.status = Some(st);
                }
                if self.forked.as_ref().is_some_and(|f| f.pid == pid) {
                    // Killed before it was started (a stop sent to its
                    // group): nothing is left to start.
                    self.forked = None;
                }
            }
            Event::NoChildren => return self.no_children(),
        }
        None
    }

    /// Start the command with `env`: hand it to a once-guard's forked
    /// process, or spawn a slot's run. Not while a run is in progress, nor
    /// once the supervisor is gone.
    fn start_run(&mut self, env: &Env, streams: Streams) {
        if self.run.command.is_some() || self.closed {
            return;
        }
        if let Some(f) = self.forked.take() {
            // Hand the environment over; the child executes the command (or
            // reports why it could not).
            let json = serde_json::to_vec(env).unwrap_or_default();
            let mut env_tx = f.env;
            let _ = env_tx.write_all(&json);
            drop(env_tx);
            self.started(f.pid);
        } else if self.args.slot {
            match spawn_run(&self.args.command, self.program.as_deref(), env, streams) {
                Ok(pid) => self.started(pid),
                Err(e) => {
                    let code = child::spawn_error_code(&e);
                    report(&mut self.out, &spawn_error(code, &self.args.command, &e));
                    report(&mut self.out, &Report::Exited(Exit::Code(code)));
                    self.run = Run::default();
                }
            }
        }
    }

    fn started(&mut self, command: Pid) {
        self.run.command = Some(command);
        self.tree.watch(command);
        report(&mut self.out, &Report::Started(command));
    }

    /// No child is left: when the run's whole tree is gone, report how its
    /// command ended. `Some(TREE_GONE_EXIT)` when the guard is done.
    fn no_children(&mut self) -> Option<u8> {
        if let Some(group) = self.run.command
            && !self.tree.gone_without_children(group)
        {
            self.orphans_left = true;
            return None;
        }
        self.orphans_left = false;
        // The run's whole tree is gone (or nothing ran yet).
        if let (Some(_), Some(st)) = (self.run.command, self.run.status) {
            let exit = Exit::from(ExitStatus::from_raw(st.as_raw()));
            report(&mut self.out, &Report::Exited(exit));
            self.run = Run::default();
            self.tree.forget();
        }
        let done = self.forked.is_none() && self.run.command.is_none() && (self.closed || !self.args.slot);
        done.then_some(TREE_GONE_EXIT)
    }
}
