//! The status page's costs on a big store (a benchmark, not a test):
//! server-side time to render the leases page with 10,000 live leases, a
//! queue page with 1,000,000 tasks, a `/metrics` scrape, and the reading
//! of the store that feeds them (once per refresh, shared by every viewer).
//!
//!     cargo run --release -p leasehold-bench --bin serve_bench [DIR]
//!
//! DIR (default: a temporary directory under /dev/shm, so building the
//! store does not wait on 10,000 fsyncs) holds the SQLite store.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leasehold::{AcquireOptions, LeaseName, NewTask, Store, TaskState};
use leasehold_serve::http::Request;
use leasehold_serve::{App, Config};

const LEASES: usize = 10_000;
const TASKS: usize = 1_000_000;
const ROUNDS: usize = 20;

fn get(path: &str) -> Request {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    Request {
        method: "GET".into(),
        path: path.into(),
        query: leasehold_serve::http::parse_query(query),
        headers: vec![],
        body: vec![],
        peer: SocketAddr::from(([127, 0, 0, 1], 1)),
    }
}

/// The bytes of a response's body (a streamed one counts 0).
fn size(r: leasehold_serve::http::Response) -> usize {
    match r.body {
        leasehold_serve::http::Body::Bytes(b) => b.len(),
        leasehold_serve::http::Body::Stream(_) => 0,
    }
}

fn timed(label: &str, mut f: impl FnMut() -> usize) {
    let mut times: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            let bytes = f();
            std::hint::black_box(bytes);
            t.elapsed()
        })
        .collect();
    times.sort();
    let bytes = f();
    println!(
        "{label:<44} median {:>8.1} ms   max {:>8.1} ms   {:>9} bytes",
        times[ROUNDS / 2].as_secs_f64() * 1e3,
        times[ROUNDS - 1].as_secs_f64() * 1e3,
        bytes
    );
}

/// Fill a new store: the leases, the tasks, and some tasks claimed and
/// failed, completed or left running.
fn build(store: &Store) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let options = AcquireOptions {
        ttl: Duration::from_secs(3600),
        ..AcquireOptions::default()
    };
    for i in 0..LEASES {
        store.try_acquire(&LeaseName::new(format!("agent-{i:05}"))?, &options)?;
    }
    let queue = LeaseName::new("crawl")?;
    for batch in 0..TASKS / 10_000 {
        let tasks = (0..10_000)
            .map(|i| {
                let mut t = NewTask::new(serde_json::json!({ "url": format!("https://example.org/{batch}/{i}") }));
                t.id = Some(LeaseName::new(format!("t{batch}-{i}")).unwrap());
                t
            })
            .collect();
        store.task_add(&queue, tasks)?;
    }
    // Some dead and done tasks with errors, some running.
    for i in 0..200 {
        let c = store
            .task_claim(&queue, Duration::from_secs(600), None)?
            .expect("a task");
        match i % 4 {
            0 => {
                store.task_fail(&c.task_ref(), "HTTP 503 from upstream", leasehold::Retry::Never)?;
            }
            1 => {
                store.task_complete(&c.task_ref(), None)?;
            }
            _ => {}
        }
    }
    eprintln!(
        "built {LEASES} leases and {TASKS} tasks in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => tempfile::tempdir_in("/dev/shm")?.keep(),
    };
    let path = dir.join("bench.db");
    let fresh = !path.exists();
    let store = Store::open_sqlite(&path)?;
    if fresh {
        build(&store)?;
    }
    let config = Config {
        refresh: Duration::from_secs(3600),
        ..Config::default()
    };
    let t = Instant::now();
    let app = App::new(Store::open_sqlite(&path)?, &config, None);
    println!(
        "{:<44} {:>8.1} ms (the follower's first reading, every name visited)",
        "start (first reading)",
        t.elapsed().as_secs_f64() * 1e3
    );
    let snapshot = app.shared().snapshot();
    println!(
        "{:<44} {:>8.1} ms",
        "one reading of the store (list + queues)",
        snapshot.took.as_secs_f64() * 1e3
    );
    assert_eq!(snapshot.leases.len(), LEASES);
    timed("GET / (leases page, 100 of 10,000 names)", || {
        size(app.handle(&get("/")))
    });
    timed("GET /?q=agent-09 (filtered)", || size(app.handle(&get("/?q=agent-09"))));
    timed("GET /queues", || size(app.handle(&get("/queues"))));
    timed("GET /queues/crawl (1,000,000 tasks, dead page)", || {
        size(app.handle(&get("/queues/crawl")))
    });
    timed("GET /queues/crawl?state=pending (first page)", || {
        size(app.handle(&get("/queues/crawl?state=pending")))
    });
    // Deep pages, by key: the page after the 500,000th pending task, the
    // page before the last one, and the last page (the links the page
    // draws: `?after=PRIORITY:MICROSECONDS:ID`, `?before=…`, `?last=1`).
    let key = |id: &str| -> Result<String, Box<dyn std::error::Error>> {
        let t = app
            .store()
            .task_get(&LeaseName::new("crawl")?, &LeaseName::new(id)?)?
            .ok_or("no such task")?;
        let micros = t.available_at.duration_since(std::time::UNIX_EPOCH)?.as_micros();
        Ok(format!("{}:{micros}:{}", t.priority, t.id))
    };
    let middle = format!("/queues/crawl?state=pending&after={}", key("t49-9999")?);
    let near_end = format!("/queues/crawl?state=pending&before={}", key("t99-9900")?);
    timed("GET /queues/crawl pending, after the 500,000th", || {
        size(app.handle(&get(&middle)))
    });
    timed("GET /queues/crawl pending, before the last page", || {
        size(app.handle(&get(&near_end)))
    });
    timed("GET /queues/crawl?state=pending&last=1", || {
        size(app.handle(&get("/queues/crawl?state=pending&last=1")))
    });
    timed("GET /timeline?name=agent-00042", || {
        size(app.handle(&get("/timeline?name=agent-00042")))
    });
    timed("GET /metrics", || size(app.handle(&get("/metrics"))));
    timed("GET /api/leases?limit=100", || {
        size(app.handle(&get("/api/leases?limit=100")))
    });
    let store = app.store();
    timed("store: task_stats (1,000,000 tasks)", || {
        store.task_stats(None).map_or(0, |s| s.len())
    });
    timed("store: list(false) (10,000 names)", || {
        store.list(false).map_or(0, |s| s.len())
    });
    timed("store: task_list pending, 1", || {
        store
            .task_list(Some(&LeaseName::new("crawl").unwrap()), Some(TaskState::Pending), 1)
            .map_or(0, |t| t.len())
    });
    println!("store: {}", path.display());
    Ok(())
}
