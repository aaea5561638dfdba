//! `leasehold task ...` through the real binary, and a process-level run
//! of many workers where some die and some wake up late.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    add_is_idempotent_by_id_and_refuses_another_payload,
    a_list_cut_at_its_limit_says_more_exist,
    batch_is_all_or_nothing_and_names_the_bad_line,
    a_batch_reports_and_stores_exactly_what_it_did,
    a_command_after_a_bulk_add_reads_and_copies_only_its_own_commit,
    claims_come_in_priority_then_insertion_order_and_exit_10_when_empty,
    a_late_workers_result_is_refused,
    failures_retry_then_die_and_retry_revives,
    purge_removes_only_old_finished_tasks,
    many_workers_with_deaths_and_pauses_lose_nothing_and_complete_once,
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not one JSON document ({e}): {s}"))
}

fn claim(env: &Env, queue: &str, ttl: &str) -> Option<Value> {
    let (code, out, err) = env.run(&["task", "claim", queue, "--ttl", ttl]);
    match code {
        0 => Some(json(&out)),
        10 => None,
        _ => panic!("claim exit {code}: {err}"),
    }
}

fn token(claim: &Value) -> String {
    claim["token"].as_u64().unwrap().to_string()
}

fn add_batch(env: &Env, queue: &str, lines: &str) -> (i32, String) {
    let (code, _, err) = add_batch_with(env, &["task", "add", queue, "--batch"], lines);
    (code, err)
}

