use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

pub fn run(ctx: &Ctx, args: &CompletionsArgs) -> u8 {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "leasehold", &mut script);
    if ctx.global.json {
        crate::output::print_json(&leasehold::json::Completions {
            shell: args.shell.to_string(),
            script: &String::from_utf8_lossy(&script),
        });
    } else {
        use std::io::Write as _;
        let _ = std::io::stdout().write_all(&script);
    }
    ExitCode::Success.code()
}
