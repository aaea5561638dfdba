//! Single-instance locks on one machine: `flock(2)` on a lock file.
//!
//! What a path means:
//!
//! - An existing directory gets a lock file inside it ([`LOCK_FILE_NAME`]).
//! - A path that names a directory — it ends in a slash, or
//!   [`LockOptions::dir`] says so — is a directory whatever is there: a
//!   missing one is created with its missing parents, as `mkdir -p`, each
//!   private (0700: an agent's state goes there, and who else may read it
//!   is for its owner to say; [`crate::symlinks::create_dir`]), then locked
//!   as above; a file there is refused (it is not a directory). So
//!   `lock state/my-agent/` leaves a directory the agent can use, not a
//!   file in its way.
//! - Anything else is the lock file itself, created (0644 less the umask)
//!   if missing — as flock(1) does — in a directory that must exist.
//!   Only a file created so (`O_EXCL`) gets the holder record below.
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
//! - **A file leasehold did not create is never changed** — not its
//!   content, size, mode or times — as flock(1) never changes it: a data
//!   file, a config, or the running script itself (`leasehold lock
//!   "$0" -- …`) may be the lock. It is opened read-only (`flock` needs no
//!   more, and a script open for writing could not be executed: `ETXTBSY`).
//! - Who holds a lock is read from the kernel where it lists flock
//!   holders (Linux: `/proc/locks`, [`host::held_locks`]). Where it does
//!   not (macOS), a lock file leasehold created itself carries a record
//!   ([`RECORD_PREFIX`] and the pid, at a fixed width) in which each
//!   exclusive holder writes its pid, overwritten in place; a file is
//!   taken for such a record only when its whole content is one. Either
//!   way it names a holder for people; the lock itself is the `flock`,
//!   never the content.
//! - Network filesystems are refused unless allowed: `flock` there is
//!   emulated (NFS), per-client (CIFS) or a no-op.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::symlinks::{self, DirError};
use crate::{ErrorKind, Remedy, host, limits};

/// The lock file created inside a directory given as the lock path.
pub const LOCK_FILE_NAME: &str = ".leasehold.lock";

/// How the holder record of a lock file leasehold created begins; the
/// pid follows, left-aligned in 10 columns (`PID_WIDTH`), then a newline.
pub const RECORD_PREFIX: &str = "leasehold lock file; last exclusive holder: pid ";

/// The width of the pid in the holder record (blank until a holder).
const PID_WIDTH: usize = 10;

/// The length of the holder record: a file of any other length is not one.
const RECORD_LEN: usize = RECORD_PREFIX.len() + PID_WIDTH + 1;

/// What can go wrong taking a lock (a lock held by another is a value,
/// [`TryLock::Held`]).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "refusing to lock {path}: it is a symbolic link, and a lock file is never followed through one (someone may have planted it); remove it or choose another path"
    )]
    Symlink { path: PathBuf },

    /// A socket, FIFO or device at the path (`kind` says which).
    #[error(
        "refusing to lock {path}: it is a {kind}, not a regular file or a directory; a lock file is \
         a regular file leasehold may create: choose another path"
    )]
    NotAFile { path: PathBuf, kind: &'static str },

    /// The path names a directory (`named_by` a trailing slash or `--dir`)
    /// but something else is there.
    #[error(
        "cannot lock {}: {named_by} names a directory, but {why}; to lock the file itself, leave out {named_by}",
        path.display()
    )]
    NotADirectory {
        path: PathBuf,
        named_by: &'static str,
        why: DirError,
    },

    /// The directory cannot be used: missing (for a lock file), or not
    /// safe to follow.
    #[error("cannot lock {}: {why}. {}", path.display(), why.hint())]
    UnsafeDirectory { path: PathBuf, why: DirError },

    #[error(
        "refusing to lock {path}: it is on a network filesystem ({fs}), where flock is unreliable; use a local path"
    )]
    NetworkFs { path: PathBuf, fs: String },

    #[error("cannot {op} lock file {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },

    /// The timeout is out of [`limits::WAIT`]; nothing was locked.
    #[error("{0}; nothing was locked")]
    InvalidInput(limits::OutOfRange),
}

// Not `#[from]`, which would also make the range its source: the message
// says it already, and every error prints its cause or chains it, not both.
impl From<limits::OutOfRange> for LockError {
    fn from(e: limits::OutOfRange) -> Self {
        LockError::InvalidInput(e)
    }
}

