//! Linux answers for [`super`]: `CLOCK_BOOTTIME`, `/proc`, `statfs` magic
//! with `/proc/self/mountinfo`, and a child subreaper.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use rustix::pipe::PipeFlags;
use rustix::process::Pid;

use super::{Magic, network_fs_by_magic, network_fuse_subtype};

pub(super) fn boot_clock() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

pub(super) const BOOT_ID_SOURCE: &str = "/proc/sys/kernel/random/boot_id (is /proc mounted?)";

pub(super) fn read_boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()
}

pub(super) fn network_filesystem(path: &Path) -> io::Result<Option<String>> {
    let st = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast, reason = "f_type's width differs between targets")]
    let magic = st.f_type as u64;
    Ok(match network_fs_by_magic(magic) {
        Magic::Local => None,
        Magic::Network(name) => Some(name.to_owned()),
        Magic::Fuse => fuse_network_subtype(path),
    })
}

pub(super) fn memory_filesystem(path: &Path) -> io::Result<Option<&'static str>> {
    let st = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast, reason = "f_type's width differs between targets")]
    Ok(super::memory_fs_by_magic(st.f_type as u64))
}

pub(super) fn processes_using_deleted(path: &Path) -> Vec<u32> {
    let mut wanted = path.as_os_str().to_owned();
    wanted.push(" (deleted)");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<u32> = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(Result::ok)
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted))
            })
        })
        .collect();
    found.sort_unstable();
    found
}

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
    network_fuse_subtype(&best?.1)
}

/// Field `field` (numbered as proc(5) does) of `/proc/PID/stat`. The
/// command name (field 2) may contain spaces and parentheses: the fields
/// after it start past the last `)`.
/// `/proc/PID/stat`, read whole in one `read` or two: waiters prove the
/// processes that block them through it ten times a second, and
/// `read_to_string`'s `statx` and growing reads (32, 32, 64, 128, 256
/// bytes) were most of a listening waiter's system calls.
fn read_stat(pid: &str) -> io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat"))?;
    // 52 fields of at most 20 digits, and a command name of 16 bytes.
    let mut text = Vec::with_capacity(1536);
    file.by_ref().take(64 * 1024).read_to_end(&mut text)?;
    String::from_utf8(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn stat_field<T: std::str::FromStr>(pid: &str, field: usize) -> io::Result<T> {
    let stat = read_stat(pid)?;
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no field {field} in /proc/{pid}/stat"),
        )
    };
    let (_, rest) = stat.rsplit_once(')').ok_or_else(invalid)?;
    rest.split_ascii_whitespace()
        .nth(field - 3)
        .and_then(|f| f.parse().ok())
        .ok_or_else(invalid)
}

pub(super) fn process_start(pid: u32) -> io::Result<u64> {
    // Field 22: start time, in clock ticks since boot.
    stat_field(&pid.to_string(), 22)
}

pub(super) fn zombie_exit(pid: u32) -> Option<(u64, i32)> {
    // One reading: field 3 the state, 22 the start time, 52 the wait
    // status (Linux 3.5+; 0 where this process may not see it).
    let stat = read_stat(&pid.to_string()).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    if fields.first() != Some(&"Z") {
        return None;
    }
    Some((fields.get(22 - 3)?.parse().ok()?, fields.get(52 - 3)?.parse().ok()?))
}

pub(super) fn process_state(pid: u32) -> Option<super::ProcessState> {
    // Field 3: one letter (R, S, D, T, t, Z, ...).
    let letter: char = stat_field(&pid.to_string(), 3).ok()?;
    Some(super::ProcessState::from_stat_letter(letter))
}

pub(super) fn parent_pid(pid: u32) -> Option<u32> {
    stat_field(&pid.to_string(), 4).ok()
}

pub(super) fn pid_namespace(pid: u32) -> Option<u64> {
    pid_namespace_of(&pid.to_string())
}

pub(super) fn own_pid_namespace() -> Option<u64> {
    pid_namespace_of("self")
}

fn pid_namespace_of(pid: &str) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok().map(|m| m.ino())
}

/// `/proc` shows our own pid namespace only when `/proc/self` is our pid
/// (it is not in a container that mounts the host's `/proc`).
pub(super) fn pids_are_ours() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
        == Some(std::process::id())
}

/// Every lock the kernel holds, one line each ([`super::locks`]).
pub(super) fn lock_list() -> Option<String> {
    std::fs::read_to_string("/proc/locks").ok()
}

pub(super) fn command_line(pid: u32) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()
}

pub(super) fn thread_count() -> Option<usize> {
    // Field 20: num_threads.
    stat_field("self", 20).ok()
}

