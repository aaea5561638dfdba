//! Facts about this host that both a host-local store (SQLite) and the
//! library above the seam (holder deadlines, proof of death, locks, state
//! files, the guard) need — the one platform crate, below the seam
//! (`leasehold-backend`), which uses it too (a holder's boot id and pid).
//! [`symlinks`] resolves the directory of every path leasehold writes.
//!
//! Every function that asks the operating system is answered by one file
//! per platform: `linux.rs` (`/proc`, `CLOCK_BOOTTIME`, `statfs` magic, a
//! child subreaper) and `macos.rs` (`sysctl`, `proc_pidinfo`,
//! `f_fstypename`, `kqueue`). The decisions taken from those answers —
//! which filesystem is a network one, when a holder is provably gone, the
//! trust window — are platform-independent and tested with values from
//! both platforms; docs/PLATFORMS.md says what each guarantee rests on
//! where, and what has been run where.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::process::Pid;

pub mod symlinks;

mod exits;
pub use exits::ExitWatch;
mod locks;
pub use locks::{HeldLock, LockCall, held_locks, held_locks_at, parse_lock_list};
mod process;
pub use process::{COMMAND_SHOWN, ProcessReport, ProcessState};
mod watch;
pub use watch::FileWatch;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
use macos as imp;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!(
    "leasehold runs on Linux and macOS only: its guarantees rest on facts each platform file of leasehold-host reads (docs/PLATFORMS.md)"
);

/// At most `max` characters of `s`; a cut is marked with `…` (which counts
/// as one of them). Total: `max` 0 gives `…` for any non-empty text. The
/// one cutting rule of every front end: commands in tables and on the
/// status page, errors in task lists, values repeated by usage errors.
/// It lives here, the lowest crate, because a process's report
/// ([`ProcessReport`]) cuts its command with it; `leasehold_backend`
/// re-exports it.
///
/// # Examples
/// ```
/// use leasehold_host::shorten;
/// assert_eq!(shorten("sleep 3", 60), "sleep 3");
/// assert_eq!(shorten(&"x".repeat(4096), 5), "xxxx…");
/// assert_eq!(shorten("ünïcödé", 4), "ünï…");
/// ```
#[must_use]
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The user's home directory (`$HOME`, when set and not empty): where `~/`
/// in a store URL and the default store lead.
#[must_use]
pub fn home_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(std::path::PathBuf::from)
}

/// Time since boot on a clock that keeps counting while the machine is
/// suspended and never jumps (Linux: `CLOCK_BOOTTIME`; macOS:
/// `CLOCK_MONOTONIC`, which on macOS counts through sleep, unlike
/// `CLOCK_UPTIME_RAW`). Comparable only together with the same
/// [`boot_id`].
#[must_use]
pub fn boot_clock() -> Duration {
    imp::boot_clock()
}

/// The kernel's wall clock (`CLOCK_REALTIME`), read through the vDSO or a
/// system call — never through libc's `clock_gettime`, so an `LD_PRELOAD`
/// shim (libfaketime) that moves one process's clock does not move this
/// one. It is the clock of a store with no server: slot times on a SQLite
/// store are judged by it, the same for every process of the host.
#[must_use]
pub fn wall_clock() -> std::time::SystemTime {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let since = Duration::new(ts.tv_sec.unsigned_abs(), u32::try_from(ts.tv_nsec).unwrap_or(0));
    if ts.tv_sec >= 0 {
        std::time::UNIX_EPOCH + since
    } else {
        std::time::UNIX_EPOCH - since
    }
}

/// Where [`boot_id`] is read from, for messages that say why it is missing.
pub const BOOT_ID_SOURCE: &str = imp::BOOT_ID_SOURCE;

/// This boot's id (Linux: `/proc/sys/kernel/random/boot_id`; macOS:
/// `sysctl kern.bootsessionuuid`), or `None` when it cannot be read (then
/// nothing host-local may be judged by it).
#[must_use]
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            imp::read_boot_id()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .clone()
}

