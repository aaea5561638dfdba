//! Each process of a command's tree gets one SIGTERM when the command is
//! stopped — by the guard (its supervisor killed) or by the supervisor
//! (`cron` shutting down). Judged by the processes themselves: each counts
//! the SIGTERMs it receives, a line per signal in the file `terms`. A
//! program that takes a second SIGTERM as "stop now, skip the cleanup"
//! must get its grace.

use std::time::Duration;

use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    the_guard_sends_each_process_of_the_tree_one_sigterm,
    a_slot_stopped_by_its_daemon_gets_one_sigterm_per_process,
];

/// `counter.sh NAME [exit]`: writes its pid to `NAME.pid` and a line
/// `NAME` to `terms` per SIGTERM it receives; with `exit`, exits after the
/// first, as most programs do; otherwise it runs on until SIGKILL. It
/// waits in `wait`, which a trapped signal interrupts at once, so two
/// signals a millisecond apart are two lines, not one.
#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn counter(env: &Env) {
    use std::os::unix::fs::PermissionsExt as _;
    let path = env.file("counter.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         trap 'echo $1 >> terms; [ \"$2\" = exit ] && exit 0' TERM\n\
         echo $$ > $1.pid\n\
         while :; do sleep 1 & wait $!; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The leader, a member of its group, and one that left it (`setsid`).
const TREE: &str = "./counter.sh member & setsid ./counter.sh escaped & exec ./counter.sh leader";

/// The lines of `terms`, by name: how many SIGTERMs each process got.
fn terms(env: &Env, name: &str) -> usize {
    std::fs::read_to_string(env.file("terms"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == name)
        .count()
}

fn wait_started(env: &Env, names: &[&str]) -> Vec<u32> {
    names
        .iter()
        .map(|name| {
            env.wait_for(&format!("{name}.pid"));
            wait_until(Duration::from_secs(10), || env.pids(&format!("{name}.pid")).len() == 1)
                .unwrap_or_else(|| panic!("{name} wrote no pid"));
            env.pids(&format!("{name}.pid"))[0]
        })
        .collect()
}

/// kill -9 of `leasehold run`: the guard stops the tree (SIGTERM, SIGKILL
/// after the grace) — the group's members from the group's signal, the
/// one that left the group from its own.
fn the_guard_sends_each_process_of_the_tree_one_sigterm() {
    let env = Env::new();
    counter(&env);
    let mut run = env.spawn(&["run", "job", "--grace", "1s", "--", "sh", "-c", TREE]);
    let pids = wait_started(&env, &["leader", "member", "escaped"]);
    run.kill().unwrap();
    run.wait().unwrap();
    wait_until(Duration::from_secs(20), || pids.iter().all(|p| !alive(*p))).expect("the tree is gone after the grace");
    for name in ["leader", "member", "escaped"] {
        assert_eq!(terms(&env, name), 1, "SIGTERMs {name} got");
    }
}

/// `cron` shut down while a slot's command runs: the daemon stops it. The
/// leader exits at its SIGTERM; the member of its group that stays and the
/// process that left the group are stopped by the guard as what the
/// command left behind — neither gets a second SIGTERM for it.
fn a_slot_stopped_by_its_daemon_gets_one_sigterm_per_process() {
    let env = Env::new();
    counter(&env);
    let tree = TREE.replace("./counter.sh leader", "./counter.sh leader exit");
    let (code, _, err) = env.run(&[
        "schedule",
        "add",
        "job",
        "--cron",
        "@every 2s",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        &tree,
    ]);
    assert_eq!(code, 0, "{err}");
    // The first slot runs it; the next ones are skipped while it runs.
    let daemon = env.spawn(&["cron", "--refresh", "200ms"]);
    let pids = wait_started(&env, &["leader", "member", "escaped"]);
    signal(daemon.id(), "TERM");
    let (code, _, err) = finish(daemon, Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    wait_until(Duration::from_secs(20), || pids.iter().all(|p| !alive(*p))).expect("the tree is gone after the grace");
    for name in ["leader", "member", "escaped"] {
        assert_eq!(terms(&env, name), 1, "SIGTERMs {name} got");
    }
}
