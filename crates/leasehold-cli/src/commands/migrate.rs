//! `leasehold migrate`: create or upgrade the store's schema now, rather
//! than on the first command that opens it — e.g. once, as a role allowed to
//! create tables, before agents that may only use them start. With
//! `--bump-tokens N`, after a restore from a backup: raise the token floor
//! (README.md, "Restoring a store").

use crate::cli::MigrateArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &MigrateArgs) -> anyhow::Result<u8> {
    // Opening a store migrates it (under the store's own lock, so that
    // concurrent first starts do not race); a newer schema is refused there.
    let store = ctx.open_store()?;
    let info = store.backend().describe()?;
    let bumped = args.bump_tokens.map(|by| store.bump_tokens(by)).transpose()?;
    if ctx.global.json {
        output::print_json(&leasehold::json::Migrated {
            store: info.kind,
            location: &info.location,
            schema_version: info.schema_version,
            tokens_bumped: bumped,
        });
    } else {
        println!(
            "{} store at {}: {}",
            info.kind,
            info.location,
            output::schema_words(info.schema_version)
        );
        if let Some(b) = bumped {
            println!(
                "tokens bumped: the highest token this store holds was {}; every token from now on is above {}. (A store that lost data — wiped, flushed, restored — cannot know the tokens it issued before: N must exceed the highest token any sink has seen.)",
                b.highest, b.floor
            );
        }
    }
    Ok(ExitCode::Success.code())
}
