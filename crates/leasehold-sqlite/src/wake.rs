//! Waking waiters without polling. SQLite has no notification across
//! processes, but every commit writes the write-ahead log (`-wal`) with
//! `write(2)`: a thread of this store handle blocks on a watch of that
//! file (`host::FileWatch`: inotify on Linux, kqueue on macOS; the store
//! file until the log exists) and counts the writes it sees; waiters wait
//! for that count to move, then read the store again. A commit to *any* name wakes every waiter of the store;
//! each then makes one cheap read, which is what the poll did anyway
//! every 100 ms.
//!
//! - One watch per store handle, kept for its life, not one per wait:
//!   closing an inotify instance waits for the kernel's grace period (7 ms
//!   measured here), which cost every hand-off that much. It also serves
//!   any number of waiting threads at once (a Python program's `async`
//!   waiters share one store).
//! - A commit between the waiter's last read and its wait must not be
//!   missed: `PRAGMA data_version` (which changes when another connection
//!   commits) is kept in the waiter's `WaitTopic` cursor and compared
//!   first, and the write count is taken before that comparison.
//! - The log is written *before* the commit is visible: the wal-index is
//!   updated after the log's fsync. So after a write — seen while waiting,
//!   or since the waiter last looked — the waiter waits for `data_version`
//!   to change (polled after 0.5 ms, then every millisecond; at most
//!   [`SETTLE`]) before it reads;
//!   reading at once would show the old state and send it back to wait
//!   for a write that has already happened (seen: p90 117 ms of a 150 ms
//!   poll).
//! - A watch that cannot be set up (no inotify instances left), or a
//!   handle used in a forked child (which has no such thread), falls back
//!   to sleeping out the timeout — the caller's poll — which is never
//!   wrong, only slower.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use leasehold_backend::{BackendError, WaitTopic, limits};
use leasehold_host as host;

use crate::SqliteBackend;

/// How long a woken waiter waits for the commit that wrote the log to
/// become visible (an fsync of the log, usually a few milliseconds); a
/// write that commits nothing new to it (its own, a checkpoint) costs at
/// most this.
const SETTLE: Duration = Duration::from_millis(50);

/// How often the watching thread looks whether its handle is gone, and
/// for a log that did not exist when it started.
const LOOK: Duration = Duration::from_secs(1);

/// The writes seen on the store's files, shared by the watching thread
/// and the waiters of one store handle.
#[derive(Debug)]
pub(crate) struct Waker {
    /// The process that started the watching thread (a forked child has
    /// none).
    pid: u32,
    seen: Mutex<Seen>,
    wrote: Condvar,
}

#[derive(Debug, Default)]
struct Seen {
    writes: u64,
    /// Commits made through this handle: `data_version` does not move for
    /// a connection's own commits, so threads sharing one store (a release
    /// on one, a waiter on another) would wait out [`SETTLE`] for each.
    own: u64,
}

impl Waker {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start watching `file` and its log; `None` when it cannot be watched.
    pub(crate) fn start(file: &Path) -> Option<Arc<Self>> {
        let mut wal = file.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        // The log alone once it exists: commits write only the log; the
        // store file is written by checkpoints, which change nothing a
        // waiter reads (and each woke every waiter next in line for a
        // settle of up to `SETTLE`).
        let has_wal = wal.exists();
        let watch = host::FileWatch::new(&[if has_wal { &wal } else { file }]).ok()?;
        let waker = Arc::new(Self {
            pid: std::process::id(),
            seen: Mutex::default(),
            wrote: Condvar::new(),
        });
        let theirs = Arc::clone(&waker);
        let file = file.to_path_buf();
        std::thread::Builder::new()
            .name("leasehold-wake".into())
            .spawn(move || theirs.watch(watch, has_wal, &file, &wal))
            .ok()?;
        Some(waker)
    }

