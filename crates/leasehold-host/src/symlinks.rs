//! The directory of a path leasehold writes (a SQLite store, a state file, a
//! lock file), resolved once, the same way for all three.
//!
//! - Symbolic links in the directory part are followed, as by any program:
//!   a symlinked `~/.local` or `$XDG_STATE_HOME`, macOS's `/tmp` →
//!   `/private/tmp`, `/var/run` → `/run`.
//! - Except a link someone else could have planted: one in a sticky
//!   world-writable directory (like `/tmp`) owned by neither the caller nor
//!   the directory's owner. That is the kernel's `protected_symlinks` rule
//!   ([`may_follow`]), applied here at every link met, because that sysctl
//!   may be off (it is in many containers) and, when on, it refuses with a
//!   bare "permission denied".
//! - The last component (the file itself) is never resolved here: callers
//!   open it with `O_NOFOLLOW`, so a link there is refused.
//!
//! - A path that ends in a slash (or `/.`, `..`) names a directory
//!   whatever is there, as the kernel reads it ([`names_dir`]).
//!
//! Resolution walks the path one component at a time, like `realpath`:
//! `lstat` each, read a link's target and walk that in its place (at most
//! [`MAX_LINKS`] links), and treat `..` as the parent of what was resolved
//! so far. What does not exist yet is kept as written: [`resolve_dir`]
//! returns it, [`existing_dir`] refuses it ([`DirError::Missing`], "create
//! it first"), [`create_dir`] creates it. The result has no symbolic links
//! in it, so SQLite's `SQLITE_OPEN_NOFOLLOW`, which refuses a link anywhere
//! in the path, can open it.
//!
//! The result is a path, checked now: a component could be swapped for a
//! link afterwards only by whoever may rename entries of its directory —
//! in a sticky directory the entry's owner or the directory's, exactly the
//! people the rule trusts.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Component, Path, PathBuf};

use rustix::fs::FileType;

/// How many symbolic links one resolution follows at most (Linux's
/// `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// Why a directory was not resolved.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// A link in a shared sticky directory that someone else owns.
    #[error(
        "{} is a symbolic link in {}, a shared directory (world-writable and sticky, like /tmp), \
         and it belongs to uid {link_owner}, who is neither you (uid {me}) nor the directory's owner \
         (uid {dir_owner}): anyone could have planted it, so it is not followed \
         (the kernel's protected_symlinks rule)",
        link.display(),
        dir.display()
    )]
    PlantedLink {
        link: PathBuf,
        dir: PathBuf,
        link_owner: u32,
        dir_owner: u32,
        me: u32,
    },

    #[error("more than {MAX_LINKS} symbolic links in {}: a loop", path.display())]
    TooManyLinks { path: PathBuf },

    /// A component that is something else: "`f` is a file, not a
    /// directory" — also for `f/`, where the trailing slash names one.
    /// `path` as written, or resolved once a link was followed.
    #[error("{} is a {kind}, not a directory", path.display())]
    NotADirectory { path: PathBuf, kind: &'static str },

    /// The directory does not exist ([`existing_dir`]); `path` as the
    /// caller gave it, `resolved` after following links.
    #[error("{}{} does not exist", path.display(), aka(path, resolved))]
    Missing { path: PathBuf, resolved: PathBuf },

    /// [`create_dir`] could not create it.
    #[error("cannot create the directory {}: {error}", path.display())]
    Create { path: PathBuf, error: io::Error },

    /// A link appeared in the path while [`create_dir`] created it.
    #[error("{} changed while it was created (a symbolic link appeared in it)", path.display())]
    Changed { path: PathBuf },

    #[error("cannot look at {}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
}

/// " (that is, RESOLVED)" when following links led somewhere the path as
/// written does not say.
fn aka(path: &Path, resolved: &Path) -> String {
    if std::path::absolute(path).is_ok_and(|p| p == resolved) {
        String::new()
    } else {
        format!(" (that is, {})", resolved.display())
    }
}

