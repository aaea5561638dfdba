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
//! nothing to forward twice. It takes the terminal back at the end. (^Z
//! stops only the command; the supervisor keeps the lease renewed.)
//! Otherwise SIGINT, SIGTERM and SIGHUP sent to the supervisor are
//! forwarded to G, and the supervisor waits for the command to exit.
//! While `run --wait` still waits for the lease, those signals end the
//! wait instead: the waiter leaves the queue and `run` exits 128+N, the
//! command never started.

use std::io::IsTerminal;
use std::sync::Arc;

use leasehold::supervise::{self, LeaseRun, RunOutcome, Spec, Stop, Supervised};
use leasehold::{Cancel, Held, format_duration};

use crate::cli::{IfHeld, RunArgs};
use crate::commands::{Ctx, guard_program, timing};
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// Who holds it, and what `--if-held`/`--wait` make of that.
fn held(ctx: &Ctx, args: &RunArgs, held: &Held) -> u8 {
    let by = crate::commands::lease::held_by(held, args.shared.mode());
    let (code, message) = match (args.wait.wait, args.if_held) {
        (None, IfHeld::Skip) => (
            ExitCode::Success,
            format!(
                "{} is held ({by}); skipped {}",
                args.name,
                supervise::child::display(&args.command)
            ),
        ),
        (Some(wait), _) => (
            ExitCode::Held,
            format!(
                "{} is still held after waiting {}: {by}",
                args.name,
                format_duration(wait.timeout().unwrap_or_default())
            ),
        ),
        (None, IfHeld::Fail) => (
            ExitCode::Held,
            format!(
                "{} is held: {by}. Try again later, wait with --wait [DUR], or skip with --if-held skip",
                args.name
            ),
        ),
    };
    let json = serde_json::json!({ "name": args.name, "held": true, "skipped": code == ExitCode::Success });
    crate::commands::refuse(ctx, &json, &CliError::new(code, message))
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> anyhow::Result<u8> {
    let timing = timing(args.ttl, args.heartbeat, args.grace, args.owner.clone())?;
    let spec = Spec::watched(
        args.command.clone(),
        guard_program()?,
        timing.grace,
        args.stall_timeout.map(|limit| (limit, args.progress_file.clone())),
    );
    let grace = timing.grace;
    let lease = LeaseRun {
        name: args.name.clone(),
        timing,
        mode: args.shared.mode(),
        wait: args.wait.wait.map(crate::cli::Wait::timeout),
        cancel: Cancel::new(),
        forward_signals: true,
        hand_terminal: true,
    };
    // The guard first: its start-up (a process's) overlaps opening the
    // store. Dropped on an error, it ends with nothing started.
    let supervised = Supervised::launch(spec)?;
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
                let line = crate::commands::lease::held_by(held, args.shared.mode());
                let line: String = line.chars().take(150).collect();
                eprint!("\r\x1b[2K{} waiting for {}: {line}", spinner[turns % 4], args.name);
            }
        },
        |_| {},
    );
    if tty && turns > 0 {
        eprint!("\r\x1b[2K");
    }
    let (grant, finished, release_error) = match outcome? {
        RunOutcome::Held(h) => {
            return Ok(match lease.cancel.signal() {
                Some(signal) => crate::commands::lease::wait_cancelled(ctx, &args.name, signal),
                None => held(ctx, args, &h),
            });
        }
        RunOutcome::Ran {
            grant,
            finished,
            release_error,
        } => (grant, finished, release_error),
    };
    if let Some(e) = release_error {
        eprintln!(
            "leasehold: could not release {} (token {}): {:#}; it expires by its TTL",
            args.name,
            grant.token,
            anyhow::Error::from(e)
        );
    }

    if let Some(reason) = finished.stopped {
        let what = match reason {
            Stop::Lost(loss) => format!(
                "lost the lease {} (token {}) while the command ran: {loss}",
                args.name, grant.token
            ),
            Stop::Stalled(limit) => format!(
                "the command stalled: it wrote nothing to stdout or stderr{} for {}",
                args.progress_file
                    .as_ref()
                    .map(|p| format!(" and did not touch {}", p.display()))
                    .unwrap_or_default(),
                format_duration(limit)
            ),
            Stop::Shutdown => "run was asked to shut down".to_owned(),
        };
        let err = CliError::new(
            ExitCode::LeaseLostWhileRunning,
            format!(
                "{what}. The command was stopped (SIGTERM, then SIGKILL after {}); its work may be incomplete — the next holder gets a new token",
                format_duration(grace)
            ),
        );
        return Err(err.into());
    }
    if let Some((code, message)) = finished.spawn_error {
        let details = serde_json::json!({ "name": args.name, "token": grant.token });
        return Ok(crate::commands::fail(ctx, &details, &message, code));
    }
    let code = finished.code.ok_or_else(|| {
        anyhow::anyhow!(
            "the guard process of {} died unexpectedly; the command's process group was killed",
            args.name
        )
    })?;
    // After the command's own output: its exit code, passed through.
    if ctx.global.json {
        crate::output::print_json(&serde_json::json!({
            "name": args.name, "token": grant.token, "owner": grant.owner, "exit_code": code,
        }));
    }
    Ok(code)
}
