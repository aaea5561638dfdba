//! libfaketime for black-box tests: a real program with its wall clock
//! shifted, its monotonic and boot clocks left alone.

use std::ffi::OsStr;
use std::process::Command;

/// Go on only where `faketime` runs; otherwise the test cannot run here
/// (ignored with the reason, a failure under `CI=true`).
pub fn need() {
    crate::need_program("faketime", "faketime");
    // Up to three tries: under a loaded suite it once failed by itself
    // (CI, 2026-12-07), and its reason was not kept.
    let mut why = String::new();
    for _ in 0..3 {
        match Command::new("faketime").args(["-f", "+0", "true"]).output() {
            Ok(out) if out.status.success() => return,
            Ok(out) => why = format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            Err(e) => why = e.to_string(),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    crate::unavailable(format!(
        "`faketime -f +0 true` fails here ({why}); reinstall the Debian package faketime"
    ));
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

/// Where libfaketime's library is (Debian's path for this architecture,
/// then the others packagers use).
fn library() -> Option<std::path::PathBuf> {
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu/faketime/libfaketime.so.1"),
        "/usr/lib/faketime/libfaketime.so.1".to_owned(),
        "/usr/local/lib/faketime/libfaketime.so.1".to_owned(),
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists())
}

/// `cmd` with its wall clock `offset` away, the library preloaded into
/// the program itself — not run under the `faketime` wrapper, which
/// forks and would take the signals a test sends to the program (a
/// daemon told to stop with SIGTERM must be the one that gets it).
/// Go on only where the library is installed (else the test cannot run
/// here).
pub fn preload(cmd: &mut Command, offset: &str) {
    need();
    let Some(lib) = library() else {
        crate::unavailable("libfaketime.so.1 is not where Debian puts it; reinstall the Debian package faketime");
    };
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
}