/// The name of the network filesystem `path` lives on, if it is one whose
/// locking or durability cannot be trusted (NFS, SMB or CIFS, AFP, `WebDAV`, 9p,
/// AFS, Ceph, network FUSE mounts such as sshfs). `Ok(None)` for a local
/// filesystem. Linux judges by `statfs` magic ([`network_fs_by_magic`])
/// and, for FUSE, the subtype in `/proc/self/mountinfo`; macOS by
/// `statfs`'s `f_fstypename` ([`network_fs_by_type_name`]).
///
/// # Errors
/// The `statfs` error, e.g. when `path` does not exist.
pub fn network_filesystem(path: &Path) -> io::Result<Option<String>> {
    imp::network_filesystem(path)
}

/// The name of the memory-backed filesystem `path` lives on (tmpfs,
/// ramfs), if it is one: its files are gone at reboot, so a store there
/// starts again empty — its tokens at 1 — while tokens it issued before
/// may still be in sinks. `Ok(None)` for a filesystem on a disk. Linux
/// judges by `statfs` magic ([`memory_fs_by_magic`]), macOS by
/// `f_fstypename` (`tmpfs`).
///
/// # Errors
/// The `statfs` error, e.g. when `path` does not exist.
pub fn memory_filesystem(path: &Path) -> io::Result<Option<&'static str>> {
    imp::memory_filesystem(path)
}

/// The processes that still have open a file that was at `path` and has
/// been deleted or replaced since (its inode unlinked): on Linux, each
/// process's `/proc/PID/fd` links read `PATH (deleted)` for it. Only the
/// processes this one may look into (all, as root); none on macOS, which
/// has no such list. Used by a file store's `doctor` to name holders left
/// on a store no one else sees.
#[must_use]
pub fn processes_using_deleted(path: &Path) -> Vec<u32> {
    imp::processes_using_deleted(path)
}

/// The decision behind [`memory_filesystem`] on Linux (`statfs.f_type`).
#[must_use]
pub fn memory_fs_by_magic(magic: u64) -> Option<&'static str> {
    match magic & 0xffff_ffff {
        0x0102_1994 => Some("tmpfs"),
        0x8584_58f6 => Some("ramfs"),
        _ => None,
    }
}

/// What a store on the memory-backed filesystem `fs` risks, and what to
/// do (one wording: `doctor` and a store's creation warn with it).
#[must_use]
pub fn memory_filesystem_risk(dir: &Path, fs: &str) -> String {
    format!(
        "{} is on {fs}, a filesystem in memory: a store there is gone after a reboot and made again empty, its tokens restarting at 1 while tokens it issued may still be in sinks; put the store on a disk",
        dir.display()
    )
}

/// What a Linux filesystem magic number (`statfs.f_type`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Magic {
    Local,
    Network(&'static str),
    /// FUSE: the subtype decides ([`network_fuse_subtype`]).
    Fuse,
}

/// The decision behind [`network_filesystem`] on Linux, apart from the
/// `statfs` call so that every platform tests it.
#[must_use]
pub fn network_fs_by_magic(magic: u64) -> Magic {
    let name = match magic & 0xffff_ffff {
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
        0x6573_5546 => return Magic::Fuse,
        _ => return Magic::Local,
    };
    Magic::Network(name)
}

