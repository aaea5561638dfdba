//! Crash-safe state files: atomic durable replacement, read-modify-write
//! under a lock, and writes fenced by a lease's token.
//!
//! - [`write_atomic`]: readers and a crash see the old content or the new,
//!   never a mix; success means the new content is on disk.
//! - [`write_locked`] and [`update`]: the same, under an exclusive lock on
//!   the sidecar `FILE.lock`, so concurrent updates never lose one another.
//! - [`FencedFile`]: the same, refused with [`FileError::StaleToken`] when
//!   the writer's token is lower than one already written.
//!
//! # Paths
//!
//! For a file `FILE`, leasehold touches only `FILE`, `FILE.lock` (never
//! deleted), `FILE.fence` (or the fence record given) and temp files
//! `.FILE.leasehold-tmp.PID.RANDOM` in the same directory; temp files of
//! crashed writers older than [`STALE_TEMP_AGE`] are removed by the next
//! write. A symbolic link at any of these names is refused, never followed
//! — `FILE` included: write to the resolved path instead. (Following it
//! would replace the link's target while a rename over the link would
//! replace the link itself; both surprise someone, so neither is done.)
//!
//! `FILE`'s directory must exist: a missing one is named
//! ([`DirError::Missing`](crate::symlinks::DirError::Missing)), never
//! created — a state file's directory, its owner and mode are the
//! caller's to choose. A path that ends in a slash (`f/`) names a
//! directory, so it is never a state file ([`FileError::TrailingSlash`]).
//!
//! # Fences
//!
//! Under the lock, a fenced write reads the fence record; a token lower than
//! the record is refused, an equal one passes (the same holder writing
//! again), a higher one is first written to the record, durably, and only
//! then is the file replaced. A write that names its grant ([`Fence`]) has
//! the grant recorded too, and an equal token of another grant is refused
//! ([`FileError::ReissuedToken`]): a store restored from a backup issues
//! tokens again. A crash anywhere leaves the old or the new
//! file and never a record lower than a token whose content was written.
//! A plain read followed by a fenced write is NOT safe against lost updates
//! (a newer holder can write in between): use [`FencedFile::update`], which
//! checks and advances the fence before the filter reads.

mod atomic;
mod error;
mod fence;
mod lock;
mod target;
#[cfg(test)]
mod tests;
mod xattr;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

pub use atomic::STALE_TEMP_AGE;
pub use error::{FileError, Role, UpdateError};
pub use fence::{
    Fence, FenceRecordError, GRANT_VAR, GrantEnvError, LeaseMismatch, NAME_VAR, Record as FenceRecord, TOKEN_VAR,
    lease_from_env, parse as parse_fence_record, parse_record as parse_fence_record_with_lease, writer_lease,
};
pub use lock::LockWait;

use crate::Token;
use target::Target;

/// How to write a state file.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Exact permission bits (e.g. `0o600`). `None` keeps the existing
    /// file's mode; a new file gets 0644 less the umask. The owner of an
    /// existing file is kept where permitted (as root).
    pub mode: Option<u32>,
    /// The content is JSON: refuse new content that does not parse
    /// ([`FileError::InvalidInput`]), and let [`update`] refuse an existing
    /// file that does not parse ([`FileError::Corrupt`]) rather than hand it
    /// to the filter.
    pub json: bool,
    /// Replace a file that has other hard links anyway: the other names
    /// keep the old content. Without it such a file is refused
    /// ([`FileError::HardLinked`]), nothing written.
    pub break_hard_links: bool,
    /// How long a locked write waits for `FILE.lock` held by another
    /// process ([`FileError::LockHeld`] after it); `None`: as long as it
    /// takes.
    pub wait: Option<std::time::Duration>,
    /// Told who holds `FILE.lock` when a locked write must wait for it,
    /// once, before it waits (the CLI says it on stderr).
    pub on_wait: Option<fn(&LockWait<'_>)>,
}

impl WriteOptions {
    fn check_new(&self, path: &Path, data: &[u8]) -> Result<(), FileError> {
        if !self.json {
            return Ok(());
        }
        check_json(data).map_err(|e| FileError::InvalidInput {
            path: path.to_owned(),
            reason: e.to_string(),
        })
    }
}

