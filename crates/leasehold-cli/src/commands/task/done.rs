use leasehold::{TaskRef, TaskUpdate};

use crate::cli::TaskDoneArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

pub fn run(ctx: &Ctx, args: &TaskDoneArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let t = &args.task;
    let task = TaskRef {
        queue: t.queue.clone(),
        id: t.id.clone(),
        token: t.token,
    };
    match store.task_complete(&task, args.result.as_ref())? {
        TaskUpdate::Applied => {
            if ctx.global.json {
                crate::output::print_json(&leasehold::json::TaskDone {
                    queue: &t.queue,
                    id: &t.id,
                    token: t.token,
                    state: "done",
                });
            }
            Ok(ExitCode::Success.code())
        }
        TaskUpdate::Lost(lost) => Err(super::lost_error("complete", &t.queue, &t.id, t.token, lost).into()),
    }
}
