//! A path leasehold writes, as an open directory plus a name in it, so every
//! later step works relative to the same directory and can refuse to follow
//! a symlink at the name (`*at` calls with `O_NOFOLLOW`).

use std::ffi::OsString;
use std::io::{self, Read as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::{FileError, Role};
use crate::symlinks::{self, DirError};

/// Mode and owner of the file already at a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Its hard links (names).
    pub links: u64,
}

#[derive(Debug)]
pub struct Target {
    /// As the caller gave it; used in messages.
    pub path: PathBuf,
    pub dir: OwnedFd,
    pub name: OsString,
    pub role: Role,
}

/// Why `path`, which names a directory (`state/`), cannot be a file: it is
/// a directory, or it is a file that the slash calls a directory.
fn named_dir(path: &Path, role: Role) -> FileError {
    match symlinks::existing_dir(path) {
        Ok(_) => FileError::IsDirectory {
            path: path.to_owned(),
            role,
        },
        Err(why @ DirError::NotADirectory { .. }) => FileError::TrailingSlash {
            path: path.to_owned(),
            role,
            why: Some(why),
        },
        Err(DirError::Missing { .. }) => FileError::TrailingSlash {
            path: path.to_owned(),
            role,
            why: None,
        },
        Err(DirError::Io { error, .. }) => FileError::io(path, "look at it", error),
        Err(why) => FileError::UnsafeDirectory {
            path: path.to_owned(),
            role,
            why,
        },
    }
}

impl Target {
    /// Open the directory of `path`, which must exist. Symlinks in the
    /// directory part are followed (as by any program) unless planted
    /// ([`crate::symlinks::resolve_dir`]); the last component never is.
    pub fn open(path: &Path, role: Role) -> Result<Self, FileError> {
        let name = match path.file_name() {
            Some(name) if !symlinks::names_dir(path) => name.to_owned(),
            _ => return Err(named_dir(path, role)),
        };
        let dir_path = symlinks::parent_of(path);
        let open_dir = |e: io::Error| FileError::io(path, format!("open its directory {}", dir_path.display()), e);
        let resolved = symlinks::existing_dir(dir_path).map_err(|why| match why {
            DirError::Io { error, .. } => open_dir(error),
            why => FileError::UnsafeDirectory {
                path: path.to_owned(),
                role,
                why,
            },
        })?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir =
            rustix::fs::openat(rustix::fs::CWD, &resolved, flags, Mode::empty()).map_err(|e| open_dir(e.into()))?;
        Ok(Self {
            path: path.to_owned(),
            dir,
            name,
            role,
        })
    }

    fn not_a_file(&self, file_type: FileType) -> FileError {
        let (path, role) = (self.path.clone(), self.role);
        match file_type {
            FileType::Directory => FileError::IsDirectory { path, role },
            FileType::Symlink => FileError::Symlink { path, role },
            other => FileError::NotRegular {
                path,
                role,
                kind: symlinks::kind(other),
            },
        }
    }

    /// What is at the name now: `None` if nothing, the mode and owner of a
    /// regular file, and an error for anything else (symlinks included).
    pub fn existing(&self) -> Result<Option<Existing>, FileError> {
        match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(FileError::io(&self.path, "look at it", e.into())),
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Ok(Some(Existing {
                    mode: crate::host::mode_bits(st.st_mode) & 0o7777,
                    uid: st.st_uid,
                    gid: st.st_gid,
                    #[allow(clippy::useless_conversion, reason = "st_nlink is narrower on some platforms")]
                    links: u64::from(st.st_nlink),
                })),
                other => Err(self.not_a_file(other)),
            },
        }
    }

    /// Open the name without following a symlink (and without blocking on a
    /// FIFO), and check that it is a regular file.
    pub fn open_file(&self, flags: OFlags, create: Option<u32>, op: &str) -> Result<Option<OwnedFd>, FileError> {
        let mut flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        if create.is_some() {
            flags |= OFlags::CREATE;
        }
        let mode = Mode::from_raw_mode(crate::host::raw_mode(create.unwrap_or(0)));
        let fd = match rustix::fs::openat(&self.dir, &self.name, flags, mode) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create.is_none() => return Ok(None),
            // O_NOFOLLOW reports a symlink at the last component as ELOOP.
            Err(Errno::LOOP) => return Err(self.not_a_file(FileType::Symlink)),
            Err(Errno::ISDIR) => return Err(self.not_a_file(FileType::Directory)),
            // A socket cannot be opened at all ("No such device or
            // address"): say what it is.
            Err(Errno::NXIO) => {
                return Err(
                    match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => self.not_a_file(FileType::from_raw_mode(st.st_mode)),
                        Err(e) => FileError::io(&self.path, op, e.into()),
                    },
                );
            }
            Err(e) => return Err(FileError::io(&self.path, op, e.into())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| FileError::io(&self.path, op, e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(Some(fd)),
            other => Err(self.not_a_file(other)),
        }
    }

    /// The whole content, or `None` when there is no file.
    pub fn read(&self) -> Result<Option<Vec<u8>>, FileError> {
        let Some(fd) = self.open_file(OFlags::RDONLY, None, "read it")? else {
            return Ok(None);
        };
        let mut file = std::fs::File::from(fd);
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|e| FileError::io(&self.path, "read it", e))?;
        Ok(Some(data))
    }
}
