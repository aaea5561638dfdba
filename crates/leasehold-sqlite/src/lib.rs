//! The embedded SQLite store: one machine, many processes, no set-up.
//!
//! - The database file is created 0600 in a directory created 0700.
//!   Symbolic links in the directory part are followed, except one that
//!   may have been planted (`leasehold_backend::symlinks`); a symlink at
//!   the store file or at its `-wal`, `-shm` or `-journal` is refused,
//!   never followed.
//! - WAL with `synchronous=FULL`: a token is durable before it is returned.
//! - Every read-modify-write is one `BEGIN IMMEDIATE` transaction; a writer
//!   that waits longer than the busy timeout gets a clear "unavailable"
//!   error, not a hang.
//! - Expiry is on the host's boot clock together with the boot id: a
//!   wall-clock jump neither expires nor prolongs a grant, and after a
//!   reboot every grant of the previous boot is expired.
//! - A database on a network filesystem is refused unless allowed: SQLite's
//!   locking is not reliable there.
//! - Waiters are woken by a watch on the write-ahead log: every commit
//!   writes it, so a thread of the store handle blocks on the watch
//!   (inotify, kqueue) and wakes the waiters when another process commits,
//!   instead of each sleeping out its poll interval (`wake.rs`).

mod classify;
mod lease;
mod register;
mod schema;
mod task;
mod wake;

pub use register::STORE;
#[doc(hidden)]
pub use task::CLAIM_SQL;

use std::fs::OpenOptions;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[cfg(feature = "test-clock")]
use leasehold_backend::ClockSkew;
use leasehold_backend::failpoint;
use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Remedy, StoreInfo, TokensBumpParams, TokensBumped, WaitTopic, WaiterEnqueueParams,
    WaiterTicket, WriteLock, duration_nanos, format_duration, host, later, migration, signed, symlinks,
};
use leasehold_backend::{
    Claim, QueueStats, Task, TaskAdd, TaskAddParams, TaskBackend, TaskClaimParams, TaskCompleteAndClaim,
    TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskIdParams,
    TaskListParams, TaskPurgeParams, TaskRef, TaskRetry, TaskStatsParams, TaskUpdate, WaiterRemoveParams,
};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::classify::{damaged_schema, io_kind, is_busy, map_error};

/// How to open a SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Open a database on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// How long to wait for another process's write transaction.
    pub busy_timeout: Duration,
    /// Shift of the boot clock, for tests.
    #[cfg(feature = "test-clock")]
    pub skew: ClockSkew,
}

impl SqliteOptions {
    /// The test shift of the boot clock.
    #[cfg(feature = "test-clock")]
    fn skew(&self) -> Duration {
        self.skew.get()
    }

    /// The test shift of the boot clock: none in a build for use.
    #[cfg(not(feature = "test-clock"))]
    #[allow(clippy::unused_self, reason = "the same call as with the test-clock feature")]
    fn skew(&self) -> Duration {
        Duration::ZERO
    }
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            allow_network_fs: false,
            busy_timeout: Duration::from_secs(5),
            #[cfg(feature = "test-clock")]
            skew: ClockSkew::default(),
        }
    }
}

/// The SQLite store.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    /// The store file, its directory resolved (for the waiters' watch).
    file: PathBuf,
    /// The waiters' watch of the store's log, started by the first wait.
    waker: std::sync::OnceLock<Option<std::sync::Arc<wake::Waker>>>,
    /// SQLite's shared-memory file beside the store, where it takes its
    /// write lock ([`WAL_WRITE_LOCK_BYTE`]).
    shm: PathBuf,
    options: SqliteOptions,
    // rusqlite's Connection is Send but not Sync; one connection per store
    // handle, used by one call at a time.
    conn: Mutex<Connection>,
}