impl LockError {
    /// What kind of failure this is (see [`ErrorKind`]).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            LockError::NetworkFs { .. } => ErrorKind::Unavailable,
            // Not the path's fault: the directory is not there (yet).
            LockError::UnsafeDirectory {
                why: DirError::Missing { .. },
                ..
            }
            | LockError::Io { .. } => ErrorKind::Failed,
            LockError::Symlink { .. }
            | LockError::NotAFile { .. }
            | LockError::NotADirectory { .. }
            | LockError::UnsafeDirectory { .. }
            | LockError::InvalidInput(_) => ErrorKind::InvalidInput,
        }
    }

    /// A next step that is the caller's option: allowing a network
    /// filesystem ([`LockOptions::allow_network_fs`]) if every user of the
    /// lock is on this host.
    #[must_use]
    pub fn remedy(&self) -> Option<Remedy> {
        matches!(self, LockError::NetworkFs { .. }).then_some(Remedy::AllowNetworkFs)
    }
}

/// How to lock.
#[derive(Debug, Clone, Copy, Default)]
pub struct LockOptions {
    /// A shared lock (many holders, no exclusive one).
    pub shared: bool,
    /// Lock on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// The path is a directory, as a trailing slash says: created if
    /// missing (see the module docs), refused if a file.
    pub dir: bool,
}

/// The outcome of an attempt: contention is a value.
#[derive(Debug)]
pub enum TryLock {
    Locked(FileLock),
    /// Someone holds it.
    Held {
        path: PathBuf,
        holders: Holders,
    },
}

/// Who holds a lock, as far as this host can tell — for people to read,
/// not proof (a holder may let go a moment later). Its `Display` is the
/// one wording of it: "pid 4242", "2 shared holders (pids 17, 18)".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holders {
    /// As the kernel lists them (Linux): one exclusive holder, or shared
    /// ones; a holder in another pid namespace has no pid here.
    Listed { exclusive: bool, pids: Vec<u32> },
    /// The pid the last exclusive holder wrote into a lock file leasehold
    /// created (where the kernel lists no holders: macOS), and that
    /// process still runs.
    Recorded(u32),
    /// Not known: the kernel does not say and there is no record, or the
    /// holder let go between the attempt and the look.
    Unknown,
}

impl Holders {
    /// The exclusive holder's pid, when known.
    #[must_use]
    pub fn exclusive_pid(&self) -> Option<u32> {
        match self {
            Holders::Listed { exclusive: true, pids } if pids.len() == 1 => Some(pids[0]),
            Holders::Recorded(pid) => Some(*pid),
            _ => None,
        }
    }

    /// How the holders hold it: shared when the kernel lists shared
    /// holders, else exclusive.
    #[must_use]
    pub fn mode(&self) -> crate::Mode {
        match self {
            Holders::Listed { exclusive: false, .. } => crate::Mode::Shared { limit: None },
            _ => crate::Mode::Exclusive,
        }
    }

    /// Every holder's pid that is known.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Holders::Listed { pids, .. } => pids.clone(),
            Holders::Recorded(pid) => vec![*pid],
            Holders::Unknown => Vec::new(),
        }
    }

    /// The holders from what the kernel lists (`None`: it lists nothing on
    /// this platform) and, failing that, the pid in the file's record of a
    /// process that still runs. Apart from the reading, so that both
    /// platforms' answers are tested on either.
    fn judge(listed: Option<Vec<host::HeldLock>>, recorded: Option<u32>) -> Self {
        if let Some(locks) = listed {
            let flocks: Vec<_> = locks.into_iter().filter(|l| l.call == host::LockCall::Flock).collect();
            if flocks.is_empty() {
                return Holders::Unknown;
            }
            return Holders::Listed {
                exclusive: flocks.iter().any(|l| l.exclusive),
                pids: flocks.iter().filter_map(|l| l.pid).collect(),
            };
        }
        recorded.map_or(Holders::Unknown, Holders::Recorded)
    }
}

impl fmt::Display for Holders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |pids: &[u32]| pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        match self {
            // Listed without pids: the holders live in another pid namespace.
            Holders::Listed { pids, .. } if pids.is_empty() => f.write_str("a process outside this pid namespace"),
            Holders::Listed { exclusive: true, pids } if pids.len() == 1 => write!(f, "pid {}", pids[0]),
            Holders::Listed { exclusive: true, pids } => write!(f, "pids {}", list(pids)),
            Holders::Listed { exclusive: false, pids } if pids.len() == 1 => {
                write!(f, "a shared holder (pid {})", pids[0])
            }
            Holders::Listed { exclusive: false, pids } => {
                write!(f, "{} shared holders (pids {})", pids.len(), list(pids))
            }
            Holders::Recorded(pid) => write!(f, "pid {pid} (as recorded in the lock file)"),
            Holders::Unknown => f.write_str("another process"),
        }
    }
}

