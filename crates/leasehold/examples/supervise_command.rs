//! A program outside the CLI supervising a command through the library:
//! open a store, run `sh -c SCRIPT` under the lease `example` with the
//! guard from `leasehold-guard`, and print what happened as one JSON line.
//!
//!     cargo build -p leasehold-guard
//!     cargo run -p leasehold --example supervise_command -- /tmp/leasehold-example.db 'echo "$LEASEHOLD_TOKEN"'
//!
//! The guard program is found as any embedding program finds it
//! (`GuardProgram::find`): `$LEASEHOLD_GUARD`, else `leasehold-guard`
//! beside this executable (or one directory up, from Cargo's `examples/`),
//! else on `$PATH`. Exit codes: the command's own; 11 when the lease is
//! held; 75 when the command was stopped (lease lost, or stalled).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use leasehold::supervise::{self, GuardProgram, LeaseRun, Output, RunOutcome, Spec, Timing};
use leasehold::{LeaseName, Store};

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "/tmp/leasehold-example.db".into());
    let script = args.next().unwrap_or_else(|| r#"echo "token $LEASEHOLD_TOKEN""#.into());
    let store = Arc::new(Store::open_sqlite(path.as_ref())?);

    // TTL 10 s: heartbeat and grace by default (3.3 s and 2 s).
    let timing = Timing::new(Duration::from_secs(10), None, None)?;
    let spec = Spec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        guard: GuardProgram::find()?,
        grace: timing.grace,
        stdin: None,
        // Collect stdout (to print it below); stderr passes through.
        output: Output::Collect {
            stdout_limit: 1 << 16,
            stderr_tail: 1024,
        },
        // Stop the command after 5 s without output.
        stall: Some((Duration::from_secs(5), None)),
    };
    let mut lease = LeaseRun::new(LeaseName::new("example")?, timing);
    // Opt in: ^C or a SIGTERM to this program reaches the command.
    lease.forward_signals = true;

    let ran = match supervise::run(&store, &lease, spec, |_| {})? {
        RunOutcome::Held(held) => {
            println!("{}", serde_json::json!({ "held": true, "token": held.grants[0].token }));
            return Ok(ExitCode::from(11));
        }
        RunOutcome::Ran(ran) => ran,
    };
    // `ended`: the command's own exit code, or why it did not run to its
    // end, worded by the library (lost, stalled, could not start, …).
    println!(
        "{}",
        serde_json::json!({
            "token": ran.grant.token,
            "exit_code": ran.ended.as_ref().ok(),
            "error": ran.ended.as_ref().err().map(ToString::to_string),
            "stdout": String::from_utf8_lossy(&ran.finished.stdout),
        })
    );
    Ok(ExitCode::from(match &ran.ended {
        Ok(code) => *code,
        Err(why) if why.stopped_it() || why.kind() == leasehold::ErrorKind::Lost => 75,
        Err(_) => 1,
    }))
}
