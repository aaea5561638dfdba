use leasehold::{Retry, TaskFail, TaskRef};

use crate::cli::TaskFailArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &TaskFailArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let t = &args.task;
    let retry = match (args.no_retry, args.retry_in) {
        (true, _) => Retry::Never,
        (false, Some(d)) => Retry::After(d),
        (false, None) => Retry::Backoff,
    };
    let task = TaskRef {
        queue: t.queue.clone(),
        id: t.id.clone(),
        token: t.token,
    };
    let (state, retry_at) = match store.task_fail(&task, &args.error, retry)? {
        TaskFail::Retrying { available_at } => ("pending", Some(output::rfc3339(available_at))),
        TaskFail::Dead => ("dead", None),
        TaskFail::Lost(lost) => return Err(super::lost_error("fail", &t.queue, &t.id, t.token, lost).into()),
    };
    if ctx.global.json {
        output::print_json(&leasehold::json::TaskFailed {
            queue: &t.queue,
            id: &t.id,
            state,
            retry_at: retry_at.clone(),
        });
    } else if let Some(at) = retry_at {
        eprintln!("task {} will be retried at {at}", t.id);
    } else {
        eprintln!(
            "task {} is dead; `leasehold task retry {} {}` revives it",
            t.id, t.queue, t.id
        );
    }
    Ok(ExitCode::Success.code())
}
