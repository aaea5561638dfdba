//! acquire / renew / release / fence / status / list / history, driven
//! through the real binary.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{etcd, postgres};
use serde_json::Value;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    acquire_after_waiting_says_it_waited_and_does_not_advise_waiting,
    fence_after_a_release_says_it_was_released_and_what_is_live,
    held_messages_and_usage_errors_escape_hidden_characters,
    list_cuts_a_long_name_on_a_terminal_and_keeps_it_whole_elsewhere,
    acquire_prints_the_token_and_a_second_acquire_is_held,
    tokens_grow_across_release_and_renew_and_release_are_token_scoped,
    an_explicit_owner_scopes_release_and_makes_acquire_idempotent,
    renew_and_release_without_the_explicit_owner_are_refused_and_say_to_pass_it,
    shared_grants_coexist_up_to_their_limit_and_exclude_exclusive,
    mixed_shared_limits_keep_the_smallest_on_every_store,
    fence_runs_the_command_only_for_the_current_token,
    json_output_is_one_document_with_the_documented_fields,
    wait_takes_the_lease_when_it_expires_and_gives_up_at_its_timeout,
    a_grant_bound_to_a_process_is_taken_over_at_once_when_it_dies,
    a_bare_acquire_lives_by_its_ttl_even_though_its_process_exited,
    list_can_leave_out_the_callers_own_process_chain,
    hostile_names_are_refused_or_stored_exactly,
    blank_names_are_refused_and_spaced_names_kept,
    a_long_bad_value_is_cut_in_the_message,
    renew_after_expiry_and_a_new_holder_says_the_ttl_ran_out,
    a_renewal_of_an_expired_grant_nobody_took_is_refused_not_revived,
    a_fence_with_an_expired_grant_nobody_took_refuses_the_command,
    a_zero_limit_is_a_usage_error,
    bad_arguments_are_usage_errors,
    an_unreachable_postgres_store_is_unavailable,
    the_default_store_is_private_and_under_xdg_state_home,
    a_corrupt_or_foreign_store_is_reported_and_never_touched,
    a_store_from_a_newer_leasehold_is_refused,
    a_symlink_at_the_store_path_is_never_followed,
    a_store_under_a_symlinked_directory_works,
    a_directory_link_planted_in_a_sticky_directory_is_refused_by_store_write_and_lock,
    doctor_checks_the_store_and_host,
    a_damaged_schema_is_bad_data_and_doctor_says_what_is_missing,
    completions_are_generated,
    tables_escape_hidden_characters_and_mark_a_cut_command_line,
    list_live_keeps_seed_002s_contract,
    waiting_and_limits_are_spelled_one_way,
    a_remedy_is_worded_as_a_flag_and_the_code_comes_from_the_kind,
    closed_standard_streams_never_become_a_file_leasehold_opens,
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not one JSON document ({e}): {s}"))
}

