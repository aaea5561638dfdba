use crate::cli::TaskListArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &TaskListArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let (tasks, more) = store.task_list_page(Some(&args.queue), args.state, args.limit)?;
    if ctx.global.json {
        output::print_json(&leasehold::json::tasks(&args.queue, &tasks, more));
        return Ok(ExitCode::Success.code());
    }
    if tasks.is_empty() {
        eprintln!("no tasks");
        return Ok(ExitCode::Success.code());
    }
    let mut table = output::Table::new(&["id", "state", "priority", "attempts", "owner", "last error"]);
    for t in &tasks {
        let error = output::shorten(t.last_error.as_deref().unwrap_or(""), 60);
        table.row([
            t.id.to_string(),
            t.state.as_str().to_owned(),
            t.priority.to_string(),
            format!("{}/{}", t.attempts, t.max_attempts),
            t.owner.clone().unwrap_or_default(),
            error,
        ]);
    }
    println!("{table}");
    if more {
        eprintln!(
            "the first {} tasks are listed; more exist: pass a higher --limit, or --state to narrow",
            tasks.len()
        );
    }
    Ok(ExitCode::Success.code())
}