impl DirError {
    /// What to do about it.
    #[must_use]
    pub fn hint(&self) -> &'static str {
        match self {
            Self::PlantedLink { .. } => {
                "use the real directory's path (readlink -f shows where the link points), or a directory of your own; if you trust the link, have its owner or the directory's owner own it"
            }
            Self::TooManyLinks { .. } => "fix the links, or use the real directory's path",
            Self::NotADirectory { .. } => "check the path",
            Self::Missing { .. } => "create it first (mkdir -p), or check the path",
            Self::Create { .. } | Self::Io { .. } => "check the path and its permissions",
            Self::Changed { .. } => "retry, and find out who else creates directories there",
        }
    }
}

/// The kernel's `protected_symlinks` rule (`may_follow_link` in
/// `fs/namei.c`): a link in a directory that is both sticky and
/// world-writable is followed only by the link's owner, or when the link's
/// owner also owns the directory. Anywhere else, any link is followed.
#[must_use]
pub fn may_follow(dir_mode: u32, dir_owner: u32, link_owner: u32, follower: u32) -> bool {
    const STICKY: u32 = 0o1000;
    const OTHER_WRITE: u32 = 0o002;
    let shared = dir_mode & (STICKY | OTHER_WRITE) == STICKY | OTHER_WRITE;
    !shared || link_owner == follower || link_owner == dir_owner
}

/// Resolve the directory `dir` (see the module docs): an absolute path
/// without symbolic links, its missing tail kept as written.
///
/// # Errors
/// [`DirError`]: a link that may have been planted, a loop, a component
/// that is not a directory, or a component that cannot be inspected.
///
/// # Examples
/// ```
/// # let tmp = tempfile::tempdir().unwrap();
/// # let tmp = std::fs::canonicalize(tmp.path()).unwrap();
/// std::fs::create_dir(tmp.join("real")).unwrap();
/// std::os::unix::fs::symlink("real", tmp.join("link")).unwrap();
/// let dir = leasehold_host::symlinks::resolve_dir(&tmp.join("link/new"))?;
/// assert_eq!(dir, tmp.join("real/new"));
/// # Ok::<(), leasehold_host::symlinks::DirError>(())
/// ```
pub fn resolve_dir(dir: &Path) -> Result<PathBuf, DirError> {
    walk(dir).map(|(resolved, _)| resolved)
}

/// [`resolve_dir`] for a directory that must exist already: one that does
/// not is [`DirError::Missing`] (what is missing; create it first).
///
/// # Errors
/// As [`resolve_dir`], and [`DirError::Missing`].
pub fn existing_dir(dir: &Path) -> Result<PathBuf, DirError> {
    match walk(dir)? {
        (resolved, true) => Err(DirError::Missing {
            path: dir.to_owned(),
            resolved,
        }),
        (resolved, false) => Ok(resolved),
    }
}

/// [`resolve_dir`], then create what is missing of it, parents included,
/// as `mkdir -p` does. Each directory created is private (0700): what goes
/// in it (a store, an agent's state) is its creator's alone until they
/// decide otherwise; whoever wants to share it creates it with the mode
/// they choose. Existing directories are left as they are.
///
/// # Errors
/// As [`resolve_dir`]; [`DirError::Create`] when creating fails, and
/// [`DirError::Changed`] when a link appeared in the path meanwhile.
pub fn create_dir(dir: &Path) -> Result<PathBuf, DirError> {
    let (resolved, missing) = walk(dir)?;
    if missing {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&resolved)
            .map_err(|error| DirError::Create {
                path: resolved.clone(),
                error,
            })?;
        // mkdir -p follows a link planted between the walk and the
        // creation; walking again refuses it (or sees that it moved us).
        if resolve_dir(&resolved)? != resolved {
            return Err(DirError::Changed { path: resolved });
        }
    }
    Ok(resolved)
}

/// Whether `path` names a directory whatever is there: it ends in `/` or
/// `/.`, or in `.` or `..` — as the kernel reads it (`open("f/")` of a
/// file `f` fails with ENOTDIR). `Path` forgets a trailing slash, so it is
/// looked for in the bytes.
#[must_use]
pub fn names_dir(path: &Path) -> bool {
    let bytes = path.as_os_str().as_encoded_bytes();
    bytes.ends_with(b"/") || bytes.ends_with(b"/.") || path.file_name().is_none()
}

