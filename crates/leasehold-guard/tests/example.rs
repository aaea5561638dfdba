//! The library's example `supervise_command` (crates/leasehold/examples/)
//! run as a program outside the CLI runs: a command under a lease, with
//! this crate's `leasehold-guard` as its guard — configured through
//! `$LEASEHOLD_GUARD`, and found without configuration beside the build.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const GUARD: &str = env!("CARGO_BIN_EXE_leasehold-guard");

/// The example's binary, built here once for all tests: cargo does
/// nothing when it is up to date, and a binary left from an older tree
/// would test that tree's example.
fn example() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_example).clone()
}

fn build_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let path = profile.join("examples").join("supervise_command");
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-p", "leasehold", "--example", "supervise_command"]);
    if profile.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    build.env("CARGO_TARGET_DIR", profile.parent().unwrap());
    assert!(build.status().unwrap().success(), "cannot build the example");
    path
}

fn run(dir: &Path, script: &str, guard: Option<&str>) -> Output {
    let mut command = Command::new(example());
    command.arg(dir.join("l.db")).arg(script).env_remove("LEASEHOLD_GUARD");
    if let Some(guard) = guard {
        command.env("LEASEHOLD_GUARD", guard);
    }
    command.output().unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON line ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn the_example_runs_its_command_under_a_lease_with_leasehold_guard() {
    let dir = tempfile::tempdir().unwrap();
    // The command's parent is the guard; it sees its token.
    let out = run(
        dir.path(),
        r#"echo "$LEASEHOLD_TOKEN $(cat /proc/$PPID/comm)""#,
        Some(GUARD),
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["exit_code"], 0);
    assert_eq!(doc["stdout"], format!("{} leasehold-guard\n", doc["token"]));
    // The lease was released: the next run gets it at once, with a new token.
    let again = json(&run(dir.path(), "exit 7", Some(GUARD)));
    assert_eq!(again["exit_code"], 7);
    assert!(again["token"].as_u64() > doc["token"].as_u64(), "{again} after {doc}");
}

#[test]
fn without_configuration_the_example_finds_leasehold_guard_beside_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(example());
    let out = command
        .arg(dir.path().join("l.db"))
        .arg(r"tr '\0' ' ' < /proc/$PPID/cmdline")
        .env_remove("LEASEHOLD_GUARD")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = json(&out)["stdout"].as_str().unwrap().to_owned();
    assert!(
        stdout.starts_with(&format!(
            "{} __guard --build={} --control-fd=",
            Path::new(GUARD).display(),
            leasehold::supervise::GUARD_BUILD
        )),
        "{stdout}"
    );
}

#[test]
fn a_guard_that_is_not_there_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "true", Some("/nonexistent/leasehold-guard"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LEASEHOLD_GUARD is /nonexistent/leasehold-guard"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("l.db").exists() || out.stdout.is_empty(),
        "nothing ran"
    );
}

#[test]
fn a_held_lease_runs_nothing_and_a_stalled_command_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let first = {
        let script = format!("touch {}; sleep 3", started.display());
        let mut command = Command::new(example());
        command
            .arg(dir.path().join("l.db"))
            .arg(script)
            .env("LEASEHOLD_GUARD", GUARD)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(t.elapsed().as_secs() < 20, "the first command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let held = run(dir.path(), "echo never", Some(GUARD));
    assert_eq!(held.status.code(), Some(11));
    assert_eq!(json(&held)["held"], true);
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0));

    // Silent for longer than the example's 5 s stall limit.
    let stalled = run(dir.path(), "sleep 30", Some(GUARD));
    assert_eq!(stalled.status.code(), Some(75));
    let error = json(&stalled)["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.starts_with("the command stalled"), "{stalled:?}");
}
