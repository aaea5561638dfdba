use leasehold::TaskState;

use crate::cli::TaskPurgeArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &TaskPurgeArgs) -> anyhow::Result<u8> {
    if !matches!(args.state, TaskState::Done | TaskState::Dead) {
        return Err(CliError::new(
            ExitCode::Usage,
            "only done or dead tasks can be purged (--state done|dead)",
        )
        .into());
    }
    let store = ctx.open_store()?;
    let n = store.task_purge(&args.queue, args.state, args.older_than)?;
    if ctx.global.json {
        output::print_json(&leasehold::json::Purged {
            queue: &args.queue,
            purged: n,
        });
    } else {
        eprintln!("purged {n} {} tasks from {}", args.state.as_str(), args.queue);
    }
    Ok(ExitCode::Success.code())
}
