//! The write-ahead log's file in the store's directory: made by leasehold,
//! not SQLite, so that its entry in the directory is known to be durable
//! without an fsync of the directory in every process.
//!
//! A commit is acknowledged once it is synced in the log (`-wal`). If the
//! log's directory entry were not durable, a power loss could take the
//! file, and the commit with it. SQLite guards against that by syncing the
//! directory at each process's first commit (it cannot know whether it
//! created the log): one of the fsyncs a short command paid for nothing.
//! leasehold's builds compile SQLite without it (`SQLITE_DISABLE_DIRSYNC`,
//! .cargo/config.toml) and do this instead, before SQLite opens the log:
//!
//! - **Whoever makes the log** creates it under a temporary name, takes an
//!   exclusive `flock` on it, links it into place, syncs the directory
//!   (which also makes the store file's entry durable, made in the same
//!   directory just before), and only then lets go of the lock.
//! - **Everyone else** opens the log and tries a shared `flock` without
//!   waiting: granted means its maker is done, so the entry is durable;
//!   refused means its maker is between the link and the sync, so this
//!   process syncs the directory itself. No one waits, and no one uses a
//!   log whose entry might not survive.
//!
//! SQLite takes no lock on the log's file (its locks are on the store file
//! and `-shm`), so these flocks and closing these descriptors never touch
//! SQLite's. A build of SQLite that still syncs the directory (a library
//! user's, built without this repository's config) only pays the old fsync.
//!
//! A log whose store file is gone is never reused (see [`refuse_orphan`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, OFlags, flock};

use crate::files;

/// The log's path beside the store file.
pub(crate) fn path_of(store: &Path) -> PathBuf {
    files::suffixed(store, "-wal")
}

/// Make sure the store's log exists and that its entry in `dir` (and the
/// store file's) is durable (see the module docs). Returns the log's inode,
/// to compare after SQLite has opened it ([`still`]).
pub(crate) fn ready(store: &Path, dir: &Path) -> io::Result<u64> {
    let wal = path_of(store);
    // Twice at most: a log made by someone else between our look and our
    // link is found on the second look.
    for _ in 0..2 {
        match open_no_follow(&wal) {
            Ok(file) => {
                match flock(&file, FlockOperation::NonBlockingLockShared) {
                    Ok(()) => {}
                    // Its maker has not synced the directory yet (or the
                    // filesystem has no flock): sync it ourselves.
                    Err(_) => files::sync_dir(dir)?,
                }
                return Ok(file.metadata()?.ino());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(inode) = make(&wal, dir)? {
                    return Ok(inode);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "{} keeps appearing and disappearing",
        wal.display()
    )))
}

/// Whether the log SQLite opened is still the one [`ready`] made durable;
/// if another program removed and SQLite re-made it in between, the
/// directory is synced now, before any commit is written to it.
pub(crate) fn still(store: &Path, dir: &Path, inode: u64) -> io::Result<()> {
    match std::fs::symlink_metadata(path_of(store)) {
        Ok(meta) if meta.ino() == inode => Ok(()),
        _ => files::sync_dir(dir),
    }
}

/// Create the log at `wal` as the module docs say; `None` if another
/// process linked one first.
fn make(wal: &Path, dir: &Path) -> io::Result<Option<u64>> {
    let name = wal.file_name().unwrap_or_default();
    let temp = files::temp_beside(dir, name, "new");
    let file = files::create_private(&temp)?;
    let linked = flock(&file, FlockOperation::LockExclusive)
        .map_err(io::Error::from)
        .and_then(|()| std::fs::hard_link(&temp, wal));
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            files::sync_dir(dir)?;
            // The lock goes with `file`, after the sync.
            Ok(Some(file.metadata()?.ino()))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Refuse to make a new store where a log is left without its store file:
/// the store was removed or moved without it, and the log may hold its
/// latest commits — SQLite would also replay them into the new file. An
/// empty log is another process's, making the same new store.
pub(crate) fn refuse_orphan(store: &Path) -> Result<(), OrphanLog> {
    let wal = path_of(store);
    match std::fs::symlink_metadata(&wal) {
        Ok(meta) if meta.len() > 0 => Err(OrphanLog { wal, bytes: meta.len() }),
        _ => Ok(()),
    }
}

/// A write-ahead log left without its store file ([`refuse_orphan`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "the store file is missing but its write-ahead log {} is there ({bytes} bytes): the store was removed or moved without it, and the log may hold its latest commits",
    wal.display()
)]
pub(crate) struct OrphanLog {
    wal: PathBuf,
    bytes: u64,
}

fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}
