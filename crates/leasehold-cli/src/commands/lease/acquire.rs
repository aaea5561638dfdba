use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context as _;
use leasehold::{Acquire, AcquireOptions, Binding, Cancel, json};

use crate::cli::AcquireArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

/// A grant bound to a process lives as long as it does (fast takeover ends
/// it), up to this TTL when no cap is given: the longest one allowed.
const PROCESS_BOUND_TTL: Duration = leasehold::limits::TTL.max;

pub fn run(ctx: &Ctx, args: &AcquireArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let (binding, default_ttl) = match args.for_pid {
        Some(pid) => (
            Binding::Process {
                pid,
                pgid: None,
                guard: None,
            },
            PROCESS_BOUND_TTL,
        ),
        // A bare acquire exits at once by design: bound to no process.
        None => (Binding::Ttl, Duration::from_secs(60)),
    };
    let options = AcquireOptions {
        ttl: args.ttl.unwrap_or(default_ttl),
        owner: args.owner.clone(),
        mode: args.shared.mode(),
        binding,
    };
    let outcome = match args.wait.wait {
        None => store.try_acquire(&args.name, &options)?,
        Some(wait) => {
            // SIGINT, SIGTERM and SIGHUP end the wait: the waiter leaves
            // the queue before it exits (killed outright, it is proved dead
            // by the next acquirer instead).
            let cancel = Cancel::new();
            let _signals = cancel.on_signals().context("cannot install the signal handlers")?;
            let tty = std::io::stderr().is_terminal();
            let mut shown = false;
            let outcome = store.acquire_wait(&args.name, &options, wait.timeout(), &cancel, |held| {
                if tty && !shown {
                    eprintln!(
                        "leasehold: waiting for {}: {}",
                        output::for_terminal(args.name.as_str()),
                        held.by(options.mode)
                    );
                    shown = true;
                }
            })?;
            if let Some(signal) = cancel.signal() {
                // The signal came before the token was printed: nobody
                // has it, so the grant (if the wait got one first) is let
                // go. (A signal from here on is too late and ignored: the
                // process exits at once.)
                if let Acquire::Acquired(grant) = &outcome {
                    store.release(grant)?;
                }
                return Ok(super::wait_cancelled(ctx, &args.name, signal));
            }
            outcome
        }
    };
    match outcome {
        Acquire::Acquired(grant) => {
            if ctx.global.json {
                output::print_json(&json::grant(&grant));
            } else {
                println!("{}", grant.token);
            }
            Ok(ExitCode::Success.code())
        }
        Acquire::Held(held) => {
            let details = json::LeaseHeld {
                name: &args.name,
                held: true,
                waiters_ahead: held.waiters_ahead,
                grants: held.grants.iter().map(json::grant).collect(),
            };
            Ok(crate::commands::refuse(
                ctx,
                details,
                &super::held_error(
                    &args.name,
                    &held,
                    options.mode,
                    args.wait.wait.map(|w| w.timeout().unwrap_or_default()),
                ),
            ))
        }
    }
}
