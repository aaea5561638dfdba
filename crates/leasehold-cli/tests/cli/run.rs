//! `leasehold run`: real processes, real signals, generous bounds.

use std::time::{Duration, Instant};

use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    exit_codes_pass_through_and_death_by_signal_is_128_plus_n,
    the_command_gets_the_lease_in_its_environment_and_stdio_passes_through,
    a_second_run_is_refused_skipped_or_waits_its_turn,
    the_old_if_held_wait_says_to_use_wait,
    arguments_that_cannot_stop_the_command_in_time_are_refused,
    signals_to_the_supervisor_are_forwarded_to_the_command,
    a_lease_lost_while_running_stops_the_command_with_75_within_the_ttl,
    an_unavailable_store_stops_the_command_before_the_holder_side_deadline,
    sigkill_of_the_supervisor_takes_the_whole_tree_down_within_grace_and_frees_the_lease,
    a_supervisor_paused_past_the_ttl_stops_the_command_on_its_boot_clock,
    a_silent_command_is_stopped_as_stalled_and_a_touched_progress_file_counts,
];

const LIMIT: Duration = Duration::from_secs(30);
/// Short leases for the fault tests: stop at sent + 3s - (0.5s + 0.5s).
const FAST: [&str; 6] = ["--ttl", "3s", "--heartbeat", "500ms", "--grace", "500ms"];

fn run_args<'a>(name: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    crate::util::sh_args("run", name, options, script)
}

fn exit_codes_pass_through_and_death_by_signal_is_128_plus_n() {
    let env = Env::new();
    assert_eq!(env.run(&run_args("job", &[], "exit 7")).0, 7);
    assert_eq!(env.run(&run_args("job", &[], "exit 0")).0, 0);
    assert_eq!(env.run(&run_args("job", &[], "kill -TERM $$")).0, 128 + 15);
    let (code, _, err) = env.run(&["run", "job", "--", "/no/such/command"]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("cannot run /no/such/command"), "{err}");
    // Released every time: the lease is free again.
    assert!(env.acquire(&["job"]) > 0);
}

fn the_command_gets_the_lease_in_its_environment_and_stdio_passes_through() {
    let env = Env::new();
    let (code, out, err) = env.run(&run_args(
        "job",
        &["--owner", "nightly"],
        "echo \"$LEASEHOLD_NAME|$LEASEHOLD_TOKEN|$LEASEHOLD_OWNER|$LEASEHOLD_STORE\"; echo to-stderr >&2",
    ));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("job|1|nightly|{}", env.store_url()));
    assert!(err.contains("to-stderr"));
    // With --stall-timeout the output is piped through, unchanged.
    let (code, out, _) = env.run(&run_args("job", &["--stall-timeout", "5s"], "echo piped; exit 3"));
    assert_eq!((code, out.trim()), (3, "piped"));
}

