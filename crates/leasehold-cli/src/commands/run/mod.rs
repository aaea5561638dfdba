//! `leasehold run NAME -- CMD`: the supervisor.
//!
//! # Timeline
//!
//! 1. Start the guard ([`guard`]), which founds the command's process
//!    group G and reports it.
//! 2. Acquire the lease, bound to this process and to G (fast takeover
//!    waits until both are gone). Held: fail (11), skip (0) or wait (FIFO).
//! 3. Send the command's environment to the guard, which starts it in G.
//! 4. A [`Keeper`] renews every heartbeat and pushes loss; the guard is
//!    told each new trust window and keeps the deadline too (see
//!    [`guard`]); signals are forwarded to G; with `--stall-timeout`, output is piped through and
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
//! where the supervisor — or, if the supervisor is stopped or starved, the
//! guard — sends SIGTERM to G; SIGKILL follows at
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

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{Acquire, AcquireOptions, Binding, Grant, Keeper, LeaseRenew, Loss, Store, format_duration, host};

use crate::cli::{IfHeld, RunArgs};
use crate::commands::supervisor::{self, Output, Spec, Stop, Supervised, Terminal};
use crate::commands::{Ctx, child};
use crate::exit_codes::ExitCode;
use crate::run::CliError;

fn usage(message: String) -> anyhow::Error {
    CliError::new(ExitCode::Usage, message).into()
}

fn check_timing(args: &RunArgs) -> anyhow::Result<supervisor::Timing> {
    supervisor::timing(args.ttl, args.heartbeat, args.grace, args.owner.clone()).map_err(usage)
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
    let outcome = match args.wait.wait {
        None => store.try_acquire(&args.name, options)?,
        Some(wait) => {
            let tty = std::io::stderr().is_terminal();
            let spinner = ['|', '/', '-', '\\'];
            let mut turns = 0usize;
            let outcome = store.acquire_wait(&args.name, options, wait.timeout(), |held| {
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
            let (code, message) = match (args.wait.wait, args.if_held) {
                (None, IfHeld::Skip) => (
                    ExitCode::Success,
                    format!(
                        "{} is held ({by}); skipped {}",
                        args.name,
                        child::display(&args.command)
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
            Ok(Err(crate::commands::refuse(ctx, &json, &CliError::new(code, message))))
        }
    }
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> anyhow::Result<u8> {
    let timing = check_timing(args)?;
    let store = Arc::new(ctx.open_store()?);
    let mut supervised = Supervised::spawn(Spec {
        command: args.command.clone(),
        grace: timing.grace,
        stdin: None,
        output: if args.stall_timeout.is_some() {
            Output::Forward
        } else {
            Output::Inherit
        },
        stall: args.stall_timeout.map(|limit| (limit, args.progress_file.clone())),
    })?;
    let options = AcquireOptions {
        ttl: args.ttl,
        owner: args.owner.clone(),
        mode: args.shared.mode(),
        binding: Binding::Process {
            pid: std::process::id(),
            pgid: Some(supervised.group()),
        },
    };
    let (grant, sent) = match acquire(ctx, &store, args, &options) {
        Ok(Ok(acquired)) => acquired,
        Ok(Err(code)) => {
            supervised.abort();
            return Ok(code);
        }
        Err(e) => {
            supervised.abort();
            return Err(e);
        }
    };
    let terminal = Terminal::hand_to(supervised.group_pid());

    let keeper = Keeper::start(store.clone(), &grant, sent, timing.keeper);
    supervised.follow(&keeper);
    supervisor::forward_signals(supervised.sender())?;
    supervised.start(&serde_json::json!({
        "LEASEHOLD_NAME": args.name.to_string(),
        "LEASEHOLD_TOKEN": grant.token.to_string(),
        "LEASEHOLD_OWNER": grant.owner,
        "LEASEHOLD_STORE": store.url().to_string(),
    }))?;
    let finished = supervised.wait();

    let loss = keeper.stop();
    if !matches!(loss, Some(Loss::Refused(_)))
        && let Err(e) = store.release(&args.name, grant.token, args.owner.as_deref())
    {
        eprintln!(
            "leasehold: could not release {} (token {}): {e:#}; it expires by its TTL",
            args.name, grant.token
        );
    }
    drop(terminal);

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
                format_duration(timing.grace)
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