/// The directory part of a path that names a file: its parent as written,
/// or `.` for a bare name.
#[must_use]
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// What a file type is called in messages ("is a FIFO, not a regular file").
#[must_use]
pub fn kind(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice | FileType::BlockDevice => "device",
        FileType::Unknown => "special file",
    }
}

/// The walk of [`resolve_dir`]: the resolved path, and whether some of it
/// is missing.
fn walk(dir: &Path) -> Result<(PathBuf, bool), DirError> {
    let io_error = |path: &Path, error| DirError::Io {
        path: path.to_owned(),
        error,
    };
    let mut resolved = if dir.is_absolute() {
        PathBuf::from("/")
    } else {
        // getcwd: already the physical path.
        std::env::current_dir().map_err(|e| io_error(Path::new("."), e))?
    };
    let mut pending: VecDeque<OsString> = parts(dir).collect();
    let me = rustix::process::geteuid().as_raw();
    let mut links = 0;
    // The path as the caller wrote it, up to where the walk is, for
    // messages ("f is a file"): until a link is followed, it names the
    // same place as `resolved`.
    let mut written = if dir.is_absolute() {
        PathBuf::from("/")
    } else {
        PathBuf::new()
    };
    // Once a component is missing, the rest is only named, not looked at.
    let mut missing = false;
    while let Some(part) = pending.pop_front() {
        if links == 0 {
            written.push(&part);
        }
        if part == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        if missing {
            resolved = next;
            continue;
        }
        let st = match rustix::fs::lstat(&next) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => {
                missing = true;
                resolved = next;
                continue;
            }
            Err(e) => return Err(io_error(&next, e.into())),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => resolved = next,
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(DirError::TooManyLinks { path: dir.to_owned() });
                }
                let parent = rustix::fs::stat(&resolved).map_err(|e| io_error(&resolved, e.into()))?;
                if !may_follow(crate::mode_bits(parent.st_mode), parent.st_uid, st.st_uid, me) {
                    return Err(DirError::PlantedLink {
                        link: next,
                        dir: resolved,
                        link_owner: st.st_uid,
                        dir_owner: parent.st_uid,
                        me,
                    });
                }
                let target = std::fs::read_link(&next).map_err(|e| io_error(&next, e))?;
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                for part in parts(&target).collect::<Vec<_>>().into_iter().rev() {
                    pending.push_front(part);
                }
            }
            other => {
                return Err(DirError::NotADirectory {
                    path: if links == 0 { written } else { next },
                    kind: kind(other),
                });
            }
        }
    }
    Ok((resolved, missing))
}

