//! Task queue throughput on the embedded store, each figure next to the
//! same SQL run directly with rusqlite on the same database file, in the
//! same run.
//!
//!     cargo run --release -p leasehold --example queue_rate -- DIR [BIG] [CLI_BINARY]
//!
//! BIG (default 1000000) is the size of the large queue and of the batch
//! add. Figures: batch add of BIG tasks; claim+done per second with 1 and
//! 4 workers; claim+done with 1 000 vs BIG tasks queued; `leasehold work`
//! running `true` per task with 1 and 4 workers, next to a loop spawning
//! `true` from as many threads (when the CLI binary is given; `WORK_TASKS`
//! tasks each, default 400; with `ONLY_WORK` set, only these).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use leasehold::unix_ms::to_ms;
use leasehold::{LeaseName, NewTask, Store, TaskId};
use rusqlite::{Connection, TransactionBehavior, params};

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).unwrap()
}

#[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn tasks(prefix: &str, n: usize) -> Vec<NewTask> {
    (0..n)
        .map(|i| NewTask {
            id: Some(TaskId::new(format!("{prefix}{i}")).unwrap()),
            ..NewTask::new(serde_json::json!({ "n": i }))
        })
        .collect()
}

fn reference_conn(db: &Path) -> Connection {
    let conn = Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn
}

/// The reference for a batch add: the same INSERT, one transaction.
fn sql_add(db: &Path, queue: &str, n: usize) -> Duration {
    let mut conn = reference_conn(db);
    let start = Instant::now();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO task (queue, id, payload, priority, state, max_attempts, available_ms, created_ms, updated_ms) \
                 VALUES (?1, ?2, ?3, 0, 'pending', 5, ?4, ?4, ?4) ON CONFLICT (queue, id) DO NOTHING",
            )
            .unwrap();
        let now = to_ms(SystemTime::now());
        for i in 0..n {
            insert
                .execute(params![queue, format!("r{i}"), format!("{{\"n\":{i}}}"), now])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    start.elapsed()
}

/// The reference for claim+done: the claim query, the claim update, the
/// done update — two durable transactions, as leasehold does.
fn sql_claim_done(db: &Path, queue: &str, n: usize) -> usize {
    let mut conn = reference_conn(db);
    let mut done = 0;
    for _ in 0..n {
        let now = to_ms(SystemTime::now());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let seq: Option<i64> = tx
            .query_row(leasehold_sqlite::CLAIM_SQL, params![queue, now], |r| r.get(0))
            .ok();
        let Some(seq) = seq else { break };
        tx.execute(
            "UPDATE task SET state = 'running', attempts = attempts + 1, token = token + 1, owner = 'ref', \
             boot_id = 'ref', lease_until_ns = ?2, updated_ms = ?3 WHERE seq = ?1",
            params![seq, i64::MAX, now],
        )
        .unwrap();
        tx.commit().unwrap();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        tx.execute(
            "UPDATE task SET state = 'done', result = 'null', boot_id = NULL, lease_until_ns = NULL, updated_ms = ?2 \
             WHERE seq = ?1 AND state = 'running'",
            params![seq, now],
        )
        .unwrap();
        tx.commit().unwrap();
        done += 1;
    }
    done
}

fn lib_claim_done(store: &Store, queue: &LeaseName, n: usize) -> usize {
    let mut done = 0;
    for _ in 0..n {
        let Some(claim) = store.task_claim(queue, Duration::from_secs(60), None).unwrap() else {
            break;
        };
        store.task_complete(&claim.task_ref(), None).unwrap();
        done += 1;
    }
    done
}

