//! Waiters are woken by etcd watches, well before their poll interval: a
//! waiter (the loop of the library's `acquire_wait`: attempt, then
//! `wait_for_change` at most `POLL`) blocked on a held lease gets it soon
//! after the holder releases — and after the holder's grant EXPIRES on the
//! server (its etcd lease runs out, deleting its live marker), which no
//! writer announces. Each change is timed so that polling alone would
//! notice it only after 2.5 s or more (the release ~4.5 s into the
//! waiter's 5 s wait; the grant ends 2–2.5 s after it was made, the
//! waiter's poll comes ~5 s after that): a wake-up within `BOUND` is the
//! watch. With `wait_for_change` sleeping instead, both tests fail.
//!
//! `cargo test -p leasehold-etcd --test wake -- --nocapture` prints the
//! latencies.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold_backend::{
    Backend, LeaseAcquire, LeaseAcquireParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, Mode, Owner, Token, WaitTopic, WaiterEnqueueParams, WaiterRefresh, WaiterRefreshParams,
    WaiterRemoveParams,
};
use leasehold_backend_tests::params;
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::etcd;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_waiter_is_woken_by_the_release,
        a_waiter_is_woken_by_the_expiry_of_the_grant,
        waits_on_a_quiet_name_never_outlast_their_timeout,
        renewals_wake_nobody,
        a_waiter_keeps_one_watch_for_all_its_waits,
        a_refresh_after_the_first_reads_nothing,
    ]]);
}

const POLL: Duration = Duration::from_secs(5);
const BOUND: Duration = Duration::from_secs(1);

fn open(prefix: &str) -> EtcdBackend {
    support::open(etcd::shared(), prefix)
}

fn name() -> LeaseName {
    LeaseName::new("job").expect("valid name")
}

fn params(owner: &str, ttl: Duration) -> LeaseAcquireParams {
    LeaseAcquireParams {
        name: name(),
        owner: Owner {
            label: owner.into(),
            explicit: true,
        },
        mode: Mode::Exclusive,
        ttl,
        holder: params::this_process(owner),
        ticket: None,
        waiter_ttl: Duration::from_secs(10),
        evict: Vec::new(),
        evict_waiters: Vec::new(),
        waiter_holder: None,
        reacquire_by_process: false,
    }
}

fn grant(b: &dyn Backend, owner: &str, ttl: Duration) -> Token {
    match b.lease_acquire(&params(owner, ttl)).unwrap() {
        LeaseAcquire::Acquired(g) => g.token,
        LeaseAcquire::Held(h) => panic!("free name held: {h:?}"),
    }
}

enum Step {
    /// The waiter attempted, found the name held, and goes back to waiting.
    Held,
    Acquired(Instant),
}

/// A waiter on its own connection: queue up, then attempt after each
/// `wait_for_change` (at most `POLL`) until it acquires.
fn waiter(prefix: String) -> (mpsc::Receiver<Step>, thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let b = open(&prefix);
        let mut p = params("waiter", Duration::from_secs(30));
        assert!(matches!(b.lease_acquire(&p).unwrap(), LeaseAcquire::Held(_)));
        p.ticket = Some(
            b.waiter_enqueue(&WaiterEnqueueParams {
                name: name(),
                mode: Mode::Exclusive,
                holder: p.holder.clone(),
                ttl: p.waiter_ttl,
            })
            .unwrap(),
        );
        let topic = WaitTopic::lease(&name());
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            b.wait_for_change(&topic, POLL).unwrap();
            match b.lease_acquire(&p).unwrap() {
                LeaseAcquire::Acquired(_) => {
                    tx.send(Step::Acquired(Instant::now())).unwrap();
                    return;
                }
                LeaseAcquire::Held(_) => tx.send(Step::Held).unwrap(),
            }
        }
        panic!("the waiter never acquired");
    });
    (rx, handle)
}

fn acquired(rx: &mpsc::Receiver<Step>) -> Instant {
    loop {
        match rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiter never got through")
        {
            Step::Held => {}
            Step::Acquired(at) => return at,
        }
    }
}

