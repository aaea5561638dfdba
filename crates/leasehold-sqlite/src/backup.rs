//! `leasehold backup`: a consistent copy of a live store.
//!
//! A plain `cp` of the store file is not a backup: the latest commits may
//! still be in its write-ahead log (`-wal`), even with no process running,
//! and a store restored from such a copy issues tokens again. The copy is
//! taken here with `VACUUM INTO`, which reads the store in one read
//! transaction — a snapshot of every commit before it began, writers going
//! on beside it (in WAL mode readers take no lock a writer waits for) —
//! and writes a compact, whole database file with no log of its own.
//! rusqlite's online backup API would do too, but it needs the destination
//! opened as a database (with its journal beside it, one more file to
//! clean up on failure), and a step-wise copy starts over whenever another
//! process commits; `VACUUM INTO` writes into a file we made ourselves.
//!
//! Safety, in order:
//! - the destination must not exist (a symbolic link there is refused, not
//!   followed), and its directory must (it is never created; a planted
//!   link in its path is refused: `symlinks::existing_dir`);
//! - the copy is written to a temporary file in that directory, created
//!   0600 with `O_EXCL | O_NOFOLLOW` (`VACUUM INTO` accepts an existing
//!   empty file, and opens it without following links: the store's
//!   connection is opened `NOFOLLOW`), stamped as a backup
//!   (`origin.rs`), fsynced, then hard-linked into place — `link` never
//!   replaces anything, so a destination that appeared meanwhile is
//!   refused — and the directory fsynced;
//! - on every failure the temporary file (and any journal beside it) is
//!   removed: nothing is left behind.
//!
//! The copy is read through a connection of its own, so the store handle's
//! connection (its keepers' renewals) is not held for the copy's length.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::SystemTime;

use leasehold_backend::{BackendError, ErrorKind, StoreBackup, StoreBackupParams};
use leasehold_host::symlinks;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::classify::{io_kind, map_error};
use crate::origin::{self, Recorded};
use crate::{SqliteBackend, files};

impl SqliteBackend {
    pub(crate) fn backup(&self, params: &StoreBackupParams) -> Result<StoreBackup, BackendError> {
        let given = &params.dest;
        let refuse =
            |reason: String, hint: &str| BackendError::plain(ErrorKind::InvalidInput, self.store(), reason).hint(hint);
        let Some(name) = given.file_name().filter(|_| !symlinks::names_dir(given)) else {
            return Err(refuse(
                format!("the backup's destination {} names a directory", given.display()),
                "name the new file to write, in an existing directory",
            ));
        };
        let dir = symlinks::existing_dir(symlinks::parent_of(given)).map_err(|e| {
            refuse(
                format!("the backup's destination {}: its directory: {e}", given.display()),
                e.hint(),
            )
        })?;
        let dest = dir.join(name);
        self.refuse_existing(given, &dest)?;
        let temp = files::temp_beside(&dir, name, "backup");
        let outcome = self.write_copy(given, &temp, &dest, &dir);
        for leftover in [
            temp.clone(),
            files::suffixed(&temp, "-journal"),
            files::suffixed(&temp, "-wal"),
            files::suffixed(&temp, "-shm"),
        ] {
            let _ = std::fs::remove_file(leftover);
        }
        outcome
    }

    /// Refuse a destination where anything is — a file, a directory, a
    /// symbolic link (never followed, so its target is not touched).
    fn refuse_existing(&self, given: &Path, dest: &Path) -> Result<(), BackendError> {
        match std::fs::symlink_metadata(dest) {
            Ok(_) => Err(BackendError::plain(
                ErrorKind::InvalidInput,
                self.store(),
                format!(
                    "the backup's destination {} exists (a {}), and a backup never overwrites anything",
                    given.display(),
                    // rustix's stat: its mode has the platform's width
                    // (16 bits on macOS), which std's `mode()` does not.
                    rustix::fs::lstat(dest).map_or("file", |st| symlinks::kind(rustix::fs::FileType::from_raw_mode(
                        st.st_mode
                    )))
                ),
            )
            .hint("name a new file, or move the old one aside first")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.dest_io(given, "look at", &e)),
        }
    }

