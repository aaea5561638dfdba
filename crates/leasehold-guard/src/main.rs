//! `leasehold-guard`: the guard program of `leasehold::supervise`. A
//! supervisor starts it as `leasehold-guard __guard ...`; everything it
//! does is in
//! `crates/leasehold/src/supervise/guard/`. Programs that embed the
//! library find it through `leasehold::supervise::GuardProgram::find`:
//! `$LEASEHOLD_GUARD`, else beside their executable, else on `$PATH`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if let Some(code) = leasehold::supervise::guard::main(&args) {
        return ExitCode::from(code);
    }
    if args.first().is_some_and(|a| a == "--version") {
        println!("leasehold-guard {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "leasehold-guard: the guard program of leasehold's supervision; a supervisor starts it (`leasehold-guard __guard ...`), it is not run by hand"
    );
    ExitCode::from(2)
}
