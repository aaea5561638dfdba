//! Checkpoints: copying the write-ahead log's commits into the store file.
//!
//! The log is kept between calls (SQLite's persistent WAL) and a closing
//! connection does not checkpoint ([`keep_the_log`]). A short command —
//! `acquire`, a cron line, an agent's shell step — then pays one fsync,
//! its commit's; when every process created the log, synced its header,
//! checkpointed on close (two more) and deleted it, one `acquire` cost
//! five (docs/PERFORMANCE.md, "fsyncs per command").
//!
//! The log must still be checkpointed, or it grows and every process that
//! opens the store first reads it whole (SQLite rebuilds its index of the
//! log when the first connection opens). Three things do it, none on a
//! short command's usual path:
//! - **a long-lived process that writes** (`run`'s keeper, `work`, the
//!   cron daemon, a library program): once its handle is older than
//!   [`LONG_LIVED`], a thread of the handle checkpoints [`EVERY`] after
//!   the handle commits — on its own connection, so the
//!   handle's calls never wait for it, and passively, so no writer waits
//!   for it either. Its own commits, not anyone's: with any commit, every
//!   long-lived process checkpointed every second — 200 idle waiters
//!   (each refreshing its place now and then) made 200 checkpoints a
//!   second between them, a quarter of what waiting cost (issue 41). A
//!   process that only reads (`serve`) leaves the log to its writers;
//! - **a busy handle**: a commit that leaves more than
//!   [`AUTOCHECKPOINT_FRAMES`] in the log copies them (SQLite's own
//!   auto-checkpoint, at its default size); the next commit then writes
//!   the log again from its start, over blocks already allocated;
//! - **a handle that leaves a long log behind**: when its last commit
//!   left more than [`TRUNCATE_FRAMES`] in the log (a bulk add, or many
//!   short commands' commits), its close copies them and starts the log
//!   again from its beginning ([`before_close`]).
//!
//! Why a close starts the log again: SQLite keeps what was copied in
//! `-shm`, which the first process to open the store rebuilds from the log
//! alone, as if nothing had been copied. A log that was only copied is
//! then read whole by that process, and copied again by its first commit
//! (more than [`AUTOCHECKPOINT_FRAMES`]): after `task add --batch` of
//! 200,000 tasks, every later `acquire` read and copied 30 MiB of log and
//! made three fsyncs, and the log grew by each command's frames for ever
//! (issue 45). A log that starts again is read only up to its first frame
//! of the old log (each frame carries the log's salt). It starts again at
//! a commit made once all of it was copied: [`before_close`] makes one,
//! rewriting the store's `application_id` (a value that never changes),
//! so that the next command appends its commit to a short log — one fsync
//! — where a log truncated to nothing would make it sync a new log header
//! first. If that cannot be done without waiting (another process writes,
//! or reads an old snapshot), SQLite's own checkpoint on close does it
//! when no other connection has the store open, truncating the log.
//!
//! Why nothing else truncates: the log, truncated, grows
//! again block by block, and an fsync of a growing file also commits its
//! new size to the filesystem's journal — truncating at a commit, or at
//! the close of a short command beside a long-lived process, nearly halved
//! the library's lease cycle rate (bench/run's leases table, measured
//! while this was written). A log that starts again keeps its blocks, up
//! to [`LOG_BYTES_KEPT`] (`journal_size_limit`): only a log that grew past
//! that (a bulk add) is cut back to it.
//!
//! A checkpoint never makes a commit less durable: each commit is synced
//! in the log before it is acknowledged (`synchronous=FULL`), wherever it
//! is later copied to. What changes is what a plain copy of the store file
//! holds — its latest commits may be only in the log — so a copy is taken
//! with `leasehold backup`.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, FileControl};

/// A handle older than this belongs to a long-lived process, which
/// checkpoints in the background. A short command ends well before.
pub(crate) const LONG_LIVED: Duration = Duration::from_secs(1);

/// How often a long-lived process's thread checkpoints what was committed.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// A commit that leaves more frames (pages and their headers, about
/// 4 KiB each) than this in the log copies them into the store file:
/// SQLite's default auto-checkpoint.
pub(crate) const AUTOCHECKPOINT_FRAMES: u32 = 1000;

/// A handle whose last commit left more frames than this in the log
/// copies them and starts the log again when it closes. A lease cycle's
/// commit writes about five; each process that opens the store reads what
/// the log holds, so this also caps what that costs (about 1 MiB).
pub(crate) const TRUNCATE_FRAMES: u32 = 256;

/// The length a log that starts again keeps (SQLite's
/// `journal_size_limit`): about [`AUTOCHECKPOINT_FRAMES`] frames of 4 KiB
/// pages, as long as the log of a busy store gets between checkpoints, so
/// that only a log that grew past it (a bulk add) is cut back.
pub(crate) const LOG_BYTES_KEPT: i64 = (AUTOCHECKPOINT_FRAMES as i64) * (4096 + 24) + 32;

