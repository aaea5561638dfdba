//! Single-instance locks on one machine: `flock(2)` on a lock file.
//!
//! - A directory gets a lock file inside it ([`LOCK_FILE_NAME`]).
//! - The lock file is opened without following a symlink (`O_NOFOLLOW`):
//!   a link planted at the lock path in a shared directory is refused, never
//!   followed. Anything but a regular file is refused too (a FIFO would
//!   block, a device would be touched). Links in the directory part are
//!   followed, unless one may have been planted
//!   ([`crate::symlinks::resolve_dir`]).
//! - The lock file is never deleted: deleting it would let a second process
//!   lock a new file of the same name while the first still holds the old.
//! - The kernel releases the lock when every descriptor of it is closed —
//!   kill -9 included. The descriptor is close-on-exec, so children do not
//!   keep the lock unless the caller hands it over on purpose.
//! - An exclusive holder writes its pid into the file (a fixed-width
//!   record overwritten in place) as a diagnostic for "held by pid N"; the
//!   lock itself is the `flock`, never the content.
//! - Network filesystems are refused unless allowed: `flock` there is
//!   emulated (NFS), per-client (CIFS) or a no-op.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::symlinks::{self, DirError};
use crate::{host, limits};

/// The lock file created inside a directory given as the lock path.
pub const LOCK_FILE_NAME: &str = ".leasehold.lock";

/// What can go wrong taking a lock (a lock held by another is a value,
/// [`TryLock::Held`]).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "refusing to lock {path}: it is a symbolic link, and a lock file is never followed through one (someone may have planted it); remove it or choose another path"
    )]
    Symlink { path: PathBuf },

    #[error("refusing to lock {path}: it is not a regular file or a directory; choose another path")]
    NotAFile { path: PathBuf },

    #[error("refusing to lock {}: {why}. {}", path.display(), why.hint())]
    UnsafeDirectory { path: PathBuf, why: DirError },

    #[error(
        "refusing to lock {path}: it is on a network filesystem ({fs}), where flock is unreliable; use a local path, or pass --allow-network-fs if you know every user is on this host"
    )]
    NetworkFs { path: PathBuf, fs: String },

    #[error("cannot {op} lock file {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The timeout is out of [`limits::WAIT`]; nothing was locked.
    #[error("{0}; nothing was locked")]
    InvalidInput(#[from] limits::OutOfRange),
}

/// How to lock.
#[derive(Debug, Clone, Copy, Default)]
pub struct LockOptions {
    /// A shared lock (many holders, no exclusive one).
    pub shared: bool,
    /// Lock on a network filesystem anyway.
    pub allow_network_fs: bool,
}

/// The outcome of an attempt: contention is a value.
#[derive(Debug)]
pub enum TryLock {
    Locked(FileLock),
    /// Someone holds it; `pid` is what the exclusive holder wrote, if
    /// readable (a diagnostic, not proof).
    Held {
        path: PathBuf,
        pid: Option<u32>,
    },
}

/// A held lock. Dropping it unlocks (and logs a failed unlock; closing the
/// descriptor releases it anyway).
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
    shared: bool,
}

impl FileLock {
    /// The lock file's path (inside the directory, for a directory).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The locked descriptor (close-on-exec).
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Err(e) = self.file.unlock() {
            tracing::warn!(path = %self.path.display(), "cannot unlock (closing releases it anyway): {e}");
        }
    }
}

/// The lock file for `path`: `path` itself, or [`LOCK_FILE_NAME`] inside it
/// when it is a directory (a symlink is not followed to find out).
#[must_use]
pub fn lock_file_path(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => path.join(LOCK_FILE_NAME),
        _ => path.to_path_buf(),
    }
}

