//! The server crashes (`pg_ctl stop -m immediate`) and restarts, several
//! times, in the middle of about 2,000 lease and task operations from 8
//! threads, each with its own store handle (fault case 11, one run).
//!
//! Proved: no token is ever issued twice (leases and task claims), every
//! completion the store accepted is the one that stuck (none lost), no task
//! has two accepted completions, and after the storm every task is done.
//! An operation cut off by the crash may fail (unavailable) — it must never
//! be reported as done when it was not.
//!
//! The full case 11 — 8 client *processes* (this test binary, re-run as a
//! client), 20 crashes at random points, each in a round of 2,000
//! operations — runs only with `LEASEHOLD_SOAK=1`:
//!
//!     LEASEHOLD_SOAK=1 cargo test -p leasehold-postgres --test restart -- --nocapture soak

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{
    Available, Backend, LeaseAcquire, TaskAddParams, TaskBackend as _, TaskClaimParams, TaskCompleteParams, TaskState,
    TaskStatsParams, TaskUpdate, Token,
};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use leasehold_testkit::postgres::Server;

fn main() {
    // A client process of the soak (this binary, started again by it) runs
    // no tests.
    if let (Ok(url), Ok(out)) = (
        std::env::var("LEASEHOLD_STORM_URL"),
        std::env::var("LEASEHOLD_STORM_OUT"),
    ) {
        storm_client_process(&url, &out);
        return;
    }
    leasehold_testkit::main(&[leasehold_testkit::tests![
        crashes_mid_storm_lose_and_reissue_nothing,
        soak_case_11_processes_across_20_crashes,
    ]]);
}

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
            match store.task_complete(&TaskCompleteParams {
                task: c.task_ref(),
                result: Some(serde_json::json!(c.token.0)),
            }) {
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

fn crashes_mid_storm_lose_and_reissue_nothing() {
    let server = Server::start(true);
    let url = server.url("storm");
    let store = open(&url);
    add_tasks(&store, 0, TASKS);

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

    let store = open(&server.url("storm"));
    drain(&store, &seen, TASKS as u64);

    let seen = seen.lock().unwrap();
    let n = verify(&store, &seen);
    eprintln!(
        "restart storm: {crashes} crashes, {} lease grants, {} accepted completions, {} operations failed as unavailable",
        n,
        seen.accepted.len(),
        seen.errors
    );
}

/// Checks what the clients saw against the store after the storm: no token
/// issued twice, the counter never behind, every accepted completion the
/// one that stuck. Returns the number of lease grants seen.
fn verify(store: &PostgresBackend, seen: &Seen) -> usize {
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
        let task = store.task_get(&params::task_id("q", id)).unwrap().unwrap();
        assert_eq!(task.state, TaskState::Done, "task {id}: accepted completion lost");
        assert_eq!(task.token, accepted[0], "task {id}: another claim's completion stuck");
        assert_eq!(task.result, Some(serde_json::json!(accepted[0].0)));
    }
    n
}

fn add_tasks(store: &PostgresBackend, from: usize, count: usize) {
    let tasks: Vec<TaskAddParams> = (from..from + count)
        .map(|i| TaskAddParams {
            queue: params::name("q"),
            id: params::name(&format!("t{i}")),
            payload: serde_json::json!(i),
            priority: 0,
            available: Available::Now,
            max_attempts: 1000,
        })
        .collect();
    store.task_add(&tasks).unwrap();
}

