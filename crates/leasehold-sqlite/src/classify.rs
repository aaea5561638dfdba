//! What a SQLite failure means for the user: its [`ErrorKind`], what
//! happened and what to do — a busy store said with who holds its write
//! lock, a full disk or a too-small filesystem told apart from SQLite's
//! "disk I/O error", a changed schema as damage.

use std::path::Path;

use leasehold_backend::{Backend, BackendError, ErrorKind, Remedy, WriteLock, format_duration, migration};
use rusqlite::ErrorCode;

use crate::{SqliteBackend, lease};

impl SqliteBackend {
    /// Map a SQLite failure of this open store; a lock that stayed held is
    /// said with who holds it.
    pub(crate) fn error(&self, e: rusqlite::Error) -> BackendError {
        if !is_busy(&e) {
            return map_error(&self.store(), e);
        }
        let waited = format_duration(self.options.busy_timeout);
        let lock = self.write_lock();
        let (reason, hint) = match &lock {
            Some(WriteLock::Free) => (
                format!(
                    "another process kept it locked for longer than the busy timeout ({waited}); it is free again now"
                ),
                "retry".to_owned(),
            ),
            Some(held) => (
                format!("it stayed locked for the whole busy timeout ({waited}): its write lock is {held}"),
                match held {
                    WriteLock::HeldBy(holder) => format!(
                        "{}; until then every write to this store, of any name, waits and fails (docs/RELIABILITY.md, \"One stopped process\")",
                        holder.remedy()
                    ),
                    _ => "find the process holding it (fuser PATH-shm, in the pid namespace that has it) and resume or end it"
                        .to_owned(),
                },
            ),
            None => (
                format!("another process kept it locked for longer than the busy timeout ({waited})"),
                "retry; if it persists, find the process holding it (fuser PATH)".to_owned(),
            ),
        };
        BackendError::new(ErrorKind::Busy, self.store(), reason)
            .hint(hint)
            .with_source(e)
    }

    pub(crate) fn map_lease_error(&self, e: lease::Error) -> BackendError {
        match e {
            lease::Error::Sqlite(e) => self.error(e),
            lease::Error::Counter(reason) => BackendError::new(ErrorKind::Corrupt, self.store(), reason)
                .hint(leasehold_backend::DAMAGED_COUNTER_HINT),
            lease::Error::BadRow(reason) => BackendError::new(ErrorKind::Corrupt, self.store(), reason)
                .hint("inspect it with `sqlite3`, or move it aside and start a new store (tokens would restart; sinks that check tokens must then be reset too)"),
        }
    }
}

/// A store whose schema does not match its version: bad data, never
/// repaired in place.
pub(crate) fn damaged_schema(store: &str, reason: String) -> BackendError {
    BackendError::new(ErrorKind::Corrupt, store, reason).hint(migration::damage_hint("it"))
}

/// The kind of an I/O failure on the store's file or directory.
pub(crate) fn io_kind(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => ErrorKind::Permission,
        std::io::ErrorKind::StorageFull => ErrorKind::DiskFull,
        std::io::ErrorKind::ReadOnlyFilesystem => ErrorKind::ReadOnly,
        _ => ErrorKind::Unavailable,
    }
}

/// `EMFILE`, when this process cannot open a file now: what lies behind a
/// failure whose own words lost the system's error (SQLite's "unable to
/// open database file", a boot id that could not be read). A front end
/// words it with the limit (the CLI: `too many open files (EMFILE) ...`).
pub(crate) fn out_of_descriptors() -> Option<std::io::Error> {
    std::fs::File::open("/dev/null")
        .err()
        .filter(|e| e.raw_os_error() == Some(rustix::io::Errno::MFILE.raw_os_error()))
}

/// SQLite's own words when a statement names a table or column the store
/// lacks: its schema was changed under a running store.
fn missing_from_schema(e: &rusqlite::Error) -> Option<&str> {
    let (rusqlite::Error::SqliteFailure(_, Some(msg)) | rusqlite::Error::SqlInputError { msg, .. }) = e else {
        return None;
    };
    (msg.starts_with("no such table") || msg.starts_with("no such column")).then_some(msg.as_str())
}

/// Another connection holds a lock this one needs.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The size of a new store at this build's schema (its pages; kept true by
/// the test `a_new_store_is_as_large_as_new_store_bytes_says`).
pub(crate) const NEW_STORE_BYTES: u64 = 60 * 1024;

/// The first part of a WAL store's shared-memory file (`-shm`), which
/// SQLite must be able to write beside the store before it can read it.
const SHM_FIRST_REGION: u64 = 32 * 1024;

