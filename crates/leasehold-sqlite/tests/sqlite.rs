//! What only the SQLite store does: boot-clock expiry across a reboot,
//! many processes opening a new store at once,
//! bounded history, and a clear error when another process keeps the
//! database locked.

use std::time::{Duration, Instant};

use leasehold_backend::plan::{HISTORY_PER_NAME, HISTORY_PRUNE_EVERY};
use leasehold_backend::{
    Backend, ErrorKind, LeaseAcquire, LeaseHistoryParams, LeaseName, LeaseRelease, TaskBackend as _,
};
use leasehold_backend_tests::params;
use leasehold_sqlite::{SqliteBackend, SqliteOptions};

fn main() {
    // This binary started again by a test, as another process of the
    // store, runs no tests.
    if let Some(path) = std::env::var_os("HOLD_WRITE_LOCK") {
        hold_the_write_lock_until_a_line_arrives(path.as_ref());
        return;
    }
    if let Some(path) = std::env::var_os("OPEN_ONLY") {
        if let Err(e) = SqliteBackend::open(path.as_ref(), SqliteOptions::default()) {
            eprintln!("open failed: {e}");
            std::process::exit(3);
        }
        return;
    }
    leasehold_testkit::main(&[leasehold_testkit::tests![
        grants_of_a_previous_boot_are_expired_and_tokens_keep_growing,
        history_is_bounded_per_name,
        a_database_locked_longer_than_the_busy_timeout_is_unavailable_not_a_hang,
        a_stopped_process_holding_the_write_lock_is_named_with_its_state,
        the_store_file_and_its_wal_are_private,
        the_claim_query_is_served_by_the_claim_index_not_a_scan,
        a_store_missing_a_table_is_refused_as_damaged_and_left_unchanged,
        a_table_dropped_under_an_open_store_is_damage_not_unavailable,
        describe_finds_a_dropped_column_and_a_sound_store_has_no_problems,
        a_store_under_a_symlinked_directory_opens,
        a_symlink_beside_the_store_is_refused_and_named,
        a_directory_link_planted_in_a_sticky_directory_is_refused,
        many_first_opens_at_once_all_succeed,
        a_commit_by_another_process_wakes_a_waiter,
        a_checkpoint_by_another_process_wakes_no_waiter,
        a_log_left_without_its_store_is_refused_not_replayed_into_a_new_store,
        a_log_its_maker_has_not_synced_yet_makes_the_opener_sync_the_directory,
        the_log_stays_small_when_only_short_processes_use_the_store,
        a_long_lived_handle_checkpoints_in_the_background,
        a_long_lived_handle_that_only_reads_does_not_checkpoint_others_commits,
        threads_sharing_one_handle_take_turns_one_holder_at_a_time,
    ]]);
}

fn open(dir: &tempfile::TempDir, options: SqliteOptions) -> SqliteBackend {
    SqliteBackend::open(&dir.path().join("leasehold.db"), options).unwrap()
}

fn acquired(b: &SqliteBackend, name: &str) -> u64 {
    match b.lease_acquire(&params::acquire(name)).unwrap() {
        LeaseAcquire::Acquired(g) => g.token.0,
        LeaseAcquire::Held(h) => panic!("{name} held: {h:?}"),
    }
}

fn grants_of_a_previous_boot_are_expired_and_tokens_keep_growing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    let first = acquired(&store, "job");
    assert!(matches!(
        store.lease_acquire(&params::acquire("job")).unwrap(),
        LeaseAcquire::Held(_)
    ));
    drop(store);
    // Stand-in for a reboot: the grant now belongs to another boot.
    let conn = rusqlite::Connection::open(dir.path().join("leasehold.db")).unwrap();
    conn.execute("UPDATE lease_grant SET boot_id = 'previous-boot'", [])
        .unwrap();
    drop(conn);
    let store = open(&dir, SqliteOptions::default());
    let second = acquired(&store, "job");
    assert!(second > first, "token reissued after a reboot: {second} <= {first}");
}

