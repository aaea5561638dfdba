//! fault case 4: the process dies at every failpoint of acquire, renew,
//! release, claim, complete and write; after a restart the invariants of
//! cases 1 and 3 hold: no token reissued, the store's integrity check ok, a
//! grant made before the crash expires (or was released) within TTL + 1 s,
//! a task is neither lost nor completed twice, a state file is old or new.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold_backend::failpoint::ALL;
use leasehold_faults::checker::Report;
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::tier::figure;

use crate::common::{acquire_recorded, history, judge};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case04_a_crash_at_every_failpoint_is_recovered_with_all_invariants,
    every_failpoint_in_the_code_is_listed,
];

/// `leasehold ARGS` with `point` armed (and `stdin` fed); its exit code.
fn crash(sb: &Sandbox, point: &str, args: &[&str], stdin: &[u8]) -> i32 {
    let mut cmd = sb.cmd(args);
    proc::arm_failpoint(&mut cmd, point);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin);
    proc::outcome(&child.wait_with_output().unwrap()).0
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Run the operation of `point` with it armed, then recover and check.
/// The grants the test takes (before the crash, the one the crashed
/// operation renews or releases, and the recovery's) are recorded in the
/// sandbox's history, which the checker judges with the trial.
fn trial(point: &str, report: &mut Report) {
    let sb = Sandbox::new();
    let (op, _) = point.split_once('/').unwrap();
    let mut history = history(&sb);
    let mut found = Vec::new();
    let mut push = |what: String| found.push(what);
    // Earlier grants: tokens 1 and 2.
    for _ in 0..2 {
        let (t, grant) = acquire_recorded(&sb, &mut history, "test", "job", &["--ttl", "60s"]).unwrap();
        history.end("job", &grant, boot_ns()).unwrap();
        assert_eq!(sb.run(&["release", "job", "--token", &t.to_string()]).0, 0);
    }
    let crashed = match op {
        "acquire" => crash(&sb, point, &["acquire", "job", "--ttl", "2s"], b""),
        "renew" | "release" => {
            let (t, grant) = acquire_recorded(&sb, &mut history, "crashed", "job", &["--ttl", "2s"]).unwrap();
            let t = t.to_string();
            let args: &[&str] = if op == "renew" {
                &["renew", "job", "--token", &t, "--ttl", "2s"]
            } else {
                &["release", "job", "--token", &t]
            };
            let code = crash(&sb, point, args, b"");
            // Its holder died with the crash.
            history.end("job", &grant, boot_ns()).unwrap();
            code
        }
        "claim" | "complete" => {
            assert_eq!(sb.run(&["task", "add", "q", "--id", "t1", "--payload", "1"]).0, 0);
            if op == "claim" {
                crash(&sb, point, &["task", "claim", "q", "--ttl", "2s"], b"")
            } else {
                let (code, out, err) = sb.run(&["task", "claim", "q", "--ttl", "2s"]);
                assert_eq!(code, 0, "{err}");
                let t = json(&out)["token"].as_u64().unwrap().to_string();
                crash(&sb, point, &["task", "done", "q", "t1", "--token", &t], b"")
            }
        }
        "write" => crash_write(&sb, point, &mut push),
        other => panic!("no scenario for failpoint operation {other}"),
    };
    if crashed != -9 {
        push(format!("the failpoint was not reached (exit {crashed})"));
        conclude_trial(&sb, point, found, report);
        return;
    }
    if op == "write" {
        conclude_trial(&sb, point, found, report);
        return;
    }
    // Recovery: a grant made before the crash must be gone within TTL + 1 s.
    let started = Instant::now();
    let recovered = acquire_recorded(&sb, &mut history, "recovery", "job", &["--ttl", "60s", "--wait=3s"]);
    if let Some((token, grant)) = recovered {
        history.end("job", &grant, boot_ns()).unwrap();
        // Tokens 1 and 2 were handed out before, and 3 too when the crash
        // came after its commit (or the operation needed a grant).
        let floor = match point {
            "acquire/begin" | "acquire/token" | "acquire/before-commit" => 3,
            _ if op == "claim" || op == "complete" => 3,
            _ => 4,
        };
        if token < floor {
            push(format!(
                "token {token} reissued (floor {floor}) after {:?}",
                started.elapsed()
            ));
        }
    } else {
        push("not recoverable within TTL + 1 s: still held after 3 s".to_owned());
    }
    if op == "claim" || op == "complete" {
        finish_task_once(&sb, &mut push);
    }
    let integrity = sb.integrity();
    if integrity != "ok" {
        push(format!("integrity check: {integrity}"));
    }
    conclude_trial(&sb, point, found, report);
}