/// The refusal of a lock held by others — "PATH is locked by pid 4242",
/// after a wait "PATH is still locked by …": its `Display` is the one
/// wording; [`LockedBy::with_remedy`] adds the next step.
#[derive(Debug, Clone, Copy)]
pub struct LockedBy<'a> {
    pub path: &'a Path,
    pub holders: &'a Holders,
    /// The caller waited for the lock (and the wait ended).
    pub waited: bool,
}

impl fmt::Display for LockedBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let still = if self.waited { "still " } else { "" };
        write!(f, "{} is {still}locked by {}", self.path.display(), self.holders)
    }
}

impl LockedBy<'_> {
    /// The refusal and its remedy, a wait spelled as the caller spells it:
    /// "… locked by pid 4242. Try again later, or wait with --wait \[DUR\]".
    #[must_use]
    pub fn with_remedy(&self, spelling: &dyn crate::spelling::Spelling) -> String {
        format!("{self}. {}", crate::spelling::try_again(spelling))
    }
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

/// The lock file for `path`: [`LOCK_FILE_NAME`] inside it when it names a
/// directory or is one (a symlink is not followed to find out), else
/// `path` itself. Only looks; creates nothing.
///
/// # Examples
/// ```
/// use std::path::Path;
/// use leasehold::lock::{LockOptions, lock_file_path};
///
/// let as_dir = LockOptions { dir: true, ..LockOptions::default() };
/// let inside = Path::new("state/my-agent/.leasehold.lock");
/// assert_eq!(lock_file_path(Path::new("state/my-agent/"), LockOptions::default()), inside);
/// assert_eq!(lock_file_path(Path::new("state/my-agent"), as_dir), inside);
/// ```
#[must_use]
pub fn lock_file_path(path: &Path, options: LockOptions) -> PathBuf {
    if named_dir(path, options).is_some() || std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        path.join(LOCK_FILE_NAME)
    } else {
        path.to_path_buf()
    }
}

/// What says that `path` is a directory whatever is there, if anything.
fn named_dir(path: &Path, options: LockOptions) -> Option<&'static str> {
    if options.dir {
        Some("--dir")
    } else if symlinks::names_dir(path) {
        Some("the trailing slash")
    } else {
        None
    }
}

/// The lock file's path as the caller spelled it (for messages), and the
/// resolved directory it goes in — created when `path` names a missing
/// directory; for a lock file, its directory must exist.
fn place(path: &Path, options: LockOptions) -> Result<(PathBuf, PathBuf), LockError> {
    let lock_file = lock_file_path(path, options);
    let refused = |why| match (why, named_dir(path, options)) {
        (DirError::Io { error, .. } | DirError::Create { error, .. }, _) => LockError::Io {
            op: "find or create the directory of",
            path: lock_file.clone(),
            error,
        },
        (why @ DirError::NotADirectory { .. }, Some(named_by)) => LockError::NotADirectory {
            path: path.to_owned(),
            named_by,
            why,
        },
        (why, _) => LockError::UnsafeDirectory {
            path: lock_file.clone(),
            why,
        },
    };
    let dir = if lock_file == path {
        symlinks::existing_dir(symlinks::parent_of(path))
    } else {
        symlinks::create_dir(path)
    }
    .map_err(refused)?;
    Ok((lock_file, dir))
}

/// An opened lock file.
struct Opened {
    file: File,
    /// As the caller spelled it (for messages).
    path: PathBuf,
    /// Where it is, its directory resolved (to open it again).
    at: PathBuf,
}

/// The flags of every open of a lock file: never through a symlink, not
/// inherited, and never blocking on a planted FIFO (refused below) or
/// becoming a terminal's controlling one.
fn open_flags() -> OFlags {
    OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY
}