/// The newest `HISTORY_PER_NAME` entries of a name are always kept, and
/// older ones are pruned at the latest at the `HISTORY_PRUNE_EVERY`th entry
/// after the last pruning.
fn history_is_bounded_per_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    let (keep, every) = (HISTORY_PER_NAME as usize, HISTORY_PRUNE_EVERY as usize);
    for cycle in 1..=600 {
        let t = acquired(&store, "busy");
        assert_eq!(
            store
                .lease_release(&params::release("busy", leasehold_backend::Token(t)))
                .unwrap(),
            LeaseRelease::Released
        );
        if cycle < 450 {
            continue;
        }
        let history = store
            .lease_history(&LeaseHistoryParams {
                name: params::name("busy"),
                limit: 5000,
            })
            .unwrap();
        let events = 2 * cycle;
        assert!(
            history.len() >= keep.min(events) && history.len() < keep + every,
            "{events} events, {} kept",
            history.len()
        );
        assert_eq!(history[0].token.map(|t| t.0), Some(t), "newest first");
    }
}

fn a_database_locked_longer_than_the_busy_timeout_is_unavailable_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(300),
        ..SqliteOptions::default()
    };
    let store = open(&dir, options);
    acquired(&store, "job");
    let mut blocker = rusqlite::Connection::open(dir.path().join("leasehold.db")).unwrap();
    let tx = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let start = Instant::now();
    let err = store.lease_acquire(&params::acquire("other")).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    assert!(err.reason().contains("busy timeout"), "{err}");
    drop(tx);
    acquired(&store, "other");
}

/// The other process of the next test (`HOLD_WRITE_LOCK`): take the
/// store's write lock with its own connection, say so, and commit when a
/// line arrives.
fn hold_the_write_lock_until_a_line_arrives(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("UPDATE lease_name SET last_token = last_token WHERE 0", [])
        .unwrap();
    println!("locked");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    tx.commit().unwrap();
}

/// A process stopped while it holds the store's write lock (a real one:
/// this test binary again, told by `HOLD_WRITE_LOCK` to take the lock with
/// its own connection, say so, and commit when a line arrives): the store
/// names it — pid, command, stopped — in a write's error, in `write_lock`
/// and in `describe` (doctor); reads go on; resumed, writes work again.
fn a_stopped_process_holding_the_write_lock_is_named_with_its_state() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    use leasehold_backend::WriteLock;
    use leasehold_host::ProcessState;

    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(300),
        ..SqliteOptions::default()
    };
    let store = open(&dir, options);
    acquired(&store, "job");
    assert_eq!(store.write_lock(), Some(WriteLock::Free), "nobody writes");
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .env("HOLD_WRITE_LOCK", dir.path().join("leasehold.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = holder.id();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.trim() == "locked")),
        "the holder never took the lock"
    );
    let target = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(target, rustix::process::Signal::STOP).unwrap();
    let stopped = (0..400).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        matches!(store.write_lock(), Some(WriteLock::HeldBy(ref p)) if p.state == Some(ProcessState::Stopped))
    });
    assert!(stopped, "{:?}", store.write_lock());
    let Some(WriteLock::HeldBy(report)) = store.write_lock() else {
        panic!("not held")
    };
    assert_eq!(report.pid, pid);
    assert!(
        report.command.contains("sqlite-"),
        "the test binary's command line: {report:?}"
    );

    let err = store.lease_acquire(&params::acquire("other")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    let text = err.to_string();
    for said in [format!("pid {pid}"), "stopped".into(), "busy timeout (300ms)".into()] {
        assert!(err.reason().contains(&said), "{said:?} missing from: {text}");
    }
    assert!(text.contains(&format!("kill -CONT {pid}")), "what to do: {text}");
    assert!(store.lease_get(&params::name("job")).unwrap().is_some(), "reads go on");
    let info = store.describe().unwrap();
    let problem = info.problems.iter().find(|(label, _)| label == "write lock");
    assert!(
        problem.is_some_and(|(_, p)| p.contains(&format!("pid {pid}")) && p.contains("stopped")),
        "{:?}",
        info.problems
    );

    rustix::process::kill_process(target, rustix::process::Signal::CONT).unwrap();
    holder.stdin.as_mut().unwrap().write_all(b"commit\n").unwrap();
    assert!(holder.wait().unwrap().success());
    assert_eq!(store.write_lock(), Some(WriteLock::Free));
    acquired(&store, "other");
    assert!(
        store.describe().unwrap().problems.is_empty(),
        "resumed and done: nothing wrong"
    );
}

fn the_store_file_and_its_wal_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    acquired(&store, "job");
    for file in ["leasehold.db", "leasehold.db-wal", "leasehold.db-shm"] {
        let mode = std::fs::metadata(dir.path().join(file)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}");
    }
}

