//! `leasehold::supervise` and `leasehold::worker` driving real commands
//! through this crate's guard binary.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::supervise::{self, GuardProgram, LeaseRun, Output, RunOutcome, Spec, Stop, Timing};
use leasehold::worker::{CommandJob, Job, Outcome, Until, WorkEvent, Worker, WorkerOptions};
use leasehold::{Acquire, AcquireOptions, Binding, LeaseName, NewTask, Store, TaskState};

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
    Timing::new(Duration::from_millis(ttl_ms), None, None, None).unwrap()
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
    let RunOutcome::Ran {
        grant,
        finished,
        release_error,
    } = supervise::run(
        &store,
        &lease,
        spec(r#"printf %s "$LEASEHOLD_TOKEN"; exit 3"#, &t),
        |_| {},
    )
    .unwrap()
    else {
        panic!("held")
    };
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
    let RunOutcome::Ran { finished, .. } = supervise::run(&store, &lease, spec, |_| {}).unwrap() else {
        panic!("held")
    };
    assert_eq!(finished.stopped, Some(Stop::Stalled(Duration::from_millis(300))));
    assert_eq!(finished.code, Some(128 + 15), "SIGTERM");
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
