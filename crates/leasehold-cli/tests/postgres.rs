//! The real `leasehold` binary against a throwaway PostgreSQL (the harness
//! of leasehold-postgres): a supervised command is stopped in time while
//! the server is down (FAULTS.md case 10 for PostgreSQL), and TLS asked of
//! a server without it is exit 69.

#[path = "../../leasehold-postgres/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::Server;

fn leasehold(url: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("leasehold"));
    cmd.env("LEASEHOLD_STORE", url)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

fn wait_until(limit: Duration, mut what: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if what() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
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
    assert!(err.contains("renewals kept failing"), "{err}");
    server.restart();
}

#[test]
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