fn the_claim_query_is_served_by_the_claim_index_not_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    // Enough finished and pending tasks that a scan would be a real choice.
    let tasks: Vec<_> = (0..500)
        .map(|i| leasehold_backend::TaskAddParams {
            queue: params::name(if i % 2 == 0 { "q" } else { "other" }),
            id: params::name(&format!("t{i}")),
            payload: serde_json::Value::Null,
            priority: i % 3,
            available: leasehold_backend::Available::Now,
            max_attempts: 5,
        })
        .collect();
    store.task_add(&tasks).unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(dir.path().join("leasehold.db")).unwrap();
    conn.execute_batch("ANALYZE").unwrap();
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", leasehold_sqlite::CLAIM_SQL))
        .unwrap();
    let plan: Vec<String> = stmt
        .query_map(rusqlite::params!["q", i64::MAX], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join(" | ");
    assert!(plan.contains("INDEX task_claim"), "claim plan: {plan}");
    assert!(
        !plan.contains("TEMP B-TREE"),
        "the index must give the order, not a sort: {plan}"
    );
}

const TABLES: [&str; 5] = ["lease_name", "lease_grant", "lease_waiter", "lease_history", "task"];

/// Change the store's schema behind its back (as `sqlite3 store.db '…'`).
fn alter(dir: &tempfile::TempDir, sql: &str) {
    let conn = rusqlite::Connection::open(dir.path().join("leasehold.db")).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// A store missing a table is damaged, not "unavailable, retry": refused at
/// open with what is missing, and left byte for byte as it was.
fn a_store_missing_a_table_is_refused_as_damaged_and_left_unchanged() {
    for table in TABLES {
        let dir = tempfile::tempdir().unwrap();
        acquired(&open(&dir, SqliteOptions::default()), "job");
        alter(&dir, &format!("DROP TABLE {table}"));
        let path = dir.path().join("leasehold.db");
        let before = std::fs::read(&path).unwrap();
        let err = SqliteBackend::open(&path, SqliteOptions::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{table} dropped: {err}");
        assert!(err.reason().contains(&format!("missing {table}")), "{table}: {err}");
        assert!(err.hint_text().contains("backup"), "{table}: {err}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{table}: the store was changed"
        );
    }
}

/// A table dropped while a store is open is damage too, not "retry".
fn a_table_dropped_under_an_open_store_is_damage_not_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    acquired(&store, "job");
    alter(&dir, "DROP TABLE lease_waiter");
    let err = store.lease_acquire(&params::acquire("other")).unwrap_err();
    assert!(
        err.kind() == ErrorKind::Corrupt && err.reason().contains("no such table: lease_waiter"),
        "{err}"
    );
}

/// What the check at open cannot see (a column dropped) `describe` finds by
/// comparing every column with a fresh schema: `doctor` reports it.
fn describe_finds_a_dropped_column_and_a_sound_store_has_no_problems() {
    let dir = tempfile::tempdir().unwrap();
    let info = open(&dir, SqliteOptions::default()).describe().unwrap();
    assert_eq!(info.problems, Vec::new(), "a fresh store");
    alter(&dir, "ALTER TABLE lease_history DROP COLUMN detail");
    let info = open(&dir, SqliteOptions::default()).describe().unwrap();
    assert_eq!(info.problems.len(), 1, "{:?}", info.problems);
    let (label, problem) = &info.problems[0];
    assert_eq!(label, "schema");
    assert!(
        problem.contains("column lease_history.detail is missing") && problem.contains("backup"),
        "{problem}"
    );
}

/// A symlinked directory in the store path is followed, as by any program
/// (macOS's /tmp, a symlinked ~/.local): SQLite's own NOFOLLOW would refuse
/// a link anywhere in the path.
fn a_store_under_a_symlinked_directory_opens() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
    for path in ["link/s.db", "link/new/s.db"] {
        let store = SqliteBackend::open(&dir.path().join(path), SqliteOptions::default())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        acquired(&store, "job");
    }
    assert!(dir.path().join("real/s.db").is_file() && dir.path().join("real/new/s.db").is_file());
}

