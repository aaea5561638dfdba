//! `leasehold schedule` and `leasehold cron` with real processes: editing
//! schedules, bad input, the overlap policies with a command longer than
//! its interval, catch-up and the deadline after downtime. Each run is
//! judged from outside the store too: commands append to a file and run
//! under `flock -n`, so two at once leave an `overlap` line.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    schedules_are_added_listed_shown_paused_resumed_and_removed,
    bad_schedules_are_refused_and_nothing_is_added,
    overlap_skip_never_runs_two_and_records_the_skipped_slots,
    overlap_wait_runs_the_next_slot_after_the_previous_one,
    overlap_stop_previous_stops_the_running_command_for_the_next_slot,
    catch_up_and_deadline_decide_what_runs_after_downtime,
    a_task_schedule_on_a_store_without_a_queue_is_refused_when_added,
    settings_that_would_fire_nothing_or_else_are_refused_and_nothing_is_added,
    a_relative_command_runs_from_a_daemon_in_another_directory,
    cron_refuses_a_name_that_is_no_schedule,
    next_of_a_paused_schedule_lists_no_slot,
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not one JSON document ({e}): {s}"))
}

fn ok(env: &Env, args: &[&str]) -> String {
    let (code, out, err) = env.run(args);
    assert_eq!(code, 0, "leasehold {args:?}: {err}");
    out
}

fn schedules_are_added_listed_shown_paused_resumed_and_removed() {
    let env = Env::new();
    let added = json(&ok(
        &env,
        &[
            "--json",
            "schedule",
            "add",
            "nightly",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--",
            "true",
        ],
    ));
    assert_eq!(added["cron"], "30 2 * * *");
    assert_eq!(added["zone"], "Europe/Berlin");
    assert_eq!(added["action"]["kind"], "run");
    assert_eq!(added["overlap"], "skip");
    assert!(added["next"].as_str().unwrap().ends_with(":30:00.000Z"), "{added}");
    ok(
        &env,
        &[
            "schedule",
            "add",
            "q",
            "--cron",
            "@every 5m",
            "--queue",
            "jobs",
            "--payload",
            r#"{"a":1}"#,
        ],
    );
    let list = json(&ok(&env, &["--json", "schedule", "list"]));
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly", "q"]);
    assert_eq!(list["schedules"][1]["action"]["payload"]["a"], 1);

    // `next` in the zone: 02:30 Berlin is 00:30 or 01:30 UTC.
    let next = json(&ok(&env, &["--json", "schedule", "next", "nightly", "-n", "3"]));
    let slots = next["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 3);
    for s in slots {
        let s = s.as_str().unwrap();
        assert!(s.contains("T00:30:00") || s.contains("T01:30:00"), "{s}");
    }

    let paused = json(&ok(&env, &["--json", "schedule", "pause", "nightly"]));
    assert_eq!(paused["paused"], true);
    let shown = json(&ok(&env, &["--json", "schedule", "show", "nightly"]));
    assert_eq!(shown["schedule"]["paused"], true);
    assert_eq!(shown["schedule"]["next"], Value::Null);
    ok(&env, &["schedule", "resume", "nightly"]);
    let shown = json(&ok(&env, &["--json", "schedule", "show", "nightly"]));
    assert_eq!(shown["schedule"]["paused"], false);
    assert!(shown["schedule"]["next"].is_string());

    ok(&env, &["schedule", "remove", "nightly"]);
    let (code, _, err) = env.run(&["schedule", "show", "nightly"]);
    assert_eq!(code, 14, "show of a removed schedule: {err}");
    assert!(err.contains("no schedule named nightly"), "{err}");
    let (code, _, _) = env.run(&["schedule", "remove", "nightly"]);
    assert_eq!(code, 14);
}

fn bad_schedules_are_refused_and_nothing_is_added() {
    let env = Env::new();
    ok(&env, &["schedule", "add", "x", "--cron", "@hourly", "--", "true"]);
    for (args, code, words) in [
        (vec!["--cron", "61 * * * *"], 2, "61"),
        (vec!["--cron", "@every 10ms"], 2, "100ms"),
        (vec!["--cron", "@daily", "--tz", "Mars/Olympus"], 2, "Mars/Olympus"),
        (vec!["--cron", "@daily"], 2, "say what each slot does"),
        (
            vec!["--cron", "@daily", "--queue", "q", "--payload", "{not json"],
            2,
            "not JSON",
        ),
    ] {
        let mut all = vec!["schedule", "add", "y"];
        all.extend(args.iter().copied());
        if !all.contains(&"--queue") && words != "say what each slot does" {
            all.extend(["--", "true"]);
        }
        let (got, _, err) = env.run(&all);
        assert_eq!(got, code, "{all:?}: {err}");
        assert!(err.contains(words), "{all:?}: {err}");
    }
    // The same name again is refused unless replaced, and `x` is untouched.
    let (code, _, err) = env.run(&["schedule", "add", "x", "--cron", "@daily", "--", "false"]);
    assert_eq!(code, 11, "{err}");
    assert!(err.contains("--replace"), "{err}");
    let list = json(&ok(&env, &["--json", "schedule", "list"]));
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["schedules"][0]["cron"], "@hourly");
    ok(
        &env,
        &["schedule", "add", "x", "--cron", "@daily", "--replace", "--", "false"],
    );
    let shown = json(&ok(&env, &["--json", "schedule", "show", "x"]));
    assert_eq!(shown["schedule"]["cron"], "@daily");
}

