//! `--json`: every command prints one JSON document on stdout for success
//! and for each refusal, usage errors included (docs/JSON.md). A failure
//! always has `error` (a string) and `exit_code` (the process's code).
//! Each document has exactly the fields of its type in `leasehold::json`
//! (which docs/JSON.md is checked against there).

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::process::Stdio;
use std::time::Duration;

use leasehold::json::{self, Document};
use serde_json::Value;

use crate::util::{Env, finish};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    usage_errors_are_json_too,
    lease_commands,
    leader_once_and_observed,
    run_reports_after_the_command_and_refusals_in_the_failure_shape,
    lock_and_state_files,
    task_commands_and_work,
    every_subcommand_describes_itself_as_the_top_level_help_does,
    the_version_names_the_commit_the_target_and_exactly_the_stores_that_open,
];

/// The JSON documents on stdout, in order.
fn documents(out: &str) -> Vec<Value> {
    serde_json::Deserializer::from_str(out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not a stream of JSON documents ({e}): {out:?}"))
}

/// A failure with no details of its own.
#[derive(serde::Serialize)]
struct Plain;

impl Document for Plain {
    const FIELDS: &'static [&'static str] = &[];
}

/// `doc` has exactly the fields of `D`, and `words` (a failure's
/// `error`/`message` and `exit_code`) beside them.
#[track_caller]
fn has_fields<D: Document>(doc: &Value, words: &[&str]) {
    let keys: BTreeSet<&str> = doc
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {doc}"))
        .keys()
        .map(String::as_str)
        .collect();
    let fields: BTreeSet<&str> = D::FIELDS.iter().chain(words).copied().collect();
    assert_eq!(keys, fields, "the fields of {}: {doc}", std::any::type_name::<D>());
}

/// The words beside a failure's details.
const FAILURE: &[&str] = &["error", "exit_code"];

/// Run `leasehold --json ARGS`, expect exit `code` and exactly one
/// document of type `D`, and return it. A failure must carry `error` and
/// `exit_code` (`message` for a refusal that is no failure, exit 0).
#[track_caller]
fn one<D: Document>(env: &Env, args: &[&str], code: i32) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (got, out, err) = env.run(&all);
    assert_eq!(got, code, "leasehold {all:?}: stderr {err}");
    let docs = documents(&out);
    assert_eq!(docs.len(), 1, "leasehold {all:?}: one document, got {docs:?}");
    let doc = docs.into_iter().next().unwrap();
    assert!(doc.is_object(), "{doc}");
    if code != 0 {
        assert!(doc["error"].as_str().is_some_and(|e| !e.is_empty()), "{all:?}: {doc}");
        assert_eq!(doc["exit_code"], code, "{all:?}: {doc}");
        has_fields::<D>(&doc, FAILURE);
    } else {
        assert!(doc.get("error").is_none(), "{all:?}: success without an error: {doc}");
        let words: &[&str] = if doc.get("message").is_some() {
            &["message", "exit_code"]
        } else {
            &[]
        };
        has_fields::<D>(&doc, words);
    }
    doc
}

