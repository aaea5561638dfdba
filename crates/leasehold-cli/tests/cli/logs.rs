//! `--log-format json`: a daemon's stderr read line by line, as a log
//! pipeline reads it. What must never happen: a line that is not one JSON
//! object (free text in a machine log), an event missing for something
//! that happened, or an event whose facts differ from the store's record
//! of it. The checker is the store's own history and task list, read
//! through the CLI's `--json` — not the code that logs.

use std::time::Duration;

use serde_json::Value;

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_run_logs_its_grant_loss_and_stop_as_json_lines,
    a_worker_logs_each_claim_and_outcome_the_store_recorded,
    text_logs_say_nothing_twice_at_the_default_level,
];

const LIMIT: Duration = Duration::from_secs(30);

/// Every line of `stderr` as a JSON object; a line that is not fails.
fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
            assert!(v.is_object(), "not an object: {line}");
            for key in ["timestamp", "level", "message"] {
                assert!(v.get(key).is_some(), "no {key}: {line}");
            }
            v
        })
        .collect()
}

/// The events named `event`, in order.
fn named<'a>(log: &'a [Value], event: &str) -> Vec<&'a Value> {
    log.iter().filter(|v| v["event"] == event).collect()
}

/// The position of the first event named `event`.
fn position(log: &[Value], event: &str) -> usize {
    log.iter()
        .position(|v| v["event"] == event)
        .unwrap_or_else(|| panic!("no {event} event in {log:#?}"))
}

/// A paused supervisor (SIGSTOP past its TTL) loses its grant: the log
/// says granted, then lost and stopping (in either order: a CI run logged
/// the guard's stop first), then exited, with the token the store
/// granted, and the error with exit 75 last — and nothing else.
fn a_run_logs_its_grant_loss_and_stop_as_json_lines() {
    let env = Env::new();
    let args = [
        "--log-format",
        "json",
        "run",
        "job",
        "--ttl",
        "2s",
        "--heartbeat",
        "400ms",
        "--grace",
        "500ms",
        "--",
        "sh",
        "-c",
        "touch started; exec sleep 60",
    ];
    let child = env.spawn(&args);
    let pid = child.id();
    env.wait_for("started");
    signal(pid, "STOP");
    std::thread::sleep(Duration::from_secs(3));
    signal(pid, "CONT");
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    let log = json_lines(&err);
    // The keeper (lost) and the guard (its window closed: stopping) see
    // the same deadline on their own threads: either may be logged first,
    // and the command's exit waits for the keeper's word only so long (2 s).
    // The error is last.
    for chain in [
        &["lease.granted", "lease.lost", "error"][..],
        &["lease.granted", "command.stopping", "command.exited", "error"],
    ] {
        let order: Vec<usize> = chain.iter().map(|e| position(&log, e)).collect();
        assert!(order.is_sorted(), "out of order {chain:?} {order:?}: {log:#?}");
    }
    let (_, history, _) = env.run(&["history", "job", "--json"]);
    let history: Value = serde_json::from_str(&history).expect("history JSON");
    let granted: Vec<&Value> = history["history"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["event"] == "granted")
        .collect();
    assert_eq!(granted.len(), 1, "{history}");
    let token = &granted[0]["token"];
    let grant = named(&log, "lease.granted")[0];
    assert_eq!(&grant["token"], token, "{grant}");
    assert_eq!(grant["name"], "job");
    assert_eq!(grant["pid"], pid, "the grant is the supervisor's");
    assert_eq!(grant["ttl_ms"], 2000);
    for event in ["lease.lost", "command.stopping", "command.exited"] {
        let e = named(&log, event)[0];
        assert_eq!((&e["name"], &e["token"]), (&Value::from("job"), token), "{e}");
    }
    assert!(
        named(&log, "lease.lost")[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("did not run for"))
    );
    let exited = named(&log, "command.exited")[0];
    assert!(
        exited["reason"].as_str().is_some_and(|r| r.starts_with("lost")),
        "{exited}"
    );
    assert!(exited["duration_ms"].as_u64().is_some(), "{exited}");
    assert_eq!(named(&log, "error")[0]["exit_code"], 75);
    assert_eq!(named(&log, "command.stopping").len(), 1, "one stop: {log:#?}");
}

/// `work --log-format json`: each task claimed and finished, with the
/// outcome the store recorded for it, and the summary as an event.
fn a_worker_logs_each_claim_and_outcome_the_store_recorded() {
    let env = Env::new();
    for id in ["a", "b", "c"] {
        let (code, _, err) = env.run(&["task", "add", "jobs", "--id", id, "--max-attempts", "1"]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = env.run(&[
        "--log-format",
        "json",
        "work",
        "jobs",
        "--until-empty",
        "--",
        "sh",
        "-c",
        "test \"$LEASEHOLD_TASK_ID\" != b",
    ]);
    assert_eq!(code, 0, "{err}");
    let log = json_lines(&err);
    let (_, list, _) = env.run(&["task", "list", "jobs", "--json"]);
    let list: Value = serde_json::from_str(&list).expect("task list JSON");
    let tasks = list["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 3, "{list}");
    for task in tasks {
        let id = &task["id"];
        let claimed: Vec<_> = named(&log, "task.claimed")
            .into_iter()
            .filter(|e| &e["task"] == id)
            .collect();
        let finished: Vec<_> = named(&log, "task.finished")
            .into_iter()
            .filter(|e| &e["task"] == id)
            .collect();
        assert_eq!((claimed.len(), finished.len()), (1, 1), "{id}: {log:#?}");
        assert_eq!(finished[0]["outcome"], task["state"], "{id}: the store says {task}");
        assert_eq!(finished[0]["token"], task["token"], "{id}");
        assert_eq!(finished[0]["queue"], "jobs");
    }
    let stopped = named(&log, "work.stopped");
    assert!(
        stopped.len() == 1
            && stopped[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("2 done") && m.contains("1 dead")),
        "{log:#?}"
    );
}

/// Text logs at the default level (warn): a stopped command is said once,
/// by the command's own error, not again by an event.
fn text_logs_say_nothing_twice_at_the_default_level() {
    let env = Env::new();
    let (code, _, err) = env.run(&[
        "run",
        "job",
        "--stall-timeout",
        "300ms",
        "--grace",
        "200ms",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(code, 75, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("leasehold: the command stalled"), "{err}");
    let (code, _, err) = env.run_with(&["run", "job", "--", "true"], &[("LEASEHOLD_LOG", "info")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("granted job") && err.contains("event=\"lease.granted\""),
        "info on asking: {err}"
    );
}
