//! The embedded SQLite store: one machine, many processes, no set-up.
//!
//! - The database file is created 0600 in a directory created 0700.
//!   Symbolic links in the directory part are followed, except one that
//!   may have been planted (`leasehold_host::symlinks`); a symlink at
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
//! - Every call first checks that the file this handle opened (device,
//!   inode) is still the one at the path: a store deleted or replaced
//!   under a running process loses its grants there (a renewal is
//!   `Lost(StoreReplaced)`) instead of being renewed on an unlinked file
//!   beside holders of the new one (`SqliteBackend::replaced`).
//! - A name's token counter is checked against the newest token its
//!   history records granted before a token is issued from it (`lease.rs`,
//!   `counter`): a damaged counter is refused, never issued from.
//! - Waiters are woken by a watch on the write-ahead log: every commit
//!   writes it, so a thread of the store handle blocks on the watch
//!   (inotify, kqueue) and wakes the waiters when another process commits,
//!   instead of each sleeping out its poll interval (`wake.rs`).

mod backup;
mod checkpoint;
mod classify;
mod files;
mod lease;
mod log_file;
mod open;
mod origin;
mod record;
mod register;
mod schema;
mod task;
mod wake;
mod wal;

pub use register::{KIND, STORE};
#[doc(hidden)]
pub use task::CLAIM_SQL;
pub use wal::LARGE_WAL_BYTES;

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[cfg(feature = "test-clock")]
use leasehold_backend::ClockSkew;
use leasehold_backend::failpoint;
use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, StoreBackup, StoreBackupParams, StoreInfo, StoreTime, TokensBumpParams, TokensBumped,
    WaitTopic, WaiterEnqueueParams, WaiterTicket, WriteLock, duration_nanos, format_duration, later, migration, signed,
};
use leasehold_backend::{
    Claim, QueueStats, Task, TaskAdd, TaskAddParams, TaskBackend, TaskClaimParams, TaskCompleteAndClaim,
    TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskIdParams,
    TaskListParams, TaskPurgeParams, TaskRef, TaskRetry, TaskStatsParams, TaskUpdate, WaiterRemoveParams,
};
use leasehold_backend::{Record, RecordBackend, RecordKey, RecordListParams, RecordWrite, RecordWriteParams};
use leasehold_host as host;
use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::classify::map_error;

/// How to open a SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Open a database on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// How long to wait for another process's write transaction.
    pub busy_timeout: Duration,
    /// Open only a store that exists: a missing file or directory is an
    /// error naming the path, and nothing is created.
    pub must_exist: bool,
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
            must_exist: false,
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
    waker: std::sync::OnceLock<Option<Arc<wake::Waker>>>,
    /// SQLite's shared-memory file beside the store, where it takes its
    /// write lock ([`WAL_WRITE_LOCK_BYTE`]).
    shm: PathBuf,
    /// When the handle was opened: one older than `checkpoint::LONG_LIVED`
    /// checkpoints in the background.
    opened: Instant,
    /// The frames in the log after this handle's last commit
    /// (`checkpoint::keep_the_log`).
    log_frames: Arc<std::sync::atomic::AtomicU32>,
    /// The background checkpoints, started by the first call of a
    /// long-lived handle.
    checkpointer: std::sync::OnceLock<Option<checkpoint::Checkpointer>>,
    options: SqliteOptions,
    /// The file this handle opened, as (device, inode): compared with what
    /// is at the path at every call ([`SqliteBackend::replaced`]).
    opened_file: FileId,
    // rusqlite's Connection is Send but not Sync; one connection per store
    // handle, used by one call at a time.
    conn: Mutex<Connection>,
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        // A long log left behind (a bulk add, many short commands'
        // commits) is copied and started again, so that the next process
        // to open the store reads and copies only its own frames (see
        // `checkpoint`).
        let conn = self.conn.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        checkpoint::before_close(conn, &self.log_frames, &self.path);
    }
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

/// A file's (device, inode): which file it is while this process runs
/// (unlike `origin.rs`'s record, which must hold across reboots, the
/// device is part of it here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    pub(crate) ino: u64,
}

impl FileId {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

impl SqliteBackend {
    fn store(&self) -> String {
        self.path.display().to_string()
    }

    /// What became of the file this handle opened, if it is no longer the
    /// one at the path: deleted (the connection goes on reading and
    /// writing an unlinked inode no other process will ever open) or
    /// replaced by another file (a restored copy, a new store made after
    /// the old one was removed). Either way, every grant and claim this
    /// process holds is in a store nobody else sees: renewing it would
    /// keep a command running beside holders of the store now at the path
    /// (DESIGN §3, a store's identity). One `stat` — cheap beside the
    /// transaction it guards. A path that cannot be looked at for another
    /// reason (permissions changed) is not judged here: SQLite's own
    /// calls fail on it as they do.
    fn replaced(&self) -> Option<String> {
        match std::fs::symlink_metadata(&self.file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Some("its file was deleted since this process opened it".to_owned())
            }
            Ok(meta) if FileId::of(&meta) != self.opened_file => Some(format!(
                "its file was replaced by another (inode {}; this process opened inode {}) since this process opened it",
                meta.ino(),
                self.opened_file.ino
            )),
            _ => None,
        }
    }

