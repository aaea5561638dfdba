//! Waking waiters without polling. SQLite has no notification across
//! processes, but every commit writes the write-ahead log (`-wal`) with
//! `write(2)`: a waiter watches that file (`host::FileWatch`: inotify on
//! Linux, kqueue on macOS) and wakes when another process commits, then
//! reads the store again. A commit to *any* name wakes every waiter of
//! the store; each then makes one cheap read, which is what the poll did
//! anyway every 100 ms.
//!
//! A commit between the waiter's last read and the watch must not be
//! missed: `PRAGMA data_version` (which changes when another connection
//! commits) is kept in the waiter's `WaitTopic` cursor, compared before
//! the watch is set up and once more after.
//!
//! The log is written *before* the commit is visible: the wal-index is
//! updated after the log's fsync. So a wake is followed by a short wait
//! for `data_version` to change (polled every 0.5 ms, at most [`SETTLE`]);
//! returning at once would let the waiter read the old state and re-arm
//! its watch after the last write of the commit, sleeping out its timeout
//! (seen: p90 117 ms of a 150 ms poll). A watch that cannot be set up (no
//! inotify left, the log not there yet) falls back to sleeping out the
//! timeout — the caller's poll — which is never wrong, only slower.

use std::time::{Duration, Instant};

use leasehold_backend::{BackendError, WaitTopic, host, limits};

use crate::SqliteBackend;

/// How long a woken waiter waits for the commit that wrote the log to
/// become visible (an fsync of the log, usually a few milliseconds); a
/// write that commits nothing (a checkpoint) costs at most this.
const SETTLE: Duration = Duration::from_millis(50);

impl SqliteBackend {
    /// `PRAGMA data_version` of this handle's connection, as a cursor
    /// (never 0, which means "not set").
    fn data_version(&self) -> Result<u64, BackendError> {
        let version: i64 = self
            .conn()
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(|e| crate::map_error(&self.store(), e))?;
        Ok((version as u64).wrapping_add(1).max(1))
    }

    /// The seam's `wait_for_change` for SQLite (see the module docs).
    pub(crate) fn wait_for_commit(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        let timeout = timeout.min(limits::WAIT.max);
        let seen = topic.cursor();
        let now = self.data_version()?;
        topic.set_cursor(now);
        if seen != 0 && seen != now {
            return Ok(()); // committed since the waiter last looked
        }
        let mut wal = self.file.clone().into_os_string();
        wal.push("-wal");
        let Ok(watch) = host::FileWatch::new(&[std::path::Path::new(&wal), &self.file]) else {
            std::thread::sleep(timeout);
            return Ok(());
        };
        if self.data_version()? != now {
            return Ok(()); // committed while the watch was being set up
        }
        let begun = Instant::now();
        match watch.wait(timeout) {
            Ok(true) => {
                let until = Instant::now() + SETTLE.min(timeout.saturating_sub(begun.elapsed()));
                while Instant::now() < until {
                    if self.data_version()? != now {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            Ok(false) => {}
            Err(_) => std::thread::sleep(timeout.saturating_sub(begun.elapsed())),
        }
        Ok(())
    }
}
