//! `leasehold::supervise` and `leasehold::worker` driving real commands
//! through this crate's guard binary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::supervise::{
    self, GuardProgram, GuardSlot, LeaseRun, Output, Ran, RunError, RunOutcome, Spec, Stop, Timing,
};
use leasehold::worker::{CommandJob, Job, Outcome, Until, WorkEvent, Worker, WorkerOptions};
use leasehold::{Acquire, AcquireOptions, Binding, ClaimLost, LeaseName, NewTask, Store, TaskState};

fn guard() -> GuardProgram {
    GuardProgram::new(env!("CARGO_BIN_EXE_leasehold-guard"))
}

fn store(dir: &tempfile::TempDir) -> Arc<Store> {
    Arc::new(Store::open_sqlite(&dir.path().join("l.db")).unwrap())
}

fn sh(script: &str) -> Vec<std::ffi::OsString> {
    vec!["sh".into(), "-c".into(), script.into()]
}

fn timing(ttl_ms: u64) -> Timing {
    Timing::new(Duration::from_millis(ttl_ms), None, None).unwrap()
}

fn spec(script: &str, timing: &Timing) -> Spec {
    Spec {
        command: sh(script),
        guard: guard(),
        grace: timing.grace,
        stdin: None,
        output: Output::Collect {
            stdout_limit: 1024,
            stderr_tail: 1024,
        },
        stall: None,
    }
}

#[test]
fn run_passes_the_exit_code_and_the_token_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let name = LeaseName::new("job").unwrap();
    let t = timing(10_000);
    let lease = LeaseRun::new(name.clone(), t.clone());
    let RunOutcome::Ran(Ran {
        grant,
        ended,
        finished,
        release_error,
    }) = supervise::run(
        &store,
        &lease,
        spec(r#"printf %s "$LEASEHOLD_TOKEN"; exit 3"#, &t),
        |_| {},
    )
    .unwrap()
    else {
        panic!("held")
    };
    assert_eq!(ended, Ok(3));
    assert_eq!(finished.code, Some(3));
    assert_eq!(finished.stopped, None);
    assert_eq!(String::from_utf8_lossy(&finished.stdout), grant.token.to_string());
    assert!(release_error.is_none());
    assert!(
        store.status(&name).unwrap().is_none_or(|s| s.grants.is_empty()),
        "released"
    );
}

#[test]
fn run_under_a_held_lease_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let name = LeaseName::new("job").unwrap();
    let options = AcquireOptions {
        binding: Binding::Ttl,
        ..AcquireOptions::default()
    };
    let Acquire::Acquired(_) = store.try_acquire(&name, &options).unwrap() else {
        panic!("free at first")
    };
    let t = timing(10_000);
    let marker = dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    let outcome = supervise::run(&store, &LeaseRun::new(name, t.clone()), spec(&script, &t), |_| {}).unwrap();
    assert!(matches!(outcome, RunOutcome::Held(_)), "{outcome:?}");
    assert!(!marker.exists());
}

#[test]
fn a_stalled_command_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let t = timing(10_000);
    let mut spec = spec("echo hi; sleep 30", &t);
    spec.stall = Some((Duration::from_millis(300), None));
    let lease = LeaseRun::new(LeaseName::new("job").unwrap(), t);
    let RunOutcome::Ran(Ran { ended, finished, .. }) = supervise::run(&store, &lease, spec, |_| {}).unwrap() else {
        panic!("held")
    };
    assert_eq!(finished.stopped, Some(Stop::Stalled(Duration::from_millis(300))));
    assert_eq!(finished.code, Some(128 + 15), "SIGTERM");
    assert!(
        matches!(ended, Err(RunError::Stalled { limit, .. }) if limit == Duration::from_millis(300)),
        "a stall is the run's outcome, not the SIGTERM's exit code: {ended:?}"
    );
}

