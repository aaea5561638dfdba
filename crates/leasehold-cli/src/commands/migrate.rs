//! `leasehold migrate`: create or upgrade the store's schema now, rather
//! than on the first command that opens it — e.g. once, as a role allowed to
//! create tables, before agents that may only use them start.

use serde_json::json;

use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx) -> anyhow::Result<u8> {
    // Opening a store migrates it (under the store's own lock, so that
    // concurrent first starts do not race); a newer schema is refused there.
    let store = ctx.open_store()?;
    let info = store.backend().describe()?;
    let version = info.schema_version.map_or_else(|| "?".to_owned(), |v| v.to_string());
    if ctx.global.json {
        output::print_json(&json!({
            "store": info.kind,
            "location": info.location,
            "schema_version": info.schema_version,
        }));
    } else {
        println!(
            "{} store at {} is at schema version {version}",
            info.kind, info.location
        );
    }
    Ok(ExitCode::Success.code())
}
