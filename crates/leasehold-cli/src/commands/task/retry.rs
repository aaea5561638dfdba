use leasehold::TaskRetry;

use crate::cli::TaskIdArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &TaskIdArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    match store.task_retry(&args.queue, &args.id)? {
        TaskRetry::Revived => Ok(ExitCode::Success.code()),
        TaskRetry::NotFound => Err(super::not_found(&args.queue, &args.id).into()),
        TaskRetry::NotDead(state) => Err(CliError::new(
            ExitCode::Failure,
            format!(
                "task {} of queue {} is {}, not dead; only dead tasks can be revived",
                args.id,
                args.queue,
                state.as_str()
            ),
        )
        .into()),
    }
}
