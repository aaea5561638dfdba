//! libfaketime for black-box tests: the real binary with its wall clock
//! shifted, its monotonic and boot clocks left alone. Shared by the test
//! targets through `#[path]`.

use std::process::Command;

/// Whether `faketime` runs here; if not, prints a SKIP line (a failure
/// under `CI=true`).
pub fn available() -> bool {
    let ok = Command::new("faketime")
        .args(["-f", "+0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "faketime is missing in CI (apt-get install faketime)"
        );
        eprintln!("SKIP wall-clock tests: faketime not installed (apt-get install faketime)");
    }
    ok
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
