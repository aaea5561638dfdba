use leasehold::{TaskRetry, TaskState};

use crate::cli::TaskIdArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// Revive a dead task. Codes by meaning: a task already pending is left
/// as it is (0: what was asked for holds); a running one is held by its
/// worker (11); a done one cannot be revived (2: add it again under a new
/// id); an unknown one is 14.
pub fn run(ctx: &Ctx, args: &TaskIdArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let (queue, id) = (&args.queue, &args.id);
    let refuse = |code, why: &str| Err(CliError::new(code, format!("task {id} of queue {queue} {why}")).into());
    let pending = |revived: bool| {
        if ctx.global.json {
            crate::output::print_json(&leasehold::json::TaskRetried {
                queue,
                id,
                state: "pending",
                revived,
            });
        }
        Ok(ExitCode::Success.code())
    };
    match store.task_retry(queue, id)? {
        TaskRetry::Revived => pending(true),
        TaskRetry::NotFound => Err(super::not_found(queue, id).into()),
        TaskRetry::NotDead(TaskState::Pending) => {
            eprintln!("leasehold: task {id} of queue {queue} is already pending; nothing was changed");
            pending(false)
        }
        TaskRetry::NotDead(TaskState::Running) => refuse(
            ExitCode::Held,
            "is running (claimed by a worker); it can be revived once it is dead",
        ),
        TaskRetry::NotDead(state) => refuse(
            ExitCode::Usage,
            &format!(
                "is {}; only dead tasks can be revived — add it again under a new id to run it again",
                state.as_str()
            ),
        ),
    }
}