fn check(latency: Duration, change: &str) {
    eprintln!("waiter acquired {latency:?} after {change} (poll interval {POLL:?})");
    assert!(
        latency < BOUND,
        "woken {latency:?} after {change}: by polling, not by the watch"
    );
}

fn a_waiter_is_woken_by_the_release() {
    let prefix = etcd::unique_prefix("wake", "release");
    let holder = open(&prefix);
    let token = grant(&holder, "holder", Duration::from_secs(60));
    let (rx, handle) = waiter(prefix);
    // The waiter's first wait (no cursor yet) returns at once; after that
    // attempt it waits up to POLL. Release well into that wait: polling
    // alone would notice only ~4.5 s later.
    match rx.recv_timeout(Duration::from_secs(30)).expect("the waiter attempted") {
        Step::Held => {}
        Step::Acquired(_) => panic!("the waiter acquired a held lease"),
    }
    thread::sleep(Duration::from_millis(500));
    assert!(rx.try_recv().is_err(), "the waiter woke without a change");
    // From before the release is sent: the latency includes its commit.
    let released = Instant::now();
    let out = holder
        .lease_release(&LeaseReleaseParams {
            name: name(),
            token,
            owner: Some("holder".into()),
            grant: None,
        })
        .unwrap();
    assert_eq!(out, LeaseRelease::Released);
    check(
        acquired(&rx).saturating_duration_since(released),
        "the release was sent",
    );
    handle.join().unwrap();
}

fn a_waiter_is_woken_by_the_expiry_of_the_grant() {
    let prefix = etcd::unique_prefix("wake", "expiry");
    let holder = open(&prefix);
    // A 1 s grant, never renewed nor released (etcd may round a lease up
    // to its minimum TTL, 2 s with default timing; its lessor revokes
    // expired leases in rounds of ~500 ms).
    let granted = Instant::now();
    let token = grant(&holder, "holder", Duration::from_secs(1));
    let (rx, handle) = waiter(prefix.clone());
    // Another client polls until the grant is gone (no live grant with its
    // token): it ended after the last time it was seen live.
    let last_live = {
        let observer = open(&prefix);
        let mut seen = Instant::now();
        loop {
            let state = observer.lease_get(&name()).unwrap().expect("granted");
            if state.grants.iter().all(|g| g.token != token) {
                break seen;
            }
            seen = Instant::now();
            assert!(granted.elapsed() < Duration::from_secs(30), "the grant never expired");
            thread::sleep(Duration::from_millis(5));
        }
    };
    let at = acquired(&rx);
    eprintln!(
        "the 1 s grant was last seen live {:?} after it was granted",
        last_live.saturating_duration_since(granted)
    );
    check(at.saturating_duration_since(last_live), "the grant was last seen live");
    handle.join().unwrap();
}

fn waits_on_a_quiet_name_never_outlast_their_timeout() {
    let b = open(&etcd::unique_prefix("wake", "quiet"));
    let topic = WaitTopic::lease(&name());
    for timeout in [
        Duration::from_millis(50),
        Duration::from_millis(300),
        Duration::from_millis(300),
    ] {
        let start = Instant::now();
        b.wait_for_change(&topic, timeout).unwrap();
        let took = start.elapsed();
        assert!(took <= timeout + Duration::from_millis(100), "{took:?} > {timeout:?}");
    }
}

fn renewals_wake_nobody() {
    let prefix = etcd::unique_prefix("wake", "renew");
    let b = open(&prefix);
    let token = grant(&b, "holder", Duration::from_secs(30));
    let topic = WaitTopic::lease(&name());
    // Set the cursor (the first wait returns at once).
    b.wait_for_change(&topic, Duration::from_secs(1)).unwrap();
    let renewer = {
        let b = open(&prefix);
        thread::spawn(move || {
            for _ in 0..3 {
                thread::sleep(Duration::from_millis(100));
                let renewed = b
                    .lease_renew(&LeaseRenewParams {
                        name: name(),
                        token,
                        owner: Some("holder".into()),
                        grant: None,
                        ttl: Duration::from_secs(30),
                    })
                    .unwrap();
                assert!(matches!(renewed, LeaseRenew::Renewed(_)));
            }
        })
    };
    let start = Instant::now();
    b.wait_for_change(&topic, Duration::from_millis(800)).unwrap();
    let took = start.elapsed();
    renewer.join().unwrap();
    assert!(took >= Duration::from_millis(750), "woken after {took:?} by a renewal");
}

