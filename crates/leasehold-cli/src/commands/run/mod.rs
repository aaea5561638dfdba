//! `leasehold run NAME -- CMD`: the supervisor.
//!
//! # Timeline
//!
//! 1. Start the guard ([`guard`]), which founds the command's process
//!    group G and reports it.
//! 2. Acquire the lease, bound to this process and to G (fast takeover
//!    waits until both are gone). Held: fail (11), skip (0) or wait (FIFO).
//! 3. Send the command's environment to the guard, which starts it in G.
//! 4. A [`Keeper`] renews every heartbeat and pushes loss; signals are
//!    forwarded to G; with `--stall-timeout`, output is piped through and
//!    watched.
//! 5. The command exits (and the guard has swept what it left in the
//!    tree): release, exit with its code (128+N for signal N).
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
//! where the supervisor sends SIGTERM to G; SIGKILL follows at
//! `stop_at + grace = sent + ttl - slack`, so the command is gone before
//! the store could hand the lease to anyone else. The slack covers signal
//! delivery and scheduling. For a first renewal to happen inside the
//! window, `heartbeat + grace + slack < ttl` — anything else is refused as
//! a usage error.
//!
//! # Signals and the terminal
//!
//! The command runs in its own group, so a terminal's ^C would not reach
//! it. When stdin is a terminal and we are its foreground group, the
//! terminal is handed to G (as a shell does for a job): ^C, ^\ and reads
//! from the terminal go straight to the command, and the supervisor gets
//! nothing to forward twice. It takes the terminal back at the end. (^Z
//! stops only the command; the supervisor keeps the lease renewed.)
//! Otherwise SIGINT, SIGTERM and SIGHUP sent to the supervisor are
//! forwarded to G, and the supervisor waits for the command to exit.

pub mod guard;

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::{
    Acquire, AcquireOptions, Binding, Grant, Keeper, KeeperOptions, LeaseRenew, Loss, Store, format_duration, host,
};
use rustix::process::{Pid, Signal};

use crate::cli::{IfHeld, RunArgs};
use crate::commands::{Ctx, child};
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// What the supervisor reacts to.
enum Event {
    Anchor(u32),
    Started,
    SpawnError(u8, String),
    Exited(u8),
    GuardGone,
    Lost(Loss),
    Stalled,
    Signal(i32),
}

/// Why the supervisor stopped the command.
enum StopReason {
    Lost(Loss),
    Stalled(Duration),
}

/// Slack between SIGKILL and the earliest store-side expiry.
fn slack(ttl: Duration) -> Duration {
    (ttl / 20).max(Duration::from_millis(500))
}

fn usage(message: String) -> anyhow::Error {
    CliError::new(ExitCode::Usage, message).into()
}

fn check_timing(args: &RunArgs) -> anyhow::Result<KeeperOptions> {
    let options = KeeperOptions {
        ttl: args.ttl,
        heartbeat: args.heartbeat,
        margin: args.grace + slack(args.ttl),
        owner: args.owner.clone(),
    };
    if args.heartbeat.is_some_and(|h| h.is_zero()) {
        return Err(usage("--heartbeat must be longer than zero".into()));
    }
    if options.problem().is_some() {
        let heartbeat = args.heartbeat.unwrap_or(args.ttl / 3);
        return Err(usage(format!(
            "--heartbeat {} + --grace {} + slack {} must be shorter than --ttl {}: otherwise the command could not be \
             stopped before the lease expires in the store. Raise --ttl, or lower --grace or --heartbeat",
            format_duration(heartbeat),
            format_duration(args.grace),
            format_duration(slack(args.ttl)),
            format_duration(args.ttl),
        )));
    }
    if args.wait_timeout.is_some() && args.if_held != IfHeld::Wait {
        return Err(usage("--wait-timeout only applies with --if-held wait".into()));
    }
    if args.stall_timeout.is_some_and(|d| d.is_zero()) {
        return Err(usage("--stall-timeout must be longer than zero".into()));
    }
    Ok(options)
}