/// The store's "now": the boot clock of this boot, shifted in tests.
#[derive(Debug, Clone)]
pub(crate) struct Now {
    pub boot_id: String,
    pub ns: i64,
    /// The wall clock (shifted by the same skew), for scheduling and
    /// informational timestamps only.
    pub wall: std::time::SystemTime,
}

impl SqliteBackend {
    /// Open (creating if needed) the store at `path`.
    ///
    /// # Errors
    /// A [`BackendError`] whose [`kind`](BackendError::kind) says what
    /// happened:
    /// - the directory or file cannot be created or opened (the kind of
    ///   the operating system's error: [`ErrorKind::Permission`],
    ///   [`ErrorKind::ReadOnly`], …), the path or a file SQLite keeps beside
    ///   it is a symlink, a directory link in the path may have been
    ///   planted, the filesystem is a network one (and not allowed), or the
    ///   store stays locked;
    /// - [`ErrorKind::Corrupt`]: the file is not a leasehold store (not
    ///   SQLite, another application's database, damaged pages, or not a
    ///   regular file), or one written by a newer leasehold. The file is
    ///   left untouched.
    ///
    /// [`ErrorKind::Permission`]: leasehold_backend::ErrorKind::Permission
    /// [`ErrorKind::ReadOnly`]: leasehold_backend::ErrorKind::ReadOnly
    /// [`ErrorKind::Corrupt`]: leasehold_backend::ErrorKind::Corrupt
    pub fn open(path: &Path, options: SqliteOptions) -> Result<Self, BackendError> {
        let store = path.display().to_string();
        let unavailable =
            |reason: String, hint: &str| BackendError::new(ErrorKind::Unavailable, &store, reason).hint(hint);
        let given = path;
        let (dir, path) = place(given).map_err(|(reason, hint)| unavailable(reason, hint))?;
        let path = path.as_path();
        if !options.allow_network_fs {
            match host::network_filesystem(&dir) {
                Ok(Some(fs)) => {
                    return Err(unavailable(
                        format!(
                            "it is on a network filesystem ({fs}), where SQLite's locking and durability cannot be trusted"
                        ),
                        "put the store on a local disk, or use a postgres:// or etcd:// store for many machines",
                    )
                    .remedy(Remedy::AllowNetworkFs));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(unavailable(
                        format!("cannot inspect directory {}: {e}", dir.display()),
                        "check the path",
                    ));
                }
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(unavailable(
                    "the path is a symbolic link, which leasehold never follows at a store path".into(),
                    "name the real file",
                )
                .remedy(Remedy::AnotherStore));
            }
            Ok(meta) if !meta.is_file() => {
                let what = if meta.is_dir() {
                    "a directory"
                } else if meta.file_type().is_fifo() {
                    "a FIFO"
                } else {
                    "not a regular file"
                };
                return Err(
                    BackendError::new(ErrorKind::Corrupt, store, format!("the path is {what}"))
                        .hint("name a database file")
                        .remedy(Remedy::AnotherStore),
                );
            }
            Ok(meta) if meta.len() < SQLITE_HEADER_LEN => {
                // A new store is created whole (see `create`), so a file this
                // short was cut off — SQLite would take it for an empty
                // database and start the token counters again at 1.
                return Err(BackendError::new(
                    ErrorKind::Corrupt,
                    store,
                    format!(
                        "it is {} bytes long, shorter than a SQLite header: truncated (or left by an interrupted first start of leasehold 0.1)",
                        meta.len()
                    ),
                )
                .hint("restore it from a backup; only if no token of this store was ever used, remove it to start a new store (tokens restart at 1)"));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create(path, &dir, &options).map_err(|e| {
                    BackendError::new(io_kind(&e), &store, format!("cannot create the database file: {e}"))
                        .hint("check the directory's permissions and free space")
                        .with_source(e)
                })?;
            }
            Err(e) => {
                return Err(
                    BackendError::new(io_kind(&e), store, format!("cannot inspect the database file: {e}"))
                        .hint("check the path")
                        .with_source(e),
                );
            }
        }

        // SQLite opens these by name beside the store: through a link it
        // would write someone else's file, or roll a planted "hot journal"
        // back into the store.
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut sibling = path.as_os_str().to_owned();
            sibling.push(suffix);
            if std::fs::symlink_metadata(&sibling).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(unavailable(
                    format!(
                        "{} is a symbolic link, which leasehold never follows beside a store (SQLite would write through it)",
                        Path::new(&sibling).display()
                    ),
                    "remove the link (SQLite's own files are never links)",
                )
                .remedy(Remedy::AnotherStore));
            }
        }
        let flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        // SQLite says only "unable to open database file" on a read-only
        // filesystem (it cannot make the WAL's shared-memory file): name it.
        let read_only =
            || rustix::fs::statvfs(&dir).is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
        let open_error = |e: rusqlite::Error| {
            if read_only() {
                BackendError::new(ErrorKind::ReadOnly, &store, "it is on a read-only filesystem")
                    .hint("remount it read-write; nothing was changed")
                    .remedy(Remedy::AnotherStore)
                    .with_source(e)
            } else {
                map_error(&store, e)
            }
        };
        let mut conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
        let setup = |conn: &mut Connection| -> rusqlite::Result<Result<(), schema::Problem>> {
            conn.busy_timeout(options.busy_timeout)?;
            // Reading the schema first makes a non-database fail with
            // NotADatabase before any pragma could write to it.
            conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
            // Judge the file before changing anything in it: switching the
            // journal mode rewrites the header of someone else's database.
            if let Err(problem) = schema::check(conn)? {
                return Ok(Err(problem));
            }
            let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Ok(Err(schema::Problem::NoWal(mode)));
            }
            conn.pragma_update(None, "synchronous", "FULL")?;
            // The same plan whatever the bound values. Without it, SQLite
            // marks the parameters its planner weighed (most `column = ?`)
            // as worth re-planning for, and clearing bindings — which the
            // statement cache does after every use — then makes the next
            // use prepare the statement again: half of a lease cycle's
            // instructions (bench/callgrind). Our plans do not depend on
            // values: they follow keys, and the partial indexes are
            // matched by literals.
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
            schema::prepare(conn)
        };
        // Two connections that both read a new file and then both want it
        // exclusively (the first switch to write-ahead logging) get
        // SQLITE_BUSY at once, without waiting out the busy timeout:
        // SQLite's deadlock avoidance. Eight processes starting together
        // on a new store hit it. Setting up is idempotent (every step
        // re-checks what it finds), so try again within the busy timeout.
        let begun = Instant::now();
        let outcome = loop {
            match setup(&mut conn) {
                Err(e) if is_busy(&e) && begun.elapsed() < options.busy_timeout => {
                    // Staggered by pid, so the racers do not meet again.
                    std::thread::sleep(Duration::from_millis(2 + u64::from(std::process::id() % 13)));
                }
                outcome => break outcome,
            }
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(schema::Problem::TooNew(found))) => {
                return Err(BackendError::schema_too_new(store, found, schema::VERSION));
            }
            Ok(Err(schema::Problem::Foreign(reason))) => {
                return Err(BackendError::new(ErrorKind::Corrupt, store, reason)
                    .hint("name a leasehold database (or a new path)")
                    .remedy(Remedy::AnotherStore));
            }
            Ok(Err(schema::Problem::Damaged(reason))) => return Err(damaged_schema(&store, reason)),
            Ok(Err(schema::Problem::NoWal(mode))) => {
                return Err(BackendError::new(
                    ErrorKind::Unavailable,
                    store,
                    format!("SQLite cannot use write-ahead logging there (journal mode stays {mode:?})"),
                )
                .hint("put the store on a local filesystem that supports shared memory"));
            }
            Err(e) => return Err(open_error(e)),
        }
        let mut shm = path.as_os_str().to_owned();
        shm.push("-shm");
        Ok(Self {
            path: given.to_path_buf(),
            file: path.to_path_buf(),
            waker: std::sync::OnceLock::new(),
            shm: PathBuf::from(shm),
            options,
            conn: Mutex::new(conn),
        })
    }

    fn store(&self) -> String {
        self.path.display().to_string()
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves SQLite consistent
        // (the transaction rolls back on drop), so poisoning is ignored.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now(&self) -> Result<Now, BackendError> {
        let boot_id = host::boot_id().ok_or_else(|| {
            BackendError::new(
                ErrorKind::Unavailable,
                self.store(),
                format!(
                    "cannot read this boot's id from {}, which expiry on the boot clock needs",
                    host::BOOT_ID_SOURCE
                ),
            )
            .hint("make it readable (Linux: mount /proc), or use a postgres:// or etcd:// store")
        })?;
        let ns = duration_nanos(host::boot_clock()).saturating_add(duration_nanos(self.options.skew()));
        Ok(Now {
            boot_id,
            ns: signed(ns),
            wall: later(std::time::SystemTime::now(), self.options.skew()),
        })
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction and commit it.
    ///
    /// `op` names the operation's failpoints (`OP/begin`,
    /// `OP/before-commit`, `OP/after-commit`; see `leasehold_backend::failpoint`).
    fn write<T>(
        &self,
        op: &str,
        f: impl FnOnce(&Transaction<'_>, &Now) -> Result<T, lease::Error>,
    ) -> Result<T, BackendError> {
        self.write_if(op, |tx, now| f(tx, now).map(|v| (v, true)))
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction; commit only if it
    /// says so (otherwise roll back and still return its value).
    ///
    /// The transaction holds the store's one write lock, which every write
    /// of every name waits for: nothing but reading and writing rows
    /// happens inside it — the clock is read before it begins, and no
    /// closure given here waits, sleeps, starts or asks a process, or
    /// touches the network. How long the lock was held is logged at debug
    /// level (`write lock held`), which `bench/write-lock` collects.
    fn write_if<T>(
        &self,
        op: &str,
        f: impl FnOnce(&Transaction<'_>, &Now) -> Result<(T, bool), lease::Error>,
    ) -> Result<T, BackendError> {
        failpoint!(op, "begin");
        let now = self.now()?;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.error(e))?;
        let locked = Instant::now();
        let mut committing = None;
        let outcome = (|| {
            let (value, commit) = f(&tx, &now).map_err(|e| self.map_lease_error(e))?;
            if commit {
                failpoint!(op, "before-commit");
                committing = Some(Instant::now());
                tx.commit().map_err(|e| self.error(e))?;
            }
            Ok(value)
        })();
        // Committed, or rolled back as the transaction was dropped. The
        // commit's part is its fsync, mostly.
        tracing::debug!(
            op,
            held_us = locked.elapsed().as_micros(),
            commit_us = committing.map_or(0, |c| c.elapsed().as_micros()),
            "write lock held"
        );
        if outcome.is_ok() {
            failpoint!(op, "after-commit");
        }
        outcome
    }

    /// Run `f` in a read transaction (a consistent snapshot).
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>, &Now) -> Result<T, lease::Error>) -> Result<T, BackendError> {
        let now = self.now()?;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| self.error(e))?;
        f(&tx, &now).map_err(|e| self.map_lease_error(e))
    }
}

