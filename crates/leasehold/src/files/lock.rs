//! The sidecar lock: an exclusive `flock` on `FILE.lock`, never on the data
//! file itself (rename replaces the data file's inode, and a lock on the old
//! inode would exclude nobody). The lock file is never deleted: deleting it
//! would let a waiter lock the unlinked inode while a newcomer locks a new
//! one. It is opened `O_NOFOLLOW|O_CLOEXEC`, so a planted symlink is refused
//! and child processes (a filter) never inherit it; the kernel releases it
//! when the process dies, kill -9 included.
//!
//! A writer that finds the lock held is told who holds it before it waits
//! ([`LockWait`], through [`WriteOptions::on_wait`](super::WriteOptions)),
//! and waits at most [`WriteOptions::wait`](super::WriteOptions) — a hung
//! filter of another `update` must not block every writer silently.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, OFlags};
use rustix::io::Errno;

use super::error::{FileError, Role};
use super::target::Target;
use crate::lock::Holders;

/// Held while alive; dropping it closes the descriptor and so unlocks.
#[derive(Debug)]
pub struct SidecarLock {
    _file: File,
}

/// A write about to wait for the lock of its file: what it waits for and
/// who holds it. Its `Display` is the one wording ("waiting for
/// state.json.lock, held by pid 4242, to write state.json").
#[derive(Debug)]
pub struct LockWait<'a> {
    /// The file to be written.
    pub file: &'a Path,
    /// Its lock file.
    pub lock: &'a Path,
    /// Who holds the lock, as far as this host can tell.
    pub holders: &'a Holders,
    /// How long the writer will wait (`None`: as long as it takes).
    pub wait: Option<Duration>,
}

impl fmt::Display for LockWait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "waiting for {}, held by {}, to write {}",
            self.lock.display(),
            self.holders,
            self.file.display()
        )?;
        match self.wait {
            Some(wait) => write!(f, " (at most {})", crate::format_duration(wait)),
            None => f.write_str(" (as long as it takes)"),
        }
    }
}

/// How to take a sidecar lock: how long to wait, and whom to tell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Waiting {
    pub wait: Option<Duration>,
    pub on_wait: Option<fn(&LockWait<'_>)>,
}

/// Lock `OF.lock` (created 0644 less the umask if missing). When another
/// holder keeps it: tell `waiting.on_wait` who, then wait up to
/// `waiting.wait` ([`FileError::LockHeld`] after it), forever without one.
pub fn lock_beside(of: &Path, waiting: Waiting) -> Result<SidecarLock, FileError> {
    let target = Target::open(&super::beside(of, ".lock"), Role::Lock).map_err(|e| e.for_data(of))?;
    let fd = target
        .open_file(OFlags::RDWR, Some(0o644), "open the lock file")
        .map_err(|e| e.for_data(of))?
        .expect("O_CREAT opens or fails");
    let file = File::from(fd);
    let flock = |op| loop {
        match rustix::fs::flock(&file, op) {
            Err(Errno::INTR) => {}
            other => return other,
        }
    };
    let failed = |e: Errno| FileError::io(&target.path, "lock the lock file", e.into()).for_data(of);
    match flock(FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => return Ok(SidecarLock { _file: file }),
        Err(Errno::WOULDBLOCK) => {}
        Err(e) => return Err(failed(e)),
    }
    let holders = crate::lock::holders(&file);
    if let Some(tell) = waiting.on_wait {
        tell(&LockWait {
            file: of,
            lock: &target.path,
            holders: &holders,
            wait: waiting.wait,
        });
    }
    let Some(wait) = waiting.wait else {
        flock(FlockOperation::LockExclusive).map_err(failed)?;
        return Ok(SidecarLock { _file: file });
    };
    // flock has no timeout: poll, backing off to 100 ms (as `lock` does).
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    loop {
        match flock(FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(SidecarLock { _file: file }),
            Err(Errno::WOULDBLOCK) => {}
            Err(e) => return Err(failed(e)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FileError::LockHeld {
                path: of.to_owned(),
                lock: PathBuf::from(&target.path),
                holders: crate::lock::holders(&file).to_string(),
                waited: wait,
            });
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
