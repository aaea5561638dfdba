//! macOS answers for [`super`]: `CLOCK_MONOTONIC` (which counts through
//! sleep on macOS), `sysctl kern.bootsessionuuid`, `proc_pidinfo`,
//! `statfs`'s `f_fstypename`, and a `kqueue` in place of a subreaper.
//!
//! Type-checked for `aarch64-apple-darwin` (`scripts/check-macos`), never
//! run: docs/PLATFORMS.md lists what waits for a Mac.
#![allow(
    unsafe_code,
    reason = "sysctl, libproc and kevent have no safe wrapper among the dependencies; each call is one FFI call on a buffer it owns"
)]

use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::event::kqueue::{Event, EventFilter, EventFlags, ProcessEvents, kevent, kqueue};
use rustix::process::Pid;

use super::network_fs_by_type_name;

pub(super) fn boot_clock() -> Duration {
    // On macOS CLOCK_MONOTONIC is mach_continuous_time: it counts while the
    // machine sleeps (CLOCK_UPTIME_RAW is the one that stops).
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Not `kern.boottime`: macOS moves that when the wall clock is set, so two
/// readings in one boot could differ (and count as two boots).
pub(super) const BOOT_ID_SOURCE: &str = "sysctl kern.bootsessionuuid";

pub(super) fn read_boot_id() -> Option<String> {
    let mut buf = [0u8; 128];
    let mut len = buf.len();
    // SAFETY: `buf` is writable for `len` bytes; sysctlbyname writes at
    // most that many and stores the length it wrote in `len`.
    let rc = unsafe {
        libc::sysctlbyname(
            c"kern.bootsessionuuid".as_ptr(),
            buf.as_mut_ptr().cast::<c_void>(),
            &raw mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    let text = CStr::from_bytes_until_nul(buf.get(..len)?).ok()?;
    text.to_str().ok().map(str::to_owned)
}

/// A C string in a fixed array (`f_fstypename` and the like).
fn c_text(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn network_filesystem(path: &Path) -> io::Result<Option<String>> {
    let st = rustix::fs::statfs(path)?;
    Ok(network_fs_by_type_name(
        &c_text(&st.f_fstypename),
        &c_text(&st.f_mntfromname),
    ))
}

pub(super) fn memory_filesystem(path: &Path) -> io::Result<Option<&'static str>> {
    let st = rustix::fs::statfs(path)?;
    Ok(c_text(&st.f_fstypename)
        .eq_ignore_ascii_case("tmpfs")
        .then_some("tmpfs"))
}

pub(super) fn processes_using_deleted(_path: &Path) -> Vec<u32> {
    Vec::new()
}

fn no_such_process() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no such process")
}

/// `proc_pidinfo(pid, FLAVOR)` into a `T` of plain integers.
fn pid_info<T: Copy>(pid: u32, flavor: c_int) -> io::Result<T> {
    let pid = c_int::try_from(pid).map_err(|_| no_such_process())?;
    let size = c_int::try_from(size_of::<T>()).map_err(io::Error::other)?;
    let mut info = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `info` is writable for `size` bytes; proc_pidinfo writes at
    // most that many.
    let n = unsafe { libc::proc_pidinfo(pid, flavor, 0, info.as_mut_ptr().cast::<c_void>(), size) };
    if n == size {
        // SAFETY: T is made of integers only (the callers' libc structs),
        // and every byte was written.
        return Ok(unsafe { info.assume_init() });
    }
    if n <= 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            no_such_process()
        } else {
            e
        });
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("proc_pidinfo answered {n} bytes of {size} for process {pid}"),
    ))
}

fn bsd_info(pid: u32) -> io::Result<libc::proc_bsdinfo> {
    pid_info(pid, libc::PROC_PIDTBSDINFO)
}

pub(super) fn process_start(pid: u32) -> io::Result<u64> {
    let info = bsd_info(pid)?;
    Ok(info
        .pbi_start_tvsec
        .saturating_mul(1_000_000)
        .saturating_add(info.pbi_start_tvusec))
}

