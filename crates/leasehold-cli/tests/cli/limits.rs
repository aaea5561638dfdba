//! Durations and times out of range (issue 12, case 4): refused with exit
//! 2 before anything is written, and records an old binary wrote out of
//! range never make a read command panic.

use serde_json::Value;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_ttl_that_would_wrap_is_refused_and_nothing_is_granted,
    a_zero_ttl_is_refused_and_nothing_is_granted,
    a_claim_ttl_past_the_limit_is_refused_before_the_claim,
    a_delay_past_the_limit_is_refused_and_the_queue_stays_readable,
    every_duration_flag_names_its_limit,
    out_of_range_rows_of_an_old_binary_never_make_a_read_panic,
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not one JSON document ({e}): {s}"))
}

/// Run `args`, which must be refused as a usage error whose message names
/// `flag`, the value given and the limit.
fn refused(env: &Env, args: &[&str], flag: &str, value: &str, limit: &str) {
    let (code, _, err) = env.run(args);
    assert_eq!(code, 2, "{args:?} must be refused as a usage error: {err}");
    for part in [flag, value, limit] {
        assert!(
            err.contains(part),
            "{args:?}: the message does not name {part:?}: {err}"
        );
    }
}

/// The name's last token (null: never granted). A refusal may leave no
/// store behind, which `status` (only reading) does not create: made here
/// first, so "nothing granted" is read from a store.
fn last_token(env: &Env, name: &str) -> Value {
    assert_eq!(env.run(&["migrate"]).0, 0, "migrate");
    let (code, out, err) = env.run(&["status", name, "--json"]);
    assert_eq!(code, 0, "status: {err}");
    json(&out)["last_token"].clone()
}

fn show(env: &Env, queue: &str, id: &str) -> Value {
    let (code, out, err) = env.run(&["task", "show", queue, id]);
    assert_eq!(code, 0, "task show: {err}");
    json(&out)
}

fn a_ttl_that_would_wrap_is_refused_and_nothing_is_granted() {
    let env = Env::new();
    // 2^64 ms and a little: the TTL used to wrap to 384 ms.
    refused(
        &env,
        &["acquire", "w", "--ttl", "18446744073709552", "--json"],
        "--ttl",
        "18446744073709552",
        "1year",
    );
    assert_eq!(last_token(&env, "w"), Value::Null, "a grant was made");

    // A renewal asking for it is refused too, and keeps the grant's TTL.
    let token = env.acquire(&["w", "--ttl", "1m"]).to_string();
    refused(
        &env,
        &["renew", "w", "--token", &token, "--ttl", "18446744073709552"],
        "--ttl",
        "18446744073709552",
        "1year",
    );
    let (_, out, _) = env.run(&["status", "w", "--json"]);
    assert_eq!(json(&out)["grants"][0]["ttl_ms"], 60_000);
}

fn a_zero_ttl_is_refused_and_nothing_is_granted() {
    let env = Env::new();
    refused(&env, &["acquire", "z", "--ttl", "0"], "--ttl", "'0'", "1ms");
    assert_eq!(last_token(&env, "z"), Value::Null, "a dead grant was made");
    refused(&env, &["task", "claim", "q", "--ttl", "0s"], "--ttl", "0s", "1ms");
}

fn a_claim_ttl_past_the_limit_is_refused_before_the_claim() {
    let env = Env::new();
    assert_eq!(env.run(&["task", "add", "q", "--id", "a", "--payload", "1"]).0, 0);
    refused(
        &env,
        &["task", "claim", "q", "--ttl", "300000000000"],
        "--ttl",
        "300000000000",
        "1year",
    );
    let task = show(&env, "q", "a");
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(task["attempts"], 0, "{task}");
}

fn a_delay_past_the_limit_is_refused_and_the_queue_stays_readable() {
    let env = Env::new();
    assert_eq!(env.run(&["task", "add", "q", "--id", "a", "--payload", "1"]).0, 0);
    refused(
        &env,
        &["task", "add", "q", "--id", "g", "--payload", "1", "--delay", "10000y"],
        "--delay",
        "10000y",
        "100years",
    );
    refused(
        &env,
        &[
            "task",
            "add",
            "q",
            "--id",
            "g",
            "--payload",
            "1",
            "--at",
            "9999-01-01T00:00:00Z",
        ],
        "--at",
        "9999-01-01T00:00:00Z",
        "100years",
    );
    let (code, _, err) = env.run(&["task", "show", "q", "g"]);
    assert_eq!(code, 14, "the refused task was not added: {err}");
    let (code, out, err) = env.run(&["task", "list", "q", "--json"]);
    assert_eq!(code, 0, "task list: {err}");
    let list = json(&out);
    let ids: Vec<&str> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a"]);
    // At the limit is fine.
    assert_eq!(
        env.run(&["task", "add", "q", "--id", "h", "--payload", "1", "--delay", "100y"])
            .0,
        0
    );
    assert_eq!(show(&env, "q", "h")["state"], "pending");
}

