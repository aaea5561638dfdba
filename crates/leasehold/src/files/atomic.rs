//! Atomic, durable replacement of one file: the only place in leasehold
//! where durability lives.
//!
//! The sequence, and why each step is there:
//!
//! 1. create a temp file `.NAME.leasehold-tmp.PID.RANDOM` in the target's
//!    own directory (rename cannot cross filesystems; /tmp would be EXDEV),
//!    `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, so a planted file or symlink
//!    at that name is never opened, and a child never inherits it;
//! 2. write all the data;
//! 3. fsync the temp file — without it, a crash after step 4 may leave the
//!    new name pointing at an empty or torn file;
//! 4. rename it over the target — atomic: readers see old or new;
//! 5. fsync the directory — without it, a crash may undo the rename after
//!    success was reported.
//!
//! Success is reported only after step 5. A failure at steps 1-4 removes the
//! temp file and leaves the target as it was. A failed fsync is never retried:
//! after a writeback error Linux may mark the pages clean, so a second fsync
//! can "succeed" without the data being on disk ("fsyncgate"). A failure at
//! step 5 is reported as [`FileError::Unconfirmed`]: the rename happened, the
//! file holds the new content, but it is not known to be durable.
//!
//! The steps go through the [`Ops`] trait so that tests can fail any one of
//! them, or run them against a model of a disk that loses unsynced data.

use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_backend::failpoint;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::FileError;
use super::target::{Existing, Target};

/// Temp files of crashed writers older than this are removed by the next
/// write to the same target; younger ones may belong to a live writer.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// The name part that marks a leasehold temp file.
const TEMP_MARK: &str = ".leasehold-tmp.";

/// The longest slice of the target's name kept in a temp name, so the temp
/// name stays under `NAME_MAX` (255) with the mark, pid and random suffix.
const TEMP_NAME_KEEP: usize = 200;

/// One step of the sequence; named in errors and by the fault layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Create,
    Write,
    SyncFile,
    Rename,
    SyncDir,
}

impl Step {
    #[cfg(test)]
    pub const ALL: [Step; 5] = [Step::Create, Step::Write, Step::SyncFile, Step::Rename, Step::SyncDir];

    fn describe(self) -> &'static str {
        match self {
            Step::Create => "create a temporary file in its directory",
            Step::Write => "write the temporary file",
            Step::SyncFile => "fsync the temporary file",
            Step::Rename => "rename the temporary file over it",
            Step::SyncDir => "fsync its directory",
        }
    }
}

/// A failed step and its cause.
#[derive(Debug)]
pub struct StepError {
    pub step: Step,
    pub source: io::Error,
}

fn at(step: Step) -> impl FnOnce(io::Error) -> StepError {
    move |source| StepError { step, source }
}

/// Permissions for the new file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Perm {
    /// Exact mode bits; `None`: 0644 less the umask.
    pub mode: Option<u32>,
    /// Owner to keep (uid, gid); a refusal (not root) is ignored.
    pub owner: Option<(u32, u32)>,
}

/// The filesystem operations of the sequence, one method per [`Step`]
/// (plus `remove` for clean-up). The real ones work in one directory.
pub trait Ops {
    type File;
    fn create(&mut self, name: &OsStr, perm: Perm) -> io::Result<Self::File>;
    fn write(&mut self, file: &mut Self::File, data: &[u8]) -> io::Result<()>;
    fn sync_file(&mut self, file: &mut Self::File) -> io::Result<()>;
    fn rename(&mut self, from: &OsStr, to: &OsStr) -> io::Result<()>;
    fn sync_dir(&mut self) -> io::Result<()>;
    fn remove(&mut self, name: &OsStr) -> io::Result<()>;
}

/// The real operations, relative to an open directory.
#[derive(Debug)]
pub struct DirOps<'a> {
    dir: BorrowedFd<'a>,
    /// Extended attributes of the file replaced, set on the temp file
    /// after its mode and owner ([`super::xattr`]).
    pub xattrs: Vec<super::xattr::Xattr>,
}