/// Run `f` on `workers` threads, each doing `each` cycles; cycles per second.
fn parallel(workers: usize, each: usize, f: impl Fn(usize) -> usize + Send + Sync + 'static) -> f64 {
    let f = Arc::new(f);
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let f = f.clone();
            std::thread::spawn(move || {
                let _ = w;
                f(each)
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    per_sec(total, start.elapsed())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(label: &str, ours: f64, reference: f64) {
    println!(
        "{label:<48} {ours:>10.0} /s   reference {reference:>10.0} /s   ratio {:.2}",
        ours / reference
    );
}

fn main() {
    let dir: PathBuf = std::env::args().nth(1).map_or_else(std::env::temp_dir, PathBuf::from);
    let big: usize = std::env::args().nth(2).map_or(1_000_000, |s| s.parse().unwrap());
    let cli = std::env::args().nth(3).map(PathBuf::from);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("queue.db");
    let store = Store::open_sqlite(&db).unwrap();
    let open = {
        let db = db.clone();
        move || Store::open_sqlite(&db).unwrap()
    };
    if let (Some(cli), Some(_)) = (&cli, std::env::var_os("ONLY_WORK")) {
        return work_rates(&store, &db, cli);
    }

    // Batch add: library (one call, one transaction) vs the same SQL,
    // alternating over three rounds of BIG/3 (the BIG queue is the three
    // rounds' tasks together).
    let third = big / 3;
    let (mut lib, mut sql, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        let start = Instant::now();
        store
            .task_add(&name("big"), tasks(&format!("t{round}-"), third))
            .unwrap();
        let ours = per_sec(third, start.elapsed());
        let reference = per_sec(third, sql_add(&db, &format!("big-ref-{round}"), third));
        lib.push(ours);
        sql.push(reference);
        ratios.push(ours / reference);
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let ratio = median(ratios);
    println!(
        "{:<48} {:>10.0} /s   reference {:>10.0} /s   ratio {ratio:.2} ({lo:.2}–{hi:.2})   target >= 0.95: {}",
        format!("task add, batch of {third} (3 rounds)"),
        median(lib),
        median(sql),
        if ratio >= 0.95 { "met" } else { "missed" }
    );

    // Claim+done, 1 and 4 workers, alternating with the reference.
    let cycles = 300;
    store.task_add(&name("work"), tasks("w", cycles * 4 * 3 * 2)).unwrap();
    sql_add(&db, "work-ref", cycles * 4 * 3 * 2);
    for workers in [1, 4] {
        let (mut lib, mut sql) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let open = open.clone();
            lib.push(parallel(workers, cycles, move |n| {
                lib_claim_done(&open(), &name("work"), n)
            }));
            let db = db.clone();
            sql.push(parallel(workers, cycles, move |n| sql_claim_done(&db, "work-ref", n)));
        }
        row(&format!("claim+done, {workers} worker(s)"), median(lib), median(sql));
    }

    // Claim cost against queue length: 1 000 vs BIG queued.
    store.task_add(&name("small"), tasks("s", 1000)).unwrap();
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let start = Instant::now();
        let n = lib_claim_done(&store, &name("small"), 200);
        small.push(per_sec(n, start.elapsed()));
        let start = Instant::now();
        let n = lib_claim_done(&store, &name("big"), 200);
        large.push(per_sec(n, start.elapsed()));
    }
    row(
        &format!("claim+done with {big} queued (ref: 1000 queued)"),
        median(large),
        median(small),
    );

    if let Some(cli) = cli {
        work_rates(&store, &db, &cli);
    }
}

/// `leasehold work QUEUE --until-empty -- true` with 1 and 4 workers, each
/// next to spawning `true` as many times the plainest way (std's
/// `Command::status`, the PATH lookup included, as `work` does it) from
/// as many threads, alternating over three rounds; medians.
fn work_rates(store: &Store, db: &Path, cli: &Path) {
    let n: usize = std::env::var("WORK_TASKS").map_or(400, |s| s.parse().unwrap());
    let url = format!("sqlite://{}", db.display());
    for workers in [1usize, 4] {
        let (mut ours, mut reference, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..3 {
            let queue = format!("cli-{workers}-{round}");
            store.task_add(&name(&queue), tasks("c", n)).unwrap();
            let start = Instant::now();
            let status = Command::new(cli)
                .args(["--store", &url, "work", &queue, "--until-empty"])
                .args(["--concurrency", &workers.to_string(), "--", "true"])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            let o = per_sec(n, start.elapsed());
            let r = parallel(workers, n / workers, |each| {
                for _ in 0..each {
                    Command::new("true").status().unwrap();
                }
                each
            });
            ours.push(o);
            reference.push(r);
            ratios.push(o / r);
        }
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let ratio = median(ratios);
        println!(
            "{:<48} {:>10.0} /s   reference {:>10.0} /s   ratio {ratio:.2} ({lo:.2}–{hi:.2})   target >= 0.5: {}",
            format!("leasehold work -- true, --concurrency {workers} (ref: {workers}-way spawn loop)"),
            median(ours),
            median(reference),
            if ratio >= 0.5 { "met" } else { "missed" }
        );
    }
}
