//! Throughput of the PostgreSQL store through the seam (what every
//! `leasehold` command and library call goes through), for docs/POSTGRES.md.
//!
//! ```text
//! cargo run --release -p leasehold-bench --bin postgres_rate -- URL lease|task CLIENTS SECONDS
//! ```
//!
//! `lease`: each client acquires and releases its own name (no contention:
//! this measures the store, not waiting). `task`: each client claims and
//! completes tasks of one shared queue, which must hold enough pending
//! tasks (see `bench/setup.sql`). Prints operations (pairs) per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use leasehold_backend::{
    Backend, Holder, LeaseAcquire, LeaseAcquireParams, LeaseName, LeaseReleaseParams, Mode, Owner, TaskBackend as _,
    TaskClaimParams, TaskCompleteParams, TaskUpdate,
};
use leasehold_postgres::{PostgresBackend, PostgresOptions};

fn holder() -> Holder {
    Holder {
        host: "bench".into(),
        boot_id: "bench".into(),
        pid_ns: None,
        pid: std::process::id(),
        start_time: None,
        cmdline: "bench".into(),
        pgid: None,
        guard: None,
        bound: false,
    }
}

fn lease_pair(store: &PostgresBackend, name: &LeaseName) {
    let params = LeaseAcquireParams {
        name: name.clone(),
        owner: Owner {
            label: "bench".into(),
            explicit: false,
        },
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(60),
        holder: holder(),
        ticket: None,
        waiter_ttl: Duration::from_secs(10),
        evict: Vec::new(),
        evict_waiters: Vec::new(),
        waiter_holder: None,
        reacquire_by_process: false,
    };
    let LeaseAcquire::Acquired(g) = store.lease_acquire(&params).expect("acquire") else {
        panic!("{name} held: names are per client")
    };
    store
        .lease_release(&LeaseReleaseParams {
            name: name.clone(),
            token: g.token,
            owner: None,
            grant: None,
        })
        .expect("release");
}

fn task_pair(store: &PostgresBackend, queue: &LeaseName) {
    let claim = store
        .task_claim(&TaskClaimParams {
            queue: queue.clone(),
            owner: "bench".into(),
            ttl: Duration::from_secs(60),
        })
        .expect("claim")
        .expect("the queue ran dry: add more tasks (bench/setup.sql)");
    assert_eq!(
        store
            .task_complete(&TaskCompleteParams {
                task: claim.task_ref(),
                result: None,
            })
            .expect("complete"),
        TaskUpdate::Applied
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, mode, clients, secs] = &args[..] else {
        eprintln!("usage: bench URL lease|task CLIENTS SECONDS");
        std::process::exit(2);
    };
    let clients: usize = clients.parse().expect("CLIENTS");
    let secs: u64 = secs.parse().expect("SECONDS");
    let task = match mode.as_str() {
        "lease" => false,
        "task" => true,
        _ => panic!("mode is lease or task"),
    };
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (url, done, stop) = (url.clone(), done.clone(), stop.clone());
            thread::spawn(move || {
                let options = PostgresOptions {
                    pool_size: 1,
                    ..PostgresOptions::default()
                };
                let store = PostgresBackend::open(&url, options).expect("open");
                let name = LeaseName::new(if task { "bench".to_owned() } else { format!("bench-{i}") }).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if task {
                        task_pair(&store, &name);
                    } else {
                        lease_pair(&store, &name);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Let connections open, then count over the window only.
    thread::sleep(Duration::from_millis(500));
    let start_count = done.load(Ordering::SeqCst);
    let start = Instant::now();
    thread::sleep(Duration::from_secs(secs));
    let n = done.load(Ordering::SeqCst) - start_count;
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    println!(
        "{mode} clients={clients} pairs/s={:.0}",
        f64::from(u32::try_from(n).unwrap_or(u32::MAX)) / elapsed
    );
}
