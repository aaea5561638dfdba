use crate::cli::StatusArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let Some(name) = &args.name else {
        super::list::show(ctx, &store.list(true)?);
        return Ok(ExitCode::Success.code());
    };
    let state = store.status(name)?;
    if ctx.global.json {
        output::print_json(&match &state {
            Some(s) => output::state_json(s),
            None => serde_json::json!({ "name": name, "last_token": null, "waiters": 0, "grants": [] }),
        });
        return Ok(ExitCode::Success.code());
    }
    match state {
        None => println!("{}: never granted", output::for_terminal(name.as_str())),
        Some(state) => {
            println!("{}", output::lease_table(std::slice::from_ref(&state)));
            println!("last token {}; {} waiter(s)", state.last_token, state.waiters);
        }
    }
    Ok(ExitCode::Success.code())
}