/// `leasehold ARGS` with `lines` on stdin: exit code, stdout, stderr.
fn add_batch_with(env: &Env, args: &[&str], lines: &str) -> (i32, String, String) {
    let mut child = env
        .std_cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn stats(env: &Env, queue: &str) -> Value {
    let (code, out, err) = env.run(&["task", "stats", queue, "--json"]);
    assert_eq!(code, 0, "{err}");
    json(&out)["queues"][0].clone()
}

fn add_is_idempotent_by_id_and_refuses_another_payload() {
    let env = Env::new();
    assert_eq!(
        env.run(&["task", "add", "q", "--id", "a", "--payload", r#"{"n":1}"#]).0,
        0
    );
    assert_eq!(
        env.run(&["task", "add", "q", "--id", "a", "--payload", r#"{"n":1}"#]).0,
        0
    );
    let (code, _, err) = env.run(&["task", "add", "q", "--id", "a", "--payload", r#"{"n":2}"#]);
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains(r#"{"n":1}"#) && err.contains(r#"{"n":2}"#),
        "names both payloads: {err}"
    );
    assert_eq!(stats(&env, "q")["pending"], 1);
    assert_eq!(env.run(&["task", "add", "q", "--payload", "not json"]).0, 2);
    // The same id and payload with another priority is another task too:
    // refused and named, never silently kept at the old priority.
    let (code, _, err) = env.run(&[
        "task",
        "add",
        "q",
        "--id",
        "a",
        "--payload",
        r#"{"n":1}"#,
        "--priority",
        "5",
    ]);
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("priority 0, not 5"), "names both priorities: {err}");
    let (_, out, _) = env.run(&["task", "show", "q", "a", "--json"]);
    assert_eq!(json(&out)["priority"], 0, "the task kept its priority");
}

/// Issue 22: `task list` stopped at its limit (100) as if that were the
/// whole queue. A list cut at its limit says more exist — `more` in JSON,
/// a line on stderr — and a list that is whole says nothing.
fn a_list_cut_at_its_limit_says_more_exist() {
    let env = Env::new();
    let (code, err) = add_batch(&env, "q", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n");
    assert_eq!(code, 0, "{err}");
    for (limit, listed, more) in [("2", 2, true), ("3", 3, false), ("100", 3, false)] {
        let (code, out, err) = env.run(&["task", "list", "q", "--limit", limit, "--json"]);
        assert_eq!(code, 0, "{err}");
        let doc = json(&out);
        assert_eq!(doc["tasks"].as_array().unwrap().len(), listed, "--limit {limit}: {doc}");
        assert_eq!(doc["more"], more, "--limit {limit}: {doc}");
        let (code, out, err) = env.run(&["task", "list", "q", "--limit", limit]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.matches("pending").count(), listed, "--limit {limit}: {out}");
        assert_eq!(err.contains("more exist"), more, "--limit {limit}: stderr {err:?}");
    }
}

fn batch_is_all_or_nothing_and_names_the_bad_line() {
    let env = Env::new();
    let (code, err) = add_batch(&env, "q", "{\"id\":\"x\"}\n{\"id\":\"y\",\"payload\":{}}\n{oops\n");
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("line 3"), "{err}");
    let (code, _, _) = env.run(&["task", "stats", "q", "--json"]);
    assert_eq!(code, 0);
    let (code, err) = add_batch(&env, "q", "{\"id\":\"x\",\"priority\":3}\n\n{\"payload\":[1,2]}\n");
    assert_eq!(code, 0, "{err}");
    assert_eq!(stats(&env, "q")["pending"], 2);
    // A conflicting id anywhere in a batch adds nothing of it.
    let (code, err) = add_batch(&env, "q", "{\"id\":\"new\"}\n{\"id\":\"x\",\"payload\":\"other\"}\n");
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains("task x already exists in queue q with payload null, not \"other\""),
        "{err}"
    );
    assert_eq!(stats(&env, "q")["pending"], 2);
    // The same id twice in one batch: both payloads named, in order.
    let (code, err) = add_batch(
        &env,
        "q",
        "{\"id\":\"d\",\"payload\":{\"a\":1}}\n{\"id\":\"d\",\"payload\":{\"a\":2}}\n",
    );
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains(r#"twice in the batch, the first time with payload {"a":1}, not {"a":2}"#),
        "{err}"
    );
    assert_eq!(stats(&env, "q")["pending"], 2);
}

/// A bulk add leaves the store as cheap for the next short command as a
/// few tasks do (issue 45, item 1). A batch of 200,000 tasks is one commit
/// of about 30 MiB of log; when its process closed the store leaving that
/// log whole, every later command's first open read all of it, its commit
/// copied all of it into the store file again (three fsyncs), and the log
/// grew by each command's frames for ever: an `acquire` took 70 ms
/// instead of 3 (strace: 15,383 preads, 7,705 pwrites).
///
/// What must never happen: a short command after a bulk add reading or
/// writing more of the store than after a small one, or copying the log
/// (a write to the store file itself, or its fsync). Two `acquire`s each,
/// under strace, after a batch of 100 tasks and after one of 200,000: the
/// store's reads and writes of the second may exceed the first's only by
/// a small constant, each `acquire` makes at most one fsync, and the log
/// the batch left is at most a few MiB long.
fn a_command_after_a_bulk_add_reads_and_copies_only_its_own_commit() {
    /// What one traced `acquire` did to the store's files.
    #[derive(Debug)]
    struct Cost {
        /// preads and pwrites of the store file and its log.
        io: usize,
        /// pwrites of the store file itself: a checkpoint's copying.
        store_writes: usize,
        fsyncs: usize,
    }
    leasehold_testkit::need_program("strace", "strace");
    let after_batch = |tasks: usize| -> (Vec<Cost>, u64) {
        let env = Env::new();
        let lines = (0..tasks).fold(String::new(), |mut lines, i| {
            let _ = writeln!(lines, "{{\"payload\":{i}}}");
            lines
        });
        let (code, err) = add_batch(&env, "filler", &lines);
        assert_eq!(code, 0, "the batch of {tasks}: {err}");
        let db = env.store_path().display().to_string();
        let (store, log) = (format!("<{db}>"), format!("<{db}-wal>"));
        let log_bytes = std::fs::metadata(format!("{db}-wal")).map_or(0, |m| m.len());
        let costs = (0..2)
            .map(|i| {
                let name = format!("after-{i}");
                let (code, trace) = env.traced("pread64,pwrite64,fsync,fdatasync", &["acquire", &name]);
                assert_eq!(code, 0, "acquire {name} after {tasks} tasks: {trace:?}");
                let on = |file: &str, call: &str| trace.iter().filter(|l| l.contains(file) && l.contains(call)).count();
                Cost {
                    io: ["pread64(", "pwrite64("]
                        .iter()
                        .map(|call| on(&store, call) + on(&log, call))
                        .sum(),
                    store_writes: on(&store, "pwrite64("),
                    fsyncs: ["fsync(", "fdatasync("]
                        .iter()
                        .map(|call| trace.iter().filter(|l| l.contains(call)).count())
                        .sum(),
                }
            })
            .collect();
        (costs, log_bytes)
    };
    let (few, _) = after_batch(100);
    let (many, log_bytes) = after_batch(200_000);
    for (i, (few, many)) in few.iter().zip(&many).enumerate() {
        assert!(
            many.io <= few.io + 64 && many.store_writes == 0 && many.fsyncs <= 1,
            "acquire #{} after a batch of 200,000 tasks: {many:?}; after one of 100: {few:?}",
            i + 1
        );
    }
    assert!(
        log_bytes <= 8 << 20,
        "the batch of 200,000 left a log of {log_bytes} bytes behind"
    );
}

/// What a batch add prints (text and `--json`) and the rows it stores,
/// byte for byte: the batch path is tuned for speed (issue 28), and none
/// of that may show. Payloads whose text `serde_json` could write in more
/// than one way (key order, escapes, floats, a number past i64), a
/// generated id, an id repeated exactly within the batch and one added
/// before, priorities and attempts given and defaulted.
fn a_batch_reports_and_stores_exactly_what_it_did() {
    let env = Env::new();
    let (code, _, err) = add_batch_with(
        &env,
        &["task", "add", "q", "--batch"],
        "{\"id\":\"old\",\"payload\":[1]}\n",
    );
    assert_eq!((code, err.as_str()), (0, "added 1 tasks to q (0 already there)\n"));
    let lines = concat!(
        r#"{"id":"a","payload":{"z":1,"a":[1,2.5,-0.0,1e3,1E-7],"s":"é\"\\\n\u0001\u00e9 ","n":null}}"#,
        "\n",
        r#"  {"payload":12345678901234567890,"priority":-3,"max_attempts":2}  "#,
        "\n\n",
        r#"{"id":"old","payload":[1],"max_attempts":5}"#,
        "\n",
        r#"{"id":"a","payload":{"a":[1,2.5,-0.0,1e3,1E-7],"z":1,"n":null,"s":"é\"\\\n\u0001é "}}"#,
        "\n",
        r#"{"id":"b","payload":"text","priority":7}"#,
        "\n",
    );
    let (code, out, err) = add_batch_with(
        &env,
        &["task", "add", "q", "--batch", "--max-attempts", "9", "--json"],
        lines,
    );
    assert_eq!((code, err.as_str()), (0, ""));
    let generated = json(&out)["ids"][1].as_str().unwrap().to_owned();
    assert_eq!(
        out,
        format!(
            "{{\n  \"added\": 3,\n  \"existing\": 2,\n  \"ids\": [\n    \"a\",\n    \"{generated}\",\n    \"old\",\n    \"a\",\n    \"b\"\n  ],\n  \"queue\": \"q\"\n}}\n"
        )
    );
    let (code, out, err) = add_batch_with(&env, &["task", "add", "q", "--batch", "--max-attempts", "9"], lines);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "", "added 1 tasks to q (4 already there)\n")
    );
    let db = rusqlite::Connection::open(env.store_path()).unwrap();
    let rows: Vec<String> = db
        .prepare(
            "SELECT id, payload, priority, state, attempts, max_attempts, token, owner IS NULL, \
             available_ms = created_ms AND created_ms = updated_ms FROM task ORDER BY seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok(format!(
                "{}|{}|{}|{}|{}|{}|{}|{}|{}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, bool>(7)?,
                r.get::<_, bool>(8)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let generated_row = |id: &str| format!("{id}|12345678901234567890|-3|pending|0|2|0|true|true");
    assert_eq!(
        rows[..4],
        [
            "old|[1]|0|pending|0|5|0|true|true".to_owned(),
            r#"a|{"a":[1,2.5,-0.0,1000.0,1e-7],"n":null,"s":"é\"\\\n\u0001é ","z":1}|0|pending|0|9|0|true|true"#
                .to_owned(),
            generated_row(&generated),
            "b|\"text\"|7|pending|0|9|0|true|true".to_owned(),
        ]
    );
    // The second batch added only its task without an id, under a new one.
    let (again, rest) = rows[4].split_once('|').unwrap();
    assert_ne!(again, generated);
    assert_eq!(rows[4..], [generated_row(again)], "{rest}");
}

fn claims_come_in_priority_then_insertion_order_and_exit_10_when_empty() {
    let env = Env::new();
    for (id, prio) in [("low", "0"), ("high", "9"), ("low2", "0"), ("later", "9")] {
        let mut args = vec!["task", "add", "q", "--id", id, "--priority", prio];
        if id == "later" {
            args.extend(["--delay", "1h"]);
        }
        assert_eq!(env.run(&args).0, 0);
    }
    let order: Vec<String> = std::iter::from_fn(|| claim(&env, "q", "60s"))
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(order, ["high", "low", "low2"], "the delayed task is not claimable yet");
    let (code, out, _) = env.run(&["task", "claim", "q", "--json"]);
    assert_eq!(code, 10);
    assert_eq!(json(&out)["claimed"], false);
}

/// The seed scenario: A claims, A's claim lapses, B claims; A's result is
/// refused, B's accepted.
fn a_late_workers_result_is_refused() {
    let env = Env::new();
    env.run(&["task", "add", "q", "--id", "t"]);
    let a = claim(&env, "q", "1s").unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    let b = claim(&env, "q", "60s").unwrap();
    assert_eq!(b["attempt"], 2);
    assert!(b["token"].as_u64() > a["token"].as_u64());
    let (code, _, err) = env.run(&[
        "task",
        "done",
        "q",
        "t",
        "--token",
        &token(&a),
        "--result",
        "\"from A\"",
    ]);
    assert_eq!(code, 12, "{err}");
    for op in [["heartbeat"], ["fail"]] {
        assert_eq!(
            env.run(&["task", op[0], "q", "t", "--token", &token(&a)]).0,
            12,
            "{op:?}"
        );
    }
    assert_eq!(
        env.run(&[
            "task",
            "done",
            "q",
            "t",
            "--token",
            &token(&b),
            "--result",
            "\"from B\""
        ])
        .0,
        0
    );
    assert_eq!(
        env.run(&["task", "done", "q", "t", "--token", &token(&b)]).0,
        12,
        "accepted at most once"
    );
    let (_, out, _) = env.run(&["task", "show", "q", "t"]);
    let t = json(&out);
    assert_eq!(
        (t["state"].as_str(), t["result"].as_str()),
        (Some("done"), Some("from B"))
    );
    assert_eq!(t["expirations"], 1);
}

fn failures_retry_then_die_and_retry_revives() {
    let env = Env::new();
    env.run(&["task", "add", "q", "--id", "poison", "--max-attempts", "2"]);
    let c = claim(&env, "q", "60s").unwrap();
    let (code, out, _) = env.run(&[
        "task",
        "fail",
        "q",
        "poison",
        "--token",
        &token(&c),
        "--error",
        "boom",
        "--retry-in",
        "0s",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["state"], "pending");
    let c = claim(&env, "q", "60s").unwrap();
    let (_, out, _) = env.run(&[
        "task",
        "fail",
        "q",
        "poison",
        "--token",
        &token(&c),
        "--error",
        "boom again",
        "--json",
    ]);
    assert_eq!(json(&out)["state"], "dead", "attempts used up");
    assert!(claim(&env, "q", "60s").is_none());
    let (_, out, _) = env.run(&["task", "list", "q", "--state", "dead", "--json"]);
    let dead = json(&out);
    assert_eq!(dead["tasks"][0]["last_error"], "boom again");
    assert_eq!(dead["tasks"][0]["failures"], 2);
    assert_eq!(env.run(&["task", "retry", "q", "poison"]).0, 0);
    let c = claim(&env, "q", "60s").unwrap();
    assert_eq!(c["attempt"], 1);
    assert!(c["token"].as_u64().unwrap() > 2, "tokens keep growing across a revival");
    assert_eq!(
        env.run(&["task", "retry", "q", "poison"]).0,
        11,
        "running: held by its worker"
    );
    assert_eq!(env.run(&["task", "retry", "q", "nope"]).0, 14, "no such task");
    assert_eq!(env.run(&["task", "show", "q", "nope"]).0, 14, "no such task");
    env.run(&["task", "add", "q", "--id", "waiting"]);
    assert_eq!(
        env.run(&["task", "retry", "q", "waiting"]).0,
        0,
        "already pending: nothing to do"
    );
    let (code, _, _) = env.run(&["task", "fail", "q", "poison", "--token", &token(&c), "--no-retry"]);
    assert_eq!(code, 0);
    assert_eq!(stats(&env, "q")["dead"], 1);
}

fn purge_removes_only_old_finished_tasks() {
    let env = Env::new();
    env.run(&["task", "add", "q", "--id", "a"]);
    env.run(&["task", "add", "q", "--id", "b"]);
    let c = claim(&env, "q", "60s").unwrap();
    env.run(&["task", "done", "q", c["id"].as_str().unwrap(), "--token", &token(&c)]);
    let (_, out, _) = env.run(&["task", "purge", "q", "--state", "done", "--older-than", "1h", "--json"]);
    assert_eq!(json(&out)["purged"], 0);
    std::thread::sleep(Duration::from_millis(20));
    let (_, out, _) = env.run(&[
        "task",
        "purge",
        "q",
        "--state",
        "done",
        "--older-than",
        "10ms",
        "--json",
    ]);
    assert_eq!(json(&out)["purged"], 1);
    assert_eq!(
        env.run(&["task", "purge", "q", "--state", "pending", "--older-than", "0s"])
            .0,
        2
    );
    assert_eq!(stats(&env, "q")["pending"], 1);
}

/// Workers claim and complete through the CLI; 10% of claims are
/// abandoned (the worker "died"), 5% complete only after their claim has
/// lapsed (the worker was paused). No task is lost; every task ends done
/// with exactly one accepted completion; late completions are refused.
fn many_workers_with_deaths_and_pauses_lose_nothing_and_complete_once() {
    const TASKS: usize = 60;
    const WORKERS: usize = 4;
    let env = Arc::new(Env::new());
    let lines: String = (0..TASKS).fold(String::new(), |mut s, i| {
        let _ = writeln!(s, "{{\"id\":\"t{i}\",\"payload\":{i}}}");
        s
    });
    assert_eq!(add_batch(&env, "q", &lines).0, 0);
    let accepted = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let refused_late = Arc::new(Mutex::new(0u32));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (env, accepted, refused_late) = (env.clone(), accepted.clone(), refused_late.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                let mut idle = 0;
                while idle < 30 {
                    n += 1;
                    let Some(c) = claim(&env, "q", "1s") else {
                        idle += 1;
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    idle = 0;
                    let id = c["id"].as_str().unwrap().to_owned();
                    let roll = (n * 7 + w as u32 * 13) % 20;
                    if roll < 2 {
                        continue; // died: the claim is abandoned
                    }
                    if roll == 2 {
                        std::thread::sleep(Duration::from_millis(1300)); // paused past the TTL
                    }
                    let (code, _, err) = env.run(&["task", "done", "q", &id, "--token", &token(&c)]);
                    match code {
                        0 => *accepted.lock().unwrap().entry(id).or_default() += 1,
                        12 if roll == 2 => *refused_late.lock().unwrap() += 1,
                        _ => panic!("worker {w}: done {id} exit {code}: {err}"),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let accepted = accepted.lock().unwrap();
    let doubled: Vec<_> = accepted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "tasks completed twice: {doubled:?}");
    let s = stats(&env, "q");
    assert_eq!(s["done"].as_u64(), Some(accepted.len() as u64));
    assert_eq!(
        s["done"].as_u64().unwrap() + s["dead"].as_u64().unwrap(),
        TASKS as u64,
        "every task ends done or dead (attempts used up): {s}"
    );
    eprintln!(
        "queue: {TASKS} tasks, {WORKERS} workers: {} done once, {} dead, {} late completions refused, 0 doubled",
        accepted.len(),
        s["dead"],
        refused_late.lock().unwrap()
    );
}
