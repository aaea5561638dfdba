use leasehold::{LeaseRelease, json};

use crate::cli::ReleaseArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &ReleaseArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let lease = &args.lease;
    match store.release(&lease.name, lease.token, lease.owner.as_deref())? {
        LeaseRelease::Released => {
            if ctx.global.json {
                output::print_json(&json::Released {
                    name: &lease.name,
                    token: lease.token,
                    released: true,
                });
            }
            Ok(ExitCode::Success.code())
        }
        LeaseRelease::Lost(reason) => Err(super::lost_error("release", &lease.name, lease.token, reason).into()),
    }
}
