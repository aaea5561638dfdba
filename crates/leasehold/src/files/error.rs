//! What can go wrong with a state file. Every message names the file and
//! says whether it changed.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::{GrantId, Token};

/// Which of the paths leasehold touches for a state file is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The state file itself.
    Data,
    /// The sidecar lock file (`FILE.lock`).
    Lock,
    /// The fence record (`FILE.fence` or the one given).
    Fence,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Data => "state file",
            Self::Lock => "lock file",
            Self::Fence => "fence record",
        })
    }
}

/// Why a state file write, update or fence check failed. Unless the variant
/// says otherwise ([`FileError::Unconfirmed`]), the file is unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// ENOSPC or EDQUOT.
    #[error("disk full: {} unchanged (could not {op})", path.display())]
    NoSpace { path: PathBuf, op: String },

    /// EROFS.
    #[error("read-only filesystem: {} unchanged (could not {op})", path.display())]
    ReadOnly { path: PathBuf, op: String },

    /// EACCES or EPERM.
    #[error("permission denied: {} unchanged (could not {op})", path.display())]
    PermissionDenied { path: PathBuf, op: String },

    /// A directory where a file was expected.
    #[error("{} is a directory, not a {role}; nothing was written", path.display())]
    IsDirectory { path: PathBuf, role: Role },

    /// The path ends in a slash, which names a directory, so it cannot be
    /// a file; `why` says what is there instead when it is not missing
    /// (`f/` of a file `f`: it is a file, not a directory).
    #[error(
        "{} ends in a slash, which names a directory{}; to write a {role}, leave out the slash; nothing was written",
        path.display(),
        why.as_ref().map(|why| format!(", but {why}")).unwrap_or_default()
    )]
    TrailingSlash {
        path: PathBuf,
        role: Role,
        why: Option<crate::symlinks::DirError>,
    },

    /// A symbolic link where a file was expected; leasehold never follows one.
    #[error(
        "{} is a symbolic link; leasehold never follows a symlink at a {role} path \
         (write to the resolved path instead); nothing was written",
        path.display()
    )]
    Symlink { path: PathBuf, role: Role },

    /// The directory part of the path cannot be used: it does not exist
    /// ([`DirError::Missing`](crate::symlinks::DirError::Missing): create
    /// it first), or it cannot be followed safely — a symbolic link
    /// someone else may have planted in a shared sticky directory, a loop,
    /// or something that is not a directory.
    #[error("cannot use the directory of {} ({role}): {why}. {}; nothing was written", path.display(), why.hint())]
    UnsafeDirectory {
        path: PathBuf,
        role: Role,
        why: crate::symlinks::DirError,
    },

    /// A FIFO, socket or device where a file was expected.
    #[error("{} is a {kind}, not a regular file; it cannot be a {role}; nothing was written", path.display())]
    NotRegular {
        path: PathBuf,
        role: Role,
        kind: &'static str,
    },

    /// The new content does not parse as JSON (only checked when asked).
    #[error("refusing to write {}: the new content is not valid JSON ({reason}); the file is unchanged", path.display())]
    InvalidInput { path: PathBuf, reason: String },

    /// The existing file does not parse; it is never replaced by an empty state.
    #[error("{} is corrupt ({reason}); it was left as it is: repair or remove it by hand", path.display())]
    Corrupt { path: PathBuf, reason: String },

    /// The fence record does not hold a token; it is never reset.
    #[error(
        "fence record {} is corrupt ({reason}); it is never reset: restore the highest token \
         ever written to it, as a decimal number on one line (optionally followed by a space \
         and the grant that wrote it)",
        path.display()
    )]
    CorruptFence {
        path: PathBuf,
        reason: super::fence::FenceRecordError,
    },

    /// A fenced write with a token lower than one already written (of
    /// `lease`, when the record names it).
    #[error(
        "stale fencing token {token} for {}: token {highest}{} was already written; the file is \
         unchanged. The holder of token {token} must stop writing. (If no grant newer than \
         {token} was made, the store lost data and issued tokens again — wiped, flushed, \
         replaced or restored: raise its tokens with `leasehold migrate --bump-tokens N`, N \
         above {highest}.)",
        path.display(),
        lease.as_deref().map(|l| format!(" of lease {}", crate::escape_hidden(l))).unwrap_or_default()
    )]
    StaleToken {
        path: PathBuf,
        token: Token,
        highest: Token,
        lease: Option<String>,
    },

    /// A fenced write naming a lease other than the one the record names:
    /// tokens of two leases say nothing about each other, so it is refused
    /// whatever the tokens, unless the writer says the file now belongs to
    /// its lease ([`FencedFile::for_new_lease`](super::FencedFile::for_new_lease)).
    #[error("{}", other_lease(path, *recorded_token, recorded_lease, lease, &crate::spelling::Flags))]
    OtherLease {
        path: PathBuf,
        token: Token,
        lease: String,
        recorded_token: Token,
        recorded_lease: String,
    },

    /// A fenced write whose token equals the record's but whose grant is
    /// another: the store issued that token again (it lost data: restored
    /// from an older copy, wiped, flushed, replaced). Refused like a stale
    /// token.
    #[error(
        "stale fencing token {token} for {}: token {token} was already written by another grant \
         ({recorded}; this grant is {grant}), so it was issued twice — the store lost data \
         (restored from a backup, wiped, flushed or replaced); the file is unchanged. The holder \
         of grant {grant} must stop writing; run `leasehold migrate --bump-tokens N` (N above \
         {token}) before granting again",
        path.display()
    )]
    ReissuedToken {
        path: PathBuf,
        token: Token,
        recorded: GrantId,
        grant: GrantId,
    },

    /// Another process kept `FILE.lock` (an update whose filter hangs, a
    /// writer) for the whole wait the writer allowed.
    #[error(
        "{} is still held by {holders} after waiting {}; {} is unchanged",
        lock.display(),
        crate::format_duration(*waited),
        path.display()
    )]
    LockHeld {
        path: PathBuf,
        lock: PathBuf,
        holders: String,
        waited: std::time::Duration,
    },

    /// The file has other hard links: replacing it (a rename) would give
    /// only this name the new content and leave the others with the old.
    #[error(
        "{} has {links} hard links; replacing it would leave the other {} with the old content, \
         so nothing was written. Write to a file with one link, or allow it (`--break-hard-links`, \
         `WriteOptions::break_hard_links`)",
        path.display(),
        if *links == 2 { "link".to_owned() } else { format!("{} links", links - 1) }
    )]
    HardLinked { path: PathBuf, links: u64 },

    /// The new content was renamed into place but the directory fsync
    /// failed: the file holds the new content now, but it may not survive a
    /// crash, so the write is not a success.
    #[error(
        "{} was replaced but fsync of its directory failed ({error}); the new content may not \
         survive a crash, so the write did not succeed",
        path.display()
    )]
    Unconfirmed { path: PathBuf, error: io::Error },

    /// Any other I/O failure.
    #[error("cannot {op} for {}: {error}; it is unchanged", path.display())]
    Io {
        path: PathBuf,
        op: String,
        error: io::Error,
    },
}