fn open(path: &Path, options: LockOptions) -> Result<Opened, LockError> {
    let (path, dir) = place(path, options)?;
    let io_err = |op, error| LockError::Io {
        op,
        path: path.clone(),
        error,
    };
    if !options.allow_network_fs
        && let Some(fs) = host::network_filesystem(&dir).map_err(|e| io_err("check the filesystem of", e))?
    {
        return Err(LockError::NetworkFs { path, fs });
    }
    let at = path.file_name().map_or_else(|| path.clone(), |name| dir.join(name));
    // An existing file is opened read-only: it may be anyone's (see the
    // module docs). A missing one is created with O_EXCL, so that only a
    // file this call made gets the holder record; losing that race to
    // another locker means the file now exists: open it as such.
    let fd = loop {
        match rustix::fs::open(&at, open_flags() | OFlags::RDONLY, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) => {}
            other => break other,
        }
        let created = rustix::fs::open(
            &at,
            open_flags() | OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(0o644),
        );
        match created {
            Ok(fd) => {
                let file = File::from(fd);
                // Before any holder: a blank record. Only a diagnostic is
                // lost if it cannot be written (the lock is the flock).
                let blank = format!("{RECORD_PREFIX}{:PID_WIDTH$}\n", "");
                if let Err(e) = file.write_all_at(blank.as_bytes(), 0) {
                    tracing::debug!(path = %path.display(), "cannot write the holder record: {e}");
                }
                return Ok(Opened { file, path, at });
            }
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => break Err(e),
        }
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(LockError::Symlink { path }),
        // A socket cannot be opened at all ("No such device or address"):
        // say what it is.
        Err(rustix::io::Errno::NXIO) => {
            let st = rustix::fs::lstat(&at).map_err(|e| io_err("inspect", e.into()))?;
            let kind = symlinks::kind(rustix::fs::FileType::from_raw_mode(st.st_mode));
            return Err(LockError::NotAFile { path, kind });
        }
        Err(e) => return Err(io_err("open", e.into())),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| io_err("inspect", e))?;
    if !meta.is_file() {
        // The type from fstat(2)'s own mode (`st_mode` is 16 bits on macOS).
        let kind = rustix::fs::fstat(&file).map_or("file", |st| {
            symlinks::kind(rustix::fs::FileType::from_raw_mode(st.st_mode))
        });
        return Err(LockError::NotAFile { path, kind });
    }
    Ok(Opened { file, path, at })
}

/// The pid in `file`'s holder record, if its whole content is one (blank
/// or unreadable: `None`). Reads nothing of a file of another length.
fn recorded_pid(file: &File) -> Option<u32> {
    if file.metadata().ok()?.len() != RECORD_LEN as u64 {
        return None;
    }
    let mut buf = [0u8; RECORD_LEN];
    file.read_exact_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf).ok()?;
    let pid = text.strip_prefix(RECORD_PREFIX)?.strip_suffix('\n')?;
    if pid.trim().is_empty() {
        return Some(0);
    }
    pid.trim_end().parse().ok()
}

/// Who holds the lock `file` could not take (see [`Holders`]); also what
/// a state file write waiting for `FILE.lock` says ([`crate::files`]).
pub(crate) fn holders(file: &File) -> Holders {
    let recorded = || {
        recorded_pid(file)
            .filter(|&pid| pid != 0)
            // A recorded pid outlives its holder: name only a live one.
            .filter(|&pid| host::process_start(pid).is_ok())
    };
    let listed = host::held_locks(file);
    let recorded = if listed.is_none() { recorded() } else { None };
    Holders::judge(listed, recorded)
}

/// Write this process's pid into the holder record, if the lock file is a
/// record (only one leasehold created is), now that this process holds it
/// exclusively — so no other leasehold writes it meanwhile. The locked
/// descriptor may be read-only: the record is written through a second
/// one, checked to be the same file (closing it keeps the flock, which
/// belongs to the first). A failure only loses the diagnostic.
fn record_holder(opened: &Opened) {
    if recorded_pid(&opened.file).is_none() {
        return;
    }
    let write = || -> io::Result<()> {
        let fd = rustix::fs::open(&opened.at, open_flags() | OFlags::WRONLY, Mode::empty())?;
        let writer = File::from(fd);
        let (ours, theirs) = (opened.file.metadata()?, writer.metadata()?);
        if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
            return Err(io::Error::other("the lock file was replaced"));
        }
        // Overwritten in place at a fixed width: truncating and rewriting
        // makes ext4 flush the file on close (auto_da_alloc), which
        // tripled the cost of `leasehold lock` on this machine.
        let pid = format!("{:<PID_WIDTH$}", std::process::id());
        writer.write_all_at(pid.as_bytes(), RECORD_PREFIX.len() as u64)
    };
    if let Err(e) = write() {
        tracing::debug!(path = %opened.path.display(), "cannot write the holder record: {e}");
    }
}

