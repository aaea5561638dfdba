//! Waiters are woken by LISTEN/NOTIFY, well before their poll interval:
//! a lease waiter (the library's `acquire_wait`) when the holder releases,
//! and a `work`-style idle loop when a task is added. The poll interval is
//! set to 5 s (a waiter still refreshes its place every 2.5 s), and each
//! change is timed so that polling alone would notice it only after 2 s or
//! more: a wake-up within 1 s is a notification.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use leasehold::{Acquire, AcquireOptions, Cancel, LeaseRelease, Store, StoreOptions, StoreUrl, WaitTopic};
use leasehold_backend::{Available, TaskAddParams, TaskClaimParams};
use leasehold_backend_tests::params;
use leasehold_testkit::postgres::Server;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_lease_waiter_is_woken_by_the_release,
        an_idle_worker_is_woken_by_a_task_add,
        waits_on_a_quiet_topic_never_outlast_their_timeout,
    ]]);
}

const POLL: Duration = Duration::from_secs(5);
const BOUND: Duration = Duration::from_secs(1);

fn store(url: &str) -> Store {
    Store::open(
        &StoreUrl::parse(url).unwrap(),
        &StoreOptions {
            poll_interval: Some(POLL),
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// The waiter reports when it got through on `rx`: within `BOUND` of
/// `sent` (when the change was sent, so its commit counts too).
fn check_woken(rx: &mpsc::Receiver<Instant>, sent: Instant, who: &str, change: &str) {
    let woke = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter never got through");
    let latency = woke.saturating_duration_since(sent);
    eprintln!("{who} {latency:?} after {change} was sent (poll interval {POLL:?})");
    assert!(latency < BOUND, "woken after {latency:?}: by polling, not by NOTIFY");
}

/// When the waiter's registration expires (moved by each refresh).
fn waiter_expiry(url: &str) -> Option<SystemTime> {
    let schema = url.split("schema=").nth(1).unwrap().split('&').next().unwrap();
    let mut client = Server::shared().client();
    client
        .query_one(&format!("SELECT max(expires_at) FROM \"{schema}\".lease_waiter"), &[])
        .unwrap()
        .get(0)
}

fn a_lease_waiter_is_woken_by_the_release() {
    let url = Server::shared().url(&Server::fresh_schema());
    let holder = store(&url);
    let name = params::name("job");
    let options = AcquireOptions {
        owner: Some("holder".into()),
        ..AcquireOptions::default()
    };
    let Acquire::Acquired(grant) = holder.try_acquire(&name, &options).unwrap() else {
        panic!("free name held")
    };
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let (url, name) = (url.clone(), name.clone());
        thread::spawn(move || {
            let store = store(&url);
            let wait = Some(Duration::from_secs(60));
            let got = store.acquire_wait(&name, &AcquireOptions::default(), wait, &Cancel::new(), |_| {});
            tx.send(Instant::now()).unwrap();
            got.unwrap()
        })
    };
    // Long enough for the waiter's backoff to reach its longest pause;
    // then release just after the waiter refreshed its place in the queue
    // (a write, seen in lease_waiter), so that polling alone would take
    // another ~2.5 s (the refresh period) to notice.
    thread::sleep(Duration::from_secs(4));
    assert!(rx.try_recv().is_err(), "the waiter acquired a held lease");
    let refreshed = waiter_expiry(&url);
    while waiter_expiry(&url) == refreshed {
        thread::sleep(Duration::from_millis(20));
    }
    // From before the release is sent: the latency includes its commit.
    let released = Instant::now();
    assert_eq!(holder.release(&grant).unwrap(), LeaseRelease::Released);
    check_woken(&rx, released, "lease waiter acquired", "the release");
    assert!(matches!(waiter.join().unwrap(), Acquire::Acquired(_)));
}

fn an_idle_worker_is_woken_by_a_task_add() {
    let url = Server::shared().url(&Server::fresh_schema());
    let adder = store(&url);
    let queue = params::name("crawl");
    let (tx, rx) = mpsc::channel();
    let worker = {
        let (url, queue) = (url.clone(), queue.clone());
        thread::spawn(move || {
            // The idle loop of `leasehold work`: claim, else wait for the
            // queue (here with the 5 s poll interval as the fallback).
            let store = store(&url);
            let topic = WaitTopic::queue(&queue);
            let claim = TaskClaimParams {
                queue: queue.clone(),
                owner: "worker".into(),
                ttl: Duration::from_secs(30),
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Some(c) = store.tasks().unwrap().task_claim(&claim).unwrap() {
                    tx.send(Instant::now()).unwrap();
                    return c.id;
                }
                store.backend().wait_for_change(&topic, POLL).unwrap();
            }
            panic!("no task claimed");
        })
    };
    thread::sleep(Duration::from_secs(3));
    assert!(rx.try_recv().is_err(), "claimed from an empty queue");
    let sent = Instant::now();
    adder
        .tasks()
        .unwrap()
        .task_add(&[TaskAddParams {
            queue: queue.clone(),
            id: params::name("t1"),
            payload: serde_json::json!(1),
            priority: 0,
            available: Available::Now,
            max_attempts: 3,
        }])
        .unwrap();
    check_woken(&rx, sent, "idle worker claimed", "the add");
    assert_eq!(worker.join().unwrap().as_str(), "t1");
}

fn waits_on_a_quiet_topic_never_outlast_their_timeout() {
    let url = Server::shared().url(&Server::fresh_schema());
    let store = store(&url);
    let topic = WaitTopic::lease(&params::name("quiet"));
    for timeout in [
        Duration::from_millis(50),
        Duration::from_millis(300),
        Duration::from_millis(300),
    ] {
        let start = Instant::now();
        store.backend().wait_for_change(&topic, timeout).unwrap();
        let took = start.elapsed();
        assert!(took <= timeout + Duration::from_millis(100), "{took:?} > {timeout:?}");
    }
}