pub(super) fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = if nonblocking {
        PipeFlags::CLOEXEC | PipeFlags::NONBLOCK
    } else {
        PipeFlags::CLOEXEC
    };
    Ok(rustix::pipe::pipe_with(flags)?)
}

pub(super) fn control_socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

pub(super) const SEND_NO_SIGNAL: rustix::net::SendFlags = rustix::net::SendFlags::NOSIGNAL;

pub(super) const RECV_CLOEXEC: rustix::net::RecvFlags = rustix::net::RecvFlags::CMSG_CLOEXEC;

/// A child subreaper's tree: see [`super::ProcessTree`].
#[derive(Debug)]
pub(super) struct ProcessTree;

impl ProcessTree {
    pub(super) fn keep() -> io::Result<Self> {
        rustix::process::set_child_subreaper(Pid::from_raw(1))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot become a child subreaper: {e}")))?;
        Ok(Self)
    }

    #[allow(clippy::unused_self, reason = "the macOS tree remembers what it watches")]
    pub(super) fn watch(&mut self, _pid: Pid) {}

    #[allow(clippy::unused_self, reason = "the macOS tree has a kqueue to wake on")]
    pub(super) fn wakeup(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    #[allow(clippy::unused_self, reason = "the macOS tree learns members as they fork")]
    pub(super) fn refresh(&mut self) {}

    /// Every process whose parent chain leads to this one: orphans are
    /// re-parented here, so the chain never breaks.
    #[allow(clippy::unused_self, reason = "the macOS tree remembers members")]
    pub(super) fn members(&mut self) -> Vec<Pid> {
        descendants(std::process::id())
    }

    /// Every descendant hangs from a child of a subreaper: none left, the
    /// tree is gone.
    #[allow(clippy::unused_self, reason = "the macOS tree has more to look at")]
    pub(super) fn gone_without_children(&mut self, _group: Pid) -> bool {
        true
    }

    #[allow(clippy::unused_self, reason = "the macOS tree remembers members")]
    pub(super) fn forget(&mut self) {}

    #[allow(clippy::unused_self, reason = "the control socket's EOF says it on Linux")]
    pub(super) fn supervisor_gone(&self) -> bool {
        false
    }
}

pub(super) fn adopt_orphans() -> io::Result<()> {
    rustix::process::set_child_subreaper(Pid::from_raw(1))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot become a child subreaper: {e}")))
}

pub(super) fn descendants_of_self() -> Vec<Pid> {
    descendants(std::process::id())
}

/// Every process whose parent chain leads to `me` (read from /proc).
fn descendants(me: u32) -> Vec<Pid> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(parent_pid) = parent_pid(pid) {
                parent.insert(pid, parent_pid);
            }
        }
    }
    let mut ours = HashSet::new();
    for &pid in parent.keys() {
        let mut chain = Vec::new();
        let mut p = pid;
        let mine = loop {
            if p == me || ours.contains(&p) {
                break true;
            }
            chain.push(p);
            match parent.get(&p) {
                Some(&pp) if pp != 0 && chain.len() < 4096 => p = pp,
                _ => break false,
            }
        };
        if mine {
            ours.extend(chain);
        }
    }
    ours.into_iter()
        .filter_map(|pid| i32::try_from(pid).ok().and_then(Pid::from_raw))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_child_is_a_descendant() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        let found = descendants(std::process::id()).contains(&pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found);
    }
}

/// A watch on files with `inotify` ([`super::FileWatch`]).
#[derive(Debug)]
pub(super) struct FileWatch {
    inotify: OwnedFd,
}

impl FileWatch {
    pub(super) fn new(paths: &[&Path]) -> io::Result<Self> {
        use rustix::fs::inotify::{CreateFlags, WatchFlags, add_watch, init};
        let inotify = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let mut last_error = io::Error::from(io::ErrorKind::NotFound);
        let mut watched = 0;
        for path in paths {
            match add_watch(&inotify, *path, WatchFlags::MODIFY) {
                Ok(_) => watched += 1,
                Err(e) => last_error = e.into(),
            }
        }
        if watched == 0 {
            return Err(last_error);
        }
        Ok(Self { inotify })
    }

    pub(super) fn wait(&self, timeout: Duration) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, poll};
        let timeout = rustix::time::Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            // A signal: wake, the caller reads again.
            Err(rustix::io::Errno::INTR) => return Ok(true),
            Err(e) => return Err(e.into()),
        }
        // Drain what woke it, so the next wait waits for the next write.
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&self.inotify, &mut buf) {
                Ok(n) if n > 0 => {}
                _ => return Ok(true),
            }
        }
    }
}