    /// The watching thread: count writes until the handle is dropped.
    fn watch(self: &Arc<Self>, mut watch: host::FileWatch, mut has_wal: bool, file: &Path, wal: &Path) {
        // The handle holds the other reference: alone, it is gone.
        while Arc::strong_count(self) > 1 {
            match watch.wait(LOOK) {
                Ok(true) => {
                    let mut seen = self.seen();
                    seen.writes += 1;
                    drop(seen);
                    self.wrote.notify_all();
                }
                Ok(false) => {
                    if !has_wal && wal.exists() {
                        // A new store: watch the log now that it is there.
                        if let Ok(log) = host::FileWatch::new(&[wal]) {
                            watch = log;
                            has_wal = true;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(file = %file.display(), "the store's watch failed; waiters poll: {e}");
                    return;
                }
            }
        }
    }

    /// A commit through this handle is visible to its waiters now.
    pub(crate) fn committed(&self) {
        self.seen().own += 1;
        self.wrote.notify_all();
    }

    /// Wait up to `timeout` for a write after the `writes`-th, or until
    /// `topic` is [ending](WaitTopic::ending).
    fn wait_past(self: &Arc<Self>, writes: u64, timeout: Duration, topic: &WaitTopic) -> bool {
        let theirs = Arc::downgrade(self);
        topic.on_interrupt(Some(Box::new(move || {
            if let Some(waker) = theirs.upgrade() {
                leasehold_backend::notify_all_under(&waker.seen, &waker.wrote);
            }
        })));
        let seen = self.seen();
        let (seen, _) = self
            .wrote
            .wait_timeout_while(seen, timeout, |s| s.writes == writes && !topic.ending())
            .unwrap_or_else(PoisonError::into_inner);
        let wrote = seen.writes != writes;
        drop(seen);
        topic.on_interrupt(None);
        wrote
    }
}

impl SqliteBackend {
    /// `PRAGMA data_version` of this handle's connection, with the commits
    /// made through the handle itself (which do not move it) in the high
    /// half, as a cursor (never 0, which means "not set").
    fn data_version(&self, waker: &Waker) -> Result<u64, BackendError> {
        let own = waker.seen().own;
        let version: i64 = self
            .conn()
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| crate::map_error(&self.store(), e))?;
        Ok((version as u64).wrapping_add(own << 32).wrapping_add(1).max(1))
    }

    /// Tell this handle's waiters of a commit made through it.
    pub(crate) fn committed_here(&self) {
        if let Some(waker) = self.waker.get().and_then(|w| w.as_deref()) {
            waker.committed();
        }
    }

    /// This handle's watch, started on the first wait.
    fn waker(&self) -> Option<&Arc<Waker>> {
        self.waker
            .get_or_init(|| Waker::start(&self.file))
            .as_ref()
            .filter(|w| w.pid == std::process::id())
    }

    /// The seam's `wait_for_change` for SQLite (see the module docs).
    pub(crate) fn wait_for_commit(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        let timeout = timeout.min(limits::WAIT.max);
        let Some(waker) = self.waker() else {
            topic.sleep(timeout);
            return Ok(());
        };
        let begun = Instant::now();
        let writes = waker.seen().writes;
        // Writes seen since this waiter last looked: one of them may not
        // be visible yet (see the module docs).
        let unseen = topic.events_moved_to(writes);
        let now = self.data_version(waker)?;
        if topic.moved_to(now) {
            return Ok(()); // committed since the waiter last looked
        }
        if unseen || waker.wait_past(writes, timeout, topic) {
            let until = Instant::now() + SETTLE.min(timeout.saturating_sub(begun.elapsed()));
            let mut pause = Duration::from_micros(500);
            while Instant::now() < until {
                let version = self.data_version(waker)?;
                if version != now {
                    // What the caller reads next includes this commit:
                    // the next wait waits for a later one.
                    topic.set_cursor(version);
                    break;
                }
                std::thread::sleep(pause);
                // An fsync takes a millisecond or a few: looked at every
                // millisecond after the first half (backing off to 4 ms
                // cost threads taking turns a millisecond a turn).
                pause = Duration::from_millis(1);
            }
            topic.events_moved_to(waker.seen().writes);
        }
        Ok(())
    }
}
