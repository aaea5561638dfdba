//! Issue 28's flat cost: a lease's acquire+release with BIG other lease
//! names held and BIG tasks queued in the store, next to the same on an
//! empty store, in the same run. Prints a Markdown table (bench/run
//! includes it, then times the CLI on the same two stores).
//!
//!     cargo run --release -p leasehold-bench --bin growth -- DIR [BIG] [ROUNDS]
//!
//! Makes DIR/empty.db and DIR/big.db (BIG defaults to 1000000, ROUNDS to
//! 10). The big store is filled before any measurement:
//!
//! - the tasks through the library's own batch add (`Store::task_add`,
//!   100 000 a transaction);
//! - the lease names through the library for the first `SEED` of them
//!   (`try_acquire`, held for a day, bound to no process, as a bare
//!   `leasehold acquire` holds), then the rest as copies of the first
//!   one's rows — its `lease_name`, `lease_grant` and `lease_history` rows
//!   with only the name changed, in one `INSERT … SELECT` each. A million
//!   library acquisitions are a million durable transactions (minutes
//!   here); the copies are the rows the library wrote, and the example
//!   checks that the library reads the last copy back as held.
//!
//! Each round times `CYCLES` library `try_acquire` + `release` of one more
//! name on each store, the order of the two alternating from round to
//! round; the ratio (big ÷ empty, per cycle) is taken per round. Issue
//! 28's goal: at most 1.2.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold::{Acquire, AcquireOptions, Binding, LeaseName, NewTask, Store, TaskId};
use leasehold_bench::{library, per_sec, spread, verdict_at_most};

/// Names acquired through the library before the rest are copied.
const SEED: usize = 1000;
/// Tasks per batch add (one transaction each).
const TASK_BATCH: usize = 100_000;
/// Library cycles per store per round.
const CYCLES: u32 = 100;

fn other(i: usize) -> String {
    format!("other-{i}")
}

/// BIG tasks through the library's batch add.
fn fill_tasks(store: &Store, big: usize) {
    let queue = LeaseName::new("growth-queue").unwrap();
    let mut added = 0;
    while added < big {
        let n = TASK_BATCH.min(big - added);
        let tasks = (added..added + n)
            .map(|i| NewTask {
                id: Some(TaskId::new(format!("t{i}")).unwrap()),
                ..NewTask::new(serde_json::json!({ "n": i }))
            })
            .collect();
        store.task_add(&queue, tasks).unwrap();
        added += n;
    }
}

/// BIG held names: `SEED` through the library, the rest copies of the
/// first one's rows.
fn fill_names(store: &Store, db: &Path, big: usize) {
    let options = AcquireOptions {
        ttl: Duration::from_secs(24 * 3600),
        binding: Binding::Ttl,
        ..AcquireOptions::default()
    };
    for i in 0..SEED.min(big) {
        let name = LeaseName::new(other(i)).unwrap();
        let Acquire::Acquired(_) = store.try_acquire(&name, &options).unwrap() else {
            panic!("{name} is held")
        };
    }
    if big <= SEED {
        return;
    }
    let mut conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let tx = conn.transaction().unwrap();
    let numbers = format!("WITH RECURSIVE n(i) AS (SELECT {SEED} UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {big})");
    let first = other(0);
    for (table, columns) in [
        ("lease_name", "last_token"),
        (
            "lease_grant",
            "token, owner, owner_explicit, exclusive, shared_limit, holder, acquired_ms, ttl_ms, boot_id, expires_ns",
        ),
        ("lease_history", "id, at_ms, event, token, owner, detail"),
    ] {
        let copied = tx
            .execute(
                &format!(
                    "{numbers} INSERT INTO {table} (name, {columns}) \
                     SELECT 'other-' || n.i, {columns} FROM n, {table} WHERE {table}.name = ?1"
                ),
                [&first],
            )
            .unwrap();
        assert!(copied >= big - SEED, "{table}: {copied} rows copied");
    }
    tx.commit().unwrap();
    // The copies' log pages into the file, as a long-lived store has them.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let last = LeaseName::new(other(big - 1)).unwrap();
    let copy = store.status(&last).unwrap().expect("the last copy is a name");
    let original = store.status(&LeaseName::new(first).unwrap()).unwrap().unwrap();
    assert!(!copy.grants.is_empty(), "the library reads the last copy as held");
    assert_eq!(copy.grants[0].token, original.grants[0].token);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let big: usize = args.next().map_or(1_000_000, |s| s.parse().expect("BIG is a number"));
    let rounds: usize = args.next().map_or(10, |s| s.parse().expect("ROUNDS is a number"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let empty = Store::open_sqlite(&dir.join("empty.db")).unwrap();
    let big_db = dir.join("big.db");
    let full = Store::open_sqlite(&big_db).unwrap();

    let start = Instant::now();
    fill_tasks(&full, big);
    let tasks_took = start.elapsed();
    let start = Instant::now();
    fill_names(&full, &big_db, big);
    let names_took = start.elapsed();

    // Past the first checkpoints of each.
    library(&empty, CYCLES);
    library(&full, CYCLES);
    let (mut on_empty, mut on_big, mut ratios) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        let (e, b) = if round % 2 == 0 {
            let e = library(&empty, CYCLES);
            (e, library(&full, CYCLES))
        } else {
            let b = library(&full, CYCLES);
            (library(&empty, CYCLES), b)
        };
        on_empty.push(e);
        on_big.push(b);
        // Per cycle, big ÷ empty: the inverse of the rates' ratio.
        ratios.push(e / b);
    }
    println!(
        "Filled before measuring: {big} tasks by batch add in {:.1} s ({} tasks/s); {big} held names in {:.1} s.",
        tasks_took.as_secs_f64(),
        per_sec(big, tasks_took).round(),
        names_took.as_secs_f64(),
    );
    println!();
    println!(
        "| library `try_acquire` + `release` ({rounds} rounds of {CYCLES} cycles) | empty store, cycles/s | {big} names + {big} tasks, cycles/s | big ÷ empty, per cycle | goal (issue 28) |"
    );
    println!("|---|---:|---:|---:|---|");
    println!(
        "| one name, next to {big} other held names and {big} queued tasks | {} | {} | {} | {} |",
        spread(&on_empty, 0),
        spread(&on_big, 0),
        spread(&ratios, 2),
        verdict_at_most(leasehold_bench::median(&ratios), 1.2)
    );
}
