//! The guard: a small process between the `run` supervisor and its command
//! that makes sure no process of the command's tree outlives the supervisor
//! by more than the grace period — even when the supervisor is killed with SIGKILL.
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
//!   └─ guard (leasehold __guard)      child subreaper; ignores INT/TERM/HUP
//!        ├─ anchor (leasehold __anchor)   leader of a new process group G
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
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use anyhow::Context as _;
use leasehold::host;
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};

use crate::cli::GuardArgs;
use crate::commands::child;

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
pub fn anchor() -> u8 {
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
fn adopt(fd: i32) -> anyhow::Result<File> {
    let flags = rustix::io::fcntl_getfd(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .with_context(|| format!("descriptor {fd} passed by the supervisor is not open"))?;
    // SAFETY: the supervisor passed `fd` open (checked just above) and this
    // process has done nothing yet that could have opened or closed
    // descriptors; nothing else in this process refers to it, so the
    // OwnedFd is its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, flags | rustix::io::FdFlags::CLOEXEC)?;
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

pub fn run(args: &GuardArgs) -> anyhow::Result<u8> {
    let control = adopt(args.control_fd)?;
    let mut out = adopt(args.report_fd)?;
    survive_group_signals();
    rustix::process::set_child_subreaper(Pid::from_raw(1)).context("cannot become a child subreaper")?;

    let exe = std::env::current_exe().context("cannot find the leasehold binary to start the anchor")?;
    let mut anchor = Command::new(exe)
        .arg("__anchor")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("cannot start the process-group anchor")?;
    let group = pid_of(anchor.id()).context("anchor pid")?;
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
