//! The server crashes (`pg_ctl stop -m immediate`) and restarts, several
//! times, in the middle of about 2,000 lease and task operations from 8
//! threads, each with its own store handle (FAULTS.md case 11, one run).
//!
//! Proved: no token is ever issued twice (leases and task claims), every
//! completion the store accepted is the one that stuck (none lost), no task
//! has two accepted completions, and after the storm every task is done.
//! An operation cut off by the crash may fail (unavailable) — it must never
//! be reported as done when it was not.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{Backend, LeaseAcquire, TaskAddParams, TaskClaimParams, TaskState, TaskUpdate, Token};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use support::Server;

const WORKERS: usize = 8;
const OPS_PER_WORKER: usize = 250;
const TASKS: usize = 400;
const TTL: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Seen {
    lease_tokens: Vec<Token>,
    claim_tokens: HashMap<String, Vec<Token>>,
    accepted: HashMap<String, Vec<Token>>,
    errors: usize,
}

fn open(url: &str) -> PostgresBackend {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match PostgresBackend::open(url, PostgresOptions::default()) {
            Ok(s) => return s,
            // The server may be restarting: it will be back.
            Err(_) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("open {url}: {e}"),
        }
    }
}

fn claim(queue: &str) -> TaskClaimParams {
    TaskClaimParams {
        queue: params::name(queue),
        owner: "worker".into(),
        ttl: TTL,
    }
}

/// One lease operation (acquire, then release) and one task operation
/// (claim, then complete), recording what the store accepted.
fn step(store: &PostgresBackend, seen: &Mutex<Seen>) -> usize {
    let mut errors = 0;
    let acquire = leasehold_backend::LeaseAcquireParams {
        ttl: TTL,
        ..params::acquire("job")
    };
    match store.lease_acquire(&acquire) {
        Ok(LeaseAcquire::Acquired(g)) => {
            seen.lock().unwrap().lease_tokens.push(g.token);
            if store.lease_release(&params::release("job", g.token)).is_err() {
                errors += 1;
            }
        }
        Ok(LeaseAcquire::Held(_)) => {}
        Err(_) => errors += 1,
    }
    match store.task_claim(&claim("q")) {
        Ok(Some(c)) => {
            let id = c.id.as_str().to_owned();
            seen.lock()
                .unwrap()
                .claim_tokens
                .entry(id.clone())
                .or_default()
                .push(c.token);
            match store.task_complete(&c.task_ref(), Some(&serde_json::json!(c.token.0))) {
                Ok(TaskUpdate::Applied) => seen.lock().unwrap().accepted.entry(id).or_default().push(c.token),
                Ok(TaskUpdate::Lost(_)) => {}
                Err(_) => errors += 1,
            }
        }
        Ok(None) => {}
        Err(_) => errors += 1,
    }
    errors
}

#[test]
fn crashes_mid_storm_lose_and_reissue_nothing() {
    let server = Server::start(true);
    let url = server.url("storm");
    let store = open(&url);
    let tasks: Vec<TaskAddParams> = (0..TASKS)
        .map(|i| TaskAddParams {
            queue: params::name("q"),
            id: params::name(&format!("t{i}")),
            payload: serde_json::json!(i),
            priority: 0,
            available_at: SystemTime::now() - Duration::from_secs(1),
            max_attempts: 1000,
        })
        .collect();
    store.task_add(&tasks).unwrap();

    let seen = Arc::new(Mutex::new(Seen::default()));
    let running = Arc::new(AtomicBool::new(true));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (url, seen) = (url.clone(), seen.clone());
            thread::spawn(move || {
                let store = open(&url);
                for _ in 0..OPS_PER_WORKER / 2 {
                    let errors = step(&store, &seen);
                    if errors > 0 {
                        seen.lock().unwrap().errors += errors;
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    let chaos = {
        let running = running.clone();
        thread::spawn(move || {
            let mut crashes = 0;
            thread::sleep(Duration::from_millis(300));
            while running.load(Ordering::SeqCst) && crashes < 4 {
                server.crash();
                thread::sleep(Duration::from_millis(300));
                server.restart();
                crashes += 1;
                thread::sleep(Duration::from_millis(700));
            }
            (server, crashes)
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    running.store(false, Ordering::SeqCst);
    let (server, crashes) = chaos.join().unwrap();
    assert!(crashes >= 1, "the server never crashed during the storm");

    // Drain: claims cut off by a crash expire after TTL and are redone.
    let store = open(&server.url("storm"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = store.task_stats(Some(&params::name("q"))).unwrap();
        if stats[0].done == TASKS as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "queue never finished: {stats:?}");
        if step(&store, &seen) == 0 && stats[0].pending == 0 {
            thread::sleep(Duration::from_millis(200));
        }
    }

    let seen = seen.lock().unwrap();
    let mut tokens = seen.lease_tokens.clone();
    tokens.sort();
    let n = tokens.len();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "a lease token was issued twice");
    let last = store.lease_get(&params::name("job")).unwrap().unwrap().last_token;
    assert!(tokens.last().is_none_or(|t| *t <= last), "the counter went backwards");
    for (id, claims) in &seen.claim_tokens {
        let mut c = claims.clone();
        c.sort();
        c.dedup();
        assert_eq!(
            c.len(),
            claims.len(),
            "task {id}: a claim token was issued twice: {claims:?}"
        );
    }
    for (id, accepted) in &seen.accepted {
        assert_eq!(accepted.len(), 1, "task {id}: completion accepted twice: {accepted:?}");
        let task = store.task_get(&params::name("q"), &params::name(id)).unwrap().unwrap();
        assert_eq!(task.state, TaskState::Done, "task {id}: accepted completion lost");
        assert_eq!(task.token, accepted[0], "task {id}: another claim's completion stuck");
        assert_eq!(task.result, Some(serde_json::json!(accepted[0].0)));
    }
    eprintln!(
        "restart storm: {crashes} crashes, {} lease grants, {} accepted completions, {} operations failed as unavailable",
        n,
        seen.accepted.len(),
        seen.errors
    );
}
