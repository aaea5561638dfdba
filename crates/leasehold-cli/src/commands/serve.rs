//! `leasehold serve`: the status page (crates/leasehold-serve). Its web
//! stack lives in that crate and runs only here; no other command starts
//! a thread or a socket for it.

use anyhow::Context as _;
use leasehold_serve::{Config, ServeError};

use crate::cli::ServeArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

fn cli_error(e: ServeError) -> anyhow::Error {
    match e {
        ServeError::Usage(m) => CliError::new(ExitCode::Usage, m).into(),
        ServeError::Io(m) => CliError::new(ExitCode::Failure, m).into(),
    }
}

pub fn run(ctx: &Ctx, args: &ServeArgs) -> anyhow::Result<u8> {
    let config = Config {
        listen: args.listen.clone(),
        token_file: args.token_file.clone(),
        allow_actions: args.allow_actions,
        refresh: args.refresh,
        retention: args.retention,
    };
    // Unsafe arguments are refused before the store is even opened.
    config.check().map_err(cli_error)?;
    let store = ctx.open_store().context("leasehold serve")?;
    leasehold_serve::run(store, &config).map_err(cli_error)?;
    Ok(ExitCode::Success.code())
}