/// The command of a schedule: under `flock -n LOCK` it appends `start
/// SLOT` and, after `secs`, `end SLOT`; finding the lock held it appends
/// `overlap SLOT` (two commands at once).
fn script(env: &Env, secs: &str) -> String {
    let (lock, log) = (env.file("run.lock"), env.file("slots.log"));
    format!(
        "flock -n {lock} sh -c 'echo \"start $LEASEHOLD_SLOT\" >> {log}; sleep {secs}; echo \"end $LEASEHOLD_SLOT\" >> {log}' || echo \"overlap $LEASEHOLD_SLOT\" >> {log}",
        lock = lock.display(),
        log = log.display()
    )
}

fn lines(env: &Env, word: &str) -> Vec<String> {
    std::fs::read_to_string(env.file("slots.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(word).map(|s| s.trim().to_owned()))
        .collect()
}

fn cron(env: &Env) -> Child {
    env.spawn(&["--json", "cron", "--refresh", "200ms"])
}

/// Stop the daemon (SIGTERM: exit 0), then the slots' records.
fn stop_and_show(env: &Env, daemon: Child, name: &str) -> Vec<Value> {
    signal(daemon.id(), "TERM");
    let (code, _, err) = finish(daemon, Duration::from_secs(30));
    assert_eq!(code, 0, "cron on SIGTERM: {err}");
    let shown = json(&ok(env, &["--json", "schedule", "show", name, "-n", "1000"]));
    shown["slots"].as_array().unwrap().clone()
}

fn count(records: &[Value], outcome: &str) -> usize {
    records.iter().filter(|r| r["outcome"] == outcome).count()
}

fn overlap_run(policy: &str, command_secs: &str, run_for: Duration) -> (Env, Vec<Value>) {
    let env = Env::new();
    let script = script(&env, command_secs);
    ok(
        &env,
        &[
            "schedule",
            "add",
            "slow",
            "--cron",
            "@every 300ms",
            "--ttl",
            "5s",
            "--overlap",
            policy,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let daemon = cron(&env);
    std::thread::sleep(run_for);
    let records = stop_and_show(&env, daemon, "slow");
    assert!(
        lines(&env, "overlap").is_empty(),
        "--overlap {policy}: two commands at once: {:?}",
        lines(&env, "overlap")
    );
    let starts = lines(&env, "start");
    let mut unique = starts.clone();
    unique.dedup();
    assert_eq!(starts, unique, "--overlap {policy}: a slot ran twice");
    (env, records)
}

fn overlap_skip_never_runs_two_and_records_the_skipped_slots() {
    let (env, records) = overlap_run("skip", "1", Duration::from_secs(4));
    let (ran, skipped) = (count(&records, "ran"), count(&records, "skipped"));
    assert!(ran >= 2, "{records:?}");
    assert!(
        skipped >= ran,
        "a 1 s command every 300 ms skips most slots: {records:?}"
    );
    let detail = records.iter().find(|r| r["outcome"] == "skipped").unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(detail.contains("--overlap skip"), "{detail}");
    assert_eq!(
        lines(&env, "start").len(),
        ran + count(&records, "stopped") + count(&records, "failed")
    );
}

fn overlap_wait_runs_the_next_slot_after_the_previous_one() {
    // 0.4 s commands every 300 ms: each slot waits up to the next slot's
    // time for the previous command, so most run, one after another.
    let (env, records) = overlap_run("wait", "0.4", Duration::from_secs(4));
    let ran = count(&records, "ran");
    let starts = lines(&env, "start").len();
    assert!(ran >= 5, "{records:?}");
    assert!(starts >= ran, "{starts} starts for {ran} ran");
}

fn overlap_stop_previous_stops_the_running_command_for_the_next_slot() {
    let (env, records) = overlap_run("stop-previous", "5", Duration::from_secs(4));
    let stopped = count(&records, "stopped");
    assert!(
        stopped >= 3,
        "a 5 s command every 300 ms is stopped by each next slot: {records:?}"
    );
    let detail = records.iter().find(|r| r["outcome"] == "stopped").unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(detail.contains("stop-previous"), "{detail}");
    // None ran to its end: each was stopped before `end`.
    assert!(lines(&env, "end").is_empty(), "{:?}", lines(&env, "end"));
}

/// Schedules added while no daemon runs: after 1.5 s of downtime the
/// daemon finds about 7 slots of `@every 200ms` due at once.
fn catch_up_and_deadline_decide_what_runs_after_downtime() {
    let env = Env::new();
    let log = env.file("slots.log");
    let add = |name: &str, extra: &[&str]| {
        let command = format!("echo \"{name} $LEASEHOLD_SLOT\" >> {}", log.display());
        let mut args = vec!["schedule", "add", name, "--cron", "@every 200ms"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", &command]);
        ok(&env, &args);
    };
    add("none", &["--catch-up", "none"]);
    add("latest", &["--catch-up", "latest"]);
    add("all", &["--catch-up", "all"]);
    add("deadline", &["--catch-up", "all", "--deadline", "700ms"]);
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let daemon = cron(&env);
    // Until `all` has worked through its backlog (about 7 slots, one after
    // another), however loaded the machine.
    let show_all = || json(&ok(&env, &["--json", "schedule", "show", "all", "-n", "1000"]));
    let caught_up = leasehold_testkit::wait::wait_until(Duration::from_secs(30), || {
        count(show_all()["slots"].as_array().unwrap(), "ran") >= 8
    });
    assert!(
        caught_up.is_some(),
        "catch-up all did not work through its backlog: {}",
        show_all()
    );
    signal(daemon.id(), "TERM");
    let _ = finish(daemon, Duration::from_secs(30));
    let ran_in = started.elapsed();
    let show = |name: &str| {
        json(&ok(&env, &["--json", "schedule", "show", name, "-n", "1000"]))["slots"]
            .as_array()
            .unwrap()
            .clone()
    };
    let missed = |records: &[Value]| -> u64 {
        records
            .iter()
            .filter(|r| r["outcome"] == "missed")
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    let first_ran = |records: &[Value]| records.iter().rev().find(|r| r["outcome"] == "ran").cloned();

    // none: the backlog is missed, nothing of it runs late.
    let none = show("none");
    assert!(missed(&none) >= 5, "{none:?}");
    if let Some(r) = first_ran(&none) {
        assert!(
            r["late_ms"].as_u64().unwrap() < 1000,
            "catch-up none ran a late slot: {r}"
        );
    }
    // latest: one late slot runs, the rest of the backlog is missed.
    let latest = show("latest");
    assert!(missed(&latest) >= 4, "{latest:?}");
    let r = first_ran(&latest).expect("latest ran its newest due slot");
    assert!(r["late_ms"].as_u64().unwrap() < 1000, "{r}");
    // all: every due slot runs, oldest first, late.
    let all = show("all");
    assert_eq!(missed(&all), 0, "{all:?}");
    let r = first_ran(&all).expect("all ran its backlog");
    assert!(r["late_ms"].as_u64().unwrap() >= 1000, "the oldest slot ran late: {r}");
    assert!(count(&all, "ran") >= 7, "{all:?}");
    // deadline: what is older than 700 ms is missed — never run late.
    let deadline = show("deadline");
    assert!(missed(&deadline) >= 3, "{deadline:?}");
    // Each missed record says why: the deadline (a slot claimed in time
    // whose lease then came too late is one too).
    for r in deadline.iter().filter(|r| r["outcome"] == "missed") {
        let why = r["detail"].as_str().unwrap();
        assert!(why.contains("the deadline is 700ms"), "{why}");
    }
    for r in deadline.iter().filter(|r| r["outcome"] == "ran") {
        assert!(r["late_ms"].as_u64().unwrap() <= 700 + ran_in.as_millis() as u64, "{r}");
    }
    // Every slot line in the file belongs to a recorded ran slot.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for (name, records) in [
        ("none", &none),
        ("latest", &latest),
        ("all", &all),
        ("deadline", &deadline),
    ] {
        let ran = text.lines().filter(|l| l.starts_with(&format!("{name} "))).count();
        assert_eq!(ran, count(records, "ran"), "{name}: runs in the file vs records");
    }
}

/// etcd keeps schedules but has no queue: a schedule that enqueues is
/// refused when added (exit 2, saying so), not failed at every slot.
fn a_task_schedule_on_a_store_without_a_queue_is_refused_when_added() {
    if !cfg!(feature = "etcd") {
        leasehold_testkit::unavailable("this leasehold is built without the etcd feature");
    }
    let endpoint = leasehold_testkit::etcd::shared().endpoint();
    let prefix = leasehold_testkit::etcd::unique_prefix("cli", "schedule");
    let env = Env::on(format!("etcd://{endpoint}?prefix={prefix}"));
    let (code, _, err) = env.run(&["schedule", "add", "sweep", "--cron", "@hourly", "--queue", "jobs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("queue"), "{err}");
    let list = json(&ok(&env, &["--json", "schedule", "list"]));
    assert_eq!(list["schedules"].as_array().unwrap().len(), 0, "{list}");
    // A command schedule is kept there.
    ok(&env, &["schedule", "add", "sweep", "--cron", "@hourly", "--", "true"]);
}

/// `schedule list` as JSON, to compare before and after a refused add:
/// what is stored, without `next` — the next slot is worked out from the
/// clock at each listing, and moves by itself (`@every 5s` moved during a
/// loop of refused adds that took over 5 s under CI's load).
fn listed(env: &Env) -> Value {
    let mut list = json(&ok(env, &["--json", "schedule", "list"]));
    for schedule in list["schedules"].as_array_mut().expect("a list of schedules") {
        schedule
            .as_object_mut()
            .expect("a schedule")
            .remove("next")
            .expect("each schedule lists its next slot");
    }
    list
}

/// Each setting that would make a schedule fire nothing (or something else
/// than meant) is refused at `add` — exit 2, a message naming the setting
/// and its value — and the store's schedules are as they were.
#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn settings_that_would_fire_nothing_or_else_are_refused_and_nothing_is_added() {
    let env = Env::new();
    ok(&env, &["schedule", "add", "kept", "--cron", "@every 5s", "--", "true"]);
    std::fs::write(env.file("plain.txt"), "not a program").unwrap();
    let before = listed(&env);
    for (args, words) in [
        (
            vec!["--cron", "@every 5s", "--deadline", "0", "--", "true"],
            "--deadline 0ms",
        ),
        (
            vec!["--cron", "@every 5s", "--jitter", "5s", "--", "true"],
            "--jitter 5s is not shorter than",
        ),
        (
            vec!["--cron", "@every 5s", "--jitter", "6s", "--", "true"],
            "(5s after the slot at",
        ),
        (
            vec!["--cron", "*/10 * * * * *", "--jitter", "10s", "--", "true"],
            "(10s after the slot at",
        ),
        (
            vec!["--cron", "@yearly", "--jitter", "1y", "--", "true"],
            "--jitter 1year is longer than the 12h",
        ),
        (
            vec!["--cron", "@hourly", "--jitter", "1m", "--deadline", "30s", "--", "true"],
            "not shorter than --deadline 30s",
        ),
        (
            vec!["--cron", "@hourly", "--payload", "{}", "--", "true"],
            "--payload goes with --queue",
        ),
        (
            vec!["--cron", "@hourly", "--", "./missing.sh"],
            "./missing.sh is not there",
        ),
        (
            vec!["--cron", "@hourly", "--", "./plain.txt"],
            "./plain.txt is not executable",
        ),
        (vec!["--cron", "@hourly", "--", ""], "command is empty"),
    ] {
        let mut all = vec!["schedule", "add", "refused"];
        all.extend(args.iter().copied());
        let (code, _, err) = env.run(&all);
        assert_eq!(code, 2, "{all:?}: {err}");
        assert!(err.contains(words), "{all:?}: {err}");
        assert!(err.contains("nothing was changed"), "{all:?}: {err}");
        assert_eq!(listed(&env), before, "{all:?} changed the schedules");
    }
    // The same settings within bounds are kept.
    ok(
        &env,
        &[
            "schedule",
            "add",
            "fine",
            "--cron",
            "@every 5s",
            "--jitter",
            "4s",
            "--deadline",
            "4500ms",
            "--",
            "true",
        ],
    );
}

/// `-- ./job.sh` is resolved when added, against the directory `schedule
/// add` runs in, and stored as an absolute path: a daemon started
/// elsewhere (a service unit's `/`) runs that program.
#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_relative_command_runs_from_a_daemon_in_another_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::new();
    let ran = env.file("ran");
    let job = env.file("job.sh");
    std::fs::write(
        &job,
        format!("#!/bin/sh\necho \"$LEASEHOLD_SLOT\" >> {}\n", ran.display()),
    )
    .unwrap();
    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `Env::run` runs in the sandbox directory, where job.sh is.
    let added = json(&ok(
        &env,
        &[
            "--json",
            "schedule",
            "add",
            "rel",
            "--cron",
            "@every 200ms",
            "--",
            "./job.sh",
        ],
    ));
    assert_eq!(added["action"]["command"][0], job.display().to_string(), "{added}");
    let daemon = env
        .std_cmd(&["cron", "--refresh", "200ms"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let fired = leasehold_testkit::wait::wait_until(Duration::from_secs(20), || ran.exists());
    let records = stop_and_show(&env, daemon, "rel");
    assert!(fired.is_some(), "no slot ran ./job.sh from a daemon in /: {records:?}");
    assert!(count(&records, "ran") >= 1, "{records:?}");
    assert_eq!(count(&records, "failed"), 0, "{records:?}");
}

/// `cron NAME...` with a name that is no schedule exits at once (14),
/// naming it, rather than firing nothing forever.
fn cron_refuses_a_name_that_is_no_schedule() {
    let env = Env::new();
    ok(&env, &["schedule", "add", "real", "--cron", "@hourly", "--", "true"]);
    let daemon = env.spawn(&["cron", "real", "typo"]);
    let (code, _, err) = finish(daemon, Duration::from_secs(20));
    assert_eq!(code, 14, "{err}");
    assert!(err.contains("no schedule named typo;"), "{err}");
    let daemon = env.spawn(&["--json", "cron", "nope", "nada"]);
    let (code, out, _) = finish(daemon, Duration::from_secs(20));
    assert_eq!(code, 14);
    assert!(json(&out)["error"].as_str().unwrap().contains("nope, nada"), "{out}");
}

/// A paused schedule has no next slot, in `next` as in `list` and `show`.
fn next_of_a_paused_schedule_lists_no_slot() {
    let env = Env::new();
    ok(
        &env,
        &["schedule", "add", "p", "--cron", "@every 5s", "--paused", "--", "true"],
    );
    let (code, out, err) = env.run(&["schedule", "next", "p"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "", "slots of a paused schedule");
    assert!(err.contains("schedule p is paused"), "{err}");
    let next = json(&ok(&env, &["--json", "schedule", "next", "p"]));
    assert_eq!(
        (&next["paused"], next["slots"].as_array().unwrap().len()),
        (&Value::Bool(true), 0)
    );
    ok(&env, &["schedule", "resume", "p"]);
    let next = json(&ok(&env, &["--json", "schedule", "next", "p", "-n", "2"]));
    assert_eq!(
        (&next["paused"], next["slots"].as_array().unwrap().len()),
        (&Value::Bool(false), 2)
    );
}