fn every_duration_flag_names_its_limit() {
    let env = Env::new();
    let cmd = ["--", "true"];
    for (args, flag, value, limit) in [
        (vec!["run", "n", "--ttl", "2y"], "--ttl", "2y", "1year"),
        (vec!["run", "n", "--heartbeat", "0"], "--heartbeat", "'0'", "1ms"),
        (vec!["run", "n", "--grace", "2y"], "--grace", "2y", "1year"),
        (
            vec!["run", "n", "--stall-timeout", "0"],
            "--stall-timeout",
            "'0'",
            "1ms",
        ),
        (vec!["run", "n", "--wait", "2y"], "--wait", "2y", "1year"),
        (vec!["acquire", "n", "--wait=2y"], "--wait", "2y", "1year"),
        (vec!["lock", "n", "--wait=2y"], "--wait", "2y", "1year"),
        (vec!["work", "q", "--ttl", "2y"], "--ttl", "2y", "1year"),
        (vec!["work", "q", "--heartbeat", "2y"], "--heartbeat", "2y", "1year"),
        (vec!["work", "q", "--grace", "2y"], "--grace", "2y", "1year"),
        (
            vec!["task", "heartbeat", "q", "a", "--token", "1", "--ttl", "2y"],
            "--ttl",
            "2y",
            "1year",
        ),
        (
            vec!["task", "fail", "q", "a", "--token", "1", "--retry-in", "101y"],
            "--retry-in",
            "101y",
            "100years",
        ),
        (
            vec!["task", "purge", "q", "--state", "done", "--older-than", "101y"],
            "--older-than",
            "101y",
            "100years",
        ),
    ] {
        let mut all = args.clone();
        if matches!(args[0], "run" | "lock" | "work") {
            all.extend_from_slice(&cmd);
        }
        refused(&env, &all, flag, value, limit);
    }
    assert!(!env.store_path().exists(), "a refused command opened the store");
}

/// The rows an old binary could write with out-of-range durations: every
/// read command still answers (no panic, exit 0).
fn out_of_range_rows_of_an_old_binary_never_make_a_read_panic() {
    let env = Env::new();
    env.acquire(&["w", "--ttl", "1m"]);
    assert_eq!(env.run(&["task", "add", "q", "--id", "a", "--payload", "1"]).0, 0);
    assert_eq!(env.run(&["task", "add", "q", "--id", "b", "--payload", "2"]).0, 0);
    assert!(env.run(&["task", "claim", "q", "--ttl", "1m"]).0 == 0);
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let db = rusqlite::Connection::open(env.store_path()).unwrap();
    // Year 10000 and beyond, negative, and the extremes of i64.
    let year_10000_ms: i64 = 253_402_300_800_000;
    db.execute(
        "UPDATE lease_grant SET acquired_ms = ?1, ttl_ms = ?2, expires_ns = ?3, boot_id = ?4",
        rusqlite::params![i64::MAX, -1i64, i64::MAX, boot_id.trim()],
    )
    .unwrap();
    db.execute("UPDATE lease_history SET at_ms = ?1", [year_10000_ms])
        .unwrap();
    db.execute(
        "INSERT INTO lease_history (name, id, at_ms, event, detail) VALUES ('w', 1000000, ?1, 'granted', 'old')",
        [i64::MIN],
    )
    .unwrap();
    db.execute(
        "UPDATE task SET available_ms = ?1, created_ms = ?2, updated_ms = ?3, ttl_ms = ?4 WHERE id = 'a'",
        rusqlite::params![year_10000_ms, i64::MIN, i64::MAX, i64::MAX],
    )
    .unwrap();
    db.execute(
        "UPDATE task SET available_ms = ?1, ttl_ms = ?2, lease_until_ns = ?3, boot_id = ?4 WHERE state = 'running'",
        rusqlite::params![i64::MAX, -5i64, i64::MAX, boot_id.trim()],
    )
    .unwrap();
    drop(db);
    for args in [
        vec!["status"],
        vec!["status", "w"],
        vec!["status", "w", "--json"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["history", "w"],
        vec!["history", "w", "--json"],
        vec!["task", "show", "q", "a"],
        vec!["task", "show", "q", "b"],
        vec!["task", "list", "q"],
        vec!["task", "list", "q", "--json"],
        vec!["task", "stats"],
        vec!["task", "stats", "q", "--json"],
    ] {
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 0, "{args:?} exit {code}: {err}");
        assert!(!out.is_empty(), "{args:?} printed nothing");
        if args.contains(&"--json") || args.starts_with(&["task", "show"]) {
            json(&out);
        }
    }
    let (_, out, _) = env.run(&["task", "show", "q", "a"]);
    assert!(
        json(&out)["available_at"].as_str().unwrap().contains("9999"),
        "year 10000 is shown as past 9999: {out}"
    );
}