pub(super) fn process_state(pid: u32) -> Option<super::ProcessState> {
    use super::ProcessState;
    // <sys/proc.h>: SIDL 1, SRUN 2, SSLEEP 3, SSTOP 4, SZOMB 5. macOS
    // reports a traced process as stopped too.
    Some(match bsd_info(pid).ok()?.pbi_status {
        2 => ProcessState::Running,
        3 => ProcessState::Sleeping,
        4 => ProcessState::Stopped,
        5 => ProcessState::Zombie,
        _ => ProcessState::Other,
    })
}

pub(super) fn parent_pid(pid: u32) -> Option<u32> {
    bsd_info(pid).ok().map(|info| info.pbi_ppid)
}

/// macOS has no pid namespaces: one pid space for the whole host.
pub(super) fn pid_namespace(pid: u32) -> Option<u64> {
    bsd_info(pid).ok().map(|_| 0)
}

#[allow(clippy::unnecessary_wraps, reason = "Linux may not be able to read it")]
pub(super) fn own_pid_namespace() -> Option<u64> {
    Some(0)
}

pub(super) fn pids_are_ours() -> bool {
    true
}

/// macOS lists no locks with their holders ([`super::locks`]).
#[allow(clippy::unnecessary_wraps, reason = "Linux can read the list")]
pub(super) fn lock_list() -> Option<String> {
    None
}

pub(super) fn command_line(pid: u32) -> Vec<u8> {
    let Ok(pid) = c_int::try_from(pid) else {
        return Vec::new();
    };
    let mut buf = vec![0u8; libc::PROC_PIDPATHINFO_MAXSIZE as usize];
    // SAFETY: `buf` is writable for the size passed.
    let n = unsafe { libc::proc_pidpath(pid, buf.as_mut_ptr().cast::<c_void>(), buf.len() as u32) };
    buf.truncate(usize::try_from(n).unwrap_or(0));
    buf
}

pub(super) fn thread_count() -> Option<usize> {
    let info: libc::proc_taskinfo = pid_info(std::process::id(), libc::PROC_PIDTASKINFO).ok()?;
    usize::try_from(info.pti_threadnum).ok()
}

pub(super) fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe()?;
    for fd in [&r, &w] {
        super::set_cloexec(fd)?;
        if nonblocking {
            let flags = rustix::fs::fcntl_getfl(fd)?;
            rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
        }
    }
    Ok((r, w))
}

/// Not read here: launchd reaps at once, so a zombie is not waited on.
pub(super) fn zombie_exit(_pid: u32) -> Option<(u64, i32)> {
    None
}

/// macOS has no child subreaper: an orphan goes to launchd.
pub(super) fn adopt_orphans() -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "macOS has no child subreaper: orphans go to launchd",
    ))
}

/// Nothing is adopted here ([`adopt_orphans`]).
pub(super) fn descendants_of_self() -> Vec<Pid> {
    Vec::new()
}

pub(super) fn control_socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::sockopt;
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    // No SOCK_SEQPACKET on macOS's Unix sockets; datagrams keep the
    // boundaries and carry descriptors. No SOCK_CLOEXEC either: set after,
    // under the supervisor's spawn lock. A datagram may be as long as the
    // send buffer (net.local.dgram.maxdgram, 2 KiB, by default): an `env`
    // message can be longer.
    let (a, b) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::DGRAM, SocketFlags::empty(), None)?;
    for fd in [&a, &b] {
        super::set_cloexec(fd)?;
        sockopt::set_socket_nosigpipe(fd, true)?;
        sockopt::set_socket_send_buffer_size(fd, super::CONTROL_MESSAGE_MAX)?;
        sockopt::set_socket_recv_buffer_size(fd, 2 * super::CONTROL_MESSAGE_MAX)?;
    }
    Ok((a, b))
}

pub(super) const SEND_NO_SIGNAL: rustix::net::SendFlags = rustix::net::SendFlags::empty();

pub(super) const RECV_CLOEXEC: rustix::net::RecvFlags = rustix::net::RecvFlags::empty();

