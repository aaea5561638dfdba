//! `leasehold work QUEUE -- CMD` with real processes.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;
use serde_json::Value;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    work_runs_each_task_with_its_payload_and_environment,
    a_failing_command_fails_the_task_with_its_stderr_until_it_is_dead,
    drain_works_through_retries_and_until_empty_does_not,
    a_lost_claim_stops_the_command_and_nothing_is_reported,
    sigterm_stops_claiming_lets_tasks_finish_then_hands_claims_back,
    killed_workers_lose_no_task,
    a_slot_guard_runs_many_tasks_and_stops_the_one_whose_claim_is_lost,
    sigkill_of_the_worker_mid_task_leaves_no_process_behind,
    an_idle_worker_sleeps_until_a_task_comes,
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not one JSON document ({e}): {s}"))
}

fn add(env: &Env, queue: &str, lines: &str) {
    let mut child = env
        .std_cmd(&["task", "add", queue, "--batch"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
}

fn show(env: &Env, queue: &str, id: &str) -> Value {
    let (code, out, err) = env.run(&["task", "show", queue, id]);
    assert_eq!(code, 0, "{err}");
    json(&out)
}

fn stats(env: &Env, queue: &str) -> Value {
    let (_, out, _) = env.run(&["task", "stats", queue, "--json"]);
    json(&out)["queues"][0].clone()
}

fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < limit, "work did not finish within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn work_runs_each_task_with_its_payload_and_environment() {
    let env = Env::new();
    add(
        &env,
        "q",
        "{\"id\":\"a\",\"payload\":{\"n\":3}}\n{\"id\":\"b\",\"payload\":\"text\"}\n",
    );
    let script = r#"read p; printf '{"payload":%s,"id":"%s","attempt":%s,"token":%s,"queue":"%s"}' "$p" "$LEASEHOLD_TASK_ID" "$LEASEHOLD_TASK_ATTEMPT" "$LEASEHOLD_TASK_TOKEN" "$LEASEHOLD_QUEUE""#;
    let (code, out, err) = env.run(&["work", "q", "--until-empty", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["done"], 2);
    let a = show(&env, "q", "a");
    assert_eq!(a["state"], "done");
    assert_eq!(
        a["result"],
        serde_json::json!({"payload": {"n": 3}, "id": "a", "attempt": 1, "token": 1, "queue": "q"})
    );
    assert_eq!(show(&env, "q", "b")["result"]["payload"], "text");
    // Output that is not JSON is kept as a string.
    add(&env, "plain", "{\"id\":\"p\"}\n");
    env.run(&["work", "plain", "--until-empty", "--", "echo", "hello world"]);
    assert_eq!(show(&env, "plain", "p")["result"], "hello world\n");
}

fn a_failing_command_fails_the_task_with_its_stderr_until_it_is_dead() {
    let env = Env::new();
    add(&env, "q", "{\"id\":\"poison\",\"max_attempts\":1}\n");
    let (code, out, err) = env.run(&[
        "work",
        "q",
        "--until-empty",
        "--json",
        "--",
        "sh",
        "-c",
        "echo it broke >&2; exit 3",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["dead"], 1);
    let t = show(&env, "q", "poison");
    assert_eq!(t["state"], "dead");
    assert_eq!(t["last_error"], "exit 3: it broke");
    assert!(err.contains("it broke"), "stderr passes through: {err}");
    // A command that cannot be started fails the task too.
    add(&env, "q2", "{\"id\":\"x\",\"max_attempts\":1}\n");
    env.run(&["work", "q2", "--until-empty", "--", "/no/such/command"]);
    let t = show(&env, "q2", "x");
    assert_eq!(t["state"], "dead");
    assert!(t["last_error"].as_str().unwrap().starts_with("exit 127"), "{t}");
}

/// `--until-empty` stops while a failed task waits for its retry;
/// `--drain` waits for it and works it.
fn drain_works_through_retries_and_until_empty_does_not() {
    let env = Env::new();
    add(&env, "q", "{\"id\":\"flaky\",\"max_attempts\":3}\n");
    let script = r#"[ "$LEASEHOLD_TASK_ATTEMPT" -ge 2 ] || exit 1; echo ok"#;
    let (code, out, err) = env.run(&["work", "q", "--until-empty", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (json(&out)["failed"].as_u64(), json(&out)["done"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(show(&env, "q", "flaky")["state"], "pending", "waiting for its retry");
    let (code, out, err) = env.run(&["work", "q", "--drain", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["done"], 1);
    assert_eq!(show(&env, "q", "flaky")["state"], "done");
}

fn a_lost_claim_stops_the_command_and_nothing_is_reported() {
    let env = Env::new();
    add(&env, "q", "{\"id\":\"t\"}\n");
    // The command gives its own claim up (as a competing worker's takeover
    // would), then keeps running: the next heartbeat is refused.
    let bin = crate::util::bin();
    let script = format!(
        "{} task fail q t --token $LEASEHOLD_TASK_TOKEN --no-retry --error gave-up; sleep 30",
        bin.display()
    );
    let start = Instant::now();
    let mut work = env
        .std_cmd(&[
            "work",
            "q",
            "--until-empty",
            "--ttl",
            "3s",
            "--heartbeat",
            "500ms",
            "--grace",
            "1s",
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bounded(&mut work, Duration::from_secs(15));
    assert!(start.elapsed() < Duration::from_secs(15));
    let out = work.wait_with_output().unwrap();
    assert_eq!(json(&String::from_utf8_lossy(&out.stdout))["lost"], 1);
    let t = show(&env, "q", "t");
    assert_eq!(
        (t["state"].as_str(), t["last_error"].as_str()),
        (Some("dead"), Some("gave-up"))
    );
}

fn sigterm_stops_claiming_lets_tasks_finish_then_hands_claims_back() {
    let env = Env::new();
    add(&env, "q", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n");
    // Finishes within the grace: done; the rest is not claimed.
    let mut work = env
        .std_cmd(&["work", "q", "--grace", "5s", "--", "sh", "-c", "sleep 1"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    rustix::process::kill_process(rustix::process::Pid::from_child(&work), rustix::process::Signal::TERM).unwrap();
    let status = wait_bounded(&mut work, Duration::from_secs(15));
    assert!(status.success());
    let s = stats(&env, "q");
    assert_eq!((s["done"].as_u64(), s["pending"].as_u64()), (Some(1), Some(2)), "{s}");

    // Does not finish within the grace: stopped, and its claim handed back
    // without charging the attempt.
    let mut work = env
        .std_cmd(&["work", "q", "--grace", "500ms", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    rustix::process::kill_process(rustix::process::Pid::from_child(&work), rustix::process::Signal::TERM).unwrap();
    assert!(wait_bounded(&mut work, Duration::from_secs(15)).success());
    let s = stats(&env, "q");
    assert_eq!(
        (s["pending"].as_u64(), s["running"].as_u64()),
        (Some(2), Some(0)),
        "{s}"
    );
    let (_, out, _) = env.run(&["task", "list", "q", "--state", "pending", "--json"]);
    for t in json(&out)["tasks"].as_array().unwrap() {
        assert_eq!(t["attempts"], 0, "a handed-back claim is not charged: {t}");
    }
}

/// Workers killed with SIGKILL mid-run: their commands die with them (the
/// guard), their claims come back by expiry, and a later worker finishes
/// everything — each task completed exactly once in the store.
fn killed_workers_lose_no_task() {
    const TASKS: usize = 40;
    let env = Env::new();
    let lines: String = (0..TASKS).fold(String::new(), |mut s, i| {
        let _ = writeln!(s, "{{\"id\":\"t{i}\"}}");
        s
    });
    add(&env, "q", &lines);
    let log = env.path().join("runs.log");
    let script = format!("read p; echo $LEASEHOLD_TASK_ID >> {}; sleep 0.05", log.display());
    for round in 0..3 {
        let mut work = env
            .std_cmd(&[
                "work",
                "q",
                "--ttl",
                "2s",
                "--grace",
                "200ms",
                "--concurrency",
                "3",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300 + round * 100));
        work.kill().unwrap();
        work.wait().unwrap();
    }
    let mop_up = || {
        let (code, _, err) = env.run(&[
            "work",
            "q",
            "--until-empty",
            "--ttl",
            "2s",
            "--grace",
            "200ms",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(code, 0, "{err}");
    };
    mop_up();
    // Claims of the killed workers may still be live: give them their TTL.
    std::thread::sleep(Duration::from_millis(2200));
    mop_up();
    let s = stats(&env, "q");
    assert_eq!(s["done"].as_u64(), Some(TASKS as u64), "no task lost: {s}");
    let runs = std::fs::read_to_string(&log).unwrap().lines().count();
    eprintln!(
        "work: {TASKS} tasks, 3 workers killed -9: all done once in the store, {runs} command runs (re-runs after kills allowed)"
    );
    assert!(runs >= TASKS);
}

/// One guard serves every task of a worker thread (each command's parent
/// is the same guard, and each command leads its own process group), and
/// it still stops a task whose claim is lost — between tasks that complete.
fn a_slot_guard_runs_many_tasks_and_stops_the_one_whose_claim_is_lost() {
    let env = Env::new();
    add(
        &env,
        "q",
        "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n{\"id\":\"d\"}\n",
    );
    let log = env.path().join("runs.log");
    // Each run logs its id, parent and process group; b gives its claim up
    // (as a competing worker's takeover would) and runs on.
    let script = format!(
        "read p; echo \"$LEASEHOLD_TASK_ID $PPID $$ $(cut -d' ' -f5 /proc/$$/stat)\" >> {log}; \
         if [ \"$LEASEHOLD_TASK_ID\" = b ]; then \
           {bin} task fail q b --token $LEASEHOLD_TASK_TOKEN --no-retry --error gave-up; sleep 30; \
         fi",
        log = log.display(),
        bin = crate::util::bin().display()
    );
    let mut work = env
        .std_cmd(&[
            "work",
            "q",
            "--until-empty",
            "--ttl",
            "3s",
            "--heartbeat",
            "500ms",
            "--grace",
            "1s",
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bounded(&mut work, Duration::from_secs(30));
    let out = work.wait_with_output().unwrap();
    let summary = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (summary["done"].as_u64(), summary["lost"].as_u64()),
        (Some(3), Some(1)),
        "{summary}"
    );
    let b = show(&env, "q", "b");
    assert_eq!(
        (b["state"].as_str(), b["last_error"].as_str()),
        (Some("dead"), Some("gave-up"))
    );
    let runs = std::fs::read_to_string(&log).unwrap();
    let runs: Vec<Vec<&str>> = runs.lines().map(|l| l.split(' ').collect()).collect();
    let ids: Vec<&str> = runs.iter().map(|r| r[0]).collect();
    assert_eq!(ids, ["a", "b", "c", "d"], "{runs:?}");
    assert!(
        runs.iter().all(|r| r[1] == runs[0][1]),
        "one guard for every task: {runs:?}"
    );
    assert!(
        runs.iter().all(|r| r[2] == r[3]),
        "each command leads its own group: {runs:?}"
    );
}

/// `leasehold work` killed with SIGKILL while its tasks run: every process
/// of every task's tree goes with it — a child that ignores SIGTERM, one
/// that left the group with `setsid` — and the guards too.
fn sigkill_of_the_worker_mid_task_leaves_no_process_behind() {
    let env = Env::new();
    add(&env, "q", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n");
    let pids = env.path().join("pids");
    let script = format!(
        "read p; sh -c 'trap \"\" TERM; sleep 60' & echo $! >> {pids}; \
         setsid sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; echo $PPID >> {pids}; \
         touch {dir}/started-$LEASEHOLD_TASK_ID; wait",
        pids = pids.display(),
        dir = env.path().display()
    );
    let mut work = env
        .std_cmd(&[
            "work",
            "q",
            "--grace",
            "1s",
            "--concurrency",
            "2",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_for("started-a");
    env.wait_for("started-b");
    std::thread::sleep(Duration::from_millis(100));
    let pids = env.pids("pids");
    assert_eq!(pids.len(), 8, "two tasks: two children, the command, its guard");
    assert!(pids.iter().all(|&p| alive(p)));
    work.kill().unwrap();
    work.wait().unwrap();
    wait_until(Duration::from_secs(20), || pids.iter().all(|&p| !alive(p))).unwrap_or_else(|| {
        let left: Vec<_> = pids.iter().filter(|&&p| alive(p)).collect();
        panic!("still alive after the worker's SIGKILL: {left:?}")
    });
}

/// Three worker threads on one store handle, idle after their tasks,
/// sleep until a task comes — and take it when it does. CI (by hand, this
/// stop): each wait made a new wait topic, which counts every commit
/// before it as new, so each woke at once for a 50 ms look polled every
/// millisecond; kept, each thread's empty claim (a commit that changed
/// nothing) woke the other two, in turn — a core busy between them.
/// Measured as the CPU time the whole process used (`/proc/PID/stat`,
/// every thread's, ended ones too), and how often the worker threads were
/// switched out. Planted: a topic per wait — 8,579 switches in 3 s (each
/// wait a 50 ms look, polled every millisecond); empty commits waking the
/// others — 371 ticks.
fn an_idle_worker_sleeps_until_a_task_comes() {
    let env = Env::new();
    add(&env, "jobs", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n{\"id\": \"c\"}\n");
    let mut worker = env.spawn(&["work", "jobs", "--concurrency", "3", "--", "true"]);
    let pid = worker.id();
    let done = |id: &str| show(&env, "jobs", id)["state"] == "done";
    wait_until(Duration::from_secs(20), || ["a", "b", "c"].iter().all(|id| done(id))).expect("the three tasks done");
    // The idle back-off reaches its longest pause (2 s) within 4 s.
    std::thread::sleep(Duration::from_secs(4));
    let (before, switched) = (cpu_ticks(pid), worker_switches(pid));
    std::thread::sleep(Duration::from_secs(3));
    let idle = cpu_ticks(pid).saturating_sub(before);
    let woke: u64 = worker_switches(pid)
        .iter()
        .map(|(tid, n)| n - switched.get(tid).copied().unwrap_or(*n))
        .sum();
    let late = Instant::now();
    add(&env, "jobs", "{\"id\": \"late\"}\n");
    let taken = wait_until(Duration::from_secs(10), || done("late"));
    let _ = worker.kill();
    let _ = worker.wait();
    // 30 ticks: a tenth of a core (it was a third, then a whole one).
    assert!(
        idle < 30,
        "three idle worker threads used {idle} clock ticks of CPU in 3 s"
    );
    // At their longest pause (2 s) each wakes once or twice in 3 s, and
    // each claim attempt costs a few switches (the store's lock, a read).
    assert!(
        woke < 60,
        "three idle worker threads were switched out {woke} times in 3 s"
    );
    assert!(
        taken.is_some(),
        "a task added to the idle worker's queue was not done within 10 s"
    );
    assert!(late.elapsed() < Duration::from_secs(10));
}

/// The CPU time process `pid` has used, user and system, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the worker's stat");
    let fields: Vec<&str> = stat.rsplit_once(')').expect("stat").1.split_whitespace().collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// How often each worker thread (`worker-N`) of process `pid` has been
/// switched out, by thread id.
fn worker_switches(pid: u32) -> std::collections::HashMap<String, u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the worker's threads");
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("worker-")))
        .filter_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let n = status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
                .sum();
            Some((t.file_name().to_string_lossy().into_owned(), n))
        })
        .collect()
}
