//! libfaketime for black-box tests: a real program with its wall clock
//! shifted, its monotonic and boot clocks left alone.

use std::ffi::OsStr;
use std::process::Command;

/// Go on only where `faketime` runs; otherwise the test cannot run here
/// (ignored with the reason, a failure under `CI=true`).
pub fn need() {
    crate::need_program("faketime", "faketime");
    let runs = Command::new("faketime")
        .args(["-f", "+0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        crate::unavailable("`faketime -f +0 true` fails here; reinstall the Debian package faketime");
    }
}

/// `program` with its wall clock `offset` away from the real one (`+2h`,
/// `-10m`); add its arguments.
pub fn command(offset: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("faketime");
    cmd.args(["-f", offset])
        .arg(program)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}
