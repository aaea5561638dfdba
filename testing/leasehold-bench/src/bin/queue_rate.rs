//! Task queue throughput on the embedded store, each figure next to the
//! same SQL run directly with rusqlite on the same database file, in the
//! same run.
//!
//!     cargo run --release -p leasehold-bench --bin queue_rate -- DIR [BIG] [CLI_BINARY] [ROUNDS]
//!
//! BIG (default 1000000) is the size of the large queue, added in ROUNDS
//! (default 3) batches. Figures, each over ROUNDS alternating rounds with
//! the ratio taken per round, printed as a Markdown table: batch add;
//! claim+done per second with 1 and 4 workers; claim+done with BIG vs
//! 1 000 tasks queued; `leasehold work` running `true` per task with 1 and
//! 4 workers, next to a loop spawning `true` from as many threads (when
//! the CLI binary is given; `WORK_TASKS` tasks each, default 400; with
//! `ONLY_WORK` set, only these).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use leasehold::unix_ms::to_ms;
use leasehold::{LeaseName, NewTask, Store, TaskId};
use leasehold_bench::{median, per_sec, spread, verdict};
use rusqlite::{Connection, TransactionBehavior, params};

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).unwrap()
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
        let Some(claim) = transient_retried(|| store.task_claim(queue, Duration::from_secs(60), None)) else {
            break;
        };
        transient_retried(|| store.task_complete(&claim.task_ref(), None));
        done += 1;
    }
    done
}

/// `call`, again while it fails with a transient error (busy: the store's
/// lock wait ran out under a load the benchmark itself makes), as a user's
/// worker would; any other error ends the benchmark with its message.
fn transient_retried<T>(call: impl Fn() -> leasehold::Result<T>) -> T {
    loop {
        match call() {
            Ok(v) => return v,
            Err(e) if e.kind().is_transient() => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Run `f` on `workers` threads, each doing `each` cycles; cycles per second.
fn parallel(workers: usize, each: usize, f: impl Fn(usize) -> usize + Send + Sync + 'static) -> f64 {
    let f = Arc::new(f);
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let f = f.clone();
            std::thread::spawn(move || f(each))
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    per_sec(total, start.elapsed())
}

/// One row: ours and the reference per round, the ratio taken per round.
#[derive(Default)]
struct Row {
    ours: Vec<f64>,
    reference: Vec<f64>,
    ratios: Vec<f64>,
}

impl Row {
    fn push(&mut self, ours: f64, reference: f64) {
        self.ours.push(ours);
        self.reference.push(reference);
        self.ratios.push(ours / reference);
    }

    /// Prints the row; `goal` is the least median ratio issue 15 asked for.
    fn print(&self, label: &str, reference: &str, goal: Option<f64>) {
        println!(
            "| {label} | {} | {reference}: {} | {} | {} |",
            spread(&self.ours, 0),
            spread(&self.reference, 0),
            spread(&self.ratios, 2),
            goal.map_or_else(String::new, |g| verdict(median(&self.ratios), g))
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let big: usize = args.next().map_or(1_000_000, |s| s.parse().expect("BIG is a number"));
    let cli = args.next().filter(|c| !c.is_empty()).map(PathBuf::from);
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("ROUNDS is a number"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("queue.db");
    let store = Store::open_sqlite(&db).unwrap();
    let open = {
        let db = db.clone();
        move || Store::open_sqlite(&db).unwrap()
    };
    println!("| figure ({rounds} rounds) | leasehold /s | reference /s | ÷ the reference | goal |");
    println!("|---|---:|---:|---:|---|");
    if let (Some(cli), Some(_)) = (&cli, std::env::var_os("ONLY_WORK")) {
        return work_rates(&store, &db, cli, rounds);
    }

    // Batch add: library (one call, one transaction) vs the same SQL,
    // alternating over the rounds, BIG/ROUNDS tasks each (the BIG queue
    // is the rounds' tasks together).
    let batch = big / rounds;
    let mut add = Row::default();
    for round in 0..rounds {
        let start = Instant::now();
        store
            .task_add(&name("big"), tasks(&format!("t{round}-"), batch))
            .unwrap();
        let ours = per_sec(batch, start.elapsed());
        add.push(ours, per_sec(batch, sql_add(&db, &format!("big-ref-{round}"), batch)));
    }
    add.print(
        &format!("`task add`, a batch of {batch} in one call"),
        "the same INSERTs, one transaction",
        Some(0.95),
    );

    // Claim+done, 1 and 4 workers, alternating with the reference.
    let cycles = 300;
    store.task_add(&name("work"), tasks("w", cycles * 5 * rounds)).unwrap();
    sql_add(&db, "work-ref", cycles * 5 * rounds);
    for workers in [1, 4] {
        let mut row = Row::default();
        for _ in 0..rounds {
            let open = open.clone();
            let ours = parallel(workers, cycles, move |n| lib_claim_done(&open(), &name("work"), n));
            let db = db.clone();
            row.push(
                ours,
                parallel(workers, cycles, move |n| sql_claim_done(&db, "work-ref", n)),
            );
        }
        row.print(
            &format!("claim + done, {workers} worker(s) (two durable transactions)"),
            "the same SQL",
            None,
        );
    }

    // Claim cost against queue length: BIG queued vs 1 000 queued (the
    // small queue keeps at least 1 000 throughout).
    let per_round = 200;
    store
        .task_add(&name("small"), tasks("s", 1000 + per_round * rounds))
        .unwrap();
    let mut length = Row::default();
    for _ in 0..rounds {
        let start = Instant::now();
        let n = lib_claim_done(&store, &name("big"), per_round);
        let large = per_sec(n, start.elapsed());
        let start = Instant::now();
        let n = lib_claim_done(&store, &name("small"), per_round);
        length.push(large, per_sec(n, start.elapsed()));
    }
    length.print(
        &format!("claim + done with {big} tasks queued"),
        "with 1 000 queued",
        None,
    );

    if let Some(cli) = cli {
        work_rates(&store, &db, &cli, rounds);
    }
}

/// `leasehold work QUEUE --until-empty -- true` with 1 and 4 workers, each
/// next to spawning `true` as many times the plainest way (std's
/// `Command::status`, the PATH lookup included, as `work` does it) from
/// as many threads, alternating over the rounds.
fn work_rates(store: &Store, db: &Path, cli: &Path, rounds: usize) {
    let n: usize = std::env::var("WORK_TASKS").map_or(400, |s| s.parse().unwrap());
    let url = format!("sqlite://{}", db.display());
    for workers in [1usize, 4] {
        let mut row = Row::default();
        for round in 0..rounds {
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
            let ours = per_sec(n, start.elapsed());
            let reference = parallel(workers, n / workers, |each| {
                for _ in 0..each {
                    Command::new("true").status().unwrap();
                }
                each
            });
            row.push(ours, reference);
        }
        row.print(
            &format!("`leasehold work --concurrency {workers} -- true`, {n} tasks"),
            &format!("spawning `true` from {workers} thread(s)"),
            Some(0.5),
        );
    }
}