fn usage_errors_are_json_too() {
    let env = Env::new();
    for args in [
        &["acquire", "x", "--ttl", "nonsense"][..],
        &["acquire"],
        &["frobnicate"],
        &["acquire", "bad\nname"],
        &["task", "add"],
    ] {
        let doc = one::<Plain>(&env, args, 2);
        assert!(!doc["error"].as_str().unwrap().contains("Usage:"), "{doc}");
    }
    // Help and version are not errors, and with --json they are JSON too
    // (issue 22: they printed plain text).
    let version = one::<json::Version>(&env, &["--version"], 0);
    assert_eq!(version["name"], "leasehold", "{version}");
    let stores: Vec<&str> = version["stores"]
        .as_array()
        .expect("stores")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for flag in ["--version", "-V"] {
        let (_, plain, _) = env.run(&[flag]);
        assert_eq!(
            plain,
            format!(
                "leasehold {}\ncommit: {}\ntarget: {}\nbuild: {}\nstores: {}\n",
                version["version"].as_str().unwrap(),
                version["commit"].as_str().unwrap(),
                version["target"].as_str().unwrap(),
                version["build"].as_str().unwrap(),
                stores.join(", ")
            ),
            "{flag}: the version as with --json"
        );
    }
    for args in [
        &["help"][..],
        &["--help"],
        &["help", "task"],
        &["task", "add", "--help"],
        &["-h"],
    ] {
        let help = one::<json::Help>(&env, args, 0)["help"].as_str().unwrap().to_owned();
        let (code, plain, _) = env.run(args);
        assert_eq!(code, 0);
        assert_eq!(help.trim(), plain.trim(), "{args:?}: the help as without --json");
        assert!(help.contains("Usage:"), "{args:?}: {help}");
    }
    // `--json` after `--` belongs to the command, not to leasehold.
    let (code, out, _) = env.run(&["run", "j", "--ttl", "bad", "--", "echo", "--json"]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
}

/// `leader NAME` once (nobody leads: `leader: null`, exit 0), and
/// `--observe`: one document per line, per change, until SIGTERM (exit 0).
fn leader_once_and_observed() {
    let env = Env::new();
    let doc = one::<json::LeaderChange>(&env, &["leader", "job"], 0);
    assert_eq!(
        (doc["name"].as_str(), doc["leader"].is_null()),
        (Some("job"), true),
        "{doc}"
    );
    let (code, plain, _) = env.run(&["leader", "job"]);
    assert_eq!((code, plain.trim()), (0, "job: no leader"));
    let mut observer = env.spawn(&["--json", "leader", "job", "--observe"]);
    let mut lines = std::io::BufReader::new(observer.stdout.take().unwrap()).lines();
    let mut line = || serde_json::from_str::<Value>(&lines.next().unwrap().unwrap()).unwrap();
    assert!(line()["leader"].is_null());
    let t = env.acquire(&["job", "--ttl", "1m", "--owner", "w1"]);
    let seen = line();
    has_fields::<json::LeaderChange>(&seen, &[]);
    has_fields::<json::Leader>(&seen["leader"], &[]);
    assert_eq!(
        (seen["leader"]["owner"].as_str(), seen["leader"]["token"].as_u64()),
        (Some("w1"), Some(t))
    );
    assert_eq!(
        one::<json::LeaderChange>(&env, &["leader", "job"], 0)["leader"],
        seen["leader"]
    );
    env.run(&["release", "job", "--token", &t.to_string(), "--owner", "w1"]);
    assert!(line()["leader"].is_null(), "the release is a change");
    crate::util::signal(observer.id(), "TERM");
    let (code, _, err) = finish(observer, Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
}

fn lease_commands() {
    let env = Env::new();
    let doc = one::<json::Grant>(&env, &["acquire", "job", "--ttl", "1m"], 0);
    let t = doc["token"].as_u64().unwrap().to_string();
    assert_eq!(doc["name"], "job");
    let doc = one::<json::LeaseHeld>(&env, &["acquire", "job"], 11);
    has_fields::<json::Grant>(&doc["grants"][0], &[]);
    assert_eq!((doc["held"].as_bool(), doc["name"].as_str()), (Some(true), Some("job")));
    assert_eq!(
        one::<json::Grant>(&env, &["renew", "job", "--token", &t], 0)["token"],
        doc["grants"][0]["token"]
    );
    one::<Plain>(&env, &["renew", "job", "--token", "999"], 12);
    let doc = one::<json::FencePassed>(&env, &["fence", "job", "--token", &t], 0);
    assert_eq!(doc["passed"], true);
    has_fields::<json::Grant>(&doc["grant"], &[]);
    assert_eq!(
        one::<json::FencePassed>(&env, &["fence", "job", "--token", &t, "--", "true"], 0)["passed"],
        true
    );
    assert_eq!(
        one::<json::FenceRefused>(&env, &["fence", "job", "--token", "0"], 13)["passed"],
        false
    );
    let doc = one::<json::LeaseState>(&env, &["status", "job"], 0);
    assert_eq!(doc["name"], "job");
    has_fields::<json::Grant>(&doc["grants"][0], &[]);
    has_fields::<json::LeaseState>(&one::<json::Leases>(&env, &["list"], 0)["leases"][0], &[]);
    let doc = one::<json::History>(&env, &["history", "job"], 0);
    has_fields::<json::HistoryEntry>(&doc["history"][0], &[]);
    has_fields::<json::LeaseState>(&one::<json::LeaseState>(&env, &["status", "never"], 0), &[]);
    assert_eq!(
        one::<json::Released>(&env, &["release", "job", "--token", &t], 0)["released"],
        true
    );
    one::<Plain>(&env, &["release", "job", "--token", &t], 12);
    one::<Plain>(&env, &["--store", "bogus://x", "status", "job"], 2);
    let doc = one::<json::Doctor>(&env, &["doctor"], 0);
    assert_eq!(doc["ok"], true);
    has_fields::<json::DoctorCheck>(&doc["checks"][0], &[]);
    assert_eq!(
        one::<json::Doctor>(&env, &["--store", "sqlite:///proc/nope/s.db", "doctor"], 1)["ok"],
        false
    );
    let dest = env.file("json-backup.db");
    let doc = one::<json::BackedUp>(&env, &["backup", dest.to_str().unwrap()], 0);
    assert!(doc["taken_at"].as_str().unwrap().ends_with('Z'), "{doc}");
    one::<Plain>(&env, &["backup", dest.to_str().unwrap()], 2);
    // `tokens_bumped` only with --bump-tokens.
    let doc = one::<json::Migrated>(&env, &["migrate", "--bump-tokens", "1"], 0);
    assert!(doc["tokens_bumped"]["floor"].is_u64(), "{doc}");
    let (code, out, err) = env.run(&["--json", "migrate"]);
    assert_eq!(code, 0, "{err}");
    let mut doc = documents(&out).remove(0);
    assert!(doc.get("tokens_bumped").is_none(), "{doc}");
    doc["tokens_bumped"] = Value::Null;
    has_fields::<json::Migrated>(&doc, &[]);
    assert!(
        one::<json::Completions>(&env, &["completions", "bash"], 0)["script"]
            .as_str()
            .unwrap()
            .contains("leasehold")
    );
}

fn run_reports_after_the_command_and_refusals_in_the_failure_shape() {
    let env = Env::new();
    // The command's own code passes through: not a failure of `run`, so
    // the document is the result, with the code and no error.
    let (code, out, err) = env.run(&["--json", "run", "r", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, 3, "{err}");
    let docs = documents(&out);
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!((docs[0]["exit_code"].as_u64(), docs[0].get("error")), (Some(3), None));
    has_fields::<json::RunEnded>(&docs[0], &[]);
    let doc = one::<json::RunEnded>(&env, &["run", "r", "--", "true"], 0);
    assert_eq!((doc["name"].as_str(), doc["exit_code"].as_u64()), (Some("r"), Some(0)));
    one::<json::RunNotStarted>(&env, &["run", "r", "--", "/no/such/command"], 127);
    let t = env.acquire(&["r", "--ttl", "1m"]);
    assert_eq!(
        one::<json::RunHeld>(&env, &["run", "r", "--", "true"], 11)["held"],
        true
    );
    let doc = one::<json::RunHeld>(&env, &["run", "r", "--if-held", "skip", "--", "true"], 0);
    assert_eq!(doc["skipped"], true, "{doc}");
    assert_eq!(env.run(&["release", "r", "--token", &t.to_string()]).0, 0);
}

fn lock_and_state_files() {
    let env = Env::new();
    let path = env.path().join("l");
    let p = path.to_str().unwrap();
    let doc = one::<json::Locked>(&env, &["lock", p, "--", "true"], 0);
    assert_eq!(doc["locked"], true);
    // The holder says when it holds the lock: probing before that could
    // itself hold the lock the moment the holder tries, and the holder
    // would give up (exit 11) instead.
    let held = env.file("held");
    let holder = env
        .std_cmd(&[
            "lock",
            p,
            "--",
            "sh",
            "-c",
            r#"touch "$0"; exec sleep 30"#,
            held.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_for("held");
    assert_eq!(
        one::<json::LockHeld>(&env, &["lock", p, "--", "true"], 11)["held"],
        true
    );
    crate::util::signal(holder.id(), "KILL");
    let _ = finish(holder, Duration::from_secs(10));
    // Printed before the command runs; a command that cannot start is a
    // second document, a failure.
    let (code, out, _) = env.run(&["--json", "lock", p, "--", "/no/such/command"]);
    assert_eq!(code, 127);
    let docs = documents(&out);
    assert_eq!(docs.len(), 2, "{docs:?}");
    assert_eq!(
        (docs[0]["locked"].as_bool(), docs[1]["locked"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(docs[1]["exit_code"], 127);
    has_fields::<json::Locked>(&docs[0], &[]);
    has_fields::<json::LockNotRun>(&docs[1], FAILURE);

    let f = env.path().join("s.json");
    let f = f.to_str().unwrap();
    let mut write = env.cmd(&["--json", "write", f]);
    let out = write.write_stdin("{\"a\":1}").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let docs = documents(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(docs.len(), 1);
    has_fields::<json::Written>(&docs[0], &[]);
    let out = env.cmd(&["--json", "write", f]).write_stdin("{oops").output().unwrap();
    assert_eq!(out.status.code(), Some(65));
    let docs = documents(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((docs.len(), docs[0]["exit_code"].as_i64()), (1, Some(65)));
    has_fields::<Plain>(&docs[0], FAILURE);
    one::<json::Written>(&env, &["update", f, "--", "cat"], 0);
    assert_eq!(
        one::<json::NotWritten>(&env, &["update", f, "--", "false"], 1)["written"],
        false
    );
}

fn task_commands_and_work() {
    let env = Env::new();
    assert_eq!(
        one::<json::TasksAdded>(&env, &["task", "add", "q", "--id", "a", "--payload", "1"], 0)["added"],
        1
    );
    one::<Plain>(&env, &["task", "add", "q", "--id", "a", "--payload", "2"], 65);
    let claim = one::<json::Claim>(&env, &["task", "claim", "q"], 0);
    let token = claim["token"].as_u64().unwrap().to_string();
    assert_eq!(
        one::<json::NothingToClaim>(&env, &["task", "claim", "q"], 10)["claimed"],
        false
    );
    assert_eq!(
        one::<json::TaskHeartbeat>(&env, &["task", "heartbeat", "q", "a", "--token", &token], 0)["state"],
        "running"
    );
    one::<Plain>(&env, &["task", "heartbeat", "q", "a", "--token", "999"], 12);
    one::<Plain>(&env, &["task", "retry", "q", "a"], 11);
    assert_eq!(
        one::<json::TaskDone>(&env, &["task", "done", "q", "a", "--token", &token], 0)["state"],
        "done"
    );
    one::<Plain>(&env, &["task", "done", "q", "a", "--token", &token], 12);
    one::<Plain>(&env, &["task", "fail", "q", "a", "--token", &token], 12);
    assert_eq!(one::<json::Task>(&env, &["task", "show", "q", "a"], 0)["state"], "done");
    one::<Plain>(&env, &["task", "show", "q", "nope"], 14);
    one::<Plain>(&env, &["task", "retry", "q", "nope"], 14);
    has_fields::<json::Task>(&one::<json::Tasks>(&env, &["task", "list", "q"], 0)["tasks"][0], &[]);
    assert!(one::<json::Queues>(&env, &["task", "stats"], 0)["queues"].is_array());
    assert_eq!(
        one::<json::Purged>(
            &env,
            &["task", "purge", "q", "--state", "done", "--older-than", "0s"],
            0
        )["purged"],
        1
    );
    one::<json::TasksAdded>(&env, &["task", "add", "q", "--id", "b"], 0);
    let c = one::<json::Claim>(&env, &["task", "claim", "q"], 0);
    let doc = one::<json::TaskFailed>(
        &env,
        &[
            "task",
            "fail",
            "q",
            "b",
            "--token",
            &c["token"].as_u64().unwrap().to_string(),
            "--no-retry",
        ],
        0,
    );
    assert_eq!(doc["state"], "dead");
    assert_eq!(
        one::<json::TaskRetried>(&env, &["task", "retry", "q", "b"], 0)["revived"],
        true
    );
    assert_eq!(
        one::<json::WorkSummary>(&env, &["work", "q", "--until-empty", "--", "true"], 0)["done"],
        1
    );
}

/// Each subcommand's own help opens with the line the top-level help lists
/// for it (subcommands are built only when used: a struct flattened into
/// one must not lend it its description).
fn every_subcommand_describes_itself_as_the_top_level_help_does() {
    let env = Env::new();
    let abouts = |args: &[&str]| -> Vec<(String, String)> {
        let (code, out, err) = env.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.split("Commands:")
            .nth(1)
            .unwrap_or_default()
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().split_once("  "))
            .map(|(name, about)| (name.trim().to_owned(), about.trim().to_owned()))
            .filter(|(name, _)| name != "help")
            .collect()
    };
    let mut checked = 0;
    for (prefix, listed) in [
        (vec![], abouts(&["--help"])),
        (vec!["task"], abouts(&["task", "--help"])),
    ] {
        assert!(listed.len() >= 8, "{listed:?}");
        for (name, about) in listed {
            let mut args: Vec<&str> = prefix.clone();
            args.extend([name.as_str(), "--help"]);
            let (code, out, err) = env.run(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            // The listing cuts a long description short; its start must match.
            let stem = about.trim_end_matches('.').split(" (").next().unwrap();
            assert!(
                out.replace('\n', " ").starts_with(stem),
                "`leasehold {}` opens with {:?}, not {about:?}",
                args.join(" "),
                out.lines().next()
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

/// `--version` names what a bug report needs: the commit this binary was
/// built from (git's, in a checkout), the target it runs on, the kind of
/// build (`development` here: scripts/dist sets the others), and the
/// stores built in — exactly those whose URLs this binary opens (a store
/// left out answers "does not include"; one built in gets as far as
/// connecting).
fn the_version_names_the_commit_the_target_and_exactly_the_stores_that_open() {
    let env = Env::new();
    let version = one::<json::Version>(&env, &["--version"], 0);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(version["commit"], head.as_str(), "{version}"),
        None => assert_eq!(version["commit"], "unknown", "not a git checkout: {version}"),
    }
    // Not built by scripts/dist: neither a release nor a snapshot.
    assert_eq!(version["build"], "development", "{version}");
    let target = version["target"].as_str().unwrap();
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains(std::env::consts::OS),
        "{target}"
    );
    let stores = version["stores"].as_array().unwrap();
    assert_eq!(stores[0], "sqlite", "{version}");
    // Port 1 on loopback: refused at once where a store is built in.
    for (scheme, url) in [("postgres", "postgres://127.0.0.1:1/x"), ("etcd", "etcd://127.0.0.1:1")] {
        let (code, _, err) = env.run(&["--store", url, "status", "job"]);
        let built_in = stores.iter().any(|s| s == scheme);
        assert_eq!(
            err.contains("does not include"),
            !built_in,
            "{scheme} listed: {built_in}; exit {code}: {err}"
        );
    }
}