fn open(path: &Path, options: LockOptions) -> Result<(File, PathBuf), LockError> {
    let path = lock_file_path(path);
    let io_err = |op, source| LockError::Io {
        op,
        path: path.clone(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = symlinks::resolve_dir(dir).map_err(|why| match why {
        DirError::Io { source, .. } => io_err("find the directory of", source),
        why => LockError::UnsafeDirectory {
            path: path.clone(),
            why,
        },
    })?;
    if !options.allow_network_fs
        && let Some(fs) = host::network_filesystem(&dir).map_err(|e| io_err("check the filesystem of", e))?
    {
        return Err(LockError::NetworkFs { path, fs });
    }
    let at = path.file_name().map_or_else(|| path.clone(), |name| dir.join(name));
    // NONBLOCK: opening a planted FIFO must not hang; it is refused below.
    let flags = OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let mode = Mode::from_raw_mode(0o644);
    let fd = match rustix::fs::open(&at, flags | OFlags::RDWR, mode) {
        // Someone else's lock file we may not write: flock works read-only.
        Err(rustix::io::Errno::ACCESS) => rustix::fs::open(&at, flags | OFlags::RDONLY, mode),
        other => other,
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(LockError::Symlink { path }),
        Err(e) => return Err(io_err("open", e.into())),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| io_err("inspect", e))?;
    if !meta.is_file() {
        return Err(LockError::NotAFile { path });
    }
    Ok((file, path))
}

fn holder_pid(file: &mut File) -> Option<u32> {
    let mut buf = String::new();
    file.rewind().ok()?;
    file.take(32).read_to_string(&mut buf).ok()?;
    buf.trim().parse().ok()
}

fn locked(mut file: File, path: PathBuf, shared: bool) -> FileLock {
    if !shared {
        // Diagnostic only; a read-only descriptor cannot write it.
        // Overwritten in place at a fixed width: truncating to zero and
        // rewriting makes ext4 flush the file on close (auto_da_alloc),
        // which tripled the cost of `leasehold lock` on this machine.
        let write = |f: &mut File| -> io::Result<()> {
            let record = format!("{:<10}\n", std::process::id());
            f.write_all_at(record.as_bytes(), 0)?;
            if f.metadata()?.len() != record.len() as u64 {
                f.set_len(record.len() as u64)?;
            }
            Ok(())
        };
        if let Err(e) = write(&mut file) {
            tracing::debug!(path = %path.display(), "cannot write the holder pid: {e}");
        }
    }
    FileLock { file, path, shared }
}

/// Try once to lock `path`.
///
/// # Errors
/// [`LockError`] when the lock file cannot be opened or is refused
/// (symlink, not a regular file, network filesystem).
///
/// # Examples
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use leasehold::lock::{try_lock, LockOptions, TryLock};
/// let TryLock::Locked(lock) = try_lock(dir.path(), LockOptions::default())? else { panic!("held") };
/// assert!(matches!(try_lock(dir.path(), LockOptions::default())?, TryLock::Held { .. }));
/// drop(lock);
/// assert!(matches!(try_lock(dir.path(), LockOptions::default())?, TryLock::Locked(_)));
/// # Ok::<(), leasehold::lock::LockError>(())
/// ```
pub fn try_lock(path: &Path, options: LockOptions) -> Result<TryLock, LockError> {
    let (mut file, path) = open(path, options)?;
    let attempt = if options.shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match attempt {
        Ok(()) => Ok(TryLock::Locked(locked(file, path, options.shared))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(TryLock::Held {
            pid: holder_pid(&mut file),
            path,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(LockError::Io {
            op: "lock",
            path,
            source: e,
        }),
    }
}

/// Lock `path`, waiting up to `timeout` (forever when `None`). Returns
/// `Held` when the timeout passes.
///
/// # Errors
/// As [`try_lock`]; [`LockError::InvalidInput`] for a timeout out of
/// [`limits::WAIT`].
pub fn lock(path: &Path, options: LockOptions, timeout: Option<Duration>) -> Result<TryLock, LockError> {
    let Some(timeout) = timeout else {
        let (file, path) = open(path, options)?;
        let res = if options.shared {
            file.lock_shared()
        } else {
            file.lock()
        };
        res.map_err(|source| LockError::Io {
            op: "lock",
            path: path.clone(),
            source,
        })?;
        return Ok(TryLock::Locked(locked(file, path, options.shared)));
    };
    // flock has no timeout: poll, backing off to 100 ms.
    let deadline = Instant::now() + limits::WAIT.check(timeout)?;
    let mut pause = Duration::from_millis(5);
    loop {
        let attempt = try_lock(path, options)?;
        if matches!(attempt, TryLock::Locked(_)) || Instant::now() >= deadline {
            return Ok(attempt);
        }
        thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_and_names_the_holder_and_shared_coexist() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        let TryLock::Locked(a) = try_lock(&f, LockOptions::default()).unwrap() else {
            panic!()
        };
        match try_lock(&f, LockOptions::default()).unwrap() {
            TryLock::Held { pid, .. } => assert_eq!(pid, Some(std::process::id())),
            TryLock::Locked(_) => panic!("two exclusive holders"),
        }
        drop(a);
        let shared = LockOptions {
            shared: true,
            ..LockOptions::default()
        };
        let TryLock::Locked(s1) = try_lock(&f, shared).unwrap() else {
            panic!()
        };
        let TryLock::Locked(s2) = try_lock(&f, shared).unwrap() else {
            panic!()
        };
        assert!(matches!(
            try_lock(&f, LockOptions::default()).unwrap(),
            TryLock::Held { .. }
        ));
        let t = Instant::now();
        assert!(matches!(
            lock(&f, LockOptions::default(), Some(Duration::from_millis(100))).unwrap(),
            TryLock::Held { .. }
        ));
        assert!(t.elapsed() >= Duration::from_millis(100));
        drop((s1, s2));
        assert!(f.exists(), "the lock file is never deleted");
    }

    #[test]
    fn a_directory_gets_a_lock_file_and_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let TryLock::Locked(l) = try_lock(dir.path(), LockOptions::default()).unwrap() else {
            panic!()
        };
        assert_eq!(l.path(), dir.path().join(LOCK_FILE_NAME));
        let target = dir.path().join("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            try_lock(&link, LockOptions::default()),
            Err(LockError::Symlink { .. })
        ));
        assert!(!target.exists(), "the link was not followed");
    }

    #[test]
    fn a_symlinked_directory_is_followed_but_one_planted_in_a_sticky_directory_is_refused() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("real")).unwrap();
        symlink("real", d.join("link")).unwrap();
        let TryLock::Locked(_l) = try_lock(&d.join("link/app.lock"), LockOptions::default()).unwrap() else {
            panic!()
        };
        assert!(d.join("real/app.lock").is_file());
        if !rustix::process::geteuid().is_root() {
            println!("skipped: needs root (to give a link another owner)");
            return;
        }
        let shared = d.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::create_dir(d.join("elsewhere")).unwrap();
        let planted = shared.join("run");
        symlink(d.join("elsewhere"), &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(4242), None).unwrap();
        for path in [planted.join("app.lock"), planted.join("sub/app.lock")] {
            let err = try_lock(&path, LockOptions::default()).unwrap_err();
            assert!(
                matches!(err, LockError::UnsafeDirectory { .. }) && err.to_string().contains("protected_symlinks"),
                "{err}"
            );
        }
        assert_eq!(std::fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
    }
}