/// Drain the queue: claims cut off by a crash expire after TTL and are redone.
fn drain(store: &PostgresBackend, seen: &Mutex<Seen>, total: u64) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let stats = store
            .task_stats(&TaskStatsParams {
                queue: Some(params::name("q")),
            })
            .unwrap();
        if stats[0].done == total {
            return;
        }
        assert!(Instant::now() < deadline, "queue never finished: {stats:?}");
        if step(store, seen) == 0 && stats[0].pending == 0 {
            thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A number in `0..n` from the clock (no randomness crate needed).
fn random_below(n: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    u64::from(nanos.wrapping_mul(2_654_435_761)) % n.max(1)
}

const SOAK_CLIENTS: usize = 8;
const SOAK_ROUNDS: usize = 20;
const SOAK_OPS_PER_ROUND: usize = 2_000;

/// One client process of the soak: `SOAK_OPS_PER_ROUND / SOAK_CLIENTS`
/// steps against `url` (`LEASEHOLD_STORM_URL`), then what it saw as lines
/// in the file `out` (`LEASEHOLD_STORM_OUT`).
fn storm_client_process(url: &str, out: &str) {
    let seen = Mutex::new(Seen::default());
    let store = open(url);
    let mut errors = 0;
    for _ in 0..SOAK_OPS_PER_ROUND / SOAK_CLIENTS {
        let e = step(&store, &seen);
        errors += e;
        if e > 0 {
            thread::sleep(Duration::from_millis(50));
        }
    }
    let seen = seen.into_inner().unwrap();
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    writeln!(file, "errors {errors}").unwrap();
    for t in &seen.lease_tokens {
        writeln!(file, "lease {}", t.0).unwrap();
    }
    for (id, tokens) in &seen.claim_tokens {
        for t in tokens {
            writeln!(file, "claim {id} {}", t.0).unwrap();
        }
    }
    for (id, tokens) in &seen.accepted {
        for t in tokens {
            writeln!(file, "accepted {id} {}", t.0).unwrap();
        }
    }
    file.into_inner().unwrap().sync_all().unwrap();
}

fn read_client(path: &std::path::Path, seen: &mut Seen) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("client output {}: {e}", path.display()));
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[..] {
            ["errors", n] => seen.errors += n.parse::<usize>().unwrap(),
            ["lease", t] => seen.lease_tokens.push(Token(t.parse().unwrap())),
            ["claim", id, t] => seen
                .claim_tokens
                .entry(id.into())
                .or_default()
                .push(Token(t.parse().unwrap())),
            ["accepted", id, t] => seen
                .accepted
                .entry(id.into())
                .or_default()
                .push(Token(t.parse().unwrap())),
            _ => panic!("bad client line {line:?}"),
        }
    }
}

/// fault case 11 at full size: 8 client processes, 20 rounds of 2,000
/// operations, the server crashed (`pg_ctl stop -m immediate`) once at a
/// random point of each round and restarted after a random pause.
fn soak_case_11_processes_across_20_crashes() {
    leasehold_testkit::soak_only();
    let started = Instant::now();
    let server = Server::start(true);
    let url = server.url("soak");
    let store = open(&url);
    let exe = std::env::current_exe().unwrap();
    let mut seen = Seen::default();
    let (mut mid_run, mut tasks) = (0, 0);
    for round in 0..SOAK_ROUNDS {
        add_tasks(&store, tasks, SOAK_OPS_PER_ROUND);
        tasks += SOAK_OPS_PER_ROUND;
        let outs: Vec<_> = (0..SOAK_CLIENTS)
            .map(|c| server.dir().join(format!("client-{round}-{c}")))
            .collect();
        let mut children: Vec<_> = outs
            .iter()
            .map(|out| {
                Command::new(&exe)
                    .env("LEASEHOLD_STORM_URL", &url)
                    .env("LEASEHOLD_STORM_OUT", out)
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        thread::sleep(Duration::from_millis(100 + random_below(3_000)));
        let running = children
            .iter_mut()
            .map(|c| c.try_wait().unwrap())
            .filter(Option::is_none)
            .count();
        server.crash();
        thread::sleep(Duration::from_millis(100 + random_below(1_000)));
        server.restart();
        if running > 0 {
            mid_run += 1;
        }
        for mut c in children {
            assert!(c.wait().unwrap().success(), "a client process failed");
        }
        for out in &outs {
            read_client(out, &mut seen);
        }
        eprintln!("soak round {round}: crash with {running} of {SOAK_CLIENTS} clients running");
    }
    let seen = Mutex::new(seen);
    drain(&store, &seen, tasks as u64);
    let seen = seen.into_inner().unwrap();
    let grants = verify(&store, &seen);
    eprintln!(
        "case 11 soak: {SOAK_ROUNDS} crashes ({mid_run} with clients mid-run), {} operations from {SOAK_CLIENTS} processes, \
         {grants} lease grants, {} accepted completions, {} operations failed as unavailable, 0 violations, {:?}",
        SOAK_ROUNDS * SOAK_OPS_PER_ROUND,
        seen.accepted.len(),
        seen.errors,
        started.elapsed()
    );
}