/// The `write` trial: a state file written with token 5, then token 6
/// with `point` armed; the file must be old or new, its fence record must
/// match, and token 5 must be refused once 6 may have landed. Findings go
/// to `push`; the crashed write's exit code is returned.
fn crash_write(sb: &Sandbox, point: &str, push: &mut dyn FnMut(String)) -> i32 {
    let state = sb.file("state.json");
    let path = state.to_str().unwrap();
    assert_eq!(
        sb.cmd(&["write", path, "--fence-token", "5"])
            .stdin(Stdio::piped())
            .spawn()
            .map(|mut c| {
                let _ = c.stdin.take().unwrap().write_all(b"{\"v\":\"old\"}");
                proc::outcome(&c.wait_with_output().unwrap()).0
            })
            .unwrap(),
        0
    );
    let code = crash(
        sb,
        point,
        &["--json", "write", path, "--fence-token", "6"],
        b"{\"v\":\"new\"}",
    );
    let content = std::fs::read_to_string(&state).unwrap_or_default();
    if content != "{\"v\":\"old\"}" && content != "{\"v\":\"new\"}" {
        push(format!("state file is neither old nor new: {content:?}"));
    }
    let fence = std::fs::read_to_string(sb.file("state.json.fence")).unwrap_or_default();
    if content.contains("new") && fence.trim() != "6" {
        push(format!("new content written but the fence record says {fence:?}"));
    }
    // Token 5 must be refused once 6 may have landed anywhere.
    if fence.trim() == "6" {
        let mut c = sb
            .cmd(&["write", path, "--fence-token", "5"])
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _ = c.stdin.take().unwrap().write_all(b"stale");
        if proc::outcome(&c.wait_with_output().unwrap()).0 != 13 {
            push("a stale token was accepted after the crash".into());
        }
    }
    code
}

/// The task ends done exactly once: claim it again (after its claim
/// expired) unless the completion was committed before the crash.
fn finish_task_once(sb: &Sandbox, push: &mut dyn FnMut(String)) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, out, _) = sb.run(&["task", "show", "q", "t1", "--json"]);
        assert_eq!(code, 0);
        let task = json(&out);
        if task["state"] == "done" {
            break;
        }
        if Instant::now() > deadline {
            push(format!("task lost: still {} after 5 s", task["state"]));
            break;
        }
        let (code, out, _) = sb.run(&["task", "claim", "q", "--ttl", "60s"]);
        if code == 0 {
            let t = json(&out)["token"].as_u64().unwrap().to_string();
            assert_eq!(sb.run(&["task", "done", "q", "t1", "--token", &t]).0, 0);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What the trial of `point` found, and the checker's verdict on its
/// history, into `report` (each violation named with the failpoint).
fn conclude_trial(sb: &Sandbox, point: &str, found: Vec<String>, report: &mut Report) {
    for what in found {
        report.push("failpoint", format!("{point}: {what}"));
    }
    let judged = judge(sb, &[]);
    report.counts.grants += judged.counts.grants;
    for v in judged.violations {
        report.push(v.kind, format!("{point}: {}", v.detail));
    }
    for (kind, n) in judged.omitted {
        *report.omitted.entry(kind).or_default() += n;
    }
}

fn case04_a_crash_at_every_failpoint_is_recovered_with_all_invariants() {
    let mut report = Report::new("failpoints");
    for point in ALL {
        trial(point, &mut report);
    }
    figure(
        4,
        &format!(
            "{} of {} failpoints covered (each crashed the process); {} grants judged; {} violations",
            ALL.len()
                - report
                    .violations
                    .iter()
                    .filter(|v| v.detail.contains("not reached"))
                    .count(),
            ALL.len(),
            report.counts.grants,
            report.total()
        ),
    );
    report.assert_clean();
}

/// The list of failpoints and the code agree: every `failpoint!` in the
/// sources names a listed point (the generic ones in the SQLite store's
/// transaction helper are checked through their operations; `acquire/token`
/// is in the lease algorithm every store applies).
fn every_failpoint_in_the_code_is_listed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found = Vec::new();
    for file in [
        "crates/leasehold-backend/src/plan.rs",
        "crates/leasehold-sqlite/src/task.rs",
        "crates/leasehold/src/files/atomic.rs",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for part in text.split("failpoint!(\"").skip(1) {
            let mut args = part.split('"');
            let op = args.next().unwrap();
            let step = args.nth(1).unwrap();
            found.push(format!("{op}/{step}"));
        }
    }
    assert!(found.len() >= 7, "{found:?}");
    for f in &found {
        assert!(
            ALL.contains(&f.as_str()),
            "failpoint {f} is not in leasehold_backend::failpoint::ALL"
        );
    }
}
