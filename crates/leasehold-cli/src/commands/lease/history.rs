use crate::cli::HistoryArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &HistoryArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let entries = store.history(&args.name, args.limit)?;
    if ctx.global.json {
        let entries: Vec<_> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "at": output::rfc3339(e.at),
                    "event": e.event,
                    "token": e.token,
                    "owner": e.owner,
                    "detail": e.detail,
                })
            })
            .collect();
        output::print_json(&serde_json::json!({ "name": args.name, "history": entries }));
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
