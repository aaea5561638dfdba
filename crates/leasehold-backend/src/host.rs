//! Facts about this host that both a host-local store (SQLite) and the
//! library above the seam (holder deadlines, locks, state files) need: the
//! boot clock, the boot id, and whether a path is on a network filesystem.
//! They live here, once, because the SQLite backend and the `leasehold`
//! crate both depend on this crate and on nothing else in common.

use std::path::Path;
use std::time::Duration;

/// Time since boot on `CLOCK_BOOTTIME`: unlike `CLOCK_MONOTONIC` it keeps
/// counting while the machine is suspended, and unlike the wall clock it
/// never jumps. Comparable only together with the same [`boot_id`].
#[must_use]
pub fn boot_clock() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or `None` when it
/// cannot be read (then nothing host-local may be judged by it).
#[must_use]
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .clone()
}

/// The name of the network filesystem `path` lives on, if it is one whose
/// locking or durability cannot be trusted (NFS, CIFS/SMB, 9p, AFS, Ceph,
/// network FUSE mounts such as sshfs). `Ok(None)` for a local filesystem.
///
/// FUSE is judged by its subtype in `/proc/self/mountinfo`: local FUSE
/// filesystems (fuse-overlayfs in containers, for one) are common and
/// harmless, so only known network subtypes are refused.
///
/// # Errors
/// The `statfs` error, e.g. when `path` does not exist.
pub fn network_filesystem(path: &Path) -> std::io::Result<Option<String>> {
    let st = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast, reason = "f_type's width differs between targets")]
    let magic = st.f_type as u64 & 0xffff_ffff;
    let name = match magic {
        0x6969 => "nfs",
        0x517b => "smb",
        0xff53_4d42 => "cifs",
        0xfe53_4d42 => "smb2",
        0x0102_1997 => "9p",
        0x5346_414f => "afs",
        0x00c3_6400 => "ceph",
        0x7375_7245 => "coda",
        0x564c => "ncp",
        0x0116_1970 => "gfs2",
        0x6573_5546 => return Ok(fuse_network_subtype(path)),
        _ => return Ok(None),
    };
    Ok(Some(name.to_owned()))
}

/// FUSE subtypes that reach over the network.
const NETWORK_FUSE: &[&str] = &[
    "sshfs",
    "s3fs",
    "gcsfuse",
    "rclone",
    "glusterfs",
    "davfs",
    "davfs2",
    "goofys",
    "cephfs",
    "ceph-fuse",
    "smbnetfs",
    "curlftpfs",
    "juicefs",
    "blobfuse",
    "blobfuse2",
    "mountpoint-s3",
    "lizardfs",
    "moosefs",
    "mfs",
    "seaweedfs",
];

fn fuse_network_subtype(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    network_fuse_in(&path, &mountinfo)
}

/// The network FUSE subtype of the mount `path` (canonical) is on,
/// according to `mountinfo` (the format of `/proc/self/mountinfo`).
fn network_fuse_in(path: &Path, mountinfo: &str) -> Option<String> {
    // The longest mount point that is a prefix of `path` is its mount.
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount_point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let mount_point = mount_point.replace("\\040", " ");
        if path.starts_with(&mount_point) && best.as_ref().is_none_or(|(len, _)| mount_point.len() >= *len) {
            best = Some((mount_point.len(), (*fstype).to_owned()));
        }
    }
    let (_, fstype) = best?;
    let subtype = fstype
        .strip_prefix("fuse.")
        .or_else(|| fstype.strip_prefix("fuseblk."))?;
    NETWORK_FUSE.contains(&subtype).then(|| format!("fuse.{subtype}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward_and_boot_id_is_readable() {
        let a = boot_clock();
        let b = boot_clock();
        assert!(b >= a);
        assert!(a > Duration::ZERO);
        assert_eq!(boot_id().map(|s| s.len()), Some(36), "boot id is a UUID on Linux");
    }

    #[test]
    fn network_fuse_mounts_are_told_from_local_ones() {
        let mountinfo = "\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:40 / /home/me/remote rw,nosuid - fuse.sshfs me@host:/ rw,user_id=0
41 22 0:41 / /var/lib/containers rw - fuse.fuse-overlayfs fuse-overlayfs rw
42 40 0:42 / /home/me/remote/local\\040dir rw - ext4 /dev/vdb rw";
        let on = |p: &str| network_fuse_in(Path::new(p), mountinfo);
        assert_eq!(on("/home/me/remote/state"), Some("fuse.sshfs".into()));
        assert_eq!(on("/var/lib/containers/x"), None, "a local FUSE filesystem is fine");
        assert_eq!(on("/home/me/remote/local dir/x"), None, "the longest mount point wins");
        assert_eq!(on("/etc"), None);
    }

    #[test]
    fn a_local_directory_is_not_a_network_filesystem() {
        let dir = std::env::temp_dir();
        assert_eq!(network_filesystem(&dir).unwrap(), None);
        assert!(network_filesystem(Path::new("/no/such/dir/at/all")).is_err());
    }
}
