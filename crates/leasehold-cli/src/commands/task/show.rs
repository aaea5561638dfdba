use crate::cli::TaskIdArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &TaskIdArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let task = store
        .task_get(&args.queue, &args.id)?
        .ok_or_else(|| super::not_found(&args.queue, &args.id))?;
    // A task is a record: JSON is its most readable form, too.
    output::print_json(&leasehold::json::task(&task));
    Ok(ExitCode::Success.code())
}