/// A link at the store's -wal, -shm or -journal file is refused like one
/// at the store itself (SQLite would write or roll back through it), and
/// the message names it.
fn a_symlink_beside_the_store_is_refused_and_named() {
    for suffix in ["-wal", "-shm", "-journal"] {
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir, SqliteOptions::default()));
        let victim = dir.path().join("victim");
        std::fs::File::create(&victim).unwrap();
        let link = dir.path().join(format!("leasehold.db{suffix}"));
        // The log and its index stay between calls: the link replaces them.
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = SqliteBackend::open(&dir.path().join("leasehold.db"), SqliteOptions::default()).unwrap_err();
        assert!(
            err.kind() == ErrorKind::Unavailable
                && err.reason().contains(&format!("leasehold.db{suffix}"))
                && err.reason().contains("symbolic link"),
            "{suffix}: {err}"
        );
        assert_eq!(
            std::fs::metadata(&victim).unwrap().len(),
            0,
            "{suffix}: written through"
        );
    }
}

/// A directory link someone else planted in a sticky world-writable
/// directory (like /tmp) is refused with the rule that refused it.
fn a_directory_link_planted_in_a_sticky_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    leasehold_testkit::need_root("to give a link another owner");
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    let link = shared.join("state");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(4242), None).unwrap();
    let err = SqliteBackend::open(&link.join("s.db"), SqliteOptions::default()).unwrap_err();
    assert!(
        err.kind() == ErrorKind::Unavailable && err.reason().contains("protected_symlinks"),
        "{err}"
    );
    assert!(!dir.path().join("elsewhere/s.db").exists());
}

