use std::time::Duration;

use leasehold::LeaseRenew;

use crate::cli::RenewArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &RenewArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let lease = &args.lease;
    let ttl = match args.ttl {
        Some(ttl) => ttl,
        // Keep the grant's own TTL; a grant that is not live is refused
        // by the renewal itself, whatever TTL it asks for.
        None => store
            .status(&lease.name)?
            .and_then(|s| s.grants.into_iter().find(|g| g.token == lease.token))
            .map_or(Duration::from_secs(60), |g| g.ttl),
    };
    match store.renew_by_token(&lease.name, lease.token, lease.owner.as_deref(), lease.grant, ttl)? {
        LeaseRenew::Renewed(grant) => {
            if ctx.global.json {
                output::print_json(&leasehold::json::grant(&grant));
            }
            Ok(ExitCode::Success.code())
        }
        LeaseRenew::Lost(reason) => Err(super::lost_error("renew", &lease.name, lease.token, reason).into()),
    }
}
