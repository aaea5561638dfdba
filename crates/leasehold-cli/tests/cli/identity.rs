//! A store's identity (DESIGN §3): a process that finds the SQLite store at
//! its path deleted or replaced stops using it (issue 39, item 7).

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, FAST, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_run_whose_store_is_deleted_stops_its_command_at_the_next_renewal,
    a_run_whose_store_is_replaced_stops_its_command_at_the_next_renewal,
    a_cron_daemon_whose_store_is_deleted_stops_firing_and_exits,
    doctor_names_a_process_still_on_a_deleted_store,
];

const LIMIT: Duration = Duration::from_secs(30);

/// Remove a SQLite store as `rm store store-wal store-shm` does.
fn remove_store(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(&p);
    }
}

/// `run job` on `env`'s store; its command's pid once it runs.
fn start_run(env: &Env) -> (std::process::Child, u32) {
    let child = env.spawn(&crate::util::sh_args(
        "run",
        "job",
        &FAST,
        "echo $$ > pid; touch started; exec sleep 60",
    ));
    env.wait_for("started");
    (child, env.pids("pid")[0])
}

/// The old `run` stopped its command soon after its store went away —
/// at its next renewal, not at the end of its TTL nor never (it renewed
/// on the unlinked file for ever) — while a holder of the store now at the
/// path holds the same name.
fn judge_stopped(child: std::process::Child, pid: u32, gone_at: Instant) {
    let Some(gone) = wait_until(Duration::from_secs(10), || !alive(pid)) else {
        signal(child.id(), "KILL");
        signal(pid, "KILL");
        panic!("the old command still ran 10 s after its store went away, beside a holder of the new one");
    };
    let (code, _, err) = finish(child, LIMIT);
    assert!(
        gone_at.elapsed() < Duration::from_secs(10) && gone < Duration::from_secs(2),
        "stopped {gone:?} after the store went away; one renewal is 500 ms"
    );
    assert_eq!(code, 75, "{err}");
    assert!(
        err.contains("deleted or replaced since this process opened it"),
        "{err}"
    );
}

fn a_run_whose_store_is_deleted_stops_its_command_at_the_next_renewal() {
    let env = Env::new();
    let (child, pid) = start_run(&env);
    remove_store(&env.store_path());
    let gone_at = Instant::now();
    // A new store made at the path issues token 1 again.
    assert_eq!(env.acquire(&["job", "--ttl", "60s"]), 1);
    judge_stopped(child, pid, gone_at);
}

#[allow(clippy::disallowed_methods, reason = "a store replaced as a person would, by mv")]
fn a_run_whose_store_is_replaced_stops_its_command_at_the_next_renewal() {
    let env = Env::new();
    let other = Env::new();
    other.acquire(&["unrelated"]);
    let (child, pid) = start_run(&env);
    // Another store put in its place, with its log (a restore done
    // wrong: no `migrate --bump-tokens`).
    remove_store(&env.store_path());
    for suffix in ["", "-wal", "-shm"] {
        let (mut from, mut to) = (other.store_path().into_os_string(), env.store_path().into_os_string());
        from.push(suffix);
        to.push(suffix);
        let _ = std::fs::rename(from, to);
    }
    let gone_at = Instant::now();
    assert_eq!(env.acquire(&["job", "--ttl", "60s"]), 1);
    judge_stopped(child, pid, gone_at);
}

/// The cron case: the store removed under a daemon and the
/// schedule added again to a fresh one, with a daemon on it: no slot may
/// run twice. The old daemon stops (exit 12, naming what happened).
fn a_cron_daemon_whose_store_is_deleted_stops_firing_and_exits() {
    let env = Env::new();
    let log = env.file("slots.log");
    let script = format!("echo \"$LEASEHOLD_SLOT\" >> {}", log.display());
    let add = [
        "schedule",
        "add",
        "tick",
        "--cron",
        "@every 300ms",
        "--",
        "sh",
        "-c",
        &script,
    ];
    assert_eq!(env.run(&add).0, 0);
    let old = env.spawn(&["cron", "--refresh", "200ms"]);
    let fired = || std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    wait_until(Duration::from_secs(20), || fired() >= 2).expect("the old daemon fires");
    remove_store(&env.store_path());
    assert_eq!(env.run(&add).0, 0);
    let new = env.spawn(&["cron", "--refresh", "200ms"]);
    let before = fired();
    wait_until(Duration::from_secs(20), || fired() >= before + 8).expect("the new daemon fires");
    signal(new.id(), "TERM");
    let (new_code, _, new_err) = finish(new, LIMIT);
    assert_eq!(new_code, 0, "{new_err}");
    let slots: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut unique = slots.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != slots.len() {
        signal(old.id(), "KILL");
        panic!("a slot ran twice: {slots:?}");
    }
    let (code, _, err) = finish(old, LIMIT);
    assert_eq!(code, 12, "{err}");
    assert!(err.contains("is no longer the store this process opened"), "{err}");
}

/// `doctor` on the store made at the path after the old one was removed
/// must not pass while a process still holds a grant in the old one (here
/// a `run` with a 60 s lease: its next renewal, which notices, is 20 s
/// away): it names that process.
fn doctor_names_a_process_still_on_a_deleted_store() {
    let env = Env::new();
    let child = env.spawn(&crate::util::sh_args(
        "run",
        "job",
        &["--ttl", "60s"],
        "touch started; exec sleep 60",
    ));
    env.wait_for("started");
    remove_store(&env.store_path());
    assert_eq!(env.acquire(&["job"]), 1);
    let (code, out, err) = env.run(&["doctor"]);
    let supervisor = child.id();
    signal(supervisor, "TERM");
    let _ = finish(child, LIMIT);
    assert_eq!(
        code, 1,
        "doctor passed with a holder left on the deleted store: {out}{err}"
    );
    assert!(
        out.contains(&format!("pid {supervisor} (`")) && out.contains("has since been deleted or replaced"),
        "{out}"
    );
}