/// The decision behind [`network_filesystem`] on macOS, from `statfs`'s
/// `f_fstypename` and `f_mntfromname`, apart from the call so that every
/// platform tests it. macFUSE (`macfuse`, formerly `osxfuse`) names no
/// subtype there; its mounts are judged by their source: `host:path` or
/// `//server/share` is a network one (sshfs, smbnetfs, …), anything else
/// (an encrypted vault, a disk image) local — as local FUSE is on Linux.
#[must_use]
pub fn network_fs_by_type_name(fstypename: &str, mounted_from: &str) -> Option<String> {
    const NETWORK: &[&str] = &["nfs", "smbfs", "afpfs", "webdav", "cifs", "ftp"];
    let name = fstypename.to_ascii_lowercase();
    if NETWORK.contains(&name.as_str()) {
        return Some(name);
    }
    let fuse = matches!(name.as_str(), "macfuse" | "osxfuse" | "fusefs");
    let remote_source = mounted_from.starts_with("//")
        || mounted_from
            .split_once(':')
            .is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'));
    (fuse && remote_source).then(|| format!("{name} ({mounted_from})"))
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

/// `fuse.SUBTYPE` when a mount's type (as `/proc/self/mountinfo` writes
/// it: `fuse.sshfs`, `fuseblk.x`) is a network FUSE filesystem. Local FUSE
/// filesystems (fuse-overlayfs in containers, for one) are common and
/// harmless, so only known network subtypes count.
#[must_use]
pub fn network_fuse_subtype(fstype: &str) -> Option<String> {
    let subtype = fstype
        .strip_prefix("fuse.")
        .or_else(|| fstype.strip_prefix("fuseblk."))?;
    NETWORK_FUSE.contains(&subtype).then(|| format!("fuse.{subtype}"))
}

/// When a process started: a number fixed for its life that differs for a
/// later process with the same pid (Linux: clock ticks since boot, field 22
/// of `/proc/PID/stat`; macOS: microseconds since the epoch, from
/// `proc_pidinfo`). Only ever compared for equality, on the same boot.
///
/// # Errors
/// `NotFound` when there is no such process; any other error (no
/// permission, an unparsable answer) is not evidence that it is gone.
pub fn process_start(pid: u32) -> io::Result<u64> {
    imp::process_start(pid)
}

/// The parent of `pid`, while both live (`None` when it cannot be read).
#[must_use]
pub fn parent_pid(pid: u32) -> Option<u32> {
    imp::parent_pid(pid)
}

/// The pid namespace `pid` lives in (Linux: the inode of
/// `/proc/PID/ns/pid`; macOS has one for the whole host: `0`), `None` when
/// it cannot be read.
#[must_use]
pub fn pid_namespace(pid: u32) -> Option<u64> {
    imp::pid_namespace(pid)
}

/// This process's pid namespace, as [`pid_namespace`] says.
#[must_use]
pub fn own_pid_namespace() -> Option<u64> {
    static NS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *NS.get_or_init(imp::own_pid_namespace)
}

/// Whether what this host says about pids describes our own pid space
/// (Linux: `/proc` may be the host's, mounted into a container; macOS:
/// always). Only then is a pid evidence of anything.
#[must_use]
pub fn pids_are_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(imp::pids_are_ours)
}

/// What `pid` runs, for people to read (Linux: its arguments, separated
/// by NUL, from `/proc/PID/cmdline`; macOS: its executable's path). Empty
/// when it cannot be read.
#[must_use]
pub fn command_line(pid: u32) -> Vec<u8> {
    imp::command_line(pid)
}

/// What `pid` runs as one line for people to read: [`command_line`] with
/// its arguments joined by spaces and control characters blanked (so a
/// hostile argument cannot break a message or a table), at most 512
/// bytes. Empty when it cannot be read.
#[must_use]
pub fn command_text(pid: u32) -> String {
    let raw = command_line(pid);
    let mut s: String = String::from_utf8_lossy(&raw)
        .trim_end_matches('\0')
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.len() > 512 {
        let mut end = 512;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// What `pid` is doing now ([`ProcessState`]; Linux: field 3 of
/// `/proc/PID/stat`; macOS: `pbi_status`), `None` when it is gone or this
/// platform cannot tell.
#[must_use]
pub fn process_state(pid: u32) -> Option<ProcessState> {
    imp::process_state(pid)
}

/// When `pid` is a zombie — exited, not yet reaped (its parent died and PID
/// 1 reaps late) — its start time (as [`process_start`]) and its wait
/// status, read together; `None` otherwise. Linux: fields 22 and 52 of
/// `/proc/PID/stat`, where a status this process may not see reads as 0;
/// macOS: `None` (launchd reaps at once).
#[must_use]
pub fn zombie_exit(pid: u32) -> Option<(u64, i32)> {
    imp::zombie_exit(pid)
}

/// The number of threads of this process (`None` when it cannot be read).
#[must_use]
pub fn thread_count() -> Option<usize> {
    imp::thread_count()
}

/// A pipe, both ends close-on-exec (and non-blocking if asked): (read,
/// write). Linux creates it so atomically (`pipe2`); macOS has no `pipe2`,
/// so a process forked by another thread between the two steps may inherit
/// the ends — which is why every spawn of the guard and the command holds
/// one lock (`supervise::supervised`), and the guard is one thread.
///
/// # Errors
/// The `pipe` or `fcntl` error.
pub fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    imp::pipe(nonblocking)
}

/// `recvmsg` flags that make received descriptors close-on-exec where
/// the platform can (Linux: `MSG_CMSG_CLOEXEC`); call [`set_cloexec`] on
/// them as well, for the platforms that cannot.
pub const RECV_CLOEXEC: rustix::net::RecvFlags = imp::RECV_CLOEXEC;

/// The supervisor's control socket to its guard: a connected pair of
/// Unix sockets that keeps message boundaries and carries descriptors,
/// close-on-exec, never raising `SIGPIPE` when written after the guard is
/// gone (Linux: `SOCK_SEQPACKET`, which also ends in EOF when the
/// supervisor dies; macOS has no `SOCK_SEQPACKET` on Unix sockets, so
/// `SOCK_DGRAM`, and the guard learns of the supervisor's death from
/// [`ProcessTree::supervisor_gone`] as well). Write with
/// [`SEND_NO_SIGNAL`].
///
/// # Errors
/// The `socketpair` or `fcntl` error.
pub fn control_socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    imp::control_socket_pair()
}

