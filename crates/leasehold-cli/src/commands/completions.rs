use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::exit_codes::ExitCode;

pub fn run(args: &CompletionsArgs) -> u8 {
    clap_complete::generate(args.shell, &mut Cli::command(), "leasehold", &mut std::io::stdout());
    ExitCode::Success.code()
}