#[test]
fn a_worker_shares_one_store_and_reports_each_task_as_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let queue = LeaseName::new("q").unwrap();
    let tasks = (0..6).map(|i| NewTask::new(serde_json::json!({ "n": i }))).collect();
    store.task_add(&queue, tasks).unwrap();
    let mut options = WorkerOptions::new(queue.clone(), timing(10_000));
    options.concurrency = 3;
    options.until = Until::Empty;
    let job = Job::Command(CommandJob {
        // The payload comes on stdin; echoed, it is the result.
        command: sh(r#"cat; test "$LEASEHOLD_TASK_ATTEMPT" = 1"#),
        guard: guard(),
        result_limit: 1024,
    });
    let events = Mutex::new(Vec::new());
    let counts = Worker::new(store.clone(), options, job)
        .run(|e| events.lock().unwrap().push(e.clone()))
        .unwrap();
    assert_eq!((counts.done, counts.failed, counts.lost, counts.running), (6, 0, 0, 0));
    let events = events.into_inner().unwrap();
    for task in store.task_list(Some(&queue), None, 100).unwrap() {
        assert_eq!(task.state, TaskState::Done);
        assert_eq!(task.result.as_ref(), Some(&task.payload));
        let mine: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                WorkEvent::Claimed(t) if t.id == task.id => Some("claimed"),
                WorkEvent::Started(t) if t.id == task.id => Some("started"),
                WorkEvent::Finished { task: t, outcome, .. } if t.id == task.id => {
                    assert_eq!(outcome, &Outcome::Done { result_cut: None });
                    Some("finished")
                }
                _ => None,
            })
            .collect();
        assert_eq!(mine, ["claimed", "started", "finished"], "{}", task.id);
    }
}

#[test]
fn a_worker_shut_down_hands_running_claims_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let queue = LeaseName::new("q").unwrap();
    store
        .task_add(&queue, vec![NewTask::new(serde_json::json!(1))])
        .unwrap();
    let mut options = WorkerOptions::new(queue.clone(), timing(10_000));
    options.shutdown_timeout = Duration::ZERO;
    let job = Job::Command(CommandJob {
        command: sh("sleep 30"),
        guard: guard(),
        result_limit: 1024,
    });
    let worker = Worker::new(store.clone(), options, job);
    let handle = worker.handle();
    let counts = worker
        .run(|e| {
            if matches!(e, WorkEvent::Started(_)) {
                handle.shutdown();
            }
        })
        .unwrap();
    assert_eq!((counts.handed_back, counts.done), (1, 0));
    let task = &store.task_list(Some(&queue), None, 10).unwrap()[0];
    assert_eq!((task.state, task.attempts), (TaskState::Pending, 0), "not charged");
}

/// A command that cannot be started is reported as such every time: the
/// once-guard's forked process writes its error to the report pipe the
/// guard writes to, and a line never lands inside another.
#[test]
fn a_command_that_cannot_start_is_reported_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let t = timing(10_000);
    let mut spec = spec("unused", &t);
    spec.command = vec!["/no/such/command".into()];
    for i in 0..30 {
        let lease = LeaseRun::new(LeaseName::new(format!("job{i}")).unwrap(), t.clone());
        let RunOutcome::Ran(ran) = supervise::run(&store, &lease, spec.clone(), |_| {}).unwrap() else {
            panic!("held")
        };
        let Err(RunError::CouldNotStart { code, message }) = ran.ended else {
            panic!("not a spawn error: {ran:?}")
        };
        assert_eq!(code, 127, "{message}");
        assert!(message.contains("/no/such/command"), "{message}");
    }
    let mut slot: GuardSlot<ClaimLost> = GuardSlot::spawn(spec).unwrap();
    for _ in 0..10 {
        let mut run = slot.next(None).unwrap();
        run.start_with(&task_env()).unwrap();
        let finished = run.wait();
        assert_eq!(finished.spawn_error.map(|(code, _)| code), Some(127));
    }
    assert!(slot.is_alive(), "a run that cannot start leaves the slot's guard up");
}

