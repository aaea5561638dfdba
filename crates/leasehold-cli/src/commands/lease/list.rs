use leasehold::LeaseState;

use crate::cli::ListArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

pub fn run(ctx: &Ctx, args: &ListArgs) -> anyhow::Result<u8> {
    let store = ctx.open_existing_store()?;
    let live = args.live || args.exclude_ancestry_of.is_some();
    let mut states = store.list(live)?;
    if let Some(pid) = args.exclude_ancestry_of {
        let chain = leasehold::identity::ancestry(pid);
        for state in &mut states {
            state
                .grants
                .retain(|g| !(g.holder.host == leasehold::identity::hostname() && chain.contains(&g.holder.pid)));
        }
        states.retain(|s| !s.grants.is_empty());
    }
    if !args.quiet {
        show(ctx, &states);
    }
    // With --live the exit code answers "is anything held?", as grep's.
    Ok(if live && states.is_empty() {
        ExitCode::Failure.code()
    } else {
        ExitCode::Success.code()
    })
}

pub fn show(ctx: &Ctx, states: &[LeaseState]) {
    if ctx.global.json {
        output::print_json(&leasehold::json::leases(states));
    } else if states.is_empty() {
        eprintln!("no leases");
    } else {
        // A closed stdout (`list | head`) is no failure worth a panic.
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{}", output::lease_table(states));
    }
}
