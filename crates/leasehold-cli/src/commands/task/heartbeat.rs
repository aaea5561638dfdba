use std::time::Duration;

use leasehold::{TaskRef, TaskUpdate};

use crate::cli::TaskHeartbeatArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

pub fn run(ctx: &Ctx, args: &TaskHeartbeatArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let t = &args.task;
    let ttl = match args.ttl {
        Some(ttl) => ttl,
        None => store
            .task_get(&t.queue, &t.id)?
            .and_then(|task| task.claim_ttl)
            .unwrap_or(Duration::from_secs(60)),
    };
    let task = TaskRef {
        queue: t.queue.clone(),
        id: t.id.clone(),
        token: t.token,
    };
    match store.task_heartbeat(&task, ttl)? {
        TaskUpdate::Applied => {
            if ctx.global.json {
                crate::output::print_json(&leasehold::json::TaskHeartbeat {
                    queue: &t.queue,
                    id: &t.id,
                    token: t.token,
                    state: "running",
                    ttl_ms: ttl.as_millis() as u64,
                });
            }
            Ok(ExitCode::Success.code())
        }
        TaskUpdate::Lost(lost) => Err(super::lost_error("heartbeat", &t.queue, &t.id, t.token, lost).into()),
    }
}