fn check_json(data: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<serde::de::IgnoredAny>(data).map(drop)
}

/// Replace the file at `path` with `data`, atomically and durably (temp
/// file in the same directory, fsync, rename, fsync of the directory). Takes
/// no lock: a concurrent [`update`] may overwrite it with a result computed
/// from the older content; use [`write_locked`] where that matters.
///
/// # Errors
///
/// [`FileError::InvalidInput`] with `json` and data that does not parse;
/// [`FileError::IsDirectory`], [`FileError::Symlink`] or
/// [`FileError::NotRegular`] when something else is at `path`;
/// [`FileError::TrailingSlash`] when `path` ends in a slash;
/// [`FileError::UnsafeDirectory`] when its directory is missing or cannot
/// be followed safely;
/// [`FileError::HardLinked`] when the file has other hard links (unless
/// `break_hard_links`);
/// [`FileError::NoSpace`], [`FileError::ReadOnly`],
/// [`FileError::PermissionDenied`] or [`FileError::Io`] with the file
/// unchanged (an extended attribute of the old file that cannot be set on
/// the new one included); [`FileError::Unconfirmed`] when only the final
/// directory fsync failed.
///
/// # Examples
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use leasehold::files::{WriteOptions, write_atomic};
///
/// let path = dir.path().join("state.json");
/// let options = WriteOptions { json: true, ..WriteOptions::default() };
/// write_atomic(&path, br#"{"runs": 1}"#, &options)?;
/// assert!(write_atomic(&path, b"{half a docum", &options).is_err());
/// assert_eq!(std::fs::read(&path)?, br#"{"runs": 1}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_atomic(path: &Path, data: &[u8], options: &WriteOptions) -> Result<(), FileError> {
    options.check_new(path, data)?;
    let target = Target::open(path, Role::Data)?;
    atomic::write_target(&target, data, options.mode, options.break_hard_links)
}

/// [`write_atomic`] under the exclusive lock on `FILE.lock`, so it never
/// lands between the read and the write of an [`update`].
///
/// # Errors
///
/// As [`write_atomic`]; also the lock file's errors ([`Role::Lock`]), and
/// [`FileError::LockHeld`] when another process keeps `FILE.lock` longer
/// than [`WriteOptions::wait`].
///
/// # Examples
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state.txt");
/// leasehold::files::write_locked(&path, b"ready\n", &Default::default())?;
/// assert!(dir.path().join("state.txt.lock").exists());
/// # Ok::<(), leasehold::files::FileError>(())
/// ```
pub fn write_locked(path: &Path, data: &[u8], options: &WriteOptions) -> Result<(), FileError> {
    options.check_new(path, data)?;
    guarded::<std::convert::Infallible>(path, options, None, |_| Ok(Cow::Borrowed(data)))
        .map_err(UpdateError::into_file)
}

/// Read-modify-write under the exclusive lock on `FILE.lock`: `filter` gets
/// the old content (`None` when there is no file yet) and returns the new;
/// the file is replaced only when it returns `Ok` (and, with `json`, the
/// result parses). Concurrent updates of the same file never lose one
/// another's changes.
///
/// # Errors
///
/// [`UpdateError::Filter`] with the filter's error (file unchanged);
/// [`UpdateError::File`] with [`FileError::Corrupt`] when `json` is set and
/// the existing file does not parse (file unchanged, filter not run), and
/// otherwise as [`write_locked`].
///
/// # Examples
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use leasehold::files::{WriteOptions, update};
///
/// let path = dir.path().join("count");
/// for _ in 0..3 {
///     update(&path, &WriteOptions::default(), |old| {
///         let n: u64 = old.map_or(Ok(0), |b| String::from_utf8_lossy(b).trim().parse())?;
///         Ok::<_, std::num::ParseIntError>(format!("{}\n", n + 1).into_bytes())
///     })?;
/// }
/// assert_eq!(std::fs::read_to_string(&path)?, "3\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn update<E>(
    path: &Path,
    options: &WriteOptions,
    filter: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, E>,
) -> Result<(), UpdateError<E>> {
    guarded(path, options, None, |target| read_and_filter(target, options, filter))
}