/// A waiter waits in slices of its poll interval (the library's 100 ms);
/// its watch is made once and kept for all of them, not made and
/// cancelled at each (two round trips and a server-side watcher ten times
/// a second for every waiter: 200 idle waiters took 6.7 % of a core).
/// Counted by the server itself — its gRPC counter of Watch streams
/// started — on a server of this test's own: 30 waits of 50 ms on one
/// topic start at most two (the old waits started one each).
fn a_waiter_keeps_one_watch_for_all_its_waits() {
    let server = etcd::EtcdServer::start();
    let b = support::open(&server, "/kept");
    grant(&b, "holder", Duration::from_secs(30));
    let topic = WaitTopic::lease(&name());
    // Set the cursor (the first wait returns at once).
    b.wait_for_change(&topic, Duration::from_millis(50)).unwrap();
    let before = watches_started(&server);
    for _ in 0..30 {
        b.wait_for_change(&topic, Duration::from_millis(50)).unwrap();
    }
    let started = watches_started(&server) - before;
    assert!(started <= 2, "30 waits on one topic started {started} watches");
    // And the kept watch still wakes the waiter.
    let releaser = {
        let b = support::open(&server, "/kept");
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            let state = b.lease_get(&name()).unwrap().expect("the name is held");
            b.lease_release(&params::release(name().as_str(), state.grants[0].token))
                .unwrap();
        })
    };
    let start = Instant::now();
    b.wait_for_change(&topic, Duration::from_secs(5)).unwrap();
    releaser.join().unwrap();
    check(start.elapsed(), "the release, on the kept watch");
}

/// The server's count of Watch streams started.
fn watches_started(server: &etcd::EtcdServer) -> u64 {
    server.grpc_count("grpc_server_started_total", "Watch")
}

/// A waiter's place is refreshed by one keep-alive of its etcd lease: the
/// lease is found by a read at the first refresh only (issue 41, item 3:
/// each of 200 idle waiters' refreshes, every 20 s, read the waiter's key
/// to find its lease — half of what the refreshes cost). Counted by the
/// server itself, on a server of this test's own: ten refreshes after the
/// first make no Range call. A place removed is then Gone, though its
/// lease was known.
fn a_refresh_after_the_first_reads_nothing() {
    let server = etcd::EtcdServer::start();
    let b = support::open(&server, "/refresh");
    grant(&b, "holder", Duration::from_secs(30));
    let ticket = b
        .waiter_enqueue(&WaiterEnqueueParams {
            name: name(),
            mode: Mode::Exclusive,
            holder: params::this_process("waiter"),
            ttl: Duration::from_secs(60),
        })
        .unwrap();
    let refresh = || {
        b.waiter_refresh(&WaiterRefreshParams {
            name: name(),
            ticket,
            ttl: Duration::from_secs(60),
        })
        .unwrap()
    };
    assert_eq!(refresh(), WaiterRefresh::Refreshed);
    let ranges = || server.grpc_count("grpc_server_handled_total", "Range");
    let before = ranges();
    for _ in 0..10 {
        assert_eq!(refresh(), WaiterRefresh::Refreshed);
    }
    let read = ranges() - before;
    assert_eq!(
        read, 0,
        "ten refreshes of a place whose lease is known made {read} reads"
    );
    b.waiter_remove(&WaiterRemoveParams { name: name(), ticket }).unwrap();
    assert_eq!(refresh(), WaiterRefresh::Gone, "a removed place was refreshed");
}