/// Where the store given as `given` is: its directory resolved (links
/// followed, planted ones refused: SQLite's NOFOLLOW refuses a link
/// anywhere in the path) and created if missing (private, with its
/// parents: [`symlinks::create_dir`]), and the file's path in it. The file
/// itself is never resolved. Errors are (reason, hint).
fn place(given: &Path) -> Result<(PathBuf, PathBuf), (String, &'static str)> {
    let dir_error = |e: symlinks::DirError| (format!("its directory: {e}"), e.hint());
    let (dir, path) = if let Some(name) = given.file_name() {
        let dir = symlinks::create_dir(symlinks::parent_of(given)).map_err(dir_error)?;
        let path = dir.join(name);
        (dir, path)
    } else {
        // "/" or "x/..": a directory, refused as such by the caller.
        let path = symlinks::resolve_dir(given).map_err(dir_error)?;
        let dir = symlinks::create_dir(path.parent().unwrap_or(&path)).map_err(dir_error)?;
        (dir, path)
    };
    Ok((dir, path))
}

/// The byte of the `-shm` file on which SQLite in WAL mode takes its write
/// lock, exclusively, for the length of every write transaction (`os_unix.c`:
/// `UNIX_SHM_BASE` = (22 + `SQLITE_SHM_NLOCK`) × 4 = 120, plus
/// `WAL_WRITE_LOCK` = 0 in `wal.c`).
const WAL_WRITE_LOCK_BYTE: u64 = 120;