/// A command line far longer than a pipe's atomic write still gets its
/// reason through: the report shows the command cut, and the error whole.
#[test]
fn a_command_too_long_to_show_is_reported_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let t = timing(10_000);
    let mut spec = spec("unused", &t);
    let program = format!("/no/such/{}", "a".repeat(20_000));
    // What the OS says to this path, as it says it to exec.
    let reason = std::fs::File::open(&program).unwrap_err().to_string();
    spec.command = vec![program.into()];
    let lease = LeaseRun::new(LeaseName::new("long").unwrap(), t);
    let RunOutcome::Ran(ran) = supervise::run(&store, &lease, spec, |_| {}).unwrap() else {
        panic!("held")
    };
    let Err(RunError::CouldNotStart { message, .. }) = ran.ended else {
        panic!("not a spawn error: {ran:?}")
    };
    assert!(message.ends_with(&reason), "{message}");
    assert!(message.len() < 512, "{} bytes: {message}", message.len());
}

/// A slot runs its command once per run, each run the leader of a new
/// process group, with its own stdin and stdout; what a run leaves behind
/// is stopped before the run is reported finished.
#[test]
fn a_slot_runs_each_command_in_a_new_group_and_sweeps_what_it_left() {
    let t = timing(10_000);
    let script = r#"read n; echo "$n $$ $(cut -d' ' -f5 /proc/$$/stat) $PPID"; sleep 60 & echo "$!""#;
    let mut slot: GuardSlot<ClaimLost> = GuardSlot::spawn(spec(script, &t)).unwrap();
    let mut seen = Vec::new();
    for n in 0..5 {
        let mut run = slot.next(Some(format!("{n}\n").into_bytes())).unwrap();
        run.start_with(&task_env()).unwrap();
        let group = run.group().expect("started: its group is known");
        let finished = run.wait();
        assert_eq!(finished.code, Some(0));
        let out = String::from_utf8(finished.stdout).unwrap();
        let mut lines = out.lines();
        let fields: Vec<u32> = lines.next().unwrap().split(' ').map(|f| f.parse().unwrap()).collect();
        let left: u32 = lines.next().unwrap().parse().unwrap();
        assert_eq!(fields[0], n, "its own stdin");
        assert_eq!((fields[1], fields[2]), (group, group), "the leader of its own group");
        assert!(
            std::fs::read_to_string(format!("/proc/{left}/stat")).map_or(true, |s| s.contains(") Z")),
            "what run {n} left behind was stopped before it was reported finished"
        );
        seen.push((group, fields[3]));
    }
    let guards: std::collections::HashSet<u32> = seen.iter().map(|(_, guard)| *guard).collect();
    assert_eq!(guards.len(), 1, "one guard for every run: {seen:?}");
    let groups: std::collections::HashSet<u32> = seen.iter().map(|(group, _)| *group).collect();
    assert_eq!(groups.len(), seen.len(), "a new group each run: {seen:?}");
}

