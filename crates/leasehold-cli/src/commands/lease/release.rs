use leasehold::{OutsiderRelease, OutsiderReleased, json};

use crate::cli::ReleaseArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &ReleaseArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let lease = &args.lease;
    let how = OutsiderRelease {
        owner: lease.owner.clone(),
        grant: lease.grant,
        stop_holder: args.force,
    };
    match store.release_as_outsider(&lease.name, lease.token, &how)? {
        released @ (OutsiderReleased::Released | OutsiderReleased::HolderStopped { .. }) => {
            if let OutsiderReleased::HolderStopped { pid } = released {
                eprintln!(
                    "leasehold: stopped the holder of {} (pid {pid}), which ended its grant",
                    lease.name
                );
            }
            if ctx.global.json {
                output::print_json(&json::Released {
                    name: &lease.name,
                    token: lease.token,
                    released: true,
                });
            }
            Ok(ExitCode::Success.code())
        }
        OutsiderReleased::Lost(reason) => Err(super::lost_error("release", &lease.name, lease.token, reason).into()),
        OutsiderReleased::Running(running) => {
            let next = match (running.here, running.waited) {
                (_, Some(_)) => "Stop it with SIGKILL if it must end now, then release again".to_owned(),
                (true, None) => format!(
                    "Stop that process (kill -TERM {}: `leasehold run` stops its command, then releases), or pass --force to do so from here and wait",
                    running.grant.holder.pid
                ),
                (false, None) => "Nothing was released".to_owned(),
            };
            Err(CliError::new(ExitCode::Lost, format!("cannot release: {running}. {next}")).into())
        }
    }
}
