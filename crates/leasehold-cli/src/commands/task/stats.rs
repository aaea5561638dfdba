use crate::cli::TaskStatsArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &TaskStatsArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let stats = store.task_stats(args.queue.as_ref())?;
    if ctx.global.json {
        output::print_json(&leasehold::json::queues(&stats));
        return Ok(ExitCode::Success.code());
    }
    let mut table = output::Table::new(&["queue", "pending", "running", "done", "dead"]);
    for s in &stats {
        table.row([
            s.queue.to_string(),
            s.pending.to_string(),
            s.running.to_string(),
            s.done.to_string(),
            s.dead.to_string(),
        ]);
    }
    println!("{table}");
    Ok(ExitCode::Success.code())
}