/// `kill -SIG PID`.
#[cfg(target_os = "linux")]
fn kill(sig: &str, pid: u32) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// A library caller is not made a subreaper: when its guard is killed, a
/// process that left the command's group (here, in a session of its own,
/// deaf to SIGTERM) runs on where nothing can find it. So the grant —
/// bound to the caller, the command's group and the guard — is not
/// released, and `run` returns only once the store has expired it: no
/// fast takeover while the orphan may run (it does, here).
#[cfg(target_os = "linux")]
#[test]
fn a_dead_guard_leaves_the_lease_unreleased_until_its_ttl_ran_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let name = LeaseName::new("job").unwrap();
    let t = timing(3_000);
    let orphan_file = dir.path().join("orphan");
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 60' & exec sleep 60",
        orphan_file.display()
    );
    let lease = LeaseRun::new(name.clone(), t.clone());
    let killed = Arc::new(Mutex::new(None));
    let (killed_at, other_store) = (killed.clone(), store.clone());
    let (lease_name, file) = (name.clone(), orphan_file.clone());
    let outcome = supervise::run_with(
        &store,
        &lease,
        spec(&script, &t),
        |_| {},
        move |grant, _| {
            let guard = grant.holder.guard.expect("a run's grant records its guard").pid;
            std::thread::spawn(move || {
                while !file.exists() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                kill("KILL", guard);
                *killed_at.lock().unwrap() = Some(std::time::Instant::now());
                std::thread::sleep(Duration::from_millis(500));
                // Bound to this process, which lives: held, not taken over.
                let held = other_store
                    .try_acquire(
                        &lease_name,
                        &AcquireOptions {
                            ttl: Duration::from_secs(5),
                            ..AcquireOptions::default()
                        },
                    )
                    .unwrap();
                assert!(matches!(held, Acquire::Held(_)), "taken over while the orphan may run");
            });
        },
    )
    .unwrap();
    let returned = std::time::Instant::now();
    let RunOutcome::Ran(Ran {
        ended, release_error, ..
    }) = outcome
    else {
        panic!("held")
    };
    let orphan: u32 = std::fs::read_to_string(&orphan_file).unwrap().trim().parse().unwrap();
    let orphan_alive = alive(orphan);
    kill("KILL", orphan);
    assert!(orphan_alive, "the premise: the orphan outlived its guard");
    assert_eq!(
        ended,
        Err(RunError::GuardDied {
            name: name.clone(),
            tree_stopped: false
        })
    );
    assert!(release_error.is_none());
    let waited = returned - killed.lock().unwrap().expect("the guard was killed");
    // The last renewal was sent at most a heartbeat (a third of the TTL)
    // before the kill; a release would have come within the grace period.
    let at_least = t.ttl() / 2;
    assert!(
        waited >= at_least,
        "returned {waited:?} after the guard's death, before its TTL could run out"
    );
    assert!(
        store.status(&name).unwrap().is_none_or(|s| s.grants.is_empty()),
        "expired by the time run returned"
    );
}

#[test]
fn a_command_launched_in_a_directory_runs_there_its_output_captured_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let work = tempfile::tempdir().unwrap();
    let t = timing(10_000);
    let mut spec = spec("pwd; head -c 100000 /dev/zero | tr '\\0' e >&2", &t);
    spec.output = Output::Capture;
    let lease = LeaseRun::new(LeaseName::new("job").unwrap(), t);
    let supervised = supervise::Supervised::launch_in(spec, Some(work.path())).unwrap();
    let RunOutcome::Ran(ran) = supervise::run_spawned(&store, &lease, supervised, |_| {}, |_, _| {}).unwrap() else {
        panic!("held")
    };
    assert_eq!(ran.ended, Ok(0));
    let cwd = std::fs::canonicalize(work.path()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ran.finished.stdout),
        format!("{}\n", cwd.display())
    );
    // Whole, not a tail, and not forwarded.
    assert_eq!(ran.finished.stderr, vec![b'e'; 100_000]);
    assert!(ran.finished.stderr_tail.is_empty());
}

/// What a slot's run is told: a task's variables (these tests look at
/// processes, not at the variables).
fn task_env() -> leasehold::supervise::CommandEnv {
    leasehold::supervise::CommandEnv::Task {
        queue: LeaseName::new("q").unwrap(),
        id: LeaseName::new("t").unwrap(),
        token: leasehold::Token(1),
        attempt: 1,
        store: "sqlite:///nowhere".into(),
    }
}

/// A guard program in `dir` named `name`, of another build, that
/// appends a line to `tried` when started.
fn other_builds_guard(dir: &std::path::Path, name: &str, tried: &std::path::Path) -> GuardProgram {
    let path = dir.join(name);
    let guard = std::path::Path::new(env!("CARGO_BIN_EXE_leasehold-guard"));
    leasehold_testkit::process::write_other_builds_guard(&path, guard, tried);
    GuardProgram::new(path)
}