/// Keep the log between connections and skip the checkpoint on close (see
/// the module docs). Returns the number of frames the log held after this
/// connection's last commit, kept up to date by SQLite's log hook (which
/// replaces its own auto-checkpoint: [`after_commit`] does the same).
pub(crate) fn keep_the_log(conn: &mut Connection) -> rusqlite::Result<Arc<AtomicU32>> {
    conn.file_control(None::<&str>, FileControl::PersistWal(&mut 1))?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.pragma_update(None, "journal_size_limit", LOG_BYTES_KEPT)?;
    let frames = Arc::new(AtomicU32::new(0));
    let theirs = Arc::clone(&frames);
    conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
        theirs.store(u32::try_from(pages).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }))?;
    Ok(frames)
}

/// After a commit: copy the log into the store file if it holds more
/// than [`AUTOCHECKPOINT_FRAMES`] (passively: never waits).
pub(crate) fn after_commit(conn: &Connection, frames: &AtomicU32, store: &Path) {
    if frames.load(Ordering::Relaxed) > AUTOCHECKPOINT_FRAMES {
        checkpoint(conn, store);
    }
}

/// Before a handle's connection closes: if its last commit left more than
/// [`TRUNCATE_FRAMES`] in the log, copy them into the store file and start
/// the log again with a commit that changes nothing (see the module docs);
/// where that cannot be done without waiting, let SQLite checkpoint and
/// truncate the log on this close — which it does only if no other
/// connection has the store open (it tries for an exclusive lock, without
/// waiting).
pub(crate) fn before_close(conn: &Connection, frames: &AtomicU32, store: &Path) {
    if frames.load(Ordering::Relaxed) <= TRUNCATE_FRAMES {
        return;
    }
    // A close never waits for another process.
    let _ = conn.busy_timeout(std::time::Duration::ZERO);
    let copied_all = matches!(
        checkpoint(conn, store),
        Some((0, log, copied)) if log == copied
    );
    // The commit that starts the log again: a log hook then reports the
    // few frames of the log's new beginning. A reader of an old snapshot
    // in another process keeps the log from starting again; the commit is
    // then only appended.
    if copied_all
        && conn
            .pragma_update(None, "application_id", crate::schema::APPLICATION_ID)
            .is_ok()
        && frames.load(Ordering::Relaxed) <= TRUNCATE_FRAMES
    {
        return;
    }
    let _ = conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false);
    let _ = conn.pragma_update(None, "journal_size_limit", 0);
}

/// Copy what no reader still needs from the log into the store file,
/// waiting for no one (`PRAGMA wal_checkpoint(PASSIVE)`): SQLite's (busy,
/// frames in the log, frames copied), or `None` when it failed — which is
/// only logged: every commit is durable in the log either way. What was
/// copied stays in the log until the log starts again: a handle's count
/// of its frames (what the next process to open the store reads) is left
/// as it was.
fn checkpoint(conn: &Connection, store: &Path) -> Option<(i64, i64, i64)> {
    let store = store.display();
    let begun = Instant::now();
    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    }) {
        Ok((busy, log, copied)) => {
            tracing::debug!(%store, busy, log, copied, took_us = begun.elapsed().as_micros(), "checkpointed");
            Some((busy, log, copied))
        }
        Err(e) => {
            tracing::debug!(%store, "checkpoint failed (a later one tries again): {e}");
            None
        }
    }
}

/// The background checkpoints of a long-lived handle: the thread runs
/// until this is dropped (with the handle), and sleeps until the handle
/// commits — an idle process's thread never wakes (200 idle waiters'
/// threads, each looking every second, cost a tenth of a core's percent
/// apiece in timer wake-ups alone).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    /// A message: the handle committed. Dropping it wakes the thread,
    /// which then ends.
    committed: mpsc::Sender<()>,
}

impl Checkpointer {
    /// Start checkpointing the store at `file` [`EVERY`] after a commit
    /// of the handle (and after the start when `uncopied`: commits it made
    /// while young); `None` when the thread cannot be started (the size
    /// bound then still keeps the log in check, as it does when the thread
    /// cannot open its connection).
    pub(crate) fn start(file: &Path, busy_timeout: Duration, uncopied: bool) -> Option<Self> {
        let (committed, commits) = mpsc::channel();
        let file = file.to_path_buf();
        // The connection is opened on the thread: the call that starts it
        // is often a waiter's attempt at the hand-off, which opening a
        // connection (a few milliseconds) delayed.
        std::thread::Builder::new()
            .name("leasehold-checkpoint".into())
            .spawn(move || {
                // The handle's own connection has made sure the file is a
                // store (and not a link) already.
                let Ok(mut conn) = Connection::open_with_flags(&file, crate::files::OPEN_FLAGS) else {
                    return;
                };
                if conn.busy_timeout(busy_timeout).is_err() || keep_the_log(&mut conn).is_err() {
                    return;
                }
                run(&conn, &commits, &file);
            })
            .ok()?;
        if uncopied {
            let _ = committed.send(());
        }
        Some(Self { committed })
    }

    /// The handle committed: checkpoint within [`EVERY`].
    pub(crate) fn committed(&self) {
        let _ = self.committed.send(());
    }
}

/// The thread: after a commit, wait [`EVERY`] (the commits meanwhile
/// share one checkpoint), then checkpoint; end when the handle is gone.
fn run(conn: &Connection, commits: &mpsc::Receiver<()>, file: &Path) {
    while commits.recv().is_ok() {
        let at = Instant::now() + EVERY;
        loop {
            match commits.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        checkpoint(conn, file);
    }
}