/// A pipe whose `child_end` survives exec (inherited by the guard) while
/// `ours` stays close-on-exec.
fn pipe_for_child(child_reads: bool) -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).context("cannot create a pipe")?;
    let (ours, theirs) = if child_reads { (w, r) } else { (r, w) };
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    Ok((ours, theirs))
}

fn spawn_guard(args: &RunArgs, tx: &mpsc::Sender<Event>) -> anyhow::Result<(std::process::Child, std::fs::File)> {
    let (control, control_child) = pipe_for_child(true)?;
    let (report, report_child) = pipe_for_child(false)?;
    let exe = std::env::current_exe().context("cannot find the leasehold binary to start the guard")?;
    let piped = if args.stall_timeout.is_some() {
        Stdio::piped
    } else {
        Stdio::inherit
    };
    // No other thread spawns processes yet, so only the guard inherits the
    // two child ends.
    let guard = Command::new(exe)
        .arg("__guard")
        .arg(format!("--control-fd={}", control_child.as_raw_fd()))
        .arg(format!("--report-fd={}", report_child.as_raw_fd()))
        .arg(format!("--grace={}ms", args.grace.as_millis()))
        .arg("--")
        .args(&args.command)
        .stdout(piped())
        .stderr(piped())
        .spawn()
        .context("cannot start the guard process (leasehold __guard)")?;
    drop((control_child, report_child));
    let tx = tx.clone();
    thread::spawn(move || {
        for line in BufReader::new(std::fs::File::from(report)).lines() {
            let Ok(line) = line else { break };
            let (kind, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            let event = match kind {
                "anchor" => rest.parse().map(Event::Anchor).ok(),
                "started" => Some(Event::Started),
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
    Ok((guard, std::fs::File::from(control)))
}

/// Copy the guard's (the command's) output through, stamping activity.
fn forward_output(guard: &mut std::process::Child, activity: &Arc<AtomicU64>) -> Vec<thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let stamp = |a: &AtomicU64| a.store(host::boot_clock().as_nanos() as u64, Ordering::SeqCst);
    stamp(activity);
    let pump = |mut from: Box<dyn Read + Send>, mut to: Box<dyn Write + Send>, activity: Arc<AtomicU64>| {
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        stamp(&activity);
                        if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        })
    };
    if let Some(out) = guard.stdout.take() {
        threads.push(pump(Box::new(out), Box::new(std::io::stdout()), activity.clone()));
    }
    if let Some(err) = guard.stderr.take() {
        threads.push(pump(Box::new(err), Box::new(std::io::stderr()), activity.clone()));
    }
    threads
}

fn watch_stall(
    limit: Duration,
    progress: Option<std::path::PathBuf>,
    activity: Arc<AtomicU64>,
    tx: mpsc::Sender<Event>,
) {
    thread::spawn(move || {
        let tick = (limit / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mtime = |p: &std::path::PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let mut seen = progress.as_ref().and_then(mtime);
        loop {
            thread::sleep(tick);
            if let Some(p) = &progress {
                let now = mtime(p);
                if now != seen {
                    seen = now;
                    activity.store(host::boot_clock().as_nanos() as u64, Ordering::SeqCst);
                }
            }
            let last = Duration::from_nanos(activity.load(Ordering::SeqCst));
            if host::boot_clock().saturating_sub(last) >= limit {
                let _ = tx.send(Event::Stalled);
                return;
            }
        }
    });
}

fn forward_signals(tx: mpsc::Sender<Event>) -> anyhow::Result<()> {
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
struct Terminal {
    ours: Pid,
}

impl Terminal {
    /// Hand the terminal to `group` if we are its foreground.
    fn hand_to(group: Pid) -> Option<Self> {
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

/// Acquire as `args` says: the grant and the boot-clock time its request
/// was sent, or (held) the exit code after the refusal was reported.
fn acquire(
    ctx: &Ctx,
    store: &Store,
    args: &RunArgs,
    options: &AcquireOptions,
) -> anyhow::Result<Result<(Grant, Duration), u8>> {
    let sent = host::boot_clock();
    let outcome = match args.if_held {
        IfHeld::Fail | IfHeld::Skip => store.try_acquire(&args.name, options)?,
        IfHeld::Wait => {
            let tty = std::io::stderr().is_terminal();
            let spinner = ['|', '/', '-', '\\'];
            let mut turns = 0usize;
            let outcome = store.acquire_wait(&args.name, options, args.wait_timeout, |held| {
                if tty {
                    turns += 1;
                    let line = crate::commands::lease::held_by(held);
                    let line: String = line.chars().take(150).collect();
                    eprint!("\r\x1b[2K{} waiting for {}: {line}", spinner[turns % 4], args.name);
                }
            })?;
            if tty && turns > 0 {
                eprint!("\r\x1b[2K");
            }
            if let Acquire::Acquired(grant) = outcome {
                // The wait made many attempts; renew once so the window
                // starts at a send time we know.
                let sent = host::boot_clock();
                return match store.renew(&args.name, grant.token, args.owner.as_deref(), args.ttl)? {
                    LeaseRenew::Renewed(g) => Ok(Ok((g, sent))),
                    LeaseRenew::Lost(reason) => {
                        Err(crate::commands::lease::lost_error("renew", &args.name, grant.token, reason).into())
                    }
                };
            }
            outcome
        }
    };
    match outcome {
        Acquire::Acquired(grant) => Ok(Ok((grant, sent))),
        Acquire::Held(held) => {
            let by = crate::commands::lease::held_by(&held);
            let (code, message) = match args.if_held {
                IfHeld::Skip => (
                    ExitCode::Success,
                    format!(
                        "{} is held ({by}); skipped {}",
                        args.name,
                        child::display(&args.command)
                    ),
                ),
                IfHeld::Wait => (
                    ExitCode::Held,
                    format!(
                        "{} is still held after waiting {}: {by}",
                        args.name,
                        format_duration(args.wait_timeout.unwrap_or_default())
                    ),
                ),
                IfHeld::Fail => (
                    ExitCode::Held,
                    format!(
                        "{} is held: {by}. Try again later, or use --if-held wait (or skip)",
                        args.name
                    ),
                ),
            };
            let json = serde_json::json!({ "name": args.name, "held": true, "skipped": code == ExitCode::Success });
            Ok(Err(crate::commands::refuse(ctx, &json, &CliError::new(code, message))))
        }
    }
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> anyhow::Result<u8> {
    let keeper_options = check_timing(args)?;
    let store = Arc::new(ctx.open_store()?);
    let (tx, rx) = mpsc::channel();
    let (mut guard, control) = spawn_guard(args, &tx)?;
    let mut control = Some(control);
    let Ok(Event::Anchor(group)) = rx.recv() else {
        let _ = guard.wait();
        anyhow::bail!("the guard process (leasehold __guard) did not start; run with LEASEHOLD_LOG=debug to see why");
    };
    let group_pid = Pid::from_raw(group as i32).context("anchor pid")?;

    let options = AcquireOptions {
        ttl: args.ttl,
        owner: args.owner.clone(),
        mode: args.shared.mode(),
        binding: Binding::Process {
            pid: std::process::id(),
            pgid: Some(group),
        },
    };
    let (grant, sent) = match acquire(ctx, &store, args, &options) {
        Ok(Ok(acquired)) => acquired,
        other => {
            // Closing the control pipe ends the guard and the anchor.
            drop(control.take());
            let _ = guard.wait();
            return match other {
                Ok(Err(code)) => Ok(code),
                Err(e) => Err(e),
                Ok(Ok(_)) => unreachable!(),
            };
        }
    };
    let terminal = Terminal::hand_to(group_pid);

    let keeper = Keeper::start(store.clone(), &grant, sent, keeper_options);
    let loss_tx = tx.clone();
    keeper.on_loss(move |loss| {
        let _ = loss_tx.send(Event::Lost(loss));
    });
    forward_signals(tx.clone())?;
    let activity = Arc::new(AtomicU64::new(0));
    let pumps = forward_output(&mut guard, &activity);
    if let Some(limit) = args.stall_timeout {
        watch_stall(limit, args.progress_file.clone(), activity, tx.clone());
    }
    drop(tx);

    let env = serde_json::json!({
        "LEASEHOLD_NAME": args.name.to_string(),
        "LEASEHOLD_TOKEN": grant.token.to_string(),
        "LEASEHOLD_OWNER": grant.owner,
        "LEASEHOLD_STORE": store.url().to_string(),
    });
    if let Some(c) = control.as_mut() {
        writeln!(c, "{env}").context("cannot hand the command to the guard process")?;
    }

    let mut stop: Option<(StopReason, Instant)> = None;
    let mut killed = false;
    let mut spawn_error = None;
    let code = loop {
        let event = match &stop {
            Some((_, kill_at)) if !killed => match rx.recv_timeout(kill_at.saturating_duration_since(Instant::now())) {
                Ok(e) => e,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = rustix::process::kill_process_group(group_pid, Signal::KILL);
                    killed = true;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => Event::GuardGone,
            },
            _ => rx.recv().unwrap_or(Event::GuardGone),
        };
        let begin = |reason: StopReason, stop: &mut Option<(StopReason, Instant)>| {
            if stop.is_none() {
                let _ = rustix::process::kill_process_group(group_pid, Signal::TERM);
                *stop = Some((reason, Instant::now() + args.grace));
            }
        };
        match event {
            Event::Anchor(_) | Event::Started => {}
            Event::SpawnError(code, message) => spawn_error = Some((code, message)),
            Event::Lost(loss) => begin(StopReason::Lost(loss), &mut stop),
            Event::Stalled => begin(StopReason::Stalled(args.stall_timeout.unwrap_or_default()), &mut stop),
            Event::Signal(sig) => {
                if let Some(sig) = Signal::from_named_raw(sig) {
                    let _ = rustix::process::kill_process_group(group_pid, sig);
                }
            }
            Event::Exited(code) => break Some(code),
            Event::GuardGone => {
                // The guard died without reporting: do its job (unless the
                // command never started, and the group is already gone).
                if spawn_error.is_none() {
                    let _ = rustix::process::kill_process_group(group_pid, Signal::KILL);
                }
                break None;
            }
        }
    };
    let loss = keeper.stop();
    drop(control.take());
    if !matches!(loss, Some(Loss::Refused(_)))
        && let Err(e) = store.release(&args.name, grant.token, args.owner.as_deref())
    {
        eprintln!(
            "leasehold: could not release {} (token {}): {e:#}; it expires by its TTL",
            args.name, grant.token
        );
    }
    drop(terminal);
    let _ = guard.wait();
    join_bounded(pumps, Duration::from_secs(1));

    if let Some((reason, _)) = stop {
        let what = match reason {
            StopReason::Lost(loss) => format!(
                "lost the lease {} (token {}) while the command ran: {loss}",
                args.name, grant.token
            ),
            StopReason::Stalled(limit) => format!(
                "the command stalled: it wrote nothing to stdout or stderr{} for {}",
                args.progress_file
                    .as_ref()
                    .map(|p| format!(" and did not touch {}", p.display()))
                    .unwrap_or_default(),
                format_duration(limit)
            ),
        };
        let err = CliError::new(
            ExitCode::LeaseLostWhileRunning,
            format!(
                "{what}. The command was stopped (SIGTERM, then SIGKILL after {}); its work may be incomplete — the next holder gets a new token",
                format_duration(args.grace)
            ),
        );
        return Err(err.into());
    }
    if let Some((code, message)) = spawn_error {
        eprintln!("leasehold: {message}");
        return Ok(code);
    }
    code.ok_or_else(|| {
        anyhow::anyhow!(
            "the guard process of {} died unexpectedly; the command's process group was killed",
            args.name
        )
    })
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