/// The length of a SQLite database header; a store file is never shorter.
const SQLITE_HEADER_LEN: u64 = 100;

/// Create a new store at `path` whole: build it under a temporary name in
/// the same directory (private, schema in place), then link it into place
/// and fsync the directory. A crash leaves no half-made store at `path`,
/// so a short file there is always damage. If another process created the
/// store first, its store is kept and ours discarded.
fn create(path: &Path, dir: &Path, options: &SqliteOptions) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.leasehold-new.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&temp); // a leftover of a crashed process with our pid
    let result = (|| {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temp)?;
        let mut conn = Connection::open_with_flags(
            &temp,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .map_err(std::io::Error::other)?;
        conn.busy_timeout(options.busy_timeout).map_err(std::io::Error::other)?;
        // A rollback journal, not the WAL, while it is made: each commit is
        // then in the file itself, so nothing can be left behind in a WAL
        // whose checkpoint failed (a full disk) when the file is linked.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(std::io::Error::other)?;
        match schema::prepare(&mut conn).map_err(std::io::Error::other)? {
            Ok(()) => {}
            Err(problem) => return Err(std::io::Error::other(format!("{problem:?}"))),
        }
        conn.close().map_err(|(_, e)| std::io::Error::other(e))?;
        std::fs::File::open(&temp)?.sync_all()?;
        match std::fs::hard_link(&temp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        std::fs::File::open(dir)?.sync_all()
    })();
    for suffix in ["", "-wal", "-shm"] {
        let mut leftover = temp.clone().into_os_string();
        leftover.push(suffix);
        let _ = std::fs::remove_file(leftover);
    }
    result
}

