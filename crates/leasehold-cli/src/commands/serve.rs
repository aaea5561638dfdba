//! `leasehold serve`: the status page (crates/leasehold-serve). Its web
//! stack lives in that crate and runs only here; no other command starts
//! a thread or a socket for it.

use anyhow::Context as _;
use leasehold_serve::{Config, ServeError};

use crate::cli::ServeArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

pub(crate) fn cli_error(e: &ServeError) -> anyhow::Error {
    let code = if e.is_usage() {
        ExitCode::Usage
    } else {
        ExitCode::Failure
    };
    CliError::new(code, e.to_string()).into()
}

pub fn run(ctx: &Ctx, args: &ServeArgs) -> anyhow::Result<u8> {
    let config = Config {
        listen: args.listen.clone(),
        token_file: args.token_file.clone(),
        allow_actions: args.allow_actions,
        refresh: args.refresh,
        retention: args.retention,
        allow_hosts: args.allow_hosts.clone(),
        announce: |line| {
            if crate::logging::json() {
                crate::logging::say(crate::logging::SERVE_LISTENING, line);
            } else {
                eprintln!("leasehold serve: {line}");
            }
        },
    };
    // Unsafe arguments are refused before the store is even opened.
    config.check().map_err(|e| cli_error(&e))?;
    let store = ctx.open_store().context("leasehold serve")?;
    leasehold_serve::run(store, &config).map_err(|e| cli_error(&e))?;
    Ok(ExitCode::Success.code())
}

/// `work` and `cron --metrics-listen ADDR`: this daemon's metrics served
/// on a thread of their own, the address said once it listens.
pub(crate) fn daemon_metrics(listen: Option<&str>) -> anyhow::Result<()> {
    if let Some(listen) = listen {
        let address = leasehold_serve::serve_metrics(listen).map_err(|e| cli_error(&e))?;
        crate::logging::say(
            crate::logging::METRICS_LISTENING,
            &format!("metrics at http://{address}/metrics"),
        );
    }
    Ok(())
}
