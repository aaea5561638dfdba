use leasehold::json;

use crate::cli::TaskClaimArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &TaskClaimArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let Some(claim) = store.task_claim(&args.queue, args.ttl, args.owner.as_deref())? else {
        let err = CliError::new(
            ExitCode::NothingToClaim,
            format!("nothing to claim in queue {}", args.queue),
        );
        let details = json::NothingToClaim {
            queue: &args.queue,
            claimed: false,
        };
        return Ok(crate::commands::refuse(ctx, details, &err));
    };
    // One JSON object, with or without --json: it is the claim.
    output::print_json(&json::Claim {
        queue: &claim.queue,
        id: &claim.id,
        payload: &claim.payload,
        attempt: claim.attempt,
        max_attempts: claim.max_attempts,
        token: claim.token,
        lease_until: output::from_now(claim.ttl),
    });
    Ok(ExitCode::Success.code())
}
