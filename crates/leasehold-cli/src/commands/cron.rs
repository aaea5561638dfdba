//! `leasehold cron`: fire the store's schedules (the library's
//! `leasehold::schedule::daemon`), one line per slot record written.

use std::sync::Arc;

use anyhow::Context as _;
use leasehold::schedule::daemon::{self, CronEvent, CronOptions};
use leasehold::{Cancel, json};

use crate::cli::CronArgs;
use crate::commands::{Ctx, guard_program};
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &CronArgs) -> anyhow::Result<u8> {
    let store = Arc::new(ctx.open_store()?);
    // A name that is no schedule would fire nothing, silently and forever
    // (a typo, a schedule on another store): refused before starting.
    let schedules = store.schedules()?;
    let mut unknown = Vec::new();
    for name in &args.only {
        if schedules.get(name)?.is_none() {
            unknown.push(name.clone());
        }
    }
    if !unknown.is_empty() {
        return Err(super::schedule::none_named(&unknown));
    }
    super::serve::daemon_metrics(args.metrics_listen.as_deref())?;
    let options = CronOptions {
        refresh: args.refresh,
        only: args.only.clone(),
        ..CronOptions::new(guard_program()?)
    };
    // SIGINT and SIGTERM end the daemon: the commands it runs are stopped
    // (their grace, then SIGKILL) and their slots recorded; exit 0.
    let cancel = Cancel::new();
    let _signals = cancel.on_signals().context("cannot install the signal handlers")?;
    let as_json = ctx.global.json;
    daemon::run(&store, &options, &cancel, move |event| match event {
        CronEvent::Slot { name, record } => {
            if as_json {
                output::print_json_line(&json::slot(name, record));
            } else {
                println!("{}", output::for_terminal(&daemon::describe(name, record)));
            }
        }
        // With --log-format json the library's events say these.
        CronEvent::Failed { .. } | CronEvent::Told { .. } if crate::logging::json() => {}
        CronEvent::Failed { name, error } => match name {
            Some(name) => eprintln!("leasehold cron: {name}: {error}"),
            None => eprintln!("leasehold cron: {error}"),
        },
        CronEvent::Told { name, line } => match name {
            Some(name) => eprintln!("leasehold cron: {name}: {line}"),
            None => eprintln!("leasehold cron: {line}"),
        },
    })?;
    Ok(ExitCode::Success.code())
}