    /// [`Self::replaced`] as the error of any call.
    fn refuse_if_replaced(&self) -> Result<(), BackendError> {
        match self.replaced() {
            Some(what) => Err(BackendError::store_replaced(self.store(), &what)),
            None => Ok(()),
        }
    }

    /// The inode of the store's file (see `origin.rs`).
    fn inode(&self) -> Result<u64, BackendError> {
        std::fs::symlink_metadata(&self.file).map(|m| m.ino()).map_err(|e| {
            BackendError::new(
                classify::io_kind(&e),
                self.store(),
                format!("cannot look at its file: {e}"),
            )
            .hint("check the path")
            .with_source(e)
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves SQLite consistent
        // (the transaction rolls back on drop), so poisoning is ignored.
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Start the background checkpoints once this handle has lived long
    /// enough to be a long-lived process's (see `checkpoint`); a short
    /// command's calls only compare two instants here.
    fn checkpoint_if_long_lived(&self) {
        if self.checkpointer.get().is_none() && self.opened.elapsed() >= checkpoint::LONG_LIVED {
            self.checkpointer.get_or_init(|| {
                // Commits made while the handle was young, not copied yet.
                let uncopied = self.log_frames.load(std::sync::atomic::Ordering::Relaxed) > 0;
                checkpoint::Checkpointer::start(&self.file, self.options.busy_timeout, uncopied)
            });
        }
    }

    fn now(&self) -> Result<Now, BackendError> {
        let boot_id = host::boot_id().ok_or_else(|| {
            let reason = format!(
                "cannot read this boot's id from {}, which expiry on the boot clock needs",
                host::BOOT_ID_SOURCE
            );
            match classify::out_of_descriptors() {
                Some(emfile) => BackendError::new(
                    ErrorKind::Unavailable,
                    self.store(),
                    format!("{reason}: this process has no file descriptor left ({emfile})"),
                )
                .with_source(emfile),
                None => BackendError::new(ErrorKind::Unavailable, self.store(), reason)
                    .hint("make it readable (Linux: mount /proc), or use a postgres:// or etcd:// store"),
            }
        })?;
        let ns = duration_nanos(host::boot_clock()).saturating_add(duration_nanos(self.options.skew()));
        Ok(Now {
            boot_id,
            ns: signed(ns),
            wall: later(std::time::SystemTime::now(), self.options.skew()),
        })
    }

    /// The store's clock: the host kernel's wall clock (one clock for every
    /// process of the host, whatever a process's libc was told), shifted by
    /// the test skew.
    fn wall_clock(&self) -> std::time::SystemTime {
        later(host::wall_clock(), self.options.skew())
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
        self.checkpoint_if_long_lived();
        let now = self.now()?;
        let mut conn = self.conn();
        let changes = conn.total_changes();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.error(e))?;
        // Inside the write lock, before anything is read or written: a
        // write to a file no longer at the path is refused whole.
        self.refuse_if_replaced()?;
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
            if committing.is_some() {
                checkpoint::after_commit(&conn, &self.log_frames, &self.path);
                if let Some(Some(checkpointer)) = self.checkpointer.get() {
                    checkpointer.committed();
                }
                // A commit that changed no row (a claim with nothing to
                // claim) wakes no waiter: each woken one would try again,
                // commit nothing in turn and wake the others — three idle
                // worker threads on one handle kept a core busy so.
                if conn.total_changes() != changes {
                    self.committed_here();
                }
            }
            failpoint!(op, "after-commit");
        }
        outcome
    }

    /// Run `f` in a read transaction (a consistent snapshot).
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>, &Now) -> Result<T, lease::Error>) -> Result<T, BackendError> {
        self.checkpoint_if_long_lived();
        let now = self.now()?;
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| self.error(e))?;
        // A long-lived reader (`serve`, a status page) must not go on
        // showing a store that is no longer at its path.
        self.refuse_if_replaced()?;
        f(&tx, &now).map_err(|e| self.map_lease_error(e))
    }
}