/// The longest message the control socket carries (the guard reads into
/// a buffer of this size; macOS's datagram sockets are sized for it, their
/// default limit being 2 KiB).
pub const CONTROL_MESSAGE_MAX: usize = 1 << 16;

/// `sendmsg` flags that keep a write to a closed socket from raising
/// `SIGPIPE` (Linux: `MSG_NOSIGNAL`; macOS: none, the socket is marked
/// `SO_NOSIGPIPE` by [`control_socket_pair`]).
pub const SEND_NO_SIGNAL: rustix::net::SendFlags = imp::SEND_NO_SIGNAL;

/// Mark `fd` close-on-exec.
///
/// # Errors
/// The `fcntl` error.
pub fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    let flags = rustix::io::fcntl_getfd(fd)?;
    rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC)?;
    Ok(())
}

/// The permission and file-type bits of a `st_mode` as a `u32` (`mode_t`
/// is 32 bits on Linux, 16 on macOS).
#[must_use]
#[allow(clippy::useless_conversion, reason = "mode_t is u32 on Linux but u16 on macOS")]
pub fn mode_bits(st_mode: rustix::fs::RawMode) -> u32 {
    u32::from(st_mode)
}

/// Permission bits (`0o7777` of `bits`) as the platform's `mode_t`.
#[must_use]
#[allow(clippy::unnecessary_cast, reason = "mode_t is u32 on Linux but u16 on macOS")]
pub fn raw_mode(bits: u32) -> rustix::fs::RawMode {
    (bits & 0o7777) as rustix::fs::RawMode
}

/// How the guard keeps a command's whole tree — everything it starts, and
/// what those start — together, to signal it and to know when it is gone.
///
/// - Linux: the guard becomes a *child subreaper*, so an orphaned
///   descendant is re-parented to it (not to PID 1) even after `setsid()`;
///   its members are every process whose parent chain leads to the guard,
///   and the tree is gone exactly when the guard has no child left.
/// - macOS has no subreaper: an orphan goes to launchd. The guard watches
///   every member it has seen with `kqueue` (`EVFILT_PROC`: a fork wakes it
///   to look for the new child before its parent can exit, an exit tells it
///   when an orphan it cannot reap is gone) and remembers each by pid and
///   start time. The members are its children's trees, the command's
///   process group and every remembered process still alive; the tree is
///   gone when the guard has no child left and none of those remains. What
///   escapes: a process that calls `setsid()` (leaving the group) and whose
///   parent exits before the guard has seen it — between a fork and the
///   guard's next look (docs/PLATFORMS.md).
#[derive(Debug)]
pub struct ProcessTree(imp::ProcessTree);

/// Make this process a child subreaper: a descendant whose parent dies is
/// re-parented here (not to PID 1), even after `setsid()` — so that a
/// supervisor whose guard was killed finds what the guard kept, stops it
/// and knows when none is left ([`descendants`]).
///
/// # Errors
/// Linux: the `prctl` error; macOS has no subreaper (`Unsupported`).
pub fn adopt_orphans() -> io::Result<()> {
    imp::adopt_orphans()
}