/// A state file whose writers hold fencing tokens: writes with a token lower
/// than the highest one written are refused. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedFile {
    path: PathBuf,
    fence: Option<PathBuf>,
    lease: Option<String>,
    new_lease: bool,
}

impl FencedFile {
    /// The file at `path`, with its fence record at `path.fence`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            fence: None,
            lease: None,
            new_lease: false,
        }
    }

    /// The tokens written are of lease `name`, recorded with them: a
    /// token of another lease is then refused ([`FileError::OtherLease`]),
    /// and a stale token's refusal names the lease of the record.
    #[must_use]
    pub fn for_lease(mut self, name: impl Into<String>) -> Self {
        self.lease = Some(name.into());
        self
    }

    /// As [`FencedFile::for_lease`], and the file now belongs to lease
    /// `name`: a record of another lease is replaced by this lease's
    /// token, whatever the tokens (they say nothing about each other).
    #[must_use]
    pub fn for_new_lease(mut self, name: impl Into<String>) -> Self {
        self.lease = Some(name.into());
        self.new_lease = true;
        self
    }

    /// [`FencedFile::for_new_lease`] with `new_lease`, else
    /// [`FencedFile::for_lease`] — when the lease is known; without one,
    /// the file as it is (its tokens judged alone).
    #[must_use]
    pub fn with_lease(self, lease: Option<impl Into<String>>, new_lease: bool) -> Self {
        match lease {
            Some(lease) if new_lease => self.for_new_lease(lease),
            Some(lease) => self.for_lease(lease),
            None => self,
        }
    }

    /// The lease the record names (`None`: no record, or one written
    /// without a lease).
    ///
    /// # Errors
    ///
    /// As [`FencedFile::highest_token`].
    pub fn recorded_lease(&self) -> Result<Option<String>, FileError> {
        Ok(fence::read(&Target::open(&self.fence_path(), Role::Fence)?)?.and_then(|r| r.lease))
    }

    /// Keep the fence record at `fence` instead (several files may share
    /// one record; a fenced write then also locks `fence.lock`).
    #[must_use]
    pub fn with_fence_record(mut self, fence: impl Into<PathBuf>) -> Self {
        self.fence = Some(fence.into());
        self
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the fence record is.
    #[must_use]
    pub fn fence_path(&self) -> PathBuf {
        self.fence.clone().unwrap_or_else(|| beside(&self.path, ".fence"))
    }

    /// The highest token written so far (`None` before the first fenced
    /// write). Only informative: it may rise as soon as it is read.
    ///
    /// # Errors
    ///
    /// [`FileError::CorruptFence`] when the record does not parse, and the
    /// errors of reading it.
    pub fn highest_token(&self) -> Result<Option<Token>, FileError> {
        Ok(self.fence_record()?.map(|f| f.token))
    }

    /// The fence record: the highest token written so far and the grant
    /// that wrote it, when it said (`None` before the first fenced write).
    ///
    /// # Errors
    ///
    /// As [`FencedFile::highest_token`].
    pub fn fence_record(&self) -> Result<Option<Fence>, FileError> {
        Ok(fence::read(&Target::open(&self.fence_path(), Role::Fence)?)?.map(|r| r.fence))
    }

    /// Replace the file with `data` if `fence` (a [`Token`], or a
    /// [`Fence`] naming the grant too, e.g. `Fence::of(&grant)`) is not
    /// stale; the fence record is raised to it first.
    ///
    /// # Errors
    ///
    /// [`FileError::StaleToken`] when a higher token was written (nothing
    /// changed); [`FileError::ReissuedToken`] when another grant wrote the
    /// same token; [`FileError::OtherLease`] when the record is of another
    /// lease than [`FencedFile::for_lease`]'s; [`FileError::CorruptFence`] when the record does not parse
    /// (it is never reset); otherwise as [`write_locked`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::Token;
    /// use leasehold::files::{FencedFile, FileError};
    ///
    /// let file = FencedFile::new(dir.path().join("report.json"));
    /// file.write(Token(7), b"{}", &Default::default())?;
    /// let stale = file.write(Token(6), b"{\"old\": true}", &Default::default());
    /// assert!(matches!(stale, Err(FileError::StaleToken { .. })));
    /// assert_eq!(file.highest_token()?, Some(Token(7)));
    /// # Ok::<(), FileError>(())
    /// ```
    pub fn write(&self, fence: impl Into<Fence>, data: &[u8], options: &WriteOptions) -> Result<(), FileError> {
        options.check_new(&self.path, data)?;
        let record = self.fence_path();
        guarded::<std::convert::Infallible>(&self.path, options, Some((&record, self.record(fence))), |_| {
            Ok(Cow::Borrowed(data))
        })
        .map_err(UpdateError::into_file)
    }

    /// [`update`] with a token: the fence is checked and raised BEFORE the
    /// filter reads, so a stale holder's read-modify-write is refused whole.
    /// A filter that fails after the fence was raised leaves the file
    /// unchanged and the fence raised (never lower than a written token).
    ///
    /// # Errors
    ///
    /// As [`FencedFile::write`] and [`update`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::Token;
    /// use leasehold::files::FencedFile;
    ///
    /// let file = FencedFile::new(dir.path().join("log"));
    /// file.update(Token(3), &Default::default(), |old| {
    ///     let mut new = old.unwrap_or_default().to_vec();
    ///     new.extend_from_slice(b"token 3 was here\n");
    ///     Ok::<_, std::convert::Infallible>(new)
    /// })?;
    /// # Ok::<(), leasehold::files::UpdateError<std::convert::Infallible>>(())
    /// ```
    pub fn update<E>(
        &self,
        fence: impl Into<Fence>,
        options: &WriteOptions,
        filter: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, E>,
    ) -> Result<(), UpdateError<E>> {
        let record = self.fence_path();
        guarded(&self.path, options, Some((&record, self.record(fence))), |target| {
            read_and_filter(target, options, filter)
        })
    }

    fn record(&self, fence: impl Into<Fence>) -> (fence::Record, bool) {
        let record = fence::Record {
            fence: fence.into(),
            lease: self.lease.clone(),
        };
        (record, self.new_lease)
    }
}