    /// Write the copy to `temp`, stamp it, make it durable and link it to
    /// `dest`. The caller removes `temp`, whatever happened.
    fn write_copy(&self, given: &Path, temp: &Path, dest: &Path, dir: &Path) -> Result<StoreBackup, BackendError> {
        let file =
            files::create_private(temp).map_err(|e| self.dest_io(given, "create a file in the directory of", &e))?;
        let inode = file.metadata().map_err(|e| self.dest_io(given, "look at", &e))?.ino();
        let Some(temp_text) = temp.to_str() else {
            return Err(BackendError::plain(
                ErrorKind::InvalidInput,
                self.store(),
                format!(
                    "the backup's destination {} is not valid UTF-8, which SQLite needs",
                    given.display()
                ),
            )
            .hint("name a destination in UTF-8"));
        };
        let taken_at = SystemTime::now();
        self.snapshot_into(given, temp_text)?;
        stamp(
            temp,
            &Recorded {
                inode,
                backup: Some(origin::Backup {
                    taken_at,
                    from: self.file.display().to_string(),
                }),
            },
        )
        .map_err(|e| match e {
            crate::lease::Error::Sqlite(e) => self.dest_sqlite(given, e),
            crate::lease::Error::BadRow(reason) | crate::lease::Error::Counter(reason) => {
                BackendError::plain(ErrorKind::Failed, self.store(), reason)
            }
        })?;
        file.sync_all().map_err(|e| self.dest_io(given, "fsync", &e))?;
        let bytes = file.metadata().map_err(|e| self.dest_io(given, "look at", &e))?.len();
        if let Err(e) = std::fs::hard_link(temp, dest) {
            // EEXIST: someone made it while the copy was taken.
            let exists = self.refuse_existing(given, dest).err();
            return Err(exists.unwrap_or_else(|| self.dest_io(given, "link the copy to", &e)));
        }
        if let Err(e) = files::sync_dir(dir) {
            // Linked but not durable: take it back rather than report a
            // backup a crash could lose.
            let _ = std::fs::remove_file(dest);
            return Err(self.dest_io(given, "fsync the directory of", &e));
        }
        Ok(StoreBackup {
            path: given.to_path_buf(),
            bytes,
            taken_at,
        })
    }

    /// `VACUUM INTO` the (empty) file `temp`, read from a connection of
    /// its own that only reads.
    fn snapshot_into(&self, given: &Path, temp: &str) -> Result<(), BackendError> {
        let conn = Connection::open_with_flags(
            &self.file,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )
        .map_err(|e| map_error(&self.store(), e))?;
        conn.busy_timeout(self.options.busy_timeout)
            .map_err(|e| map_error(&self.store(), e))?;
        conn.execute("VACUUM INTO ?1", [temp]).map(|_| ()).map_err(|e| {
            // A failure to write the copy is the destination's; one to
            // read the store (busy, damaged) is the store's.
            if writes_failed(&e) {
                self.dest_sqlite(given, e)
            } else {
                self.error(e)
            }
        })
    }

    /// An I/O failure at the destination, by its kind (a full disk, a
    /// read-only filesystem, permissions).
    fn dest_io(&self, given: &Path, op: &str, e: &std::io::Error) -> BackendError {
        let kind = match io_kind(e) {
            ErrorKind::Unavailable => ErrorKind::Failed,
            kind => kind,
        };
        BackendError::plain(
            kind,
            self.store(),
            format!("cannot {op} the backup {}: {e}", given.display()),
        )
        .hint(dest_hint(kind))
    }

    /// A SQLite failure writing the copy.
    fn dest_sqlite(&self, given: &Path, e: rusqlite::Error) -> BackendError {
        let kind = match e.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => ErrorKind::DiskFull,
            Some(ErrorCode::ReadOnly) => ErrorKind::ReadOnly,
            Some(ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => ErrorKind::Permission,
            _ => ErrorKind::Failed,
        };
        BackendError::plain(
            kind,
            self.store(),
            format!("cannot write the backup {} ({e})", given.display()),
        )
        .hint(dest_hint(kind))
        .with_source(e)
    }
}

/// Whether SQLite failed writing (rather than reading the store).
fn writes_failed(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DiskFull | ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen)
    ) || matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.extended_code & 0xff == rusqlite::ffi::SQLITE_IOERR
        && f.extended_code != rusqlite::ffi::SQLITE_IOERR_READ && f.extended_code != rusqlite::ffi::SQLITE_IOERR_SHORT_READ)
}

fn dest_hint(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::DiskFull => "free space on the destination's filesystem, or back up to another one",
        ErrorKind::ReadOnly => "back up to a writable filesystem",
        ErrorKind::Permission => "back up to a directory you may write, or check its permissions",
        _ => "check the destination's disk and directory, then try again",
    }
}

/// Mark the copy as a backup: its own inode, when and from what it was
/// taken. The copy has no log (`VACUUM INTO` writes none): written here
/// with a rollback journal, removed at the commit, so the copy stays one
/// whole file.
fn stamp(temp: &Path, recorded: &Recorded) -> crate::lease::Result<()> {
    let mut conn = Connection::open_with_flags(temp, files::OPEN_FLAGS)?;
    let _: String = conn.pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    origin::record(&tx, recorded)?;
    tx.commit()?;
    conn.close().map_err(|(_, e)| e.into())
}
