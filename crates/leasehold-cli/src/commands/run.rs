//! `leasehold run NAME -- CMD`: a command under a lease, through
//! `leasehold::supervise::run` (the timeline, the trust window and the
//! guard are told in `crates/leasehold/src/supervise/mod.rs`). Here: the
//! arguments, the waiting spinner, messages and exit codes — held 11 (or
//! 0 with `--if-held skip`), lost or stalled 75, the command's own code
//! otherwise (128+N for signal N).
//!
//! # Signals and the terminal
//!
//! The command runs in its own group, so a terminal's ^C would not reach
//! it. When stdin is a terminal and we are its foreground group, the
//! terminal is handed to G (as a shell does for a job): ^C, ^\ and reads
//! from the terminal go straight to the command, and the supervisor gets
//! nothing to forward twice. It takes the terminal back at the end. ^Z
//! stops the command and then the supervisor, as a shell expects of its
//! job; `fg` continues both (`child::Terminal`).
//! Otherwise SIGINT, SIGTERM and SIGHUP sent to the supervisor are
//! forwarded to G (then SIGCONT, for a stopped command), and the
//! supervisor waits for the command to exit.
//!
//! `run` adopts its guard's orphans (a child subreaper): should the guard
//! be killed, the command's whole tree is stopped before the lease is
//! released.
//! While `run --wait` still waits for the lease, those signals end the
//! wait instead: the waiter leaves the queue and `run` exits 128+N, the
//! command never started.

use std::io::IsTerminal;
use std::sync::Arc;

use leasehold::supervise::{self, LeaseRun, RunError, RunOutcome, Spec, Supervised};
use leasehold::{Cancel, Held, json};

use crate::cli::{IfHeld, RunArgs};
use crate::commands::{Ctx, guard_program, timing};
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// Who holds it, and what `--if-held`/`--wait` make of that.
fn held(ctx: &Ctx, args: &RunArgs, held: &Held) -> u8 {
    let mode = args.shared.mode();
    let (code, message) = match (args.wait.wait, args.if_held) {
        (None, IfHeld::Skip) => (
            ExitCode::Success,
            format!(
                "{}; skipped {}",
                held.refusal(args.name.as_str(), mode, None),
                supervise::child::display(&args.command)
            ),
        ),
        (Some(wait), _) => (
            ExitCode::Held,
            held.refusal(args.name.as_str(), mode, Some(wait.timeout().unwrap_or_default()))
                .to_string(),
        ),
        (None, IfHeld::Fail) => (
            ExitCode::Held,
            format!(
                "{}. Try again later, wait with --wait [DUR], or skip with --if-held skip",
                held.refusal(args.name.as_str(), mode, None)
            ),
        ),
    };
    let details = json::RunHeld {
        name: &args.name,
        held: true,
        skipped: code == ExitCode::Success,
    };
    crate::commands::refuse(ctx, details, &CliError::new(code, message))
}

/// Why the command did not run to its own end, as an exit: a command
/// leasehold stopped (lost, stalled, interrupted) or never started because
/// the grant was lost exits 75 — run it again later; one that could not
/// start exits as a shell says (127, 126); a dead guard is a failure (1).
fn run_error(ctx: &Ctx, args: &RunArgs, token: leasehold::Token, error: &RunError) -> anyhow::Result<u8> {
    match error {
        RunError::LostBeforeStart { .. }
        | RunError::TooLate { .. }
        | RunError::Lost { .. }
        | RunError::Stalled { .. }
        | RunError::Interrupted { .. }
        // The command has no timeout of its own (a host's: `store.run`).
        | RunError::TimedOut { .. } => Err(CliError::new(ExitCode::LeaseLostWhileRunning, error.to_string()).into()),
        RunError::CouldNotStart { code, .. } => {
            let details = json::RunNotStarted {
                name: &args.name,
                token,
            };
            Ok(crate::commands::fail(ctx, details, &error.to_string(), *code))
        }
        RunError::GuardDied { .. } => Err(anyhow::Error::new(error.clone())),
    }
}

fn report_release_error(args: &RunArgs, grant: &leasehold::Grant, error: Option<leasehold::Error>) {
    if let Some(e) = error {
        crate::logging::warn(
            crate::logging::RELEASE_FAILED,
            &supervise::ReleaseFailed {
                name: &args.name,
                token: grant.token,
                error: &format!("{:#}", anyhow::Error::from(e)),
            }
            .to_string(),
        );
    }
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> anyhow::Result<u8> {
    let timing = timing(args.ttl, args.heartbeat, args.grace)?;
    let spec = Spec::watched(
        args.command.clone(),
        guard_program()?,
        timing.grace,
        args.stall_timeout.map(|limit| (limit, args.progress_file.clone())),
    );
    let lease = LeaseRun {
        name: args.name.clone(),
        timing,
        owner: args.owner.clone(),
        mode: args.shared.mode(),
        wait: args.wait.wait.map(crate::cli::Wait::timeout),
        cancel: Cancel::new(),
        forward_signals: true,
        hand_terminal: true,
        env: Vec::new(),
        start_by: None,
    };
    // The guard first: its start-up (a process's) overlaps opening the
    // store. Dropped on an error, it ends with nothing started.
    let mut supervised = Supervised::launch(spec)?;
    // This process runs this one command: should the guard die, what it
    // kept (also what left the command's group) comes here to be stopped,
    // and the tree is known gone before the lease is released. Where the
    // platform cannot (macOS), a dead guard leaves the lease to its TTL.
    if let Err(e) = supervised.adopt_orphans() {
        tracing::debug!("{e}");
    }
    let store = Arc::new(ctx.open_store()?);
    let tty = std::io::stderr().is_terminal();
    let spinner = ['|', '/', '-', '\\'];
    let mut turns = 0usize;
    let outcome = supervise::run_spawned(
        &store,
        &lease,
        supervised,
        |held| {
            if tty {
                turns += 1;
                let line = held.by(args.shared.mode()).to_string();
                let line: String = line.chars().take(150).collect();
                eprint!("\r\x1b[2K{} waiting for {}: {line}", spinner[turns % 4], args.name);
            }
        },
        |_, _| {},
    );
    if tty && turns > 0 {
        eprint!("\r\x1b[2K");
    }
    let ran = match outcome? {
        RunOutcome::Held(h) => {
            return Ok(match lease.cancel.signal() {
                Some(signal) => crate::commands::lease::wait_cancelled(ctx, &args.name, signal),
                None => held(ctx, args, &h),
            });
        }
        RunOutcome::Ran(ran) => ran,
    };
    let grant = ran.grant;
    report_release_error(args, &grant, ran.release_error);
    let code = match &ran.ended {
        Ok(code) => *code,
        Err(error) => return run_error(ctx, args, grant.token, error),
    };
    // After the command's own output: its exit code, passed through.
    if ctx.global.json {
        crate::output::print_json(&json::RunEnded {
            name: &args.name,
            token: grant.token,
            owner: &grant.owner,
            exit_code: code,
        });
    }
    Ok(code)
}
