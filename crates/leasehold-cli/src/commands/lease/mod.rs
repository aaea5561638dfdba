//! Lease commands: acquire, renew, release, fence, status, list, history.

pub mod acquire;
pub mod fence;
pub mod history;
pub mod list;
pub mod release;
pub mod renew;
pub mod status;
mod timeline;

use std::time::Duration;

use leasehold::{Held, LeaseName, LostReason, Mode, Token};

use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// The error for a lease that is held by others: names the holders, and
/// after a wait (`waited`) says how long it waited — advising `--wait`
/// to one who just waited would be advice already taken.
pub fn held_error(name: &LeaseName, held: &Held, mode: Mode, waited: Option<Duration>) -> CliError {
    let next = match waited {
        None => leasehold::spelling::try_again(&leasehold::spelling::Flags),
        Some(_) => "Try again later, or wait longer (--wait forever waits as long as it takes)".into(),
    };
    CliError::new(
        ExitCode::Held,
        format!("{}. {next}", held.refusal(name.as_str(), mode, waited)),
    )
}

/// End a wait for `name` that SIGINT, SIGTERM or SIGHUP cancelled (the
/// waiter has left the queue, holding nothing): exit 128 + the signal's
/// number, as if the signal had ended the process, with `--json` a
/// document that says so (docs/JSON.md).
pub fn wait_cancelled(ctx: &Ctx, name: &LeaseName, signal: i32) -> u8 {
    let what = signal_hook::low_level::signal_name(signal).unwrap_or("a signal");
    crate::commands::fail(
        ctx,
        leasehold::json::WaitCancelled { name, signal: what },
        &format!("stopped waiting for {name} on {what}; left the queue, holding nothing"),
        crate::exit_codes::by_signal(signal),
    )
}

/// The error for a token-scoped operation on a grant that is not live.
pub fn lost_error(op: &str, name: &LeaseName, token: Token, reason: LostReason) -> CliError {
    let next = match reason {
        // The grant is live and the caller may well be its holder.
        LostReason::OwnerRequired => "Pass --owner with the owner it was acquired with",
        LostReason::BoundToProcess => {
            "Stop that process to end its grant (`leasehold status` names it), or name the grant with --grant"
        }
        _ => "Stop writing with this token; acquire again for a new one",
    };
    CliError::new(
        ExitCode::Lost,
        format!("cannot {op} {name} with token {token}: {reason}. {next}"),
    )
}
