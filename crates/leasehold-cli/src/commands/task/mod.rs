//! `leasehold task ...`: the queue from the shell.

mod add;
mod claim;
mod done;
mod fail;
mod heartbeat;
mod list;
mod purge;
mod retry;
mod show;
mod stats;

use leasehold::{LeaseName, TaskLost, Token};

use crate::cli::TaskCommand;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

pub fn dispatch(ctx: &Ctx, command: TaskCommand) -> anyhow::Result<u8> {
    match command {
        TaskCommand::Add(args) => add::run(ctx, &args),
        TaskCommand::Claim(args) => claim::run(ctx, &args),
        TaskCommand::Heartbeat(args) => heartbeat::run(ctx, &args),
        TaskCommand::Done(args) => done::run(ctx, &args),
        TaskCommand::Fail(args) => fail::run(ctx, &args),
        TaskCommand::Retry(args) => retry::run(ctx, &args),
        TaskCommand::List(args) => list::run(ctx, &args),
        TaskCommand::Show(args) => show::run(ctx, &args),
        TaskCommand::Stats(args) => stats::run(ctx, &args),
        TaskCommand::Purge(args) => purge::run(ctx, &args),
    }
}

/// The error for a token-scoped operation whose claim is gone or stale.
pub fn lost_error(op: &str, queue: &LeaseName, id: &LeaseName, token: Token, lost: TaskLost) -> CliError {
    match lost {
        TaskLost::NotFound => CliError::new(
            ExitCode::Lost,
            format!("cannot {op} task {id} of queue {queue}: no such task"),
        ),
        TaskLost::Stale => CliError::new(
            ExitCode::Lost,
            format!(
                "cannot {op} task {id} of queue {queue} with token {token}: the claim is no longer current (it expired, \
                 or another worker claimed the task since); nothing was changed. Drop this attempt's result"
            ),
        ),
    }
}

pub fn not_found(queue: &LeaseName, id: &LeaseName) -> CliError {
    CliError::new(
        ExitCode::NotFound,
        format!("no task {id} in queue {queue}; `leasehold task list {queue}` shows what is there"),
    )
}