fn locked(opened: Opened, shared: bool) -> FileLock {
    if !shared {
        record_holder(&opened);
    }
    FileLock {
        file: opened.file,
        path: opened.path,
        shared,
    }
}

/// Try once to lock `path`.
///
/// # Errors
/// [`LockError`] when the lock file cannot be opened or is refused
/// (symlink, not a regular file, network filesystem), when a directory is
/// named where a file is ([`LockError::NotADirectory`]), and when a lock
/// file's directory is missing or unsafe ([`LockError::UnsafeDirectory`]).
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
    let opened = open(path, options)?;
    let attempt = if options.shared {
        opened.file.try_lock_shared()
    } else {
        opened.file.try_lock()
    };
    match attempt {
        Ok(()) => Ok(TryLock::Locked(locked(opened, options.shared))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(TryLock::Held {
            holders: holders(&opened.file),
            path: opened.path,
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(LockError::Io {
            op: "lock",
            path: opened.path,
            error: e,
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
        let opened = open(path, options)?;
        let res = if options.shared {
            opened.file.lock_shared()
        } else {
            opened.file.lock()
        };
        res.map_err(|error| LockError::Io {
            op: "lock",
            path: opened.path.clone(),
            error,
        })?;
        return Ok(TryLock::Locked(locked(opened, options.shared)));
    };
    lock_or_cancel(path, options, Some(limits::WAIT.check(timeout)?), &crate::Cancel::new())
}

/// Lock `path`, waiting up to `timeout` (forever when `None`) or until
/// `cancel` is cancelled, whichever comes first: then `Held`, as the last
/// attempt found it. `flock` has no timeout and cannot be interrupted, so
/// this polls, backing off from 5 ms to 100 ms; a cancel is answered at
/// once, not at the next poll.
///
/// # Errors
/// As [`try_lock`].
///
/// # Examples
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use leasehold::Cancel;
/// use leasehold::lock::{lock_or_cancel, try_lock, LockOptions, TryLock};
/// let held = try_lock(dir.path(), LockOptions::default())?;
/// let cancel = Cancel::new();
/// cancel.cancel();
/// let waited = lock_or_cancel(dir.path(), LockOptions::default(), None, &cancel)?;
/// assert!(matches!(waited, TryLock::Held { .. }));
/// # drop(held);
/// # Ok::<(), leasehold::lock::LockError>(())
/// ```
pub fn lock_or_cancel(
    path: &Path,
    options: LockOptions,
    timeout: Option<Duration>,
    cancel: &crate::Cancel,
) -> Result<TryLock, LockError> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut pause = Duration::from_millis(5);
    loop {
        let attempt = try_lock(path, options)?;
        let over = deadline.is_some_and(|d| Instant::now() >= d);
        if matches!(attempt, TryLock::Locked(_)) || over || cancel.is_cancelled() {
            return Ok(attempt);
        }
        let rest = deadline.map_or(pause, |d| d.saturating_duration_since(Instant::now()));
        cancel.sleep(pause.min(rest));
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
            TryLock::Held { holders, .. } => assert_eq!(holders.exclusive_pid(), Some(std::process::id())),
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
    fn holders_come_from_the_kernel_first_then_from_a_live_record() {
        let flock = |pid, exclusive| host::HeldLock {
            call: host::LockCall::Flock,
            exclusive,
            pid,
            start: 0,
            end: None,
        };
        let posix = host::HeldLock {
            call: host::LockCall::Posix,
            ..flock(Some(9), true)
        };
        // Linux: the kernel's list, whatever a record says.
        let one = Holders::judge(Some(vec![flock(Some(7), true)]), Some(8));
        assert_eq!((one.to_string(), one.exclusive_pid()), ("pid 7".into(), Some(7)));
        let two = Holders::judge(Some(vec![flock(Some(7), false), flock(Some(8), false)]), None);
        assert_eq!(
            (two.to_string(), two.exclusive_pid(), two.pids()),
            ("2 shared holders (pids 7, 8)".into(), None, vec![7, 8])
        );
        assert_eq!(
            Holders::judge(Some(vec![flock(Some(7), false)]), None).to_string(),
            "a shared holder (pid 7)"
        );
        assert_eq!(
            Holders::judge(Some(vec![flock(None, true)]), None).to_string(),
            "a process outside this pid namespace"
        );
        // Gone by the time we looked, or only other kinds of lock.
        assert_eq!(Holders::judge(Some(vec![posix]), Some(8)), Holders::Unknown);
        assert_eq!(Holders::judge(Some(Vec::new()), None).to_string(), "another process");
        // macOS: no list; the record, if it names a live process.
        let recorded = Holders::judge(None, Some(8));
        assert_eq!(
            (recorded.to_string(), recorded.exclusive_pid()),
            ("pid 8 (as recorded in the lock file)".into(), Some(8))
        );
        assert_eq!(Holders::judge(None, None), Holders::Unknown);
    }

    #[test]
    #[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
    fn only_a_whole_record_is_taken_for_one() {
        let dir = tempfile::tempdir().unwrap();
        let read = |content: &str| {
            let path = dir.path().join("f");
            std::fs::write(&path, content).unwrap();
            recorded_pid(&File::open(&path).unwrap())
        };
        assert_eq!(read(&format!("{RECORD_PREFIX}4242      \n")), Some(4242));
        assert_eq!(read(&format!("{RECORD_PREFIX}          \n")), Some(0));
        // An old leasehold's record, a pid file, the record with more
        // after it, the record cut short: another program's file.
        for content in [
            "4242      \n".to_owned(),
            "4242\n".to_owned(),
            format!("{RECORD_PREFIX}4242      \nmore"),
            format!("{RECORD_PREFIX}4242"),
            format!("{RECORD_PREFIX}42x2      \n"),
        ] {
            assert_eq!(read(&content), None, "{content:?}");
        }
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
    fn a_path_named_as_a_directory_is_created_private_and_a_file_there_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mode = |p: &str| std::fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o777;
        let as_dir = LockOptions {
            dir: true,
            ..LockOptions::default()
        };
        // A trailing slash or `dir`: a directory, made with its parents.
        let TryLock::Locked(l) = try_lock(&d.join("state/my-agent/"), LockOptions::default()).unwrap() else {
            panic!()
        };
        assert_eq!(l.path(), d.join("state/my-agent/").join(LOCK_FILE_NAME));
        assert_eq!((mode("state"), mode("state/my-agent")), (0o700, 0o700));
        assert!(matches!(
            try_lock(&d.join("state/my-agent"), as_dir).unwrap(),
            TryLock::Held { .. }
        ));
        let TryLock::Locked(_l) = try_lock(&d.join("other"), as_dir).unwrap() else {
            panic!()
        };
        assert!(d.join("other").join(LOCK_FILE_NAME).is_file());
        // Neither: a lock file, as flock(1) makes one.
        let TryLock::Locked(_l) = try_lock(&d.join("plain"), LockOptions::default()).unwrap() else {
            panic!()
        };
        assert!(d.join("plain").is_file());
        assert_eq!(
            lock_file_path(&d.join("plain"), LockOptions::default()),
            d.join("plain")
        );
        assert_eq!(
            lock_file_path(&d.join("plain"), as_dir),
            d.join("plain").join(LOCK_FILE_NAME)
        );
        // A file where a directory is named.
        for (path, options, named_by) in [
            (d.join("plain/"), LockOptions::default(), "the trailing slash"),
            (d.join("plain"), as_dir, "--dir"),
        ] {
            let err = try_lock(&path, options).unwrap_err();
            assert!(
                matches!(err, LockError::NotADirectory { named_by: n, .. } if n == named_by),
                "{err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("plain is a file, not a directory") && text.contains(&format!("leave out {named_by}")),
                "{text}"
            );
        }
        // A lock file's directory must exist; it is named, not created.
        let err = try_lock(&d.join("no/such/x"), LockOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                LockError::UnsafeDirectory {
                    why: DirError::Missing { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("no/such does not exist") && err.to_string().contains("mkdir -p"),
            "{err}"
        );
        assert!(!d.join("no").exists());
    }

    /// A directory link of our own is followed (one planted by someone
    /// else is refused: `tests/planted_links.rs`, as root).
    #[test]
    fn a_symlinked_directory_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink("real", d.join("link")).unwrap();
        let TryLock::Locked(_l) = try_lock(&d.join("link/app.lock"), LockOptions::default()).unwrap() else {
            panic!()
        };
        assert!(d.join("real/app.lock").is_file());
    }
}