impl Backend for SqliteBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: true,
            host_local: true,
            reopenable: true,
        }
    }

    fn describe(&self) -> Result<StoreInfo, BackendError> {
        let conn = self.conn();
        let q = |sql: &str| -> Result<String, BackendError> {
            conn.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0))
                .map(|v| match v {
                    rusqlite::types::Value::Integer(i) => i.to_string(),
                    rusqlite::types::Value::Text(t) => t,
                    other => format!("{other:?}"),
                })
                .map_err(|e| map_error(&self.store(), e))
        };
        let version: i64 = q("PRAGMA user_version")?.parse().unwrap_or(-1);
        let mut facts = vec![
            ("sqlite version".to_owned(), rusqlite::version().to_owned()),
            ("journal mode".to_owned(), q("PRAGMA journal_mode")?),
            ("synchronous".to_owned(), q("PRAGMA synchronous")?),
        ];
        let mut problems = Vec::new();
        match q("PRAGMA quick_check")? {
            ok if ok == "ok" => facts.push(("integrity".to_owned(), ok)),
            damage => problems.push((
                "integrity".to_owned(),
                format!("{damage}; restore the store from a backup"),
            )),
        }
        match self.write_lock() {
            Some(WriteLock::HeldBy(holder)) if holder.state.is_some_and(host::ProcessState::is_halted) => {
                problems.push((
                    "write lock".to_owned(),
                    format!(
                        "{}: every write to this store, of any name, waits for it and fails after the busy timeout ({}); {}",
                        WriteLock::HeldBy(holder.clone()),
                        format_duration(self.options.busy_timeout),
                        holder.remedy()
                    ),
                ));
            }
            Some(lock) => facts.push(("write lock".to_owned(), lock.to_string())),
            None => {}
        }
        let differences = schema::differences(&conn).map_err(|e| map_error(&self.store(), e))?;
        if differences.is_empty() {
            facts.push((
                "schema".to_owned(),
                format!("every table, column and index of version {version}"),
            ));
        } else {
            problems.push((
                "schema".to_owned(),
                format!("{}; {}", differences.join("; "), migration::damage_hint("the store")),
            ));
        }
        Ok(StoreInfo {
            kind: "sqlite",
            location: self.store(),
            schema_version: u32::try_from(version).ok(),
            facts,
            problems,
        })
    }

    /// SQLite's write lock is a POSIX lock on one byte of the `-shm` file
    /// (`WAL_WRITE_LOCK_BYTE`); Linux lists its holder in `/proc/locks`,
    /// found here by the file's device and inode without opening it (which
    /// would drop this process's own SQLite locks on it). A lock missing
    /// from several reads of the list is free ([`host::held_locks`]).
    fn write_lock(&self) -> Option<WriteLock> {
        let locks = host::held_locks_at(&self.shm)?;
        let holder = locks
            .iter()
            .find(|l| l.call == host::LockCall::Posix && l.exclusive && l.covers(WAL_WRITE_LOCK_BYTE));
        Some(holder.map_or(WriteLock::Free, |l| {
            l.pid.map_or(WriteLock::HeldUnnamed, |pid| {
                WriteLock::HeldBy(host::ProcessReport::read(pid))
            })
        }))
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.write("acquire", |tx, now| lease::acquire(tx, now, params))
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> Result<LeaseRenew, BackendError> {
        params.check()?;
        self.write("renew", |tx, now| lease::renew(tx, now, params))
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> Result<LeaseRelease, BackendError> {
        self.write("release", |tx, now| lease::release(tx, now, params))
    }

    fn lease_fence(&self, params: &LeaseFenceParams) -> Result<LeaseFence, BackendError> {
        self.write("fence", |tx, now| lease::fence(tx, now, params))
    }

    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> Result<WaiterTicket, BackendError> {
        params.check()?;
        self.write("waiter-enqueue", |tx, now| lease::waiter_enqueue(tx, now, params))
    }

    fn waiter_remove(&self, p: &WaiterRemoveParams) -> Result<(), BackendError> {
        self.write("waiter-remove", |tx, _| lease::waiter_remove(tx, &p.name, p.ticket))
    }

    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        self.wait_for_commit(topic, timeout)
    }

    fn lease_get(&self, name: &LeaseName) -> Result<Option<LeaseState>, BackendError> {
        self.read(|tx, now| lease::get(tx, now, name))
    }

    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError> {
        self.read(|tx, now| lease::list(tx, now, params))
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError> {
        self.read(|tx, _| lease::history(tx, params))
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> Result<TokensBumped, BackendError> {
        self.write("bump-tokens", |tx, _| lease::tokens_bump(tx, params))?
            .map_err(|refused| BackendError::tokens_bump_refused(self.store(), refused))
    }

    fn tasks(&self) -> Option<&dyn TaskBackend> {
        Some(self)
    }
}

impl TaskBackend for SqliteBackend {
    fn task_add(&self, params: &[TaskAddParams]) -> Result<Vec<TaskAdd>, BackendError> {
        TaskAddParams::check_all(params)?;
        self.write_if("add", |tx, now| task::add(tx, now, params))
    }

    fn task_claim(&self, params: &TaskClaimParams) -> Result<Option<Claim>, BackendError> {
        params.check()?;
        self.write("claim", |tx, now| task::claim(tx, now, params))
    }

    fn task_heartbeat(&self, p: &TaskHeartbeatParams) -> Result<TaskUpdate, BackendError> {
        p.check()?;
        self.write("heartbeat", |tx, now| task::heartbeat(tx, now, &p.task, p.ttl))
    }

    fn task_complete(&self, p: &TaskCompleteParams) -> Result<TaskUpdate, BackendError> {
        self.write("complete", |tx, now| {
            task::complete(tx, now, &p.task, p.result.as_ref())
        })
    }

    fn task_complete_and_claim(
        &self,
        params: &[TaskCompleteAndClaimParams],
    ) -> Result<Vec<TaskCompleteAndClaim>, BackendError> {
        params.iter().try_for_each(|p| p.claim.check())?;
        self.write("complete-and-claim", |tx, now| {
            params
                .iter()
                .map(|p| {
                    let completed = task::complete(tx, now, &p.complete.task, p.complete.result.as_ref())?;
                    let claim = task::claim(tx, now, &p.claim)?;
                    Ok(TaskCompleteAndClaim { completed, claim })
                })
                .collect()
        })
    }

    fn task_fail(&self, p: &TaskFailParams) -> Result<TaskFail, BackendError> {
        p.check()?;
        self.write("fail", |tx, now| task::fail(tx, now, &p.task, &p.error, p.retry))
    }

    fn task_release(&self, t: &TaskRef) -> Result<TaskUpdate, BackendError> {
        self.write("task-release", |tx, now| task::release(tx, now, t))
    }

    fn task_retry(&self, p: &TaskIdParams) -> Result<TaskRetry, BackendError> {
        self.write("retry", |tx, now| task::retry(tx, now, &p.queue, &p.id))
    }

    fn task_get(&self, p: &TaskIdParams) -> Result<Option<Task>, BackendError> {
        self.read(|tx, now| task::get(tx, now, &p.queue, &p.id))
    }

    fn task_list(&self, params: &TaskListParams) -> Result<Vec<Task>, BackendError> {
        if let Some((queue, state, page)) = params.paged()? {
            return self.read(|tx, now| task::list_page(tx, now, queue, state, page, params.limit));
        }
        self.read(|tx, now| task::list(tx, now, params))
    }

    fn task_stats(&self, p: &TaskStatsParams) -> Result<Vec<QueueStats>, BackendError> {
        self.read(|tx, _| task::stats(tx, p.queue.as_ref()))
    }

    fn task_purge(&self, p: &TaskPurgeParams) -> Result<u64, BackendError> {
        p.check()?;
        self.write("purge", |tx, now| task::purge(tx, now, &p.queue, p.state, p.older_than))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_backend::{LeaseAcquire, LeaseRelease};
    use leasehold_backend_tests::params;
    use rusqlite::StatementStatus;

    use super::*;

    /// A cached statement is prepared once per connection. Without the
    /// query planner stability guarantee, SQLite re-prepares a statement
    /// with a `column = ?` term whenever its bindings are cleared — which
    /// the statement cache does after every use.
    #[test]
    fn cached_statements_are_not_prepared_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteBackend::open(&dir.path().join("s.db"), SqliteOptions::default()).unwrap();
        for _ in 0..3 {
            let LeaseAcquire::Acquired(g) = store.lease_acquire(&params::acquire("job")).unwrap() else {
                panic!("held")
            };
            let released = store.lease_release(&params::release("job", g.token)).unwrap();
            assert_eq!(released, LeaseRelease::Released);
        }
        let conn = store.conn();
        let stmt = conn.prepare_cached(&lease::rows_sql()).unwrap();
        assert!(
            stmt.get_status(StatementStatus::Run) >= 3,
            "not the statement the cycles ran"
        );
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
    }
}
