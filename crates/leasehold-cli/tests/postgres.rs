//! The real `leasehold` binary against a throwaway PostgreSQL (the harness
//! of leasehold-postgres): a supervised command is stopped in time while
//! the server is down (fault case 10 for PostgreSQL), TLS asked of a
//! server without it is exit 69, and a task's availability is on the
//! server's clock, whatever the adding client's wall clock says.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin;
use leasehold_testkit::faketime;
use leasehold_testkit::postgres::Server;
use leasehold_testkit::wait::wait_until;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_run_is_stopped_before_the_holder_side_deadline_while_the_server_is_down,
        sslmode_require_against_a_server_without_tls_is_exit_69,
        a_task_added_by_a_client_whose_clock_is_ahead_is_claimable_at_once,
        a_delay_from_a_client_whose_clock_is_behind_runs_on_the_server_clock,
    ]]);
}

fn leasehold(url: &str, dir: &Path) -> Command {
    on_store(Command::new(cargo_bin("leasehold")), url, dir)
}

/// `cmd` (a `leasehold`, maybe wrapped) on the store `url`, at home in `dir`.
fn on_store(mut cmd: Command, url: &str, dir: &Path) -> Command {
    cmd.env("LEASEHOLD_STORE", url)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

/// Run `cmd`; returns (exit code, stdout, stderr).
fn output(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn a_run_is_stopped_before_the_holder_side_deadline_while_the_server_is_down() {
    let server = Server::start(false);
    let dir = tempfile::tempdir().unwrap();
    let child = leasehold(&server.url("run_down"), dir.path())
        .args([
            "run",
            "job",
            "--ttl",
            "3s",
            "--heartbeat",
            "500ms",
            "--grace",
            "500ms",
            "--",
        ])
        .args(["sh", "-c", "echo $$ > pid; touch started; exec sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), || dir.path().join("started").exists()).expect("the command started");
    let pid = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .to_owned();
    // Every renewal that succeeded was sent before the crash, so the
    // holder-side deadline (sent + TTL) is at most 3 s after it.
    let crashed = Instant::now();
    server.crash();
    let gone = wait_until(Duration::from_secs(10), || !Path::new(&format!("/proc/{pid}")).exists())
        .map(|_| crashed.elapsed())
        .expect("the command was never stopped");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("command stopped {gone:?} after the server went down (TTL 3s)");
    assert!(
        gone < Duration::from_secs(3),
        "stopped {gone:?} after the crash; the TTL is 3s"
    );
    assert_eq!(out.status.code(), Some(75), "{err}");
    // Refused connections (an error), or a renewal still out at the
    // deadline: either is said, and neither is a pause.
    assert!(
        err.contains("renewals kept failing")
            || err.contains("still unanswered (the store is slow, unreachable or locked"),
        "{err}"
    );
    assert!(!err.contains("did not run"), "{err}");
    server.restart();
}

fn sslmode_require_against_a_server_without_tls_is_exit_69() {
    let server = Server::shared();
    let dir = tempfile::tempdir().unwrap();
    let out = leasehold(&format!("{}&sslmode=require", server.url("tls")), dir.path())
        .args(["status", "job"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("TLS"), "{err}");
}

/// `task add q --id a EXTRA...` on `url` by a client whose wall clock is
/// `offset` from the real one, then `task claim q` by a client with the
/// real clock: the claim's (exit code, stdout, stderr).
fn claim_after_add_at(offset: &str, url: &str, dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let (code, _, err) = output(
        on_store(faketime::command(offset, cargo_bin("leasehold")), url, dir)
            .args(["task", "add", "q", "--id", "a"])
            .args(extra),
    );
    assert_eq!(code, 0, "task add with the clock at {offset}: {err}");
    output(leasehold(url, dir).args(["task", "claim", "q", "--ttl", "1m"]))
}

/// Issue 13: a client whose wall clock is two hours ahead adds a task (no
/// delay) that a client with a correct clock claims at once: the task is
/// available from the server's now, not the adder's.
fn a_task_added_by_a_client_whose_clock_is_ahead_is_claimable_at_once() {
    faketime::need();
    let dir = tempfile::tempdir().unwrap();
    let url = Server::shared().url("clock_ahead");
    let (code, out, err) = claim_after_add_at("+2h", &url, dir.path(), &[]);
    assert_eq!(
        code, 0,
        "a task added by a client 2h ahead is not claimable now: {out}{err}"
    );
    let claim: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(claim["id"], "a", "{out}");
}

/// Issue 13: `--delay 1h` from a client whose wall clock is two hours
/// behind is an hour on the server's clock — not claimable at once, as it
/// was when the client added its delay to its own clock.
fn a_delay_from_a_client_whose_clock_is_behind_runs_on_the_server_clock() {
    faketime::need();
    let dir = tempfile::tempdir().unwrap();
    let url = Server::shared().url("clock_behind");
    let (code, out, err) = claim_after_add_at("-2h", &url, dir.path(), &["--delay", "1h"]);
    assert_eq!(code, 10, "a task delayed 1h was claimable at once: {out}{err}");
    let (code, out, err) = output(leasehold(&url, dir.path()).args(["task", "show", "q", "a", "--json"]));
    assert_eq!(code, 0, "{err}");
    let show: serde_json::Value = serde_json::from_str(&out).unwrap();
    let at = humantime::parse_rfc3339(show["available_at"].as_str().unwrap()).unwrap();
    let ahead = at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    assert!(
        ahead > Duration::from_secs(3500) && ahead <= Duration::from_secs(3600),
        "available {ahead:?} from now, not the hour asked (on the server's clock)"
    );
}