fn a_second_run_is_refused_skipped_or_waits_its_turn() {
    let env = Env::new();
    let first = env.spawn(&run_args("job", &[], "touch started; sleep 2; touch first-done"));
    env.wait_for("started");

    let (code, _, err) = env.run(&run_args("job", &[], "touch ran"));
    assert_eq!(code, 11, "{err}");
    assert!(err.contains("job is held") && err.contains("--if-held"), "{err}");

    let (code, _, err) = env.run(&run_args("job", &["--if-held", "skip"], "touch ran"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    assert!(err.contains("skipped"), "{err}");
    assert!(!env.file("ran").exists());

    let (code, _, err) = env.run(&run_args("job", &["--wait", "20s"], "test -f first-done"));
    assert_eq!(code, 0, "the waiter ran only after the first run ended: {err}");
    assert_eq!(finish(first, LIMIT).0, 0);

    let (code, _, err) = env.run(&run_args("job", &["--wait", "1s", "--if-held", "skip"], "true"));
    assert_eq!(code, 2, "--wait and --if-held skip contradict each other: {err}");
}

/// Issue 22: the old spelling `--if-held wait` got "invalid value 'wait'"
/// and a list of values without waiting in it. It is a usage error that
/// names the flag to use instead (in JSON too), and runs nothing.
fn the_old_if_held_wait_says_to_use_wait() {
    let env = Env::new();
    for json in [false, true] {
        let mut args = run_args("job", &["--if-held", "wait"], "touch ran");
        if json {
            args.insert(0, "--json");
        }
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--wait") && err.contains("--if-held"), "{err}");
        if json {
            let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            assert!(doc["error"].as_str().unwrap().contains("--wait"), "{doc}");
        }
    }
    assert!(!env.file("ran").exists());
    let (code, _, err) = env.run(&run_args("job", &["--if-held", "never"], "true"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fail") && err.contains("skip"), "the values: {err}");
}

fn arguments_that_cannot_stop_the_command_in_time_are_refused() {
    let env = Env::new();
    // Defaults scale with the TTL: a TTL alone always works (it did not:
    // the fixed default grace of 10s refused --ttl 10s and shorter).
    for ttl in ["1s", "5s", "10s"] {
        let (code, _, err) = env.run(&["run", "job", "--ttl", ttl, "--", "true"]);
        assert_eq!(code, 0, "--ttl {ttl} with defaults: {err}");
        let (code, _, err) = env.run(&["work", "q", "--ttl", ttl, "--until-empty", "--", "true"]);
        assert_eq!(code, 0, "work --ttl {ttl} with defaults: {err}");
    }
    // What the user spelled out and cannot work is refused, naming it.
    let (code, _, err) = env.run(&["run", "job", "--ttl", "10s", "--grace", "10s", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--grace 10s") && err.contains("lower --grace"), "{err}");
    let (code, _, err) = env.run(&[
        "run",
        "job",
        "--ttl",
        "3s",
        "--heartbeat",
        "2s",
        "--grace",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = env.run(&["run", "job"]);
    assert_eq!(code, 2, "a command is required");
}

fn signals_to_the_supervisor_are_forwarded_to_the_command() {
    let env = Env::new();
    let child = env.spawn(&run_args(
        "job",
        &[],
        "trap 'exit 42' TERM; touch started; while :; do sleep 0.05; done",
    ));
    env.wait_for("started");
    signal(child.id(), "TERM");
    assert_eq!(finish(child, LIMIT).0, 42);
}

fn a_lease_lost_while_running_stops_the_command_with_75_within_the_ttl() {
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let env = Env::new();
    let child = env.spawn(&run_args(
        "job",
        &FAST,
        "echo $LEASEHOLD_TOKEN > token; touch started; exec sleep 60",
    ));
    env.wait_for("started");
    let token = std::fs::read_to_string(env.file("token")).unwrap();
    let lost_at = Instant::now();
    // The store loses the grant underneath (as a restore or a damaged
    // store would): nobody may release a running command's grant for it
    // (`grants::an_outsiders_release_never_lets_the_next_command_start_beside_the_running_one`).
    let deleted = std::process::Command::new("sqlite3")
        .arg(env.store_path())
        .arg("DELETE FROM lease_grant WHERE name = 'job'")
        .status()
        .expect("sqlite3");
    assert!(deleted.success());
    let new_token = env.acquire(&["job", "--ttl", "60s"]);
    assert!(new_token > token.trim().parse().unwrap());
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped within the TTL: {:?}",
        lost_at.elapsed()
    );
    assert!(
        err.contains("refused a renewal") && err.contains("was stopped"),
        "{err}"
    );
    // The keeper's warning, in plain text: stderr is a pipe, not a terminal.
    assert!(err.contains("lease lost"), "{err}");
    assert!(!err.contains('\x1b'), "no colour codes off a terminal: {err:?}");
}

fn an_unavailable_store_stops_the_command_before_the_holder_side_deadline() {
    let env = Env::new();
    let child = env.spawn(&run_args("job", &FAST, "echo $$ > pid; touch started; exec sleep 60"));
    env.wait_for("started");
    let pid = env.pids("pid")[0];
    // Every successful renewal so far was sent before now, so the store
    // cannot expire the grant before locked_at + TTL.
    let db = rusqlite::Connection::open(env.store_path()).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked_at = Instant::now();
    let gone = wait_until(Duration::from_secs(10), || !alive(pid)).expect("command stopped");
    assert!(
        gone < Duration::from_secs(3),
        "gone {gone:?} after the store locked; the TTL is 3s"
    );
    // Keep it locked past 2×TTL, then let the supervisor finish.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(locked_at.elapsed()));
    db.execute_batch("ROLLBACK").unwrap();
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    // The renewal was out when the deadline passed; the store names its
    // locker (this test process) rather than blaming a pause.
    let locker = format!("its write lock is held by pid {}", std::process::id());
    assert!(
        err.contains("still unanswered: the store is locked") && err.contains(&locker),
        "{err}"
    );
    assert!(!err.contains("did not run"), "{err}");
}

fn sigkill_of_the_supervisor_takes_the_whole_tree_down_within_grace_and_frees_the_lease() {
    let env = Env::new();
    let script = "sh -c 'trap \"\" TERM; sleep 60' & echo $! >> pids; \
                  sleep 60 & echo $! >> pids; \
                  setsid sleep 60 & echo $! >> pids; \
                  echo $$ >> pids; touch started; wait";
    let mut child = env.spawn(&run_args("job", &["--grace", "1s"], script));
    env.wait_for("started");
    std::thread::sleep(Duration::from_millis(100));
    let pids = env.pids("pids");
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|&p| alive(p)));
    child.kill().unwrap();
    let killed_at = Instant::now();
    child.wait().unwrap();
    let gone = wait_until(Duration::from_secs(10), || pids.iter().all(|&p| !alive(p)));
    let gone = gone.expect("every process of the tree is gone");
    assert!(
        gone < Duration::from_secs(2),
        "gone after {gone:?}; grace 1s + 1s allowed"
    );
    // The supervisor and the group are gone: fast takeover, long before the 60s TTL.
    let mut token = None;
    wait_until(Duration::from_secs(5), || {
        let (code, out, _) = env.run(&["acquire", "job"]);
        token = (code == 0).then(|| out.trim().to_owned());
        token.is_some()
    })
    .expect("taken over at once");
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    let (_, history, _) = env.run(&["history", "job"]);
    assert!(history.contains("fast_takeover"), "{history}");
}

fn a_supervisor_paused_past_the_ttl_stops_the_command_on_its_boot_clock() {
    let env = Env::new();
    let options = ["--ttl", "2s", "--heartbeat", "400ms", "--grace", "500ms"];
    let child = env.spawn(&run_args("job", &options, "touch started; exec sleep 60"));
    env.wait_for("started");
    signal(child.id(), "STOP");
    std::thread::sleep(Duration::from_secs(3));
    // The store expired it; someone else takes it.
    assert!(env.acquire(&["job", "--ttl", "60s"]) >= 2);
    signal(child.id(), "CONT");
    let resumed = Instant::now();
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(resumed.elapsed() < Duration::from_secs(3), "{:?}", resumed.elapsed());
    assert!(
        err.contains("this process did not run for"),
        "noticed on the boot clock, not by a refused renewal: {err}"
    );
}

fn a_silent_command_is_stopped_as_stalled_and_a_touched_progress_file_counts() {
    let env = Env::new();
    let (code, out, err) = env.run(&run_args(
        "job",
        &["--stall-timeout", "500ms", "--grace", "500ms"],
        "echo begin; sleep 30",
    ));
    assert_eq!(code, 75, "{err}");
    assert_eq!(out.trim(), "begin");
    assert!(err.contains("stalled"), "{err}");
    let (code, _, err) = env.run(&run_args(
        "job",
        &["--stall-timeout", "500ms", "--progress-file", "p"],
        "for i in 1 2 3 4 5 6 7 8; do touch p; sleep 0.2; done",
    ));
    assert_eq!(code, 0, "progress by file: {err}");
}