impl<'a> DirOps<'a> {
    pub fn new(dir: BorrowedFd<'a>) -> Self {
        Self {
            dir,
            xattrs: Vec::new(),
        }
    }
}

impl Ops for DirOps<'_> {
    type File = std::fs::File;

    fn create(&mut self, name: &OsStr, perm: Perm) -> io::Result<std::fs::File> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        // Without an explicit mode the kernel applies the umask to 0644.
        let initial = if perm.mode.is_some() { 0o600 } else { 0o644 };
        let fd = rustix::fs::openat(self.dir, name, flags, Mode::from_raw_mode(initial))?;
        // After chown, which clears security.capability.
        if let Err(e) = set_perm(&fd, perm).and_then(|()| super::xattr::apply(&fd, &self.xattrs)) {
            let _ = self.remove(name);
            return Err(e);
        }
        Ok(std::fs::File::from(fd))
    }

    fn write(&mut self, file: &mut std::fs::File, data: &[u8]) -> io::Result<()> {
        file.write_all(data)
    }

    fn sync_file(&mut self, file: &mut std::fs::File) -> io::Result<()> {
        file.sync_all()
    }

    fn rename(&mut self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        Ok(rustix::fs::renameat(self.dir, from, self.dir, to)?)
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        Ok(rustix::fs::fsync(self.dir)?)
    }

    fn remove(&mut self, name: &OsStr) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(self.dir, name, AtFlags::empty())?)
    }
}

fn set_perm(fd: &OwnedFd, perm: Perm) -> io::Result<()> {
    if let Some((uid, gid)) = perm.owner {
        let (uid, gid) = (rustix::fs::Uid::from_raw(uid), rustix::fs::Gid::from_raw(gid));
        let differs = uid != rustix::process::geteuid() || gid != rustix::process::getegid();
        // Only root may give a file away; anyone else keeps their own
        // ownership, which is what a plain rewrite would do too.
        match rustix::fs::fchown(fd, Some(uid), Some(gid)) {
            Err(Errno::PERM) if differs => {}
            other => other?,
        }
    }
    // After chown, which clears set-id bits.
    if let Some(mode) = perm.mode {
        rustix::fs::fchmod(fd, Mode::from_raw_mode(crate::host::raw_mode(mode)))?;
    }
    Ok(())
}

/// Run the sequence: temp file, write, fsync, rename over `target`, fsync
/// the directory. On a failure before the rename the temp file is removed.
pub fn replace<O: Ops>(ops: &mut O, target: &OsStr, data: &[u8], perm: Perm) -> Result<(), StepError> {
    let (temp, file) = create_temp(ops, target, perm)?;
    if let Err(e) = fill_and_rename(ops, file, &temp, target, data) {
        if let Err(rm) = ops.remove(&temp) {
            tracing::warn!("cannot remove the temporary file {}: {rm}", temp.to_string_lossy());
        }
        return Err(e);
    }
    failpoint!("write", "renamed");
    ops.sync_dir().map_err(at(Step::SyncDir))?;
    failpoint!("write", "dir-synced");
    Ok(())
}

fn fill_and_rename<O: Ops>(
    ops: &mut O,
    mut file: O::File,
    temp: &OsStr,
    target: &OsStr,
    data: &[u8],
) -> Result<(), StepError> {
    failpoint!("write", "created");
    ops.write(&mut file, data).map_err(at(Step::Write))?;
    failpoint!("write", "written");
    ops.sync_file(&mut file).map_err(at(Step::SyncFile))?;
    failpoint!("write", "synced");
    drop(file);
    ops.rename(temp, target).map_err(at(Step::Rename))
}

