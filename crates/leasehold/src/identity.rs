//! Who holds a grant, and when a holder is *provably* gone.
//!
//! A grant records its holder's host, boot id, pid namespace, pid, the
//! pid's start time and (for `run`) the command's process group. On the
//! same host, boot and pid namespace, a bound holder is provably gone when
//! its pid no longer exists, or now belongs to a process with another start
//! time (pid reuse) — and its process group, if recorded, is empty.
//!
//! Missing or unreadable evidence never counts as proof: a holder on
//! another host, from another namespace, with an unreadable start time or a
//! `/proc` that is not ours is treated as alive until its TTL runs out.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, OnceLock};

use leasehold_backend::{Holder, host};
use rustix::process::Pid;

/// Which process a grant lives by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// No process: the grant lives by its TTL alone (a bare
    /// `leasehold acquire`, whose process exits at once by design).
    Ttl,
    /// The calling process (a library holder).
    ThisProcess,
    /// Another process (`--for-pid`, the `run` supervisor), and optionally
    /// the process group that must be empty before a takeover.
    Process { pid: u32, pgid: Option<u32> },
}

/// This host's name.
#[must_use]
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The default owner label: `host:pid` of the caller.
#[must_use]
pub fn default_owner() -> String {
    own().owner.clone()
}

/// What a grant records about this process, read once per process: its
/// pid's start time, boot, pid namespace and command line cannot change
/// while it lives (a program that rewrites its argv keeps the first
/// reading, which is informational only), and the host name is taken as
/// of the first acquisition. Every acquisition used to read `/proc` three
/// times and call `uname`. Keyed by pid, so a forked child reads its own.
#[derive(Debug, PartialEq, Eq)]
struct Own {
    pid: u32,
    host: String,
    boot_id: String,
    pid_ns: Option<u64>,
    start_time: Option<u64>,
    cmdline: String,
    /// `host:pid`.
    owner: String,
}

impl Own {
    fn read(pid: u32) -> Self {
        let host = hostname();
        Self {
            pid,
            owner: format!("{host}:{pid}"),
            host,
            boot_id: host::boot_id().unwrap_or_default(),
            pid_ns: my_pid_ns(),
            start_time: start_time(pid).ok(),
            cmdline: cmdline(pid),
        }
    }
}

fn own() -> Arc<Own> {
    static OWN: Mutex<Option<Arc<Own>>> = Mutex::new(None);
    let pid = std::process::id();
    let mut own = OWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match &*own {
        Some(o) if o.pid == pid => o.clone(),
        _ => own.insert(Arc::new(Own::read(pid))).clone(),
    }
}

fn pid_ns_of(pid: &str) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok().map(|m| m.ino())
}

fn my_pid_ns() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| pid_ns_of("self"))
}

/// Whether `/proc` shows our own pid namespace (it may not, in a container
/// that mounts the host's `/proc`): only then is it evidence about pids.
fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
            == Some(std::process::id())
    })
}

/// Start time of `pid` in clock ticks since boot (`/proc/PID/stat` field
/// 22). `NotFound` when there is no such process.
///
/// # Errors
/// The read error, or `InvalidData` for an unparsable stat line.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces and parentheses; the
    // fields after it start past the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no ')' in /proc/PID/stat"))?;
    rest.split_ascii_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no start time in /proc/PID/stat"))
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut s: String = String::from_utf8_lossy(&raw)
        .trim_end_matches('\0')
        .chars()
        .map(|c| if c == '\0' || c.is_control() { ' ' } else { c })
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

/// Describe the holder a grant of `binding` records.
///
/// # Errors
/// When `binding` names a process that does not exist or whose identity
/// cannot be read (binding a grant to it would prove nothing).
pub fn holder(binding: Binding) -> io::Result<Holder> {
    let (pid, group) = match binding {
        Binding::Ttl | Binding::ThisProcess => {
            let own = own();
            return Ok(Holder {
                host: own.host.clone(),
                boot_id: own.boot_id.clone(),
                pid_ns: own.pid_ns,
                pid: own.pid,
                start_time: own.start_time,
                cmdline: own.cmdline.clone(),
                pgid: None,
                bound: binding == Binding::ThisProcess,
            });
        }
        Binding::Process { pid, pgid } => (pid, pgid),
    };
    let start = start_time(pid).map_err(|e| io::Error::new(e.kind(), format!("cannot read process {pid}: {e}")))?;
    Ok(Holder {
        host: hostname(),
        boot_id: host::boot_id().unwrap_or_default(),
        pid_ns: pid_ns_of(&pid.to_string()),
        pid,
        start_time: Some(start),
        cmdline: cmdline(pid),
        pgid: group,
        bound: true,
    })
}

