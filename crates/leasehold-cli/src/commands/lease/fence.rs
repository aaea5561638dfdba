use std::os::unix::process::CommandExt;

use anyhow::Context as _;
use leasehold::{HistoryEvent, LeaseFence, LeaseName, Store, Token, json};

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
            let why = not_live(&store, &args.name, args.token);
            let newest = newest.map_or_else(|| "none".to_owned(), |t| t.to_string());
            let why = why.unwrap_or_else(|| format!("{reason} (newest token {newest})"));
            let err = CliError::new(
                ExitCode::StaleToken,
                format!(
                    "token {} of {} refused: {why}; the command was not run. The holder of token {} must stop writing",
                    args.token,
                    crate::output::for_terminal(args.name.as_str()),
                    args.token
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

/// Why `token`'s grant of `name` is not live, as its history says (it was
/// released, it expired, it was taken over), and which grant is live now —
/// rather than "no longer live (newest token 1)", which leaves both to
/// guess. `None` when the history no longer tells (the caller says what
/// the store said).
fn not_live(store: &Store, name: &LeaseName, token: Token) -> Option<String> {
    let entries = store.history(name, leasehold::HISTORY_PER_NAME).ok()?;
    let ended = entries.iter().find(|e| {
        e.token == Some(token)
            && matches!(
                e.event,
                HistoryEvent::Released | HistoryEvent::Expired | HistoryEvent::FastTakeover
            )
    })?;
    let how = match ended.event {
        HistoryEvent::Released => "released",
        HistoryEvent::Expired => "expired (its TTL ran out)",
        _ => "taken over (its holder was gone)",
    };
    let live: Vec<String> = store
        .status(name)
        .ok()
        .flatten()
        .map(|s| s.grants)
        .unwrap_or_default()
        .iter()
        .map(|g| format!("token {}", g.token))
        .collect();
    let now = if live.is_empty() {
        format!("no grant of {} is live now", crate::output::for_terminal(name.as_str()))
    } else {
        format!("{} live now", live.join(", "))
    };
    Some(format!(
        "its grant was {how} at {}; {now}",
        crate::output::rfc3339(ended.at)
    ))
}
