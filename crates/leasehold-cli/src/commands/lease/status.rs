use crate::cli::StatusArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<u8> {
    let store = ctx.open_existing_store()?;
    let Some(name) = &args.name else {
        super::list::show(ctx, &store.list(true)?);
        return Ok(ExitCode::Success.code());
    };
    let state = store.status(name)?;
    if ctx.global.json {
        output::print_json(&match &state {
            Some(s) => leasehold::json::lease_state(s),
            None => leasehold::json::never_granted(name),
        });
        return Ok(ExitCode::Success.code());
    }
    match state {
        None => println!("{}: never granted", output::for_terminal(name.as_str())),
        Some(state) => {
            println!("{}", output::lease_table(std::slice::from_ref(&state)));
            println!("last token {}; {} waiter(s)", state.last_token, state.waiters.len());
        }
    }
    Ok(ExitCode::Success.code())
}