/// Every process whose parent chain leads to this one (Linux: read from
/// `/proc`; macOS: none — nothing is adopted there, see [`adopt_orphans`]).
#[must_use]
pub fn descendants() -> Vec<Pid> {
    imp::descendants_of_self()
}

impl ProcessTree {
    /// Start keeping the trees of this process's children.
    ///
    /// # Errors
    /// Linux: becoming a child subreaper failed; macOS: no `kqueue`.
    pub fn keep() -> io::Result<Self> {
        imp::ProcessTree::keep().map(Self)
    }

    /// Watch `pid`, a command just started (the leader of its group).
    pub fn watch(&mut self, pid: Pid) {
        self.0.watch(pid);
    }

    /// A descriptor that becomes readable when the tree changes in a way no
    /// `SIGCHLD` reports (macOS: the `kqueue`); `None` when there is none.
    #[must_use]
    pub fn wakeup(&self) -> Option<BorrowedFd<'_>> {
        self.0.wakeup()
    }

    /// Take in what woke [`wakeup`](Self::wakeup), and look for members not
    /// seen yet.
    pub fn refresh(&mut self) {
        self.0.refresh();
    }

    /// Every live member of the tree, the command's group's members too:
    /// a caller that signals the group first leaves those out (the guard's
    /// `signal_tree`), so that no process gets a signal twice.
    #[must_use]
    pub fn members(&mut self) -> Vec<Pid> {
        self.0.members()
    }

    /// Whether the tree of the run led by `group` is gone, asked once this
    /// process has no child left.
    #[must_use]
    pub fn gone_without_children(&mut self, group: Pid) -> bool {
        self.0.gone_without_children(group)
    }

    /// Forget the run that just ended (its tree is gone).
    pub fn forget(&mut self) {
        self.0.forget();
    }

    /// Whether the process that started this one (the supervisor) has
    /// exited, as far as [`refresh`](Self::refresh) has seen (macOS: a
    /// `kqueue` exit note; Linux: always `false` — the control socket's EOF
    /// says it).
    #[must_use]
    pub fn supervisor_gone(&self) -> bool {
        self.0.supervisor_gone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_and_ramfs_are_memory_filesystems_and_disks_are_not() {
        assert_eq!(memory_fs_by_magic(0x0102_1994), Some("tmpfs"));
        assert_eq!(memory_fs_by_magic(0x8584_58f6), Some("ramfs"));
        // ext4, xfs, btrfs, nfs
        for disk in [0xef53, 0x5846_5342, 0x9123_683e, 0x6969] {
            assert_eq!(memory_fs_by_magic(disk), None, "{disk:#x}");
        }
    }

    #[test]
    fn boot_clock_moves_forward_and_boot_id_is_readable() {
        let a = boot_clock();
        let b = boot_clock();
        assert!(b >= a);
        assert!(a > Duration::ZERO);
        assert_eq!(
            boot_id().map(|s| s.len()),
            Some(36),
            "boot id is a UUID on Linux and macOS"
        );
    }

    #[test]
    fn linux_filesystem_magic_is_judged() {
        // Values of statfs.f_type as Linux reports them (linux/magic.h).
        assert_eq!(network_fs_by_magic(0x6969), Magic::Network("nfs"));
        assert_eq!(network_fs_by_magic(0xff53_4d42), Magic::Network("cifs"));
        assert_eq!(network_fs_by_magic(0xfe53_4d42), Magic::Network("smb2"));
        assert_eq!(network_fs_by_magic(0x0102_1997), Magic::Network("9p"));
        assert_eq!(
            network_fs_by_magic(0xffff_ffff_ff53_4d42),
            Magic::Network("cifs"),
            "f_type is sign-extended on some targets"
        );
        assert_eq!(network_fs_by_magic(0x6573_5546), Magic::Fuse);
        for local in [0xef53, 0x5846_5342, 0x9123_683e, 0x0102_1994, 0x794c_7630] {
            assert_eq!(
                network_fs_by_magic(local),
                Magic::Local,
                "{local:#x}: ext4, xfs, btrfs, tmpfs, overlay"
            );
        }
    }

    #[test]
    fn macos_filesystem_type_names_are_judged() {
        // f_fstypename / f_mntfromname as macOS's statfs reports them.
        let on = network_fs_by_type_name;
        assert_eq!(on("nfs", "server:/export"), Some("nfs".into()));
        assert_eq!(on("smbfs", "//me@server/share"), Some("smbfs".into()));
        assert_eq!(on("afpfs", "afp://server/vol"), Some("afpfs".into()));
        assert_eq!(on("webdav", "https://dav.example/x"), Some("webdav".into()));
        assert_eq!(on("NFS", "x:/y"), Some("nfs".into()), "case does not matter");
        for (local, from) in [
            ("apfs", "/dev/disk3s5"),
            ("hfs", "/dev/disk4s2"),
            ("msdos", "/dev/disk5s1"),
            ("exfat", "/dev/disk5s1"),
            ("devfs", "devfs"),
            ("autofs", "map auto_home"),
            ("lifs", "/dev/disk6s1"),
        ] {
            assert_eq!(on(local, from), None, "{local} is local");
        }
        assert_eq!(
            on("macfuse", "me@host:/home/me"),
            Some("macfuse (me@host:/home/me)".into()),
            "sshfs over macFUSE"
        );
        assert_eq!(on("osxfuse", "//server/share"), Some("osxfuse (//server/share)".into()));
        assert_eq!(on("macfuse", "cryptomator@vault"), None, "a local FUSE vault");
        assert_eq!(on("macfuse", "/dev/disk7"), None);
    }

    #[test]
    fn network_fuse_subtypes_are_told_from_local_ones() {
        assert_eq!(network_fuse_subtype("fuse.sshfs"), Some("fuse.sshfs".into()));
        assert_eq!(network_fuse_subtype("fuseblk.rclone"), Some("fuse.rclone".into()));
        assert_eq!(network_fuse_subtype("fuse.fuse-overlayfs"), None);
        assert_eq!(network_fuse_subtype("ext4"), None);
    }

    #[test]
    fn a_local_directory_is_not_a_network_filesystem() {
        let dir = std::env::temp_dir();
        assert_eq!(network_filesystem(&dir).unwrap(), None);
        assert!(network_filesystem(Path::new("/no/such/dir/at/all")).is_err());
    }

    #[test]
    fn this_process_is_readable_and_a_missing_one_is_not_found() {
        let me = std::process::id();
        let start = process_start(me).unwrap();
        assert_eq!(process_start(me).unwrap(), start, "fixed for the life of a process");
        assert_eq!(process_start(u32::MAX / 2).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(
            parent_pid(me),
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32))
        );
        assert!(own_pid_namespace().is_some() && pids_are_ours());
        assert_eq!(pid_namespace(me), own_pid_namespace());
        assert!(!command_line(me).is_empty());
        assert!(thread_count().is_some_and(|n| n >= 1));
    }

    #[test]
    fn the_control_socket_keeps_message_boundaries_up_to_its_limit() {
        use rustix::net::{RecvFlags, recv, send};
        let (a, b) = control_socket_pair().unwrap();
        for fd in [&a, &b] {
            assert!(
                rustix::io::fcntl_getfd(fd)
                    .unwrap()
                    .contains(rustix::io::FdFlags::CLOEXEC)
            );
        }
        let longest = vec![b'x'; CONTROL_MESSAGE_MAX];
        for message in [&b"window 1"[..], b"env - {}", &longest] {
            assert_eq!(send(&a, message, SEND_NO_SIGNAL).unwrap(), message.len());
        }
        let mut buf = vec![0u8; CONTROL_MESSAGE_MAX];
        for expected in [&b"window 1"[..], b"env - {}", &longest] {
            let (n, _) = recv(&b, &mut buf, RecvFlags::DONTWAIT).unwrap();
            assert_eq!(&buf[..n], expected, "one message per receive");
        }
    }

    #[test]
    fn pipes_are_close_on_exec() {
        for nonblocking in [false, true] {
            let (r, w) = pipe(nonblocking).unwrap();
            for fd in [&r, &w] {
                assert!(
                    rustix::io::fcntl_getfd(fd)
                        .unwrap()
                        .contains(rustix::io::FdFlags::CLOEXEC)
                );
                let status = rustix::fs::fcntl_getfl(fd).unwrap();
                assert_eq!(status.contains(rustix::fs::OFlags::NONBLOCK), nonblocking);
            }
        }
    }
}
