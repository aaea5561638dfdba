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
//! Resolution walks the path one component at a time, like `realpath`:
//! `lstat` each, read a link's target and walk that in its place (at most
//! [`MAX_LINKS`] links), and treat `..` as the parent of what was resolved
//! so far. What does not exist yet is kept as written, for the caller to
//! create. The result has no symbolic links in it, so SQLite's
//! `SQLITE_OPEN_NOFOLLOW`, which refuses a link anywhere in the path, can
//! open it.
//!
//! The result is a path, checked now: a component could be swapped for a
//! link afterwards only by whoever may rename entries of its directory —
//! in a sticky directory the entry's owner or the directory's, exactly the
//! people the rule trusts.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
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

    #[error("{} is not a directory", path.display())]
    NotADirectory { path: PathBuf },

    #[error("cannot look at {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
            Self::Io { .. } => "check the path and its permissions",
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
/// let dir = leasehold_backend::symlinks::resolve_dir(&tmp.join("link/new"))?;
/// assert_eq!(dir, tmp.join("real/new"));
/// # Ok::<(), leasehold_backend::symlinks::DirError>(())
/// ```
pub fn resolve_dir(dir: &Path) -> Result<PathBuf, DirError> {
    let io_error = |path: &Path, source| DirError::Io {
        path: path.to_owned(),
        source,
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
    // Once a component is missing, the rest is only named, not looked at.
    let mut missing = false;
    while let Some(part) = pending.pop_front() {
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
                if !may_follow(parent.st_mode, parent.st_uid, st.st_uid, me) {
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
            _ => return Err(DirError::NotADirectory { path: next }),
        }
    }
    Ok(resolved)
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
    use std::os::unix::fs::{PermissionsExt as _, lchown, symlink};

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
    fn a_link_planted_in_a_sticky_directory_by_someone_else_is_refused() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root (to give a link another owner)");
            return;
        }
        let (_guard, t) = tmp();
        let shared = t.join("shared");
        std::fs::create_dir_all(t.join("real")).unwrap();
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let link = shared.join("link");
        symlink(t.join("real"), &link).unwrap();
        assert_eq!(resolve_dir(&link).unwrap(), t.join("real"), "our own link");
        lchown(&link, Some(4242), None).unwrap();
        let err = resolve_dir(&link.join("sub")).unwrap_err();
        assert!(
            matches!(
                &err,
                DirError::PlantedLink {
                    link_owner: 4242,
                    dir_owner: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("protected_symlinks"), "{err}");
        // The directory's owner may link there.
        std::os::unix::fs::chown(&shared, Some(4242), None).unwrap();
        assert_eq!(resolve_dir(&link).unwrap(), t.join("real"));
    }
}