/// Whether `holder` is provably gone, judged from this process. See the
/// module docs: anything short of proof is `false`.
#[must_use]
pub fn provably_gone(holder: &Holder) -> bool {
    if !holder.bound || holder.host != hostname() || !proc_is_ours() {
        return false;
    }
    match (host::boot_id(), my_pid_ns(), holder.pid_ns) {
        (Some(boot), Some(mine), Some(theirs)) if boot == holder.boot_id && mine == theirs => {}
        _ => return false,
    }
    let Some(recorded_start) = holder.start_time else {
        return false;
    };
    let pid_gone = match start_time(holder.pid) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Ok(start) => start != recorded_start,
        Err(_) => false,
    };
    pid_gone && holder.pgid.is_none_or(group_is_empty)
}

/// Whether no process is left in process group `pgid`.
#[must_use]
pub fn group_is_empty(pgid: u32) -> bool {
    let Some(pgid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    matches!(
        rustix::process::test_kill_process_group(pgid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let a = start_time(std::process::id()).unwrap();
        let b = start_time(std::process::id()).unwrap();
        assert_eq!(a, b);
        assert_eq!(start_time(u32::MAX / 2).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn this_process_is_read_once_and_as_a_fresh_reading_would() {
        let pid = std::process::id();
        assert!(Arc::ptr_eq(&own(), &own()), "read again");
        assert_eq!(*own(), Own::read(pid));
        let me = holder(Binding::ThisProcess).unwrap();
        assert_eq!((me.pid, me.bound, me.pgid), (pid, true, None));
        assert_eq!(me.start_time, Some(start_time(pid).unwrap()));
        assert_eq!(
            (me.host.as_str(), me.cmdline.as_str()),
            (hostname().as_str(), cmdline(pid).as_str())
        );
        assert_eq!(me.pid_ns, pid_ns_of("self"));
        let ttl = holder(Binding::Ttl).unwrap();
        assert_eq!(ttl, Holder { bound: false, ..me });
        assert_eq!(default_owner(), format!("{}:{pid}", hostname()));
    }

    #[test]
    fn a_live_process_is_not_gone_and_an_exited_one_is() {
        let me = holder(Binding::ThisProcess).unwrap();
        assert!(me.bound && me.start_time.is_some() && me.pid_ns.is_some());
        assert!(!provably_gone(&me));

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let h = holder(Binding::Process { pid, pgid: None });
        child.wait().unwrap();
        // The child may have exited before we read it; either way, once
        // reaped it is gone.
        if let Ok(h) = h {
            assert!(provably_gone(&h));
        }
    }

    #[test]
    fn reused_pid_is_gone_but_missing_evidence_is_not_proof() {
        let mut me = holder(Binding::ThisProcess).unwrap();
        me.start_time = Some(me.start_time.unwrap() + 1);
        assert!(provably_gone(&me), "same pid, other start time: reused");

        let mut unbound = holder(Binding::Ttl).unwrap();
        unbound.pid = u32::MAX / 2;
        assert!(!provably_gone(&unbound), "a TTL-only grant is never judged by its pid");

        let mut elsewhere = holder(Binding::ThisProcess).unwrap();
        elsewhere.pid = u32::MAX / 2;
        elsewhere.host = "another-host".into();
        assert!(!provably_gone(&elsewhere));

        let mut no_start = holder(Binding::ThisProcess).unwrap();
        no_start.pid = u32::MAX / 2;
        no_start.start_time = None;
        assert!(!provably_gone(&no_start));

        let mut other_boot = holder(Binding::ThisProcess).unwrap();
        other_boot.pid = u32::MAX / 2;
        other_boot.boot_id = "another-boot".into();
        assert!(!provably_gone(&other_boot));
    }

    #[test]
    fn a_group_with_a_member_is_not_empty() {
        let pgid = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
        assert!(!group_is_empty(pgid));
        assert!(!provably_gone(&Holder {
            pid: u32::MAX / 2,
            pgid: Some(pgid),
            ..holder(Binding::ThisProcess).unwrap()
        }));
    }
}
