//! libfaketime for black-box tests: a real program with its wall clock
//! shifted, its monotonic and boot clocks left alone.

use std::ffi::OsStr;
use std::process::Command;

/// Go on only where libfaketime shifts a program's clock; otherwise the
/// test cannot run here (ignored with the reason, a failure under
/// `CI=true`).
///
/// Every shifted program is preloaded with the library itself, never run
/// under the `faketime` wrapper: the wrapper makes a POSIX semaphore
/// named by its own pid with `O_EXCL`, and one a killed wrapper left in
/// /dev/shm refuses a later wrapper given the same pid ("`faketime:
/// sem_open: File exists`" — fault case 13 failed so in a CI run here,
/// with 289 such semaphores left in /dev/shm).
pub fn need() {
    // Once per test binary: preload calls it for every command.
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    if let Err(why) = CHECKED.get_or_init(check) {
        crate::unavailable(why.clone());
    }
}

fn check() -> Result<(), String> {
    let Some(lib) = library() else {
        return Err("libfaketime.so.1 is not where Debian puts it; reinstall the Debian package faketime".into());
    };
    let year = |preload: bool| -> Option<u32> {
        let mut cmd = Command::new("date");
        cmd.arg("+%Y");
        if preload {
            cmd.env("LD_PRELOAD", &lib).env("FAKETIME", "+3650d");
        }
        let out = cmd.output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match (year(false), year(true)) {
        (Some(now), Some(shifted)) if shifted >= now + 9 => Ok(()),
        (now, shifted) => Err(format!(
            "libfaketime does not shift `date` here (the year {now:?}, with +3650d {shifted:?}); reinstall the Debian package faketime"
        )),
    }
}

/// `program` with its wall clock `offset` away from the real one (`+2h`,
/// `-10m`); add its arguments.
pub fn command(offset: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    preload(&mut cmd, offset);
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
/// the program itself — not run under the `faketime` wrapper (see
/// [`need`]; it would also fork and take the signals a test sends to the
/// program: a daemon told to stop with SIGTERM must be the one that gets
/// it). Go on only where the library works (else the test cannot run
/// here).
pub fn preload(cmd: &mut Command, offset: &str) {
    need();
    let lib = library().expect("need() found the library");
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
}