/// What must never happen: a command run by a guard of another build,
/// which may speak another protocol (a `leasehold-guard` found on `$PATH`,
/// or left beside a program upgraded alone). Such a guard starts nothing
/// and says which build it is; the supervisor then fails with both builds
/// named — holding no lease — or, where the program has a fallback, runs
/// the command under that instead, once.
#[test]
fn a_guard_of_another_build_starts_nothing_and_the_fallback_runs_the_command() {
    if !std::path::Path::new("/proc/self/exe").exists() {
        return; // the parent's program is read from /proc (Linux)
    }
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let tried = dir.path().join("tried");
    let t = timing(10_000);
    let name = LeaseName::new("job").unwrap();
    let lease = LeaseRun::new(name.clone(), t.clone());
    // The program that ran the command's parent: the guard it ran under.
    let ran_file = dir.path().join("ran");
    let mut spec = spec(&format!("readlink /proc/$PPID/exe; touch '{}'", ran_file.display()), &t);
    let run_in = |spec: Spec| {
        let supervised = supervise::Supervised::launch_in(spec, Some(dir.path())).unwrap();
        supervise::run_spawned(&store, &lease, supervised, |_| {}, |_, _| {})
    };

    // No fallback: refused, nothing ran, no lease left held.
    spec.guard = other_builds_guard(dir.path(), "other-guard", &tried);
    let error = run_in(spec.clone()).unwrap_err().to_string();
    assert!(
        error.contains("other-guard") && error.contains("is another build of leasehold"),
        "{error}"
    );
    assert!(error.contains(supervise::GUARD_BUILD), "{error}");
    assert!(!ran_file.exists(), "a guard of another build ran the command");
    assert!(
        store.status(&name).unwrap().is_none_or(|s| s.grants.is_empty()),
        "a lease is held after the refusal"
    );
    assert_eq!(std::fs::read_to_string(&tried).unwrap().lines().count(), 1);

    // With a fallback: the command runs once, under the fallback.
    spec.guard = other_builds_guard(dir.path(), "other-guard", &tried).or_else(guard());
    let RunOutcome::Ran(ran) = run_in(spec.clone()).unwrap() else {
        panic!("held")
    };
    assert_eq!(ran.ended, Ok(0));
    assert_eq!(
        String::from_utf8_lossy(&ran.finished.stdout).trim(),
        std::fs::canonicalize(env!("CARGO_BIN_EXE_leasehold-guard"))
            .unwrap()
            .to_string_lossy()
    );
    assert_eq!(
        std::fs::read_to_string(&tried).unwrap().lines().count(),
        2,
        "the other build was tried first"
    );

    // A guard that predates the check refuses `--build` and ends without a
    // report (its error on the command's stderr): the fallback runs too.
    let old = dir.path().join("old-guard");
    leasehold_testkit::process::write_script(
        &old,
        "#!/bin/sh\necho 'leasehold: unknown guard argument' >&2\nexit 1\n",
    );
    spec.guard = GuardProgram::new(&old).or_else(guard());
    let RunOutcome::Ran(ran) = run_in(spec.clone()).unwrap() else {
        panic!("held")
    };
    assert_eq!(ran.ended, Ok(0));

    // A worker's slot the same.
    std::fs::remove_file(&ran_file).unwrap();
    spec.guard = other_builds_guard(dir.path(), "other-guard", &tried);
    let error = GuardSlot::<ClaimLost>::spawn(spec.clone()).unwrap_err().to_string();
    assert!(error.contains("is another build of leasehold"), "{error}");
    spec.guard = other_builds_guard(dir.path(), "other-guard", &tried).or_else(guard());
    let mut slot: GuardSlot<ClaimLost> = GuardSlot::spawn(spec).unwrap();
    let mut run = slot.next(None).unwrap();
    run.start_with(&task_env()).unwrap();
    assert_eq!(run.wait().code, Some(0));
    assert!(ran_file.exists());
    assert_eq!(std::fs::read_to_string(&tried).unwrap().lines().count(), 4);
}