/// `PATH{suffix}`: a sidecar's path, spelled as the caller spelled `path`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

impl UpdateError<std::convert::Infallible> {
    fn into_file(self) -> FileError {
        match self {
            Self::File(e) => e,
            Self::Filter(never) => match never {},
        }
    }
}

fn read_and_filter<'a, E>(
    target: &Target,
    options: &WriteOptions,
    filter: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, E>,
) -> Result<Cow<'a, [u8]>, UpdateError<E>> {
    let old = target.read()?;
    if let (true, Some(old)) = (options.json, &old) {
        check_json(old).map_err(|e| FileError::Corrupt {
            path: target.path.clone(),
            reason: e.to_string(),
        })?;
    }
    let new = filter(old.as_deref()).map_err(UpdateError::Filter)?;
    options.check_new(&target.path, &new)?;
    Ok(Cow::Owned(new))
}

/// The one locked write path: lock (the fence record's own lock first when
/// it is not the default one beside the file), check and raise the fence,
/// produce the content, replace the file.
fn guarded<'a, E>(
    path: &Path,
    options: &WriteOptions,
    fence: Option<(&Path, (fence::Record, bool))>,
    produce: impl FnOnce(&Target) -> Result<Cow<'a, [u8]>, UpdateError<E>>,
) -> Result<(), UpdateError<E>> {
    let target = Target::open(path, Role::Data)?;
    // Refuse a directory or symlink at FILE before raising any fence.
    target.existing()?;
    // Opened before its lock, so a missing or unusable directory of the
    // fence record is told about the record, not about its lock file.
    let fence = fence
        .map(|(p, token)| Target::open(p, Role::Fence).map(|target| (target, p, token)))
        .transpose()?;
    let waiting = lock::Waiting {
        wait: options.wait,
        on_wait: options.on_wait,
    };
    let _fence_lock = match &fence {
        Some((_, p, _)) if *p != beside(path, ".fence") => Some(lock::lock_beside(p, waiting)?),
        _ => None,
    };
    let _lock = lock::lock_beside(path, waiting)?;
    if let Some((fence_target, _, (record, new_lease))) = fence {
        fence::check_and_advance(path, &fence_target, record, new_lease)?;
    }
    let data = produce(&target)?;
    atomic::write_target(&target, &data, options.mode, options.break_hard_links)?;
    Ok(())
}