fn create_temp<O: Ops>(ops: &mut O, target: &OsStr, perm: Perm) -> Result<(OsString, O::File), StepError> {
    let mut attempts = 0;
    loop {
        let name = temp_name(target);
        match ops.create(&name, perm) {
            Ok(file) => return Ok((name, file)),
            // Someone (or something planted) holds this name: draw another.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => attempts += 1,
            Err(e) => {
                return Err(StepError {
                    step: Step::Create,
                    source: e,
                });
            }
        }
    }
}

/// `.NAME.leasehold-tmp.` — what every temp file of `target` starts with.
pub fn temp_prefix(target: &OsStr) -> OsString {
    let bytes = target.as_bytes();
    let kept = &bytes[..bytes.len().min(TEMP_NAME_KEEP)];
    let mut prefix = OsString::from(".");
    prefix.push(OsStr::from_bytes(kept));
    prefix.push(TEMP_MARK);
    prefix
}

fn temp_name(target: &OsStr) -> OsString {
    let mut name = temp_prefix(target);
    name.push(format!("{}.{:08x}", std::process::id(), random_u32()));
    name
}

/// Not for secrets: enough to keep concurrent writers' names apart
/// (`O_EXCL` catches the rest). `RandomState` is seeded from the OS.
fn random_u32() -> u32 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u32
}

/// Remove `target`'s temp files that are regular files last modified more
/// than `max_age` ago (a live writer touches its temp file as it writes).
/// Symlinks and other odd entries with a temp-like name are left alone and
/// never followed. Returns how many were removed; failures are only logged.
pub fn clean_stale_temps(dir: BorrowedFd<'_>, target: &OsStr, max_age: Duration) -> usize {
    let prefix = temp_prefix(target);
    let Ok(entries) = rustix::fs::Dir::read_from(dir) else {
        return 0;
    };
    let cutoff = SystemTime::now().checked_sub(max_age).unwrap_or(UNIX_EPOCH);
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if !name.as_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let mtime = UNIX_EPOCH + Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || mtime > cutoff {
            continue;
        }
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!("cannot remove the stale temporary file {}: {e}", name.to_string_lossy()),
        }
    }
    removed
}

/// Replace `target` with `data` durably: the public write path. Keeps the
/// existing file's mode and owner unless `mode` is given, and its extended
/// attributes; refuses a file with other hard links unless
/// `break_hard_links` ([`FileError::HardLinked`]); cleans up stale temp
/// files first.
pub fn write_target(target: &Target, data: &[u8], mode: Option<u32>, break_hard_links: bool) -> Result<(), FileError> {
    let mut ops = DirOps::new(target.dir.as_fd());
    if let Some(existing) = target.existing()? {
        if existing.links > 1 && !break_hard_links {
            return Err(FileError::HardLinked {
                path: target.path.clone(),
                links: existing.links,
            });
        }
        ops.xattrs = super::xattr::read(target)?;
    }
    write_target_with(target, data, mode, &mut ops)
}

/// [`write_target`] through any [`Ops`] (tests pass a faulty one).
pub fn write_target_with<O: Ops>(
    target: &Target,
    data: &[u8],
    mode: Option<u32>,
    ops: &mut O,
) -> Result<(), FileError> {
    let existing = target.existing()?;
    let perm = match existing {
        Some(Existing {
            mode: old, uid, gid, ..
        }) => Perm {
            mode: Some(mode.unwrap_or(old)),
            owner: Some((uid, gid)),
        },
        None => Perm { mode, owner: None },
    };
    let cleaned = clean_stale_temps(target.dir.as_fd(), &target.name, STALE_TEMP_AGE);
    if cleaned > 0 {
        tracing::info!("removed {cleaned} stale temporary file(s) of {}", target.path.display());
    }
    replace(ops, &target.name, data, perm).map_err(|e| match e.step {
        Step::SyncDir => FileError::Unconfirmed {
            path: target.path.clone(),
            error: e.source,
        },
        step => FileError::io(&target.path, step.describe(), e.source),
    })
}
