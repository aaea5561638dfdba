use std::os::unix::process::CommandExt;

use anyhow::Context as _;
use leasehold::{LeaseFence, json};

use crate::cli::FenceArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &FenceArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let fence = crate::commands::fence_of(args.token, args.grant, || {
        "the command was not run (pass --grant, or unset it)".to_owned()
    })?;
    match store.fence(&args.name, fence)? {
        LeaseFence::Passed(grant) => {
            // With a command, printed before it runs (it becomes us).
            if ctx.global.json {
                output::print_json(&json::FencePassed {
                    name: &args.name,
                    token: args.token,
                    passed: true,
                    grant: json::grant(&grant),
                });
            }
            let Some((program, rest)) = args.command.split_first() else {
                return Ok(ExitCode::Success.code());
            };
            drop(store);
            // Become the command: its exit status and signals are its own.
            let err = std::process::Command::new(program).args(rest).exec();
            Err(err).with_context(|| format!("cannot run {}", program.to_string_lossy()))
        }
        LeaseFence::Refused { newest, reason } => {
            let newest = newest.map_or_else(|| "none".to_owned(), |t| t.to_string());
            let err = CliError::new(
                ExitCode::StaleToken,
                format!(
                    "token {} of {} refused: {reason} (newest token {newest}); the command was not run. The holder of token {} must stop writing",
                    args.token, args.name, args.token
                ),
            );
            let details = json::FenceRefused {
                name: &args.name,
                token: args.token,
                passed: false,
                reason,
                newest_token: newest,
            };
            Ok(crate::commands::refuse(ctx, details, &err))
        }
    }
}
