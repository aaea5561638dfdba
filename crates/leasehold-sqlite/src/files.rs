//! Names and files beside a store: the files SQLite keeps next to it
//! (`-wal`, `-shm`, `-journal`) and the temporary files leasehold makes
//! whole before linking them into place (a new store, its log, a backup).

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rusqlite::OpenFlags;

/// How leasehold opens a SQLite file: read-write, never creating it (a new
/// store is made whole first), never through a link, one thread at a time.
pub(crate) const OPEN_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_WRITE
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX)
    .union(OpenFlags::SQLITE_OPEN_NOFOLLOW);

/// `path` with `suffix` appended: `leasehold.db` and `-wal` make
/// `leasehold.db-wal`.
pub(crate) fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

/// A temporary name for `name` in `dir`, unique in this process and
/// hidden: `.NAME.leasehold-WHAT.PID.SEQ`. A leftover of a crashed
/// process that had our pid is removed.
pub(crate) fn temp_beside(dir: &Path, name: &OsStr, what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let temp = dir.join(format!(
        ".{}.leasehold-{what}.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&temp);
    temp
}

/// Create `path` as a new private file (0600), never through a link and
/// never over an existing file.
pub(crate) fn create_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path)
}

/// Make `dir`'s entries durable (fsync the directory).
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}
