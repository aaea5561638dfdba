//! `leader NAME`: who leads a name now, and with `--observe` each change
//! of leader as it happens. Campaigning is `run --wait` (a command as a
//! candidate) or the library's `Store::campaign`.

use std::sync::Arc;

use anyhow::Context as _;
use leasehold::{Cancel, LeaderChange, json};

use crate::cli::LeaderArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &LeaderArgs) -> anyhow::Result<u8> {
    let store = Arc::new(ctx.open_store()?);
    if !args.observe {
        let leader = store.observe(&args.name).current()?;
        show(
            ctx,
            &LeaderChange {
                name: args.name.clone(),
                leader,
            },
        );
        return Ok(ExitCode::Success.code());
    }
    // SIGINT and SIGTERM are how observing ends: exit 0, as after a
    // complete answer.
    let cancel = Cancel::new();
    let _signals = cancel.on_signals().context("cannot install the signal handlers")?;
    for change in store.observe(&args.name).with_cancel(cancel) {
        show(ctx, &change?);
    }
    Ok(ExitCode::Success.code())
}

/// One change: a JSON line (one document per line, for a stream reader),
/// or the library's one line of words.
fn show(ctx: &Ctx, change: &LeaderChange) {
    if ctx.global.json {
        output::print_json_line(&json::leader_change(change));
    } else {
        println!("{}", output::for_terminal(&change.to_string()));
    }
}
