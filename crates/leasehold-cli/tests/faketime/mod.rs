//! libfaketime for black-box tests: the real binary with its wall clock
//! shifted, its monotonic and boot clocks left alone. Shared by the test
//! targets through `#[path]`.

use std::process::Command;

/// Go on only where `faketime` runs; otherwise the test cannot run here
/// (leasehold-testkit: ignored with the reason, a failure under `CI=true`).
pub fn need() {
    leasehold_testkit::need_program("faketime", "faketime");
    let runs = Command::new("faketime")
        .args(["-f", "+0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        leasehold_testkit::unavailable("`faketime -f +0 true` fails here; reinstall the Debian package faketime");
    }
}

/// `leasehold` with its wall clock `offset` away from the real one
/// (`+2h`, `-10m`); add the arguments and the store.
pub fn leasehold(offset: &str) -> Command {
    let mut cmd = Command::new("faketime");
    cmd.args(["-f", offset])
        .arg(assert_cmd::cargo::cargo_bin("leasehold"))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}