/// The components of `path` to walk: names and `..` (the root and `.`
/// need no step).
fn parts(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_owned()),
        Component::ParentDir => Some("..".into()),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    fn tmp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        (dir, real)
    }

    #[test]
    fn the_protected_symlinks_rule() {
        let (me, other, root) = (1000, 2000, 0);
        // A private directory: any link is followed.
        assert!(may_follow(0o755, root, other, me));
        // World-writable but not sticky, or sticky but not world-writable.
        assert!(may_follow(0o777, root, other, me));
        assert!(may_follow(0o1755, root, other, me));
        // /tmp: only the link's owner, or the directory owner's link.
        assert!(!may_follow(0o1777, root, other, me));
        assert!(may_follow(0o1777, root, me, me));
        assert!(may_follow(0o1777, root, root, me));
        assert!(may_follow(0o1777, other, other, me), "the directory's owner planted it");
        assert!(!may_follow(0o1777, root, other, root), "root is no exception");
    }

    #[test]
    fn links_in_the_directory_part_are_followed_like_realpath() {
        let (_guard, t) = tmp();
        std::fs::create_dir_all(t.join("real/sub")).unwrap();
        symlink("real", t.join("rel")).unwrap();
        symlink(t.join("real/sub"), t.join("abs")).unwrap();
        symlink("../../real", t.join("real/sub/up")).unwrap();
        symlink("rel", t.join("chain")).unwrap();
        let r = |p: &str| resolve_dir(&t.join(p)).unwrap();
        assert_eq!(r("rel"), t.join("real"));
        assert_eq!(r("abs"), t.join("real/sub"));
        assert_eq!(
            r("abs/up/sub"),
            t.join("real/sub"),
            "a relative target from the link's directory"
        );
        assert_eq!(r("chain/sub/./"), t.join("real/sub"));
        assert_eq!(
            r("abs/.."),
            t.join("real"),
            "`..` of where the link led, as the kernel does"
        );
        assert_eq!(r("rel/new/deeper"), t.join("real/new/deeper"), "a missing tail is kept");
        assert_eq!(r("rel/new/../x"), t.join("real/x"));
    }

    #[test]
    fn a_relative_path_is_resolved_from_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(resolve_dir(Path::new(".")).unwrap(), cwd);
        assert_eq!(resolve_dir(Path::new("no-such-dir")).unwrap(), cwd.join("no-such-dir"));
    }

    #[test]
    fn a_loop_and_a_file_are_refused() {
        let (_guard, t) = tmp();
        symlink("b", t.join("a")).unwrap();
        symlink("a", t.join("b")).unwrap();
        assert!(matches!(
            resolve_dir(&t.join("a/x")),
            Err(DirError::TooManyLinks { .. })
        ));
        std::fs::File::create(t.join("file")).unwrap();
        assert!(matches!(
            resolve_dir(&t.join("file/x")),
            Err(DirError::NotADirectory { .. })
        ));
    }

    #[test]
    fn a_trailing_slash_names_a_directory() {
        for dir in ["state/", "state//", "state/.", "state/..", ".", "..", "/", "./"] {
            assert!(names_dir(Path::new(dir)), "{dir}");
        }
        for file in ["state", "a/state", "./state", ".state", "state."] {
            assert!(!names_dir(Path::new(file)), "{file}");
        }
        assert_eq!(parent_of(Path::new("state")), Path::new("."));
        assert_eq!(parent_of(Path::new("a/b/state")), Path::new("a/b"));
    }

    #[test]
    fn a_missing_directory_is_named_and_a_file_with_a_slash_is_a_file() {
        let (_guard, t) = tmp();
        std::fs::File::create(t.join("f")).unwrap();
        symlink("nowhere", t.join("dangling")).unwrap();
        let err = existing_dir(&t.join("no/such")).unwrap_err();
        assert!(
            matches!(&err, DirError::Missing { path, .. } if *path == t.join("no/such")),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("{} does not exist", t.join("no/such").display())
        );
        assert!(err.hint().contains("mkdir -p"));
        let err = existing_dir(&t.join("dangling")).unwrap_err();
        assert!(
            err.to_string().contains("(that is, ") && err.to_string().contains("nowhere"),
            "{err}"
        );
        let err = existing_dir(&t.join("f/")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} is a file, not a directory", t.join("f").display())
        );
        assert_eq!(existing_dir(&t).unwrap(), t);
    }

    #[test]
    fn create_dir_makes_missing_parents_private_and_leaves_existing_ones() {
        use std::os::unix::fs::MetadataExt as _;
        let (_guard, t) = tmp();
        std::fs::create_dir(t.join("real")).unwrap();
        std::fs::set_permissions(t.join("real"), std::fs::Permissions::from_mode(0o755)).unwrap();
        symlink("real", t.join("link")).unwrap();
        assert_eq!(create_dir(&t.join("link/a/b")).unwrap(), t.join("real/a/b"));
        let mode = |p: &str| std::fs::metadata(t.join(p)).unwrap().mode() & 0o777;
        assert_eq!((mode("real/a"), mode("real/a/b")), (0o700, 0o700));
        assert_eq!(mode("real"), 0o755, "an existing directory is left as it is");
        assert_eq!(
            create_dir(&t.join("real/a/b")).unwrap(),
            t.join("real/a/b"),
            "nothing to do"
        );
        std::fs::File::create(t.join("f")).unwrap();
        assert!(matches!(
            create_dir(&t.join("f/sub")),
            Err(DirError::NotADirectory { kind: "file", .. })
        ));
    }
}