/// The byte of the `-shm` file on which SQLite in WAL mode takes its write
/// lock, exclusively, for the length of every write transaction (`os_unix.c`:
/// `UNIX_SHM_BASE` = (22 + `SQLITE_SHM_NLOCK`) × 4 = 120, plus
/// `WAL_WRITE_LOCK` = 0 in `wal.c`).
const WAL_WRITE_LOCK_BYTE: u64 = 120;

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
        for damage in lease::counters_below_history(&conn).map_err(|e| self.map_lease_error(e))? {
            problems.push((
                "token counters".to_owned(),
                format!(
                    "{damage}: it would be refused, as issuing from it would reissue tokens; {}",
                    leasehold_backend::DAMAGED_COUNTER_HINT
                ),
            ));
        }
        let mut warnings = Vec::new();
        if let Some(warning) = wal::warning(&self.file, wal::length(&self.file), LARGE_WAL_BYTES) {
            warnings.push(("write-ahead log".to_owned(), warning));
        }
        // Processes still on a store file deleted or replaced at this
        // path: they hold grants no holder of this store can see, until
        // their next call notices (`replaced`). Said by `doctor` run from
        // anywhere — a fresh process sees only the file now at the path.
        for pid in host::processes_using_deleted(&self.file) {
            let holder = host::ProcessReport::read(pid);
            if holder.this_process {
                continue;
            }
            problems.push((
                "store file".to_owned(),
                format!(
                    "{holder} still has open a store file that was at this path and has since been deleted or replaced: it may hold grants there, beside the holders of this store, until its next call to the store notices (a `run` at its next renewal); stop it, then {}",
                    leasehold_backend::STORE_REPLACED_HINT
                ),
            ));
        }
        if let Some(what) = self.replaced() {
            // A long-lived process (`serve`) asked about the store it
            // opened, which is no longer at its path.
            problems.push((
                "store file".to_owned(),
                format!("{what}; {}", leasehold_backend::STORE_REPLACED_HINT),
            ));
        } else {
            let recorded = origin::read(&conn).map_err(|e| map_error(&self.store(), e))?;
            match origin::judge(recorded.as_ref(), self.inode()?) {
                origin::Judgement::Fact(label, text) => facts.push((label.to_owned(), text)),
                origin::Judgement::Warning(label, text) => warnings.push((label.to_owned(), text)),
            }
        }
        Ok(StoreInfo {
            kind: "sqlite",
            location: self.store(),
            schema_version: u32::try_from(version).ok(),
            facts,
            problems,
            warnings,
        })
    }

    fn store_backup(&self, params: &StoreBackupParams) -> Result<StoreBackup, BackendError> {
        self.backup(params)
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

    /// A grant in a store whose file was deleted or replaced is lost —
    /// an answer, not an error to retry: the keeper stops the command at
    /// once instead of at the end of its window.
    fn lease_renew(&self, params: &LeaseRenewParams) -> Result<LeaseRenew, BackendError> {
        params.check()?;
        if let Some(what) = self.replaced() {
            tracing::warn!(name = %params.name, token = %params.token, "{}", BackendError::store_replaced(self.store(), &what));
            return Ok(LeaseRenew::Lost(leasehold_backend::LostReason::StoreReplaced));
        }
        self.write("renew", |tx, now| lease::renew(tx, now, params))
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> Result<LeaseRelease, BackendError> {
        if self.replaced().is_some() {
            return Ok(LeaseRelease::Lost(leasehold_backend::LostReason::StoreReplaced));
        }
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

    fn lease_waiting(
        &self,
        name: &LeaseName,
        ticket: WaiterTicket,
        proved: usize,
    ) -> Result<Option<LeaseState>, BackendError> {
        self.read(|tx, now| lease::waiting(tx, now, name, ticket, proved))
    }

    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError> {
        self.read(|tx, now| lease::list(tx, now, params))
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError> {
        self.read(|tx, _| lease::history(tx, params))
    }

    /// The last step of a restore: the bump also records this file as the
    /// store's own (`origin.rs`), in the same transaction, which ends
    /// `doctor`'s warning about a copy.
    fn tokens_bump(&self, params: &TokensBumpParams) -> Result<TokensBumped, BackendError> {
        let inode = self.inode()?;
        self.write("bump-tokens", |tx, _| {
            let bumped = lease::tokens_bump(tx, params)?;
            if bumped.is_ok() {
                origin::record(tx, &origin::Recorded { inode, backup: None })?;
            }
            Ok(bumped)
        })?
        .map_err(|refused| BackendError::tokens_bump_refused(self.store(), refused))
    }

    fn tasks(&self) -> Option<&dyn TaskBackend> {
        Some(self)
    }

    fn records(&self) -> Option<&dyn RecordBackend> {
        Some(self)
    }
}

impl RecordBackend for SqliteBackend {
    fn record_get(&self, key: &RecordKey) -> Result<Option<Record>, BackendError> {
        self.read(|tx, _| record::get(tx, key))
    }

    fn record_list(&self, params: &RecordListParams) -> Result<Vec<Record>, BackendError> {
        params.check()?;
        self.read(|tx, _| record::list(tx, params))
    }

    fn record_write(&self, params: &RecordWriteParams) -> Result<RecordWrite, BackendError> {
        params.check()?;
        // The clock is read inside the write lock: a write that waited for
        // another process's transaction is judged when it is applied.
        self.write_if("record", |tx, _| record::write(tx, params, || self.wall_clock()))
    }

    fn record_clock(&self) -> Result<StoreTime, BackendError> {
        Ok(StoreTime::exactly(self.wall_clock()))
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

    /// What a full disk while a store is made is judged by: a new store
    /// (closed, its log checkpointed) is `NEW_STORE_BYTES` long — change
    /// the constant with the schema.
    #[test]
    fn a_new_store_is_as_large_as_new_store_bytes_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteBackend::open(&path, SqliteOptions::default()).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), classify::NEW_STORE_BYTES);
    }

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