/// Eight processes starting at once on a store that does not exist yet
/// (the seed's racers, a fleet of workers after a deploy) all open it. The
/// first switch to write-ahead logging races: two connections that both
/// read the file and then both want it exclusively get `SQLITE_BUSY` at once,
/// without the busy timeout (SQLite's deadlock avoidance); opening retries
/// that within the timeout. Real processes (this test binary again, told
/// by `OPEN_ONLY` to open one store and exit): before the retry, 8 of 320
/// opens failed this way.
fn many_first_opens_at_once_all_succeed() {
    let me = std::env::current_exe().unwrap();
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leasehold.db");
        let openers: Vec<_> = (0..8)
            .map(|_| {
                std::process::Command::new(&me)
                    .env("OPEN_ONLY", &path)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for opener in openers {
            let out = opener.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A waiter is woken by another process's commit, not by its own timeout:
/// with a 30 s timeout, a release by a separate process (the `sqlite3`
/// shell, sharing no code with the store) ends the wait within a generous
/// 10 s; with nothing committed, the wait lasts its whole (short) timeout.
fn a_commit_by_another_process_wakes_a_waiter() {
    use leasehold_backend::WaitTopic;
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let dir = tempfile::tempdir().unwrap();
    let b = open(&dir, SqliteOptions::default());
    acquired(&b, "job");
    let name = leasehold_backend::LeaseName::new("job").unwrap();
    let topic = WaitTopic::lease(&name);
    let begun = Instant::now();
    b.wait_for_change(&topic, Duration::from_millis(300)).unwrap();
    assert!(
        begun.elapsed() >= Duration::from_millis(300),
        "nothing committed: the whole timeout"
    );
    let writer = sqlite3_after(&dir, "0.5", "DELETE FROM lease_grant;");
    let begun = Instant::now();
    b.wait_for_change(&topic, Duration::from_secs(30)).unwrap();
    let woken = begun.elapsed();
    let _ = writer.wait_with_output();
    assert!(
        woken < Duration::from_secs(10),
        "woken by the commit, not the timeout: {woken:?}"
    );
    assert!(b.lease_get(&name).unwrap().is_none_or(|s| s.grants.is_empty()));
}

/// The sqlite3 program, started now, runs `sql` on the store in `dir`
/// after `delay` seconds (another process, as a waiter would see it). Its
/// output is piped: first the busy timeout it set, then what `sql` prints.
fn sqlite3_after(dir: &tempfile::TempDir, delay: &str, sql: &str) -> std::process::Child {
    let db = dir.path().join("leasehold.db");
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep {delay}; sqlite3 '{}' 'PRAGMA busy_timeout=5000; {sql}'",
            db.display()
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A checkpoint by another process — it writes the store file, not the
/// log, and changes nothing a waiter reads — wakes no waiter. (The wake
/// watched the store file too, so every checkpoint woke the waiters next
/// in line for a settle of up to 50 ms; with long-lived processes
/// checkpointing after their commits, that was a wake-up per commit
/// more.)
fn a_checkpoint_by_another_process_wakes_no_waiter() {
    use leasehold_backend::WaitTopic;
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let dir = tempfile::tempdir().unwrap();
    let b = open(&dir, SqliteOptions::default());
    acquired(&b, "job");
    let topic = WaitTopic::lease(&LeaseName::new("job").unwrap());
    // The first wait takes its cursor.
    b.wait_for_change(&topic, Duration::from_millis(100)).unwrap();
    let checkpoint = sqlite3_after(&dir, "0.3", "PRAGMA wal_checkpoint(PASSIVE);");
    let begun = Instant::now();
    b.wait_for_change(&topic, Duration::from_secs(2)).unwrap();
    let waited = begun.elapsed();
    let out = checkpoint.wait_with_output().unwrap();
    // busy_timeout's line, then "busy|frames in the log|frames copied".
    let copied = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(
        copied
            .rsplit('|')
            .next()
            .is_some_and(|n| n.parse::<u32>().unwrap_or(0) > 0),
        "the checkpoint copied nothing, so it tested nothing: {copied:?}"
    );
    assert!(
        waited >= Duration::from_millis(1500),
        "a checkpoint woke the waiter after {waited:?} (it copied {copied:?})"
    );
}

/// The store file removed (or moved) without its log: the log may hold the
/// latest commits, and SQLite would replay it into a new file at the path.
/// Refused, and the log left as it was.
fn a_log_left_without_its_store_is_refused_not_replayed_into_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    for name in ["a", "b", "c"] {
        acquired(&store, name);
    }
    drop(store);
    let db = dir.path().join("leasehold.db");
    let wal = dir.path().join("leasehold.db-wal");
    let log = std::fs::read(&wal).unwrap();
    assert!(!log.is_empty(), "the log is kept between handles");
    std::fs::remove_file(&db).unwrap();
    let err = SqliteBackend::open(&db, SqliteOptions::default()).unwrap_err();
    assert!(
        err.kind() == ErrorKind::Corrupt && err.reason().contains("leasehold.db-wal"),
        "{err}"
    );
    assert_eq!(std::fs::read(&wal).unwrap(), log, "the log was changed");
    assert!(!db.exists(), "a new store was made beside the old log");
}

/// The fsyncs of this binary opening the store at `db` (`OPEN_ONLY`),
/// as strace shows them (`-y`: each with the path of its descriptor).
fn fsyncs_of_an_open(db: &std::path::Path) -> Vec<String> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new("strace")
        .args(["-f", "-y", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(out.path())
        .arg(std::env::current_exe().unwrap())
        .env("OPEN_ONLY", db)
        .status()
        .unwrap();
    assert!(status.success(), "open under strace: {status}");
    std::fs::read_to_string(out.path())
        .unwrap()
        .lines()
        .filter(|l| l.contains("sync("))
        .map(str::to_owned)
        .collect()
}

/// A commit is acknowledged once synced in the log, so the log's entry in
/// the directory must be durable before anyone commits to it. Its maker
/// holds a lock on it until it has synced the directory: an opener that
/// finds the lock taken syncs the directory itself; one that finds it free
/// does not (one fsync per command).
fn a_log_its_maker_has_not_synced_yet_makes_the_opener_sync_the_directory() {
    leasehold_testkit::need_program("strace", "strace");
    let dir = tempfile::tempdir().unwrap();
    drop(open(&dir, SqliteOptions::default()));
    let db = dir.path().join("leasehold.db");
    let of_dir = format!("<{}>", dir.path().display());
    let done = fsyncs_of_an_open(&db);
    assert!(
        !done.iter().any(|l| l.contains(&of_dir)),
        "the maker was done, yet the directory was synced: {done:?}"
    );
    // As the log's maker between linking it and syncing the directory.
    let log = std::fs::File::open(dir.path().join("leasehold.db-wal")).unwrap();
    rustix::fs::flock(&log, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let midway = fsyncs_of_an_open(&db);
    assert!(
        midway.iter().any(|l| l.contains(&of_dir)),
        "the log's maker had not synced the directory, and neither did the opener: {midway:?}"
    );
}

/// Where only short processes use the store (each opens it, commits, and
/// closes without checkpointing), the log is still checkpointed past its
/// size bound: it does not grow with the number of commits.
fn the_log_stays_small_when_only_short_processes_use_the_store() {
    let dir = tempfile::tempdir().unwrap();
    // 800 commits of a few pages each: several MiB of log unchecked.
    for i in 0..800 {
        let store = open(&dir, SqliteOptions::default());
        acquired(&store, &format!("job-{i}"));
    }
    let log = std::fs::metadata(dir.path().join("leasehold.db-wal")).unwrap().len();
    assert!(log <= 2 << 20, "the log grew to {log} bytes");
}

/// A handle kept open (a long-lived process) checkpoints in the
/// background: its commits reach the store file itself without another
/// commit or a close.
fn a_long_lived_handle_checkpoints_in_the_background() {
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    // Older than a short command ever is (checkpoint::LONG_LIVED, 1 s).
    std::thread::sleep(Duration::from_millis(1200));
    acquired(&store, "long-lived");
    assert!(
        leasehold_testkit::wait::wait_until(Duration::from_secs(10), || in_the_store_file(&dir, "long-lived"))
            .is_some(),
        "the commit is still only in the log after 10 s"
    );
    drop(store);
}

/// A long-lived handle that only reads (an idle waiter, `serve`) leaves
/// the log to the handles that write it: its thread checkpoints after the
/// handle's own commits, not after another's. (When it checkpointed after
/// any commit, 200 idle waiters made 200 checkpoints a second between
/// them, issue 41.) Another handle's commit, made while the reader looks
/// on for 2.5 s — past the reader's second, when it checkpointed before —
/// is still only in the log.
fn a_long_lived_handle_that_only_reads_does_not_checkpoint_others_commits() {
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let dir = tempfile::tempdir().unwrap();
    let reader = open(&dir, SqliteOptions::default());
    std::thread::sleep(Duration::from_millis(1200));
    reader.lease_get(&LeaseName::new("other").unwrap()).unwrap();
    let writer = open(&dir, SqliteOptions::default());
    acquired(&writer, "other");
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(100));
        reader.lease_get(&LeaseName::new("other").unwrap()).unwrap();
    }
    assert!(
        !in_the_store_file(&dir, "other"),
        "a handle that only reads copied another handle's commit into the store file"
    );
    drop((reader, writer));
}

/// Whether `name` is in the store file itself, not only in its log: read
/// from a copy of the file alone by the sqlite3 program, as an immutable
/// file (no log).
fn in_the_store_file(dir: &tempfile::TempDir, name: &str) -> bool {
    let copies = tempfile::tempdir().unwrap();
    let copy = copies.path().join("copy.db");
    std::fs::copy(dir.path().join("leasehold.db"), &copy).unwrap();
    let out = std::process::Command::new("sqlite3")
        .arg(format!("file:{}?immutable=1", copy.display()))
        .arg(format!("SELECT count(*) FROM lease_name WHERE name = '{name}'"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "1"
}

/// Threads of one process sharing one store handle (a Python program's
/// threads on one `Store`) take turns on one name: each waits for it
/// (woken by the handle's own commits, `wake.rs`), holds it briefly and
/// releases it. Checked outside the store, on this process's clock: no
/// two holdings overlap, and the tokens rise strictly in the order the
/// holdings began.
fn threads_sharing_one_handle_take_turns_one_holder_at_a_time() {
    use leasehold_backend::{Token, WaitTopic};
    const THREADS: usize = 4;
    const TURNS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, SqliteOptions::default());
    let name = LeaseName::new("job").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let held: Vec<(Token, Instant, Instant)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let topic = WaitTopic::lease(&name);
                    let mut mine = Vec::new();
                    while mine.len() < TURNS {
                        assert!(Instant::now() < deadline, "{} turns in 60 s", mine.len());
                        match store.lease_acquire(&params::acquire("job")).unwrap() {
                            LeaseAcquire::Acquired(g) => {
                                let from = Instant::now();
                                std::thread::sleep(Duration::from_millis(1));
                                let to = Instant::now();
                                let released = store.lease_release(&params::release("job", g.token)).unwrap();
                                assert_eq!(released, LeaseRelease::Released, "token {}", g.token);
                                mine.push((g.token, from, to));
                            }
                            LeaseAcquire::Held(_) => store.wait_for_change(&topic, Duration::from_millis(100)).unwrap(),
                        }
                    }
                    mine
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(held.len(), THREADS * TURNS);
    let mut by_start = held;
    by_start.sort_by_key(|h| h.1);
    for pair in by_start.windows(2) {
        let ((earlier, _, ended), (later, began, _)) = (pair[0], pair[1]);
        assert!(
            began > ended,
            "token {later} was held from before token {earlier}'s holding ended"
        );
        assert!(
            later > earlier,
            "token {later} was granted after token {earlier}: tokens must rise"
        );
    }
}