/// SQLite could not grow the store's shared-memory file (extended code
/// `SQLITE_IOERR_SHMSIZE`, 4874), which it reports as a mere "disk I/O
/// error": no room for it on the filesystem.
fn shm_cannot_grow(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE)
}

/// What a filesystem of `total` bytes with `available` free means for a
/// store of `store_len` bytes whose `-shm` file could not grow: full, or
/// too small ever to hold the store and its shared-memory file.
fn no_room_for_shm(store: &str, store_len: u64, space: Option<(u64, u64)>) -> BackendError {
    let kib = |b: u64| format!("{} KiB", b.div_ceil(1024));
    match space {
        Some((total, _)) if total < store_len.saturating_add(SHM_FIRST_REGION) => BackendError::new(
            ErrorKind::DiskFull,
            store,
            format!(
                "its filesystem is too small for it: {} in all, and the store ({}) needs its shared-memory file \
                 ({}) beside it, so it can never be opened there",
                kib(total),
                kib(store_len),
                kib(SHM_FIRST_REGION)
            ),
        )
        .hint("put the store on a larger filesystem; nothing was changed")
        .remedy(Remedy::AnotherStore),
        space => BackendError::new(
            ErrorKind::DiskFull,
            store,
            format!(
                "the disk is full: SQLite cannot make room for the store's shared-memory file (-shm){}",
                space
                    .map(|(_, free)| format!("; {} free", kib(free)))
                    .unwrap_or_default()
            ),
        )
        .hint("free space on its filesystem; nothing was changed"),
    }
}

/// Map a SQLite failure to its kind and what the user must do about it.
pub(crate) fn map_error(store: &str, e: rusqlite::Error) -> BackendError {
    if let Some(msg) = missing_from_schema(&e) {
        let reason = format!("its schema is damaged ({msg})");
        return damaged_schema(store, reason).with_source(e);
    }
    let disk_full = e.sqlite_error_code() == Some(ErrorCode::DiskFull);
    if shm_cannot_grow(&e) || disk_full {
        let path = Path::new(store);
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let space = rustix::fs::statvfs(dir).ok().map(|s| {
            (
                s.f_blocks.saturating_mul(s.f_frsize),
                s.f_bavail.saturating_mul(s.f_frsize),
            )
        });
        // A store being made is as large as a new one will be.
        let store_len = std::fs::metadata(path).map_or(0, |m| m.len()).max(NEW_STORE_BYTES);
        // Without SQLite's own words as its cause: "disk I/O error" with
        // its code is what this replaces (issue 22). A full disk while the
        // store is made (its schema written) on a filesystem that could
        // never hold it says so too.
        let too_small = space.is_some_and(|(total, _)| total < store_len.saturating_add(SHM_FIRST_REGION));
        if !disk_full || too_small {
            return no_room_for_shm(store, store_len, space);
        }
    }
    let (kind, reason, hint) = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => (
            ErrorKind::Corrupt,
            "the file is not a SQLite database".to_owned(),
            CORRUPT_HINT,
        ),
        Some(ErrorCode::DatabaseCorrupt) => (ErrorKind::Corrupt, format!("damaged database ({e})"), CORRUPT_HINT),
        _ if is_busy(&e) => (
            ErrorKind::Busy,
            "another process kept it locked for longer than the busy timeout".to_owned(),
            "retry; if it persists, find the process holding it (fuser PATH)",
        ),
        Some(ErrorCode::DiskFull) => (
            ErrorKind::DiskFull,
            "the disk is full".to_owned(),
            "free space on its filesystem; nothing was changed",
        ),
        Some(ErrorCode::ReadOnly) => (
            ErrorKind::ReadOnly,
            "it is read-only (read-only filesystem or file)".to_owned(),
            "make it writable; nothing was changed",
        ),
        Some(ErrorCode::PermissionDenied) => (
            ErrorKind::Permission,
            format!("cannot open it ({e})"),
            "check the file's and directory's permissions",
        ),
        Some(ErrorCode::CannotOpen) => (
            ErrorKind::Unavailable,
            format!("cannot open it ({e})"),
            "check the file's and directory's permissions",
        ),
        Some(ErrorCode::SystemIoFailure) => (
            ErrorKind::Unavailable,
            format!("I/O error ({e})"),
            "check the disk (dmesg); nothing was reported as done",
        ),
        _ => (
            ErrorKind::Unavailable,
            format!("SQLite error: {e}"),
            "retry; if it persists, check it with `sqlite3 PATH 'PRAGMA integrity_check'`",
        ),
    };
    BackendError::new(kind, store, reason).hint(hint).with_source(e)
}

const CORRUPT_HINT: &str = "inspect it with `sqlite3 PATH 'PRAGMA integrity_check'`, restore it from a backup, or move it aside (tokens would restart)";