/// The pids a libproc listing call wrote into a zeroed buffer. Whether the
/// calls answer a count or a byte length has differed between releases, so
/// the answer only bounds the scan, and zeros (never a pid) are skipped.
fn listed(call: impl Fn(*mut c_void, c_int) -> c_int) -> Vec<u32> {
    let mut buf = vec![0 as libc::pid_t; 4096];
    let bytes = c_int::try_from(buf.len() * size_of::<libc::pid_t>()).unwrap_or(c_int::MAX);
    let n = call(buf.as_mut_ptr().cast::<c_void>(), bytes);
    let n = usize::try_from(n).unwrap_or(0).min(buf.len());
    buf[..n].iter().filter(|pid| **pid > 0).map(|pid| *pid as u32).collect()
}

fn children_of(pid: u32) -> Vec<u32> {
    let Ok(pid) = c_int::try_from(pid) else {
        return Vec::new();
    };
    // SAFETY: `listed` passes a buffer writable for the size it passes.
    listed(|buf, size| unsafe { libc::proc_listchildpids(pid, buf, size) })
}

fn group_members(group: Pid) -> Vec<u32> {
    let group = group.as_raw_nonzero().get();
    // SAFETY: as in `children_of`.
    listed(|buf, size| unsafe { libc::proc_listpgrppids(group, buf, size) })
}

/// The tree kept with a `kqueue`: see [`super::ProcessTree`].
#[derive(Debug)]
pub(super) struct ProcessTree {
    kq: OwnedFd,
    /// Every member seen, with its start time: a pid now used by a process
    /// with another start time is a stranger, never signalled.
    known: HashMap<u32, u64>,
    group: Option<Pid>,
    /// The supervisor (this process's parent when it started), and whether
    /// it has exited: a datagram socket has no EOF to say so.
    parent: Option<Pid>,
    parent_gone: bool,
}

impl ProcessTree {
    pub(super) fn keep() -> io::Result<Self> {
        let kq = kqueue().map_err(|e| io::Error::new(e.kind(), format!("cannot create a kqueue: {e}")))?;
        let parent = rustix::process::getppid();
        let tree = Self {
            kq,
            known: HashMap::new(),
            group: None,
            parent,
            // Re-parented to launchd already: the supervisor is gone.
            parent_gone: parent.is_none_or(|p| p.as_raw_nonzero().get() == 1),
        };
        if let Some(parent) = parent {
            tree.note(parent, ProcessEvents::EXIT);
        }
        Ok(tree)
    }

    pub(super) fn watch(&mut self, pid: Pid) {
        self.group = Some(pid);
        self.learn(pid.as_raw_nonzero().get() as u32);
    }