fn history_events(env: &Env, name: &str) -> Vec<String> {
    let (code, out, err) = env.run(&["history", name, "--json", "--limit", "100"]);
    assert_eq!(code, 0, "{err}");
    json(&out)["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect()
}

fn acquire_prints_the_token_and_a_second_acquire_is_held() {
    let env = Env::new();
    let t = env.acquire(&["job", "--ttl", "2m"]);
    assert!(t >= 1);
    let (code, out, err) = env.run(&["acquire", "job"]);
    assert_eq!(code, 11, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("job is held") && err.contains(&format!("token {t}")),
        "{err}"
    );
}

fn tokens_grow_across_release_and_renew_and_release_are_token_scoped() {
    let env = Env::new();
    let t1 = env.acquire(&["job"]);
    assert_eq!(env.run(&["renew", "job", "--token", &t1.to_string()]).0, 0);
    assert_eq!(env.run(&["release", "job", "--token", &t1.to_string()]).0, 0);
    // Lost: renew and release of a released grant.
    let (code, _, err) = env.run(&["renew", "job", "--token", &t1.to_string()]);
    assert_eq!(code, 12, "{err}");
    assert!(err.contains("released or taken over"), "{err}");
    assert_eq!(env.run(&["release", "job", "--token", &t1.to_string()]).0, 12);
    let t2 = env.acquire(&["job"]);
    assert!(t2 > t1);
    // A token never issued is lost, too.
    assert_eq!(env.run(&["renew", "job", "--token", &(t2 + 5).to_string()]).0, 12);
    assert_eq!(
        history_events(&env, "job"),
        [
            "stale_refused",
            "granted",
            "stale_refused",
            "stale_refused",
            "released",
            "granted"
        ]
    );
}

fn an_explicit_owner_scopes_release_and_makes_acquire_idempotent() {
    let env = Env::new();
    let t = env.acquire(&["job", "--owner", "agent-7"]);
    assert_eq!(
        env.acquire(&["job", "--owner", "agent-7"]),
        t,
        "same owner again: same token"
    );
    assert_eq!(env.run(&["acquire", "job", "--owner", "agent-8"]).0, 11);
    let (code, _, err) = env.run(&["release", "job", "--token", &t.to_string(), "--owner", "agent-8"]);
    assert_eq!(code, 12, "{err}");
    assert!(err.contains("another owner"), "{err}");
    assert_eq!(
        env.run(&["release", "job", "--token", &t.to_string(), "--owner", "agent-7"])
            .0,
        0
    );
}

fn renew_and_release_without_the_explicit_owner_are_refused_and_say_to_pass_it() {
    let env = Env::new();
    let t = env.acquire(&["job", "--owner", "me"]).to_string();
    for op in ["renew", "release"] {
        let (code, _, err) = env.run(&[op, "job", "--token", &t]);
        assert_eq!(code, 12, "{op} without --owner: {err}");
        assert!(err.contains("explicit owner") && err.contains("--owner"), "{op}: {err}");
    }
    assert_eq!(env.run(&["renew", "job", "--token", &t, "--owner", "me"]).0, 0);
    assert_eq!(env.run(&["release", "job", "--token", &t, "--owner", "me"]).0, 0);
}

fn shared_grants_coexist_up_to_their_limit_and_exclude_exclusive() {
    let env = Env::new();
    let a = env.acquire(&["checkout", "--shared=2"]);
    let b = env.acquire(&["checkout", "--shared=2"]);
    assert!(b > a);
    assert_eq!(env.run(&["acquire", "checkout", "--shared=2"]).0, 11);
    assert_eq!(env.run(&["acquire", "checkout"]).0, 11);
    assert_eq!(env.run(&["acquire", "checkout", "--shared=0"]).0, 2);
    let (_, out, _) = env.run(&["status", "checkout", "--json"]);
    let v = json(&out);
    assert_eq!(v["grants"].as_array().unwrap().len(), 2);
    assert_eq!(v["grants"][0]["mode"], "shared");
}

/// The sequence: two holders that asked for at most two, then
/// newcomers with a larger limit or none. Each limit is a promise to its
/// holder: the holder count, read back with `status`, never exceeds the
/// smallest limit any live holder asked for.
fn mixed_shared_limits_keep_the_smallest(env: &Env) {
    let count = || {
        let (_, out, _) = env.run(&["status", "z", "--json"]);
        let grants = json(&out)["grants"].as_array().unwrap().clone();
        let limits: Vec<u64> = grants.iter().filter_map(|g| g["shared_limit"].as_u64()).collect();
        (grants.len(), limits.into_iter().min())
    };
    env.acquire(&["z", "--shared", "2", "--ttl", "1h"]);
    env.acquire(&["z", "--shared", "2", "--ttl", "1h"]);
    for shared in [&["--shared", "3"][..], &["--shared"], &["--shared=1"]] {
        let mut args = vec!["acquire", "z", "--ttl", "1h"];
        args.extend_from_slice(shared);
        let (code, _, err) = env.run(&args);
        assert_eq!(code, 11, "{shared:?}: {err}");
        assert!(err.contains("2 shared holder(s)") && err.contains("at most"), "{err}");
        let (holders, smallest) = count();
        assert!(
            holders as u64 <= smallest.unwrap(),
            "{holders} holders, smallest limit {smallest:?}"
        );
    }
    let (code, _, err) = env.run(&["acquire", "z", "--ttl", "1h", "--shared", "3"]);
    assert!(
        err.contains("a holder asked for at most 2 (the smallest limit among the holders and this request counts)"),
        "the refusal says whose limit: {err} ({code})"
    );
    let (code, out, err) = env.run(&["run", "z", "--shared", "5", "--ttl", "1h", "--", "echo", "ran"]);
    assert_eq!((code, out.as_str()), (11, ""), "run is held by the same rule: {err}");
}

fn mixed_shared_limits_keep_the_smallest_on_every_store() {
    mixed_shared_limits_keep_the_smallest(&Env::new());
    let server = postgres::Server::shared();
    mixed_shared_limits_keep_the_smallest(&Env::on(server.url("mixed_limits")));
    let prefix = etcd::unique_prefix("cli", "mixed-limits");
    let etcd = etcd::shared();
    mixed_shared_limits_keep_the_smallest(&Env::on(format!("etcd://{}?prefix={prefix}", etcd.endpoint())));
    mixed_shared_limits_keep_the_smallest(&Env::firestore("mixed-limits").0);
    mixed_shared_limits_keep_the_smallest(&Env::redis("mixed-limits").0);
}

fn fence_runs_the_command_only_for_the_current_token() {
    let env = Env::new();
    let marker = env.path().join("published");
    let t1 = env.acquire(&["pub", "--ttl", "1m"]);
    let t1s = t1.to_string();
    let (code, out, _) = env.run(&["fence", "pub", "--token", &t1s, "--", "sh", "-c", "echo ran; exit 7"]);
    assert_eq!(
        (code, out.as_str()),
        (7, "ran\n"),
        "the command's own code passes through"
    );
    env.run(&["release", "pub", "--token", &t1s]);
    let t2 = env.acquire(&["pub"]);
    let touch = format!("touch {}", marker.display());
    let (code, _, err) = env.run(&["fence", "pub", "--token", &t1s, "--", "sh", "-c", &touch]);
    assert_eq!(code, 13, "{err}");
    assert!(
        err.contains("refused: its grant was released at ") && err.contains(&format!("token {t2} live now")),
        "{err}"
    );
    assert!(!marker.exists(), "a refused fence must not run the command");
    assert_eq!(env.run(&["fence", "pub", "--token", &t2.to_string()]).0, 0);
    let events = history_events(&env, "pub");
    assert_eq!(events[0], "fence_passed");
    assert_eq!(events[1], "fence_refused");
}

fn json_output_is_one_document_with_the_documented_fields() {
    let env = Env::new();
    let (code, out, _) = env.run(&["acquire", "job", "--json", "--ttl", "90s", "--owner", "me"]);
    assert_eq!(code, 0);
    let v = json(&out);
    for field in ["name", "token", "owner", "mode", "expires"] {
        assert!(!v[field].is_null(), "missing {field}: {v}");
    }
    assert_eq!(v["owner"], "me");
    assert_eq!(v["ttl_ms"], 90_000);
    let (code, out, _) = env.run(&["acquire", "job", "--json"]);
    assert_eq!(code, 11);
    assert_eq!(json(&out)["held"], true);
    let (code, out, _) = env.run(&["renew", "job", "--token", "999", "--json"]);
    assert_eq!(code, 12);
    assert_eq!(json(&out)["exit_code"], 12);
    let (_, out, _) = env.run(&["list", "--json"]);
    assert_eq!(json(&out)["leases"][0]["name"], "job");
}

fn wait_takes_the_lease_when_it_expires_and_gives_up_at_its_timeout() {
    let env = Env::new();
    let t1 = env.acquire(&["job", "--ttl", "1s"]);
    let (code, _, err) = env.run(&["acquire", "job", "--wait=200ms"]);
    assert_eq!(code, 11, "{err}");
    let start = Instant::now();
    let (code, out, err) = env.run(&["acquire", "job", "--wait=20s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim().parse::<u64>().unwrap() > t1);
    assert!(start.elapsed() < Duration::from_secs(15));
}

fn a_grant_bound_to_a_process_is_taken_over_at_once_when_it_dies() {
    let env = Env::new();
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id().to_string();
    let t1 = env.acquire(&["agent", "--for-pid", &pid]);
    assert_eq!(env.run(&["acquire", "agent"]).0, 11, "held while the process lives");
    let (_, out, _) = env.run(&["list", "--json"]);
    assert_eq!(json(&out)["leases"][0]["grants"][0]["alive"], "yes");
    child.kill().unwrap();
    child.wait().unwrap();
    let t2 = env.acquire(&["agent"]);
    assert!(t2 > t1);
    assert!(history_events(&env, "agent").contains(&"fast_takeover".to_owned()));
    assert_eq!(
        env.run(&["acquire", "x", "--for-pid", "999999999"]).0,
        2,
        "an unreadable pid is a usage error"
    );
}

fn a_bare_acquire_lives_by_its_ttl_even_though_its_process_exited() {
    let env = Env::new();
    env.acquire(&["job", "--ttl", "1m"]);
    // The acquiring process is gone, but it was never meant to stay: no takeover.
    let (code, out, _) = env.run(&["acquire", "job"]);
    assert_eq!(code, 11);
    assert!(out.is_empty());
}

fn list_can_leave_out_the_callers_own_process_chain() {
    let env = Env::new();
    let me = std::process::id().to_string();
    env.acquire(&["checkout", "--shared", "--for-pid", &me]);
    let mut other = Command::new("sleep").arg("60").spawn().unwrap();
    env.acquire(&["checkout", "--shared", "--for-pid", &other.id().to_string()]);
    let (_, out, _) = env.run(&["list", "--exclude-ancestry-of", &me, "--json"]);
    let v = json(&out);
    let grants = v["leases"][0]["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{v}");
    assert_eq!(grants[0]["holder"]["pid"], other.id());
    other.kill().unwrap();
    other.wait().unwrap();
}

fn hostile_names_are_refused_or_stored_exactly() {
    let env = Env::new();
    for bad in ["", "a\ntoken=999", "tab\there", &"x".repeat(256)] {
        let (code, _, err) = env.run(&["acquire", bad]);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    let non_utf8 = env
        .cmd(&[])
        .arg("acquire")
        .arg(OsStr::from_bytes(b"bad\xff"))
        .output()
        .unwrap();
    assert_eq!(non_utf8.status.code(), Some(2));
    for odd in [
        "../../etc/passwd",
        "/abs",
        "it's\"; DROP TABLE lease_grant; --",
        "job",
        "job/1",
        &"é".repeat(127),
    ] {
        env.acquire(&[odd]);
        let (_, out, _) = env.run(&["status", odd, "--json"]);
        assert_eq!(json(&out)["name"], odd);
    }
    let (_, out, _) = env.run(&["list", "--json"]);
    assert_eq!(
        json(&out)["leases"].as_array().unwrap().len(),
        6,
        "job and job/1 are distinct names"
    );
    // Nothing was written outside the sandbox's store directory.
    let entries: Vec<_> = std::fs::read_dir(env.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, [std::ffi::OsString::from("state")]);
}

/// Issue 22: a name of one space was accepted and showed as an empty cell
/// in every table. A blank name is refused (exit 2, saying why); visible
/// names keep their spaces, and nothing blank reaches the store.
fn blank_names_are_refused_and_spaced_names_kept() {
    let env = Env::new();
    for blank in [" ", "   ", "\u{a0}"] {
        for args in [
            &["acquire", blank][..],
            &["run", blank, "--", "true"],
            &["task", "add", blank],
        ] {
            let (code, out, err) = env.run(args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(out.is_empty(), "{args:?} printed {out:?}");
            assert!(err.contains("must not be blank"), "{args:?}: {err}");
        }
    }
    env.acquire(&[" job "]);
    let (_, out, _) = env.run(&["list", "--json"]);
    let names: Vec<_> = json(&out)["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, [" job "], "only the visible name was stored, exactly");
}

/// Issue 22: a 4 KB name was echoed whole in the usage error. A value is
/// repeated cut to a line's worth, marked with `…`, on stderr and in the
/// JSON document alike.
fn a_long_bad_value_is_cut_in_the_message() {
    let env = Env::new();
    let long = "x".repeat(4096);
    for args in [
        &["acquire", long.as_str()][..],
        &["acquire", "job", "--ttl", long.as_str()],
    ] {
        let (code, out, err) = env.run(args);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty());
        assert!(err.contains('…') && err.contains("xxxxxxxxxx"), "the value, cut: {err}");
        assert!(err.len() < 1000, "{} bytes of message", err.len());
        let mut json_args = vec!["--json"];
        json_args.extend_from_slice(args);
        let (code, out, _) = env.run(&json_args);
        assert_eq!(code, 2);
        let message = json(&out)["error"].as_str().unwrap().to_owned();
        assert!(message.contains('…') && message.len() < 1000, "{message}");
    }
    // A short bad value is repeated whole.
    let (_, _, err) = env.run(&["acquire", "job", "--ttl", "soon"]);
    assert!(err.contains("'soon'"), "{err}");
}

/// Issue 22: `renew` after expiry said "released or taken over" once a
/// new holder had taken the name (which removes the expired grant): the
/// store's history says it expired, and so does the message.
fn renew_after_expiry_and_a_new_holder_says_the_ttl_ran_out() {
    let env = Env::new();
    let old = env.acquire(&["job", "--ttl", "1s"]).to_string();
    std::thread::sleep(Duration::from_millis(1300));
    let new = env.acquire(&["job", "--ttl", "1m"]);
    for verb in ["renew", "release"] {
        let (code, _, err) = env.run(&[verb, "job", "--token", &old]);
        assert_eq!(code, 12, "{err}");
        assert!(
            err.contains("its TTL ran out") && !err.contains("released or taken over"),
            "{verb}: {err}"
        );
    }
    let (_, out, _) = env.run(&["status", "job", "--json"]);
    assert_eq!(json(&out)["grants"][0]["token"], new, "the new grant untouched");
}

/// A grant whose TTL ran out is over, though nobody took the name and the
/// store still has it: its renewal is refused (12) and does not bring it
/// back — a newcomer is granted the name. (The planted bug
/// `renewal-revives-expired` passed every CLI test and fault case.)
fn a_renewal_of_an_expired_grant_nobody_took_is_refused_not_revived() {
    let env = Env::new();
    let old = env.acquire(&["job", "--ttl", "1s"]).to_string();
    std::thread::sleep(Duration::from_millis(1300));
    let (code, _, err) = env.run(&["renew", "job", "--token", &old, "--ttl", "1h"]);
    assert_eq!(code, 12, "{err}");
    assert!(err.contains("its TTL ran out"), "{err}");
    let (code, out, err) = env.run(&["acquire", "job", "--json"]);
    assert_eq!(code, 0, "the name is free: {err}");
    assert!(json(&out)["token"].as_u64() > old.parse().ok(), "{out}");
}

/// The same for the fence: a grant whose TTL ran out may not act through
/// `fence`, though it is still the newest the store has (exit 13, the
/// command not run). (The planted bug `fence-gate-passes-stale` passed
/// every CLI test and fault case.)
fn a_fence_with_an_expired_grant_nobody_took_refuses_the_command() {
    let env = Env::new();
    let marker = env.path().join("published");
    let old = env.acquire(&["pub", "--ttl", "1s"]).to_string();
    std::thread::sleep(Duration::from_millis(1300));
    let touch = format!("touch {}", marker.display());
    let (code, _, err) = env.run(&["fence", "pub", "--token", &old, "--", "sh", "-c", &touch]);
    assert_eq!(code, 13, "{err}");
    assert!(!marker.exists(), "a refused fence must not run the command");
    assert_eq!(history_events(&env, "pub")[0], "fence_refused");
}

/// `history --limit 0` said "no history for NAME" of a name with history:
/// a limit below 1 is a usage error, as with `task list`.
fn a_zero_limit_is_a_usage_error() {
    let env = Env::new();
    env.acquire(&["job"]);
    for args in [
        &["history", "job", "--limit", "0"][..],
        &["task", "list", "q", "--limit", "0"],
    ] {
        let (code, out, err) = env.run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty() && err.contains("--limit"), "{args:?}: {err}");
    }
    let (code, out, _) = env.run(&["history", "job", "--limit", "1"]);
    assert_eq!(code, 0);
    assert!(out.contains("granted"), "{out}");
}

fn bad_arguments_are_usage_errors() {
    let env = Env::new();
    for args in [
        &["acquire", "job", "--ttl", "soon"][..],
        &["renew", "job", "--token", "abc"],
        &["acquire", "job", "--wait=never"],
        // An unknown scheme (redis:// is a store since issue 30), and a
        // Redis URL that cannot be one.
        &["--store", "mysql://x", "acquire", "job"],
        &["--store", "redis://x?password=hunter2", "acquire", "job"],
        &["--store", "sqlite://", "acquire", "job"],
        &["--store", "postgres://localhost/x?schema=Bad-Name", "acquire", "job"],
    ] {
        let (code, _, err) = env.run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.is_empty());
    }
}

fn an_unreachable_postgres_store_is_unavailable() {
    if !cfg!(feature = "postgres") {
        leasehold_testkit::unavailable("this leasehold is built without the postgres feature");
    }
    // Nothing listens on port 1.
    let (code, _, err) = Env::new().run(&["--store", "postgres://127.0.0.1:1/x", "acquire", "job"]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("cannot reach"), "{err}");
}

fn the_default_store_is_private_and_under_xdg_state_home() {
    let env = Env::new();
    let out = env
        .cmd(&["acquire", "job"])
        .env_remove("LEASEHOLD_STORE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let db = env.path().join("xdg/leasehold/leasehold.db");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
}

type Make<'a> = Box<dyn Fn(&std::path::Path) + 'a>;

fn a_corrupt_or_foreign_store_is_reported_and_never_touched() {
    let env = Env::new();
    std::fs::create_dir_all(env.store_path().parent().unwrap()).unwrap();
    let garbage = b"this is not a database, but someone's precious notes\n".repeat(100);
    let cases: Vec<(&str, Make)> = vec![
        ("garbage", Box::new(|p| write_file(p, &garbage))),
        (
            "truncated header",
            Box::new(|p| write_file(p, b"SQLite format 3\0\x10\0")),
        ),
        (
            "foreign sqlite",
            Box::new(|p| {
                rusqlite::Connection::open(p)
                    .and_then(|db| db.execute_batch("CREATE TABLE notes(x); INSERT INTO notes VALUES ('keep me');"))
                    .expect("make a foreign SQLite database");
            }),
        ),
    ];
    for (what, make) in cases {
        let _ = std::fs::remove_file(env.store_path());
        make(&env.store_path());
        let before = std::fs::read(env.store_path()).unwrap();
        let (code, _, err) = env.run(&["acquire", "job"]);
        assert_eq!(code, 65, "{what}: {err}");
        assert!(
            err.contains("corrupt or not a leasehold store") && err.contains("untouched"),
            "{what}: {err}"
        );
        assert!(
            std::fs::read(env.store_path()).unwrap() == before,
            "{what}: the file was modified"
        );
    }
    // A directory where the database belongs.
    let _ = std::fs::remove_file(env.store_path());
    std::fs::create_dir(env.store_path()).unwrap();
    assert_eq!(env.run(&["acquire", "job"]).0, 65);
}

fn a_store_from_a_newer_leasehold_is_refused() {
    let env = Env::new();
    env.acquire(&["job"]);
    rusqlite::Connection::open(env.store_path())
        .and_then(|db| db.pragma_update(None, "user_version", 99))
        .expect("set the store's schema version");
    let (code, _, err) = env.run(&["acquire", "job2"]);
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains("schema version 99") && err.contains("upgrade leasehold"),
        "{err}"
    );
}

fn a_symlink_at_the_store_path_is_never_followed() {
    let env = Env::new();
    let target = env.path().join("elsewhere.db");
    std::fs::create_dir_all(env.store_path().parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&target, env.store_path()).unwrap();
    let (code, _, err) = env.run(&["acquire", "job"]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!target.exists());
}

/// Issue 12's case: a store under a symlinked directory (`ln -s real
/// link`) works, as `write` and `lock` already did, and `doctor` says where
/// it resolves.
fn a_store_under_a_symlinked_directory_works() {
    let env = Env::new();
    std::fs::create_dir(env.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", env.path().join("link")).unwrap();
    let store = format!("--store=sqlite://{}/link/s.db", env.path().display());
    let (code, out, err) = env.run(&[&store, "acquire", "a"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "1");
    assert!(env.path().join("real/s.db").is_file());
    let (code, out, _) = env.run(&[&store, "doctor"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("store path") && out.contains("real"), "{out}");
}

/// A directory link someone else planted in a sticky world-writable
/// directory (like /tmp) is refused the same way by the store, `write` and
/// `lock`, naming the rule; `doctor` explains it; nothing is written
/// through it.
fn a_directory_link_planted_in_a_sticky_directory_is_refused_by_store_write_and_lock() {
    leasehold_testkit::need_root("to give a link another owner");
    let env = Env::new();
    let shared = env.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let elsewhere = env.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let planted = shared.join("p");
    std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(4242), None).unwrap();
    let p = planted.display();
    let store = format!("--store=sqlite://{p}/s.db");
    let state = format!("{p}/state.json");
    let lock = format!("{p}/app.lock");
    for (args, exit) in [
        (vec![store.as_str(), "acquire", "a"], 69),
        (vec!["write", &state], 65),
        (vec!["lock", &lock, "--", "true"], 2),
    ] {
        let (code, _, err) = env.run(&args);
        assert_eq!(code, exit, "{args:?}: {err}");
        assert!(
            err.contains("protected_symlinks") && err.contains("uid 4242") && err.contains("real directory"),
            "{args:?}: {err}"
        );
    }
    let (code, out, _) = env.run(&[&store, "doctor"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("store path") && l.contains("protected_symlinks")),
        "{out}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the link"
    );
}

fn doctor_checks_the_store_and_host() {
    let env = Env::new();
    // A store that is not there fails, naming its path, and is not made.
    let (code, out, _) = env.run(&["doctor"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL store") && out.contains("nothing was created"),
        "{out}"
    );
    assert!(
        !env.store_path().parent().unwrap().exists(),
        "doctor made the store's directory"
    );
    assert_eq!(env.run(&["migrate"]).0, 0);
    let (code, out, err) = env.run(&["doctor", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["ok"], true);
    let checks: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for c in ["boot id", "process identity", "filesystem", "fsync", "store"] {
        assert!(checks.contains(&c), "{checks:?}");
    }
    write_file(
        &env.store_path(),
        b"garbage, not a database at all, long enough to be read",
    );
    let (code, out, _) = env.run(&["doctor"]);
    assert_eq!(code, 1);
    assert!(out.contains("FAIL"), "{out}");
}

/// A dropped table is bad data (65, what is missing, restore from a
/// backup), not "unavailable, retry"; `doctor` says so, and finds a dropped
/// column, which the cheap check at open does not look for.
fn a_damaged_schema_is_bad_data_and_doctor_says_what_is_missing() {
    let env = Env::new();
    env.acquire(&["job"]);
    let sql = |sql: &str| {
        rusqlite::Connection::open(env.store_path())
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    };
    sql("ALTER TABLE lease_history DROP COLUMN detail");
    let (code, out, _) = env.run(&["doctor"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL") && out.contains("column lease_history.detail is missing"),
        "{out}"
    );
    sql("DROP TABLE lease_waiter");
    let (code, _, err) = env.run(&["acquire", "other"]);
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains("missing lease_waiter") && err.contains("backup") && !err.contains("retry"),
        "{err}"
    );
    let (code, out, _) = env.run(&["doctor"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL") && out.contains("missing lease_waiter"), "{out}");
}

fn completions_are_generated() {
    let env = Env::new();
    let (code, out, _) = env.run(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(out.contains("leasehold") && out.contains("acquire"));
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn write_file(path: &std::path::Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
}

/// A name with a bidirectional override (U+202E) is shown escaped in
/// tables, so it cannot reorder what follows it; JSON keeps it exact. A
/// holder's long command line is cut with an ellipsis.
fn tables_escape_hidden_characters_and_mark_a_cut_command_line() {
    let env = Env::new();
    let name = "pay\u{202e}lortnoc";
    let long = format!("{}x", "a".repeat(80));
    let t = env.acquire(&[name, "--ttl", "1m"]);
    let (code, out, err) = env.run(&["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pay\\u{202e}lortnoc"), "{out}");
    assert!(!out.contains('\u{202e}'), "{out}");
    let (code, out, _) = env.run(&["--json", "list"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["leases"][0]["name"], name, "JSON keeps the name exact");
    assert_eq!(env.run(&["release", name, "--token", &t.to_string()]).0, 0);
    // The acquirer's command line, with its long --owner, is over 60 characters.
    let (code, _, err) = env.run(&["acquire", "cmd", "--ttl", "1m", "--owner", &long]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = env.run(&["list"]);
    assert!(out.contains('…'), "a cut command line ends in an ellipsis: {out}");
}

/// Seed 002's `live` contract: `list --live` lists the leases of holders
/// not proven dead, exits 0 when it lists something and 1 when nothing
/// (`--quiet` prints nothing), and leaves the caller's own process chain
/// out on request; registering the same process again renews its one
/// grant (same token); a killed holder drops out of `--live` at once,
/// while `list` (which only reads) still shows its grant until the next
/// acquire takes it over.
fn list_live_keeps_seed_002s_contract() {
    let env = Env::new();
    // No store yet: `list` only reads, and does not make an empty one to
    // say nobody holds (a mistyped path would say so too): 69, unknown.
    let (code, _, err) = env.run(&["list", "--live"]);
    assert_eq!(code, 69, "{err}");
    assert!(
        err.contains("no store file at") || err.contains("does not exist"),
        "{err}"
    );
    assert!(!env.store_path().exists() && !env.store_path().parent().unwrap().exists());
    assert_eq!(env.run(&["migrate"]).0, 0);
    assert_eq!(env.run(&["list", "--live"]).0, 1, "nothing held");
    let mut agent = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = agent.id().to_string();
    let t1 = env.acquire(&["session", "--shared", "--for-pid", &pid]);
    let t2 = env.acquire(&["session", "--shared", "--for-pid", &pid]);
    assert_eq!(t1, t2, "the same process registered again keeps its one grant");
    let (code, out, _) = env.run(&["--json", "list", "--live"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["leases"][0]["grants"].as_array().unwrap().len(), 1);
    let (code, out, err) = env.run(&["list", "--live", "--quiet"]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    assert_eq!(
        env.run(&["list", "--live", "--exclude-ancestry-of", &pid]).0,
        1,
        "the caller's own chain does not count"
    );
    agent.kill().unwrap();
    agent.wait().unwrap();
    assert_eq!(
        env.run(&["list", "--live", "-q"]).0,
        1,
        "a proven-dead holder is not live"
    );
    let (code, out, _) = env.run(&["--json", "list"]);
    assert_eq!(code, 0);
    assert_eq!(
        json(&out)["leases"][0]["grants"][0]["alive"],
        "no",
        "list only reads: the grant is there until an acquire takes it over"
    );
    let t3 = env.acquire(&["session", "--ttl", "1m"]);
    assert!(t3 > t1, "taken over at once");
}

/// One grammar for waiting and limits: `--wait 1s` and `--wait=1s` wait up
/// to a second, a bare `--wait` or `--wait forever` without limit, and a
/// word is never silently taken for another — a forgotten NAME is an
/// error, not a lease named after the value.
fn waiting_and_limits_are_spelled_one_way() {
    let env = Env::new();
    let t = env.acquire(&["job", "--ttl", "1m"]);
    for wait in [&["--wait", "1s"][..], &["--wait=1s"], &["--wait", "1"]] {
        let mut args = vec!["acquire", "job"];
        args.extend_from_slice(wait);
        let began = Instant::now();
        let (code, _, err) = env.run(&args);
        assert_eq!(code, 11, "{args:?}: {err}");
        assert!(began.elapsed() >= Duration::from_millis(900), "{args:?} waited");
        assert!(err.contains("still held") || err.contains("is held"), "{err}");
    }
    // Forgotten NAME: an error, and no lease named "5s" or "3".
    for args in [
        &["acquire", "--wait", "5s"][..],
        &["acquire", "--shared", "3"],
        &["acquire", "--shared", "job"],
    ] {
        let (code, _, err) = env.run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (_, out, _) = env.run(&["--json", "list"]);
    let names: Vec<String> = json(&out)["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["job"], "nothing was taken for a name");
    // `--shared 3` is a limit of three holders, spelled with or without `=`.
    let (code, out, err) = env.run(&["--json", "acquire", "pool", "--shared", "3"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["shared_limit"], 3);
    assert_eq!(env.run(&["acquire", "pool", "--shared=3"]).0, 0);
    // A bare --wait (before other flags or at the end) waits without limit:
    // released from another process, the waiter gets it.
    let waiter = env
        .std_cmd(&["acquire", "job", "--wait", "--ttl", "1m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(env.run(&["release", "job", "--token", &t.to_string()]).0, 0);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Typed errors: the exit code comes from the error's kind, and a remedy
/// that is the caller's option is worded as the CLI's flag (the library
/// says it in its own terms).
fn a_remedy_is_worded_as_a_flag_and_the_code_comes_from_the_kind() {
    let env = Env::new();
    let dir = env.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let store = format!("sqlite://{}", dir.display());
    let (code, _, err) = env.run(&["--store", &store, "acquire", "job"]);
    assert_eq!(code, 65, "a directory where the store belongs is bad data: {err}");
    assert!(err.contains("use another --store"), "{err}");
    assert!(
        !err.contains("open another store"),
        "library words stay in the library: {err}"
    );
}

/// Started with stdin, stdout and stderr closed (as some daemons start
/// their children), leasehold opens them on /dev/null first: a file it
/// opens never takes descriptor 0, 1 or 2 — here the lock file, which a
/// locked command inherits, would otherwise be the command's stdout.
fn closed_standard_streams_never_become_a_file_leasehold_opens() {
    let env = Env::new();
    let (lock, out) = (env.path().join("l"), env.path().join("out"));
    let status = Command::new("sh")
        .args([
            "-c",
            "exec 0<&- 1>&- 2>&-; exec \"$0\" lock \"$1\" -- sh -c 'echo $LEASEHOLD_LOCK_FD > \"$0\"' \"$2\"",
        ])
        .arg(crate::util::bin())
        .arg(&lock)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let fd: u32 = std::fs::read_to_string(&out).unwrap().trim().parse().unwrap();
    assert!(fd > 2, "the lock file took descriptor {fd}");
}

/// Issue 41, item 8: `acquire --wait 1s` advised "wait with --wait" after
/// it had waited. Now it says it waited 1s and the name is still held.
fn acquire_after_waiting_says_it_waited_and_does_not_advise_waiting() {
    let env = Env::new();
    env.acquire(&["job", "--ttl", "60s"]);
    let (code, _, err) = env.run(&["acquire", "job", "--wait", "1s"]);
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains("leasehold: job is still held after waiting 1s: exclusive by"),
        "{err}"
    );
    assert!(!err.contains("wait with --wait"), "{err}");
    // Without --wait, waiting is still the advice.
    let (code, _, err) = env.run(&["acquire", "job"]);
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains("job is held: ") && err.contains("wait with --wait"),
        "{err}"
    );
}

/// `fence` after a release said "its grant is no longer live (newest token
/// 1)": whether it was released or expired, and who holds the name now,
/// were left to guess. Now the store's history says.
fn fence_after_a_release_says_it_was_released_and_what_is_live() {
    let env = Env::new();
    let token = env.acquire(&["job"]).to_string();
    assert_eq!(env.run(&["release", "job", "--token", &token]).0, 0);
    let (code, _, err) = env.run(&["fence", "job", "--token", &token, "--", "touch", "ran"]);
    assert_eq!(code, 13, "{err}");
    assert!(
        err.contains(&format!("token {token} of job refused: its grant was released at ")),
        "{err}"
    );
    assert!(
        err.contains("; no grant of job is live now; the command was not run"),
        "{err}"
    );
    let newer = env.acquire(&["job"]).to_string();
    let (code, _, err) = env.run(&["fence", "job", "--token", &token]);
    assert_eq!(code, 13, "{err}");
    assert!(err.contains(&format!("; token {newer} live now;")), "{err}");
    assert!(!env.file("ran").exists());
}

/// The "is held" message printed a name's U+202E raw (tables escape it),
/// and clap's usage error repeated a name with a raw newline: both are
/// escaped as tables escape text now.
fn held_messages_and_usage_errors_escape_hidden_characters() {
    let env = Env::new();
    let name = "invoice\u{202e}fdp.exe";
    env.acquire(&[name]);
    let (code, _, err) = env.run(&["acquire", name]);
    assert_eq!(code, 11, "{err}");
    assert!(!err.contains('\u{202e}'), "a raw U+202E: {err:?}");
    assert!(err.contains("invoice\\u{202e}fdp.exe is held"), "{err}");
    let (code, _, err) = env.run(&["acquire", "two\nlines"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid value 'two\\u{a}lines'"), "{err}");
    assert!(!err.contains("two\nlines"), "a raw newline: {err:?}");
}

/// One 255-byte name made every row of `list` 300 columns wide. On a
/// terminal names are cut (with an ellipsis); into a pipe and with --json
/// they are whole.
fn list_cuts_a_long_name_on_a_terminal_and_keeps_it_whole_elsewhere() {
    leasehold_testkit::need_program("script", "util-linux");
    let env = Env::new();
    let long = "n".repeat(255);
    env.acquire(&[&long]);
    env.acquire(&["short"]);
    let shell = env
        .std_cmd(&[])
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect::<Vec<_>>();
    let out = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!("'{}' list", crate::util::bin().display()))
        .arg("/dev/null")
        .envs(shell)
        .env("COLUMNS", "400")
        .current_dir(env.path())
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("short"), "{screen}");
    assert!(!screen.contains(&long), "the whole name on a terminal: {screen}");
    assert!(screen.contains(&format!("{}…", "n".repeat(59))), "{screen}");
    let widest = screen.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest < 255, "{widest} columns: {screen}");
    // Into a pipe, and as JSON: whole.
    let (code, piped, err) = env.run(&["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(piped.contains(&long), "{piped}");
    let (_, listed, _) = env.run(&["--json", "list"]);
    assert!(listed.contains(&long), "{listed}");
}