impl FileError {
    /// What kind of failure this is (see [`crate::ErrorKind`]): a stale
    /// token, bad data at the path (a corrupt file or record, invalid new
    /// content, something that is not a regular file) or a disk that
    /// refused.
    #[must_use]
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            Self::NoSpace { .. } => ErrorKind::DiskFull,
            Self::ReadOnly { .. } => ErrorKind::ReadOnly,
            Self::PermissionDenied { .. } => ErrorKind::Permission,
            Self::StaleToken { .. } | Self::ReissuedToken { .. } | Self::OtherLease { .. } => ErrorKind::Stale,
            Self::LockHeld { .. } => ErrorKind::Held,
            Self::Corrupt { .. } | Self::CorruptFence { .. } => ErrorKind::Corrupt,
            // Not the path's fault: the directory is not there (yet).
            Self::UnsafeDirectory {
                why: crate::symlinks::DirError::Missing { .. },
                ..
            }
            | Self::Unconfirmed { .. }
            | Self::Io { .. } => ErrorKind::Failed,
            Self::InvalidInput { .. }
            | Self::IsDirectory { .. }
            | Self::TrailingSlash { .. }
            | Self::Symlink { .. }
            | Self::UnsafeDirectory { .. }
            | Self::NotRegular { .. }
            | Self::HardLinked { .. } => ErrorKind::InvalidInput,
        }
    }

    /// The message, an option it names spelled as the front end spells
    /// it (`Display` is the command line's): `{ fenceNewLease: true }`
    /// where the CLI says `--fence-new-lease`.
    #[must_use]
    pub fn message_with(&self, spelling: &dyn crate::spelling::Spelling) -> String {
        match self {
            Self::OtherLease {
                path,
                lease,
                recorded_token,
                recorded_lease,
                ..
            } => other_lease(path, *recorded_token, recorded_lease, lease, spelling),
            other => other.to_string(),
        }
    }

    /// An I/O failure at a sidecar (the lock file) told about the data file
    /// it serves: "disk full: state.json unchanged (could not open the lock
    /// file state.json.lock)". Other kinds name the sidecar and are kept.
    pub(crate) fn for_data(self, data: &Path) -> Self {
        let sidecar = |path: PathBuf, op: String| (data.to_owned(), format!("{op} {}", path.display()));
        match self {
            Self::NoSpace { path, op } => {
                let (path, op) = sidecar(path, op);
                Self::NoSpace { path, op }
            }
            Self::ReadOnly { path, op } => {
                let (path, op) = sidecar(path, op);
                Self::ReadOnly { path, op }
            }
            Self::PermissionDenied { path, op } => {
                let (path, op) = sidecar(path, op);
                Self::PermissionDenied { path, op }
            }
            Self::Io { path, op, error } => {
                let (path, op) = sidecar(path, op);
                Self::Io { path, op, error }
            }
            other => other,
        }
    }

    /// An I/O failure while doing `op` for `path`, sorted by cause.
    pub(crate) fn io(path: &Path, op: impl Into<String>, source: io::Error) -> Self {
        let (path, op) = (path.to_owned(), op.into());
        match source.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
            Some(rustix::io::Errno::NOSPC | rustix::io::Errno::DQUOT) => Self::NoSpace { path, op },
            Some(rustix::io::Errno::ROFS) => Self::ReadOnly { path, op },
            Some(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => Self::PermissionDenied { path, op },
            _ => Self::Io {
                path,
                op,
                error: source,
            },
        }
    }
}

/// [`FileError::OtherLease`]'s words, its remedy in `spelling`.
fn other_lease(
    path: &Path,
    recorded_token: Token,
    recorded_lease: &str,
    lease: &str,
    spelling: &dyn crate::spelling::Spelling,
) -> String {
    let (recorded_lease, lease) = (crate::escape_hidden(recorded_lease), crate::escape_hidden(lease));
    format!(
        "{} is fenced by lease {recorded_lease} (token {recorded_token} written), not by lease {lease}; the file is \
         unchanged. A token of one lease says nothing about another's: write with a token of \
         {recorded_lease}, or, if the file now belongs to {lease}, say so ({})",
        path.display(),
        spelling.name(crate::spelling::Setting::FenceNewLease)
    )
}

/// Why [`update`](super::update) did not replace the file: the file layer
/// failed, or the filter did (the file is unchanged either way).
#[derive(Debug, thiserror::Error)]
pub enum UpdateError<E> {
    #[error(transparent)]
    File(#[from] FileError),

    /// The filter returned an error; nothing was written.
    #[error("the filter failed; the file is unchanged")]
    Filter(E),
}
