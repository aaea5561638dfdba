//! Failover to a synchronous standby (docs/POSTGRES.md, "What holds under
//! failover"): a primary with a synchronous streaming standby on loopback,
//! both started here from the Debian binaries; the primary is killed
//! (SIGKILL of its postmaster, as a machine that dies) and the standby
//! promoted while 4 threads acquire and release one lease through a
//! multi-host URL (`host a,b` with `target_session_attrs=read-write`).
//!
//! Proved: every token a client was told about is unique, tokens grow in
//! the order clients were told about them — across the failover — every
//! acknowledged grant is in the new primary's history, and the clients
//! follow the new primary with no change of URL. An operation cut
//! off by the failover may fail (unavailable); it is never reported done.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use leasehold_backend::{Backend, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseHistoryParams, Token};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use leasehold_testkit::postgres::Server;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_promoted_synchronous_standby_reissues_no_acknowledged_token,
    ]]);
}

const WORKERS: usize = 4;
/// Acknowledged grants wanted before the failover, and after it.
const ACKS_EACH_SIDE: usize = 100;
/// Short, so a grant whose release the failover cut off runs out soon.
const TTL: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Seen {
    /// Each acknowledged grant's token, in the order clients were told.
    acked: Vec<Token>,
    errors: usize,
    /// The last failure, to tell why clients did not come back.
    last_error: Option<String>,
}

/// One client: acquire and release "job" through `url` until `running`
/// is cleared, telling `seen` (and counting in `acks`) every grant
/// acknowledged, and `seen` every failure.
fn acquire_and_release_until_stopped(url: &str, seen: &Mutex<Seen>, acks: &AtomicUsize, running: &AtomicBool) {
    let store = PostgresBackend::open(url, PostgresOptions::default()).expect("open");
    let acquire = LeaseAcquireParams {
        ttl: TTL,
        ..params::acquire("job")
    };
    while running.load(Ordering::SeqCst) {
        match store.lease_acquire(&acquire) {
            Ok(LeaseAcquire::Acquired(g)) => {
                // Recorded before the release, so the next grant
                // is recorded after this one.
                seen.lock().unwrap().acked.push(g.token);
                acks.fetch_add(1, Ordering::SeqCst);
                if store.lease_release(&params::release("job", g.token)).is_err() {
                    seen.lock().unwrap().errors += 1;
                }
            }
            Ok(LeaseAcquire::Held(_)) => thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                let mut seen = seen.lock().unwrap();
                seen.errors += 1;
                seen.last_error = Some(e.to_string());
                drop(seen);
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn a_promoted_synchronous_standby_reissues_no_acknowledged_token() {
    let (primary, standby) = Server::start_replicated();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?schema=failover&connect_timeout=2&target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let store = PostgresBackend::open(&url, PostgresOptions::default()).expect("open through the multi-host URL");
    drop(store);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let acks = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (url, seen, acks, running) = (url.clone(), seen.clone(), acks.clone(), running.clone());
            thread::spawn(move || acquire_and_release_until_stopped(&url, &seen, &acks, &running))
        })
        .collect();

    let wait_for = |n: usize, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(40);
        while acks.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "{what}: only {} grants acknowledged; the last failure: {:?}",
                acks.load(Ordering::SeqCst),
                seen.lock().unwrap().last_error
            );
            thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(ACKS_EACH_SIDE, "before the failover");
    primary.kill();
    let before = acks.load(Ordering::SeqCst);
    standby.promote();
    let promoted = Instant::now();
    wait_for(before + 1, "after the failover");
    let regained = promoted.elapsed();
    wait_for(before + ACKS_EACH_SIDE, "after the failover");
    running.store(false, Ordering::SeqCst);
    for w in workers {
        w.join().expect("a worker panicked");
    }

    let seen = seen.lock().unwrap();
    let mut sorted = seen.acked.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        seen.acked.len(),
        "a token was acknowledged twice: {:?}",
        seen.acked
    );
    for pair in seen.acked.windows(2) {
        assert!(pair[0] < pair[1], "token {} acknowledged after {}", pair[1], pair[0]);
    }
    assert!(
        !standby
            .client()
            .query_one("SELECT pg_is_in_recovery()", &[])
            .expect("ask the standby")
            .get::<_, bool>(0),
        "the standby was not promoted"
    );
    // Every grant acknowledged by the old primary is on the new one: its
    // history has each of them, and its counter is past them all.
    let store = PostgresBackend::open(&url, PostgresOptions::default()).expect("open the new primary");
    let granted: Vec<Token> = store
        .lease_history(&LeaseHistoryParams {
            name: params::name("job"),
            limit: 1000,
        })
        .expect("history")
        .into_iter()
        .filter(|e| e.event == HistoryEvent::Granted)
        .filter_map(|e| e.token)
        .collect();
    for token in &seen.acked {
        assert!(
            granted.contains(token),
            "acknowledged token {token} is not on the new primary"
        );
    }
    let last = store
        .lease_get(&params::name("job"))
        .expect("get")
        .expect("known")
        .last_token;
    assert!(
        seen.acked.iter().all(|t| *t <= last),
        "last_token {last} on the new primary"
    );
    eprintln!(
        "failover: {} grants acknowledged ({before} before the primary was killed), tokens {}..{}, {} operations failed during the failover; clients granted again {:.1} s after the promotion",
        seen.acked.len(),
        seen.acked.first().map_or(0, |t| t.0),
        seen.acked.last().map_or(0, |t| t.0),
        seen.errors,
        regained.as_secs_f64(),
    );
}