    #[allow(clippy::unnecessary_wraps, reason = "Linux has nothing to wake on")]
    pub(super) fn wakeup(&self) -> Option<BorrowedFd<'_>> {
        Some(self.kq.as_fd())
    }

    /// Remember `pid` as a member, and ask for a note when it forks or
    /// exits. `false` when it was known already (or is gone).
    fn learn(&mut self, pid: u32) -> bool {
        if self.known.contains_key(&pid) {
            return false;
        }
        let (Ok(start), Some(raw)) = (process_start(pid), i32::try_from(pid).ok().and_then(Pid::from_raw)) else {
            return false;
        };
        self.known.insert(pid, start);
        self.note(raw, ProcessEvents::EXIT | ProcessEvents::FORK);
        true
    }

    /// Ask the kqueue for `events` of `pid`.
    fn note(&self, pid: Pid, events: ProcessEvents) {
        let note = Event::new(
            EventFilter::Proc { pid, flags: events },
            EventFlags::ADD | EventFlags::CLEAR,
            std::ptr::null_mut(),
        );
        let mut no_events: Vec<Event> = Vec::new();
        // SAFETY: a process filter refers to no descriptor. A process that
        // exited already makes this fail (ESRCH): members are pruned later,
        // and the parent is compared with getppid on every refresh.
        let _ = unsafe { kevent(&self.kq, &[note], &mut no_events, Some(Duration::ZERO)) };
    }

    pub(super) fn refresh(&mut self) {
        let mut notes: Vec<Event> = Vec::with_capacity(64);
        loop {
            notes.clear();
            // SAFETY: as in `learn`; this only collects notes.
            match unsafe { kevent(&self.kq, &[], &mut notes, Some(Duration::ZERO)) } {
                Ok(n) if n > 0 => {}
                _ => break,
            }
            for note in &notes {
                if let EventFilter::Proc { pid, flags } = note.filter()
                    && Some(pid) == self.parent
                    && flags.contains(ProcessEvents::EXIT)
                {
                    self.parent_gone = true;
                }
            }
        }
        if rustix::process::getppid() != self.parent {
            self.parent_gone = true;
        }
        self.scan();
    }

    /// Learn the children of this process and of every member, and the
    /// command's group, until nothing new turns up.
    fn scan(&mut self) {
        // Only the children of members still alive: a stranger that has
        // since taken a member's pid is no parent of ours.
        self.prune();
        let mut todo: Vec<u32> = self.known.keys().copied().collect();
        todo.push(std::process::id());
        if let Some(group) = self.group {
            todo.extend(group_members(group).into_iter().filter(|pid| self.learn(*pid)));
        }
        while let Some(pid) = todo.pop() {
            for child in children_of(pid) {
                if self.learn(child) {
                    todo.push(child);
                }
            }
        }
    }

    /// Forget members that are gone (or whose pid a stranger now has).
    fn prune(&mut self) {
        self.known
            .retain(|pid, start| process_start(*pid).is_ok_and(|now| now == *start));
    }

    pub(super) fn members(&mut self) -> Vec<Pid> {
        self.scan();
        self.known
            .keys()
            .filter_map(|pid| i32::try_from(*pid).ok().and_then(Pid::from_raw))
            .collect()
    }

    pub(super) fn gone_without_children(&mut self, group: Pid) -> bool {
        self.scan();
        self.known.is_empty()
            && matches!(
                rustix::process::test_kill_process_group(group),
                Err(rustix::io::Errno::SRCH)
            )
    }

    pub(super) fn forget(&mut self) {
        self.known.clear();
        self.group = None;
    }

    pub(super) fn supervisor_gone(&self) -> bool {
        self.parent_gone
    }
}

/// A watch on files with a `kqueue` ([`super::FileWatch`]): a vnode note
/// on a descriptor of each file, kept open while it watches.
#[derive(Debug)]
pub(super) struct FileWatch {
    kq: OwnedFd,
    _files: Vec<OwnedFd>,
}

impl FileWatch {
    pub(super) fn new(paths: &[&Path]) -> io::Result<Self> {
        use rustix::event::kqueue::VnodeEvents;
        use rustix::fs::{Mode, OFlags};
        let kq = kqueue()?;
        let mut last_error = io::Error::from(io::ErrorKind::NotFound);
        let mut files = Vec::new();
        for path in paths {
            // O_EVTONLY: watch only, without keeping the volume busy.
            let evtonly = OFlags::from_bits_retain(libc::O_EVTONLY as _);
            let fd = match rustix::fs::open(*path, evtonly | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) => {
                    last_error = e.into();
                    continue;
                }
            };
            let note = Event::new(
                EventFilter::Vnode {
                    vnode: std::os::fd::AsRawFd::as_raw_fd(&fd),
                    flags: VnodeEvents::WRITE | VnodeEvents::EXTEND,
                },
                EventFlags::ADD | EventFlags::CLEAR,
                std::ptr::null_mut(),
            );
            let mut no_events: Vec<Event> = Vec::new();
            // SAFETY: the note refers to `fd`, which this watch keeps open
            // for as long as the kqueue lives.
            unsafe { kevent(&kq, &[note], &mut no_events, Some(Duration::ZERO)) }?;
            files.push(fd);
        }
        if files.is_empty() {
            return Err(last_error);
        }
        Ok(Self { kq, _files: files })
    }

    pub(super) fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut notes: Vec<Event> = Vec::with_capacity(8);
        // SAFETY: only collects notes of descriptors this watch keeps open.
        match unsafe { kevent(&self.kq, &[], &mut notes, Some(timeout)) } {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }
}
