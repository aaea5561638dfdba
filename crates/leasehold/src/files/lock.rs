//! The sidecar lock: an exclusive `flock` on `FILE.lock`, never on the data
//! file itself (rename replaces the data file's inode, and a lock on the old
//! inode would exclude nobody). The lock file is never deleted: deleting it
//! would let a waiter lock the unlinked inode while a newcomer locks a new
//! one. It is opened `O_NOFOLLOW|O_CLOEXEC`, so a planted symlink is refused
//! and child processes (a filter) never inherit it; the kernel releases it
//! when the process dies, kill -9 included.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FlockOperation, OFlags};
use rustix::io::Errno;

use super::error::{FileError, Role};
use super::target::Target;

/// Held while alive; dropping it closes the descriptor and so unlocks.
#[derive(Debug)]
pub struct SidecarLock {
    _fd: OwnedFd,
}

/// Lock `OF.lock` (created 0644 less the umask if missing), waiting as long
/// as another holder keeps it.
pub fn lock_beside(of: &Path) -> Result<SidecarLock, FileError> {
    let target = Target::open(&super::beside(of, ".lock"), Role::Lock).map_err(|e| e.for_data(of))?;
    let fd = target
        .open_file(OFlags::RDWR, Some(0o644), "open the lock file")
        .map_err(|e| e.for_data(of))?
        .expect("O_CREAT opens or fails");
    loop {
        match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(SidecarLock { _fd: fd }),
            Err(Errno::INTR) => {}
            Err(e) => return Err(FileError::io(&target.path, "lock the lock file", e.into()).for_data(of)),
        }
    }
}
