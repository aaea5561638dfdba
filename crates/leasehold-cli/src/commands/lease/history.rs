use crate::cli::HistoryArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &HistoryArgs) -> anyhow::Result<u8> {
    let store = ctx.open_existing_store()?;
    if args.timeline && !ctx.global.json {
        return timeline(&store, args);
    }
    let entries = store.history(&args.name, args.limit)?;
    if ctx.global.json {
        output::print_json(&leasehold::json::history(&args.name, &entries));
        return Ok(ExitCode::Success.code());
    }
    if entries.is_empty() {
        eprintln!("no history for {}", args.name);
        return Ok(ExitCode::Success.code());
    }
    let mut table = output::Table::new(&["at", "event", "token", "owner", "detail"]);
    for e in &entries {
        table.row([
            output::rfc3339(e.at),
            e.event.as_str().to_owned(),
            e.token.map(|t| t.to_string()).unwrap_or_default(),
            e.owner.clone().unwrap_or_default(),
            e.detail.clone(),
        ]);
    }
    println!("{table}");
    Ok(ExitCode::Success.code())
}

/// `history NAME --timeline`: the status page's timeline in Unicode
/// blocks, coloured only for a person at a terminal (as messages are).
fn timeline(store: &leasehold::Store, args: &HistoryArgs) -> anyhow::Result<u8> {
    use std::io::IsTerminal as _;
    let mut entries = store.history(&args.name, leasehold::timeline::HISTORY_MAX)?;
    entries.reverse();
    let live = store.status(&args.name)?.map(|s| s.grants).unwrap_or_default();
    let tl = leasehold::timeline::build(
        &args.name,
        &entries,
        &live,
        &|g| leasehold::identity::provably_gone(&g.holder),
        &std::collections::HashMap::new(),
        std::time::SystemTime::now(),
        args.since,
    );
    let stdout = std::io::stdout();
    let colour = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let width = rustix::termios::tcgetwinsize(&stdout)
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|w| *w > 0)
        .or_else(|| std::env::var("COLUMNS").ok()?.parse().ok())
        .unwrap_or(100);
    print!(
        "{}",
        super::timeline::render(&tl, width.saturating_sub(40), colour, &output::for_terminal)
    );
    Ok(ExitCode::Success.code())
}
