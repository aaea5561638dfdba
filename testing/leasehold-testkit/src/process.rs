//! The processes a test starts or leaves behind: whether one runs, by pid,
//! and a watchdog that cleans up after this test process.

use std::process::{Command, Output, Stdio};

/// Whether `pid` runs (a zombie does not).
#[must_use]
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// The guard of the supervisor `sup` (`leasehold run` or `work`): its
/// child running `leasehold __guard`, spawned from any of its threads.
///
/// # Panics
/// When `sup` has no such child.
#[must_use]
pub fn guard_of(sup: u32) -> u32 {
    let tasks = std::fs::read_dir(format!("/proc/{sup}/task")).expect("the supervisor's threads");
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"__guard"))
        })
        .expect("the supervisor has a guard")
}

/// Run `cmd` to its end and return what it printed; a command that cannot
/// start or fails fails the test, with the command line and its output.
///
/// # Panics
/// When `cmd` cannot be started or exits unsuccessfully.
pub fn succeed(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run the shell command `cleanup` (stop a server, remove its directory)
/// once this test process has exited, however it exited: a shared server
/// is a static, never dropped, and a killed test drops nothing.
pub fn after_exit(cleanup: &str) {
    // Run in the background of a shell that exits at once (waited for
    // below), so the watchdog outlives this process.
    let watchdog = format!(
        "(while kill -0 {me} 2>/dev/null; do sleep 0.5; done; {cleanup}) >/dev/null 2>&1 &",
        me = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start a watchdog");
}

/// Write at `path` a guard program of another build, for what a
/// supervisor does with one: a script that appends a line to `tried`, then
/// runs `guard` (this build's `leasehold-guard`) told that its supervisor
/// is another build (`--build=` replaced) — so it is the real guard that
/// refuses, as one of another build would.
///
/// # Panics
/// When the script cannot be written.
pub fn write_other_builds_guard(path: &std::path::Path, guard: &std::path::Path, tried: &std::path::Path) {
    write_script(
        path,
        &format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\n[ \"$1\" = __guard ] || exit 9\nshift 2\nexec '{}' __guard --build=0.0.1-another \"$@\"\n",
            tried.display(),
            guard.display()
        ),
    );
}

/// Write `text` at `path` as a program anyone may run (mode 755): a
/// script a test starts.
///
/// # Panics
/// When it cannot be written.
#[allow(clippy::disallowed_methods, reason = "a test fixture, not state")]
pub fn write_script(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot make {} executable: {e}", path.display()));
}
