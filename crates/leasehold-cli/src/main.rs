//! The `leasehold` command. `main` only hands over to [`run::run`], which
//! maps every outcome to an exit code in one place.

mod cli;
mod commands;
mod exit_codes;
mod output;
mod run;

fn main() -> std::process::ExitCode {
    run::run()
}
