//! Extended attributes kept across a replacement: ACLs
//! (`system.posix_acl_access`), security labels (`security.selinux`) and
//! `user.*` attributes live on the inode, and a rename puts a new inode at
//! the name — so the old file's attributes are read first and set on the
//! temp file before the rename. An attribute the new file already has with
//! the same value (a label the directory gives every file) is not set
//! again; one that cannot be set fails the write, file unchanged, rather
//! than silently dropping an ACL.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;

use rustix::fs::XattrFlags;
use rustix::io::Errno;

use super::error::FileError;
use super::target::Target;

/// An attribute's name and value.
pub type Xattr = (CString, Vec<u8>);

/// A size query then a read, again when the size changed in between.
fn sized(
    mut read: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
    query: impl Fn() -> rustix::io::Result<usize>,
) -> rustix::io::Result<Vec<u8>> {
    let mut attempts = 0;
    loop {
        let mut buf = vec![0; query()?];
        match read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(Errno::RANGE) if attempts < 8 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The extended attributes of the file at `target` (none where the
/// filesystem has none). Read through the open directory
/// (`/proc/self/fd/DIR/NAME`), never following a symlink at the name.
pub fn read(target: &Target) -> Result<Vec<Xattr>, FileError> {
    use std::os::fd::AsRawFd as _;
    let mut path = PathBuf::from(format!("/proc/self/fd/{}", target.dir.as_raw_fd()));
    path.push(&target.name);
    let failed = |e: Errno| FileError::io(&target.path, "read its extended attributes", e.into());
    let names = match sized(
        |b| rustix::fs::llistxattr(&path, b),
        || rustix::fs::llistxattr_query(&path),
    ) {
        Ok(names) => names,
        Err(Errno::NOTSUP | Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(failed(e)),
    };
    let mut attrs = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = CString::new(name).expect("split at NUL");
        match sized(
            |b| rustix::fs::lgetxattr(&path, name.as_c_str(), b),
            || rustix::fs::lgetxattr_query(&path, name.as_c_str()),
        ) {
            Ok(value) => attrs.push((name, value)),
            // Removed since it was listed: nothing to keep.
            Err(Errno::NODATA) => {}
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(attrs)
}

/// Set `attrs` on the new file `fd`, skipping those it already has.
///
/// # Errors
/// The first attribute that cannot be set, named.
pub fn apply(fd: impl AsFd, attrs: &[Xattr]) -> io::Result<()> {
    for (name, value) in attrs {
        let has = sized(
            |b| rustix::fs::fgetxattr(&fd, name.as_c_str(), b),
            || rustix::fs::fgetxattr_query(&fd, name.as_c_str()),
        );
        if has.as_ref().is_ok_and(|v| v == value) {
            continue;
        }
        rustix::fs::fsetxattr(&fd, name.as_c_str(), value, XattrFlags::empty()).map_err(|e| {
            let name = OsStr::from_bytes(name.as_bytes()).to_string_lossy();
            io::Error::new(
                io::Error::from(e).kind(),
                format!("cannot keep the extended attribute {name} ({e}): check that this user may set it here"),
            )
        })?;
    }
    Ok(())
}
