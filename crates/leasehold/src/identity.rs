//! Who holds a grant, and when a holder is *provably* gone.
//!
//! A grant records its holder's host, boot id, pid namespace, pid, the
//! pid's start time and (for `run`) the command's process group and the
//! guard's pid and start time. On the same host, boot and pid namespace, a
//! bound holder is provably gone when its pid no longer exists, or now
//! belongs to a process with another start time (pid reuse) — and its
//! guard, if recorded, is gone the same way, and its process group, if
//! recorded, is empty.
//!
//! Why the guard: it is a child subreaper that exits only when the
//! command's whole tree is gone — also the processes that left the group
//! (`setsid`, `timeout(1)`, a shell's `set -m` jobs), which no group test
//! sees. While it stops them (SIGTERM, up to `--grace`, SIGKILL) after the
//! supervisor was killed, the grant is not proven free. A guard that was
//! killed too leaves what left the group unseen: the group is then the only
//! evidence, and a kill -9 of both the supervisor and the guard is the one
//! case a fast takeover can come while such a process runs (docs/RUN-AND-LOCK.md).
//! A guard that exited but was not reaped yet (its parent died, and PID 1
//! reaps late — up to 2 s on some machines, never on others) counts as gone
//! only when its wait status says it exited with
//! [`TREE_GONE_EXIT`], which it
//! does only once its tree is gone; killed, or a status this process may
//! not read (shown as 0), it counts as alive.
//!
//! Missing or unreadable evidence never counts as proof: a holder on
//! another host, from another namespace, with an unreadable start time or a
//! pid space that is not ours (a container showing the host's `/proc`) is
//! treated as alive until its TTL runs out. The evidence is read through
//! `leasehold_host` (docs/PLATFORMS.md: what it rests on per
//! platform); the judgement here is the same everywhere.

use std::io;
use std::sync::{Arc, Mutex};

use leasehold_backend::mutant::{Mutant, strikes};
use leasehold_backend::{GuardProcess, Holder};
use leasehold_host as host;

use crate::supervise::guard::TREE_GONE_EXIT;
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
    /// the process group that must be empty and the guard process that
    /// must be gone before a takeover (`run`'s command).
    Process {
        pid: u32,
        pgid: Option<u32>,
        guard: Option<u32>,
    },
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
/// of the first acquisition. Every acquisition used to read the process three
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
            pid_ns: host::own_pid_namespace(),
            start_time: start_time(pid).ok(),
            cmdline: host::command_text(pid),
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

/// When `pid` started, as [`host::process_start`] reads it (Linux: clock
/// ticks since boot from `/proc/PID/stat`; macOS: microseconds since the
/// epoch from `proc_pidinfo`). `NotFound` when there is no such process.
///
/// # Errors
/// The read error, or `InvalidData` for an unparsable answer.
pub fn start_time(pid: u32) -> io::Result<u64> {
    host::process_start(pid)
}

/// Describe the holder a grant of `binding` records.
///
/// # Errors
/// When `binding` names a process that does not exist or whose identity
/// cannot be read (binding a grant to it would prove nothing).
pub fn holder(binding: Binding) -> io::Result<Holder> {
    let (pid, group, guard) = match binding {
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
                guard: None,
                bound: binding == Binding::ThisProcess,
            });
        }
        Binding::Process { pid, pgid, guard } => (pid, pgid, guard),
    };
    let read =
        |pid: u32| start_time(pid).map_err(|e| io::Error::new(e.kind(), format!("cannot read process {pid}: {e}")));
    let start = read(pid)?;
    let guard = match guard {
        Some(pid) => Some(GuardProcess {
            pid,
            start_time: read(pid)?,
        }),
        None => None,
    };
    Ok(Holder {
        host: hostname(),
        boot_id: host::boot_id().unwrap_or_default(),
        pid_ns: host::pid_namespace(pid),
        pid,
        start_time: Some(start),
        cmdline: host::command_text(pid),
        pgid: group,
        guard,
        bound: true,
    })
}

/// Whether `holder` is provably gone, judged from this process. See the
/// module docs: anything short of proof is `false`.
#[must_use]
pub fn provably_gone(holder: &Holder) -> bool {
    Vantage::read().gone(holder)
}

/// What this host can tell of a grant's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Its process runs on this host (same pid, same start time).
    Alive,
    /// Provably gone ([`provably_gone`]): the next acquisition takes the
    /// grant over at once.
    Dead,
    /// Bound to no process: the grant lives by its TTL alone.
    Unbound,
    /// Another host, or no evidence either way.
    Unknown,
}

impl Liveness {
    /// The word `--json` prints as `alive`: `yes`, `no`, `ttl`, `?`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "yes",
            Liveness::Dead => "no",
            Liveness::Unbound => "ttl",
            Liveness::Unknown => "?",
        }
    }
}

/// What a holder is, as far as this host can tell.
#[must_use]
pub fn liveness(holder: &Holder) -> Liveness {
    Vantage::read().liveness(holder)
}

/// Where this process runs, read once to judge many holders (a status
/// page judges every grant of a store at each reading).
#[derive(Debug, Clone)]
pub struct Vantage {
    here: Here,
}

impl Vantage {
    /// Read this host's name, boot and pid namespace now.
    #[must_use]
    pub fn read() -> Self {
        Self {
            here: Here {
                host: hostname(),
                boot_id: host::boot_id(),
                pid_ns: host::own_pid_namespace(),
                pids_are_ours: host::pids_are_ours(),
            },
        }
    }

    /// [`provably_gone`], from here.
    #[must_use]
    pub fn gone(&self, holder: &Holder) -> bool {
        gone_by_evidence(
            holder,
            &self.here,
            start_time,
            guard_exited_with_its_tree,
            group_is_empty,
        )
    }

    /// The process by which `holder` is proved gone (or alive) from here —
    /// its pid and recorded start time — when it can be: bound to a
    /// process on this host, boot and pid namespace, with a start time to
    /// tell a reused pid by.
    #[must_use]
    pub fn provable_process(&self, holder: &Holder) -> Option<(u32, u64)> {
        self.here.judges(holder).map(|start| (holder.pid, start))
    }

    /// Whether `holder`'s process is one this process can signal: bound,
    /// on this host, boot and pid namespace, and its pid still the process
    /// that started when the grant says (never a reused pid).
    #[must_use]
    pub fn can_signal(&self, holder: &Holder) -> bool {
        self.here
            .judges(holder)
            .is_some_and(|recorded| start_time(holder.pid).ok() == Some(recorded))
    }

    /// Send SIGTERM to `holder`'s process when [`Vantage::can_signal`]
    /// (checked again just before); whether it was sent.
    pub fn terminate(&self, holder: &Holder) -> bool {
        self.can_signal(holder)
            && i32::try_from(holder.pid)
                .ok()
                .and_then(Pid::from_raw)
                .is_some_and(|pid| rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok())
    }

    /// Whether `holder`'s grant can end only after this process has: it
    /// is bound to this process's own process group, or held by a
    /// supervisor (a grant with a guard: `run`, `work`, `cron`) this
    /// process descends from — whose command's tree, which the grant
    /// outlives, this process is part of. Waiting for such a grant is
    /// waiting for oneself (issue 41: `run` inside `run` on its own name
    /// waited for ever).
    #[must_use]
    pub fn encloses_this_process(&self, holder: &Holder) -> bool {
        if self.here.judges(holder).is_none() || start_time(holder.pid).ok() != holder.start_time {
            return false;
        }
        let own_group = rustix::process::getpgrp().as_raw_nonzero().get().unsigned_abs();
        if holder.pgid == Some(own_group) {
            return true;
        }
        let guard = holder.guard.as_ref().map(|g| g.pid);
        guard.is_some()
            && ancestry(std::process::id())
                .iter()
                .any(|&p| p == holder.pid || Some(p) == guard)
    }

    /// [`liveness`], from here.
    #[must_use]
    pub fn liveness(&self, holder: &Holder) -> Liveness {
        if !holder.bound {
            Liveness::Unbound
        } else if self.gone(holder) {
            Liveness::Dead
        } else if holder.host == self.here.host && start_time(holder.pid).ok() == holder.start_time {
            Liveness::Alive
        } else {
            Liveness::Unknown
        }
    }
}

/// `pid` and its ancestors, nearest first, as far as they can be read.
#[must_use]
pub fn ancestry(pid: u32) -> Vec<u32> {
    let mut chain = vec![pid];
    let mut current = pid;
    while let Some(parent) = host::parent_pid(current) {
        if parent == 0 || chain.contains(&parent) {
            break;
        }
        chain.push(parent);
        current = parent;
    }
    chain
}

/// What this process knows of where it runs, against which a holder's
/// record is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Here {
    host: String,
    boot_id: Option<String>,
    pid_ns: Option<u64>,
    /// Whether pids read here describe our own pid space.
    pids_are_ours: bool,
}

impl Here {
    /// The start time `holder` records, when its pids can be judged from
    /// here: bound to a process on this host, boot and pid namespace, with
    /// a start time to tell a reused pid by. `None`: nothing about its
    /// process can be proved (or signalled) from here.
    fn judges(&self, holder: &Holder) -> Option<u64> {
        let here_as_theirs = holder.bound
            && holder.host == self.host
            && self.pids_are_ours
            && self.boot_id.as_deref() == Some(holder.boot_id.as_str())
            && self.pid_ns.is_some()
            && self.pid_ns == holder.pid_ns;
        holder.start_time.filter(|_| here_as_theirs)
    }
}

/// The proof of death, apart from reading the evidence (so that it is
/// tested with records from every platform): `start_of` reads a pid's start
/// time now, `guard_done` whether a pid with a start time is a guard that
/// exited with its tree gone and waits to be reaped
/// ([`guard_exited_with_its_tree`]), `group_is_empty` whether a process
/// group has no member left. None is asked unless the record could be
/// judged from here.
fn gone_by_evidence(
    holder: &Holder,
    here: &Here,
    start_of: impl Fn(u32) -> io::Result<u64>,
    guard_done: impl Fn(u32, u64) -> bool,
    group_is_empty: impl FnOnce(u32) -> bool,
) -> bool {
    let Some(recorded_start) = here.judges(holder) else {
        return false;
    };
    let gone = |pid: u32, recorded: u64| match start_of(pid) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Ok(start) => start != recorded,
        Err(_) => false,
    };
    let no_guard_left = || {
        holder
            .guard
            .is_none_or(|g| gone(g.pid, g.start_time) || guard_done(g.pid, g.start_time))
    };
    let group_empty = || holder.pgid.is_none_or(group_is_empty);
    gone(holder.pid, recorded_start)
        // Planted bugs (scripts/mutants): either piece of evidence skipped.
        && (no_guard_left() || strikes(Mutant::ProofIgnoresGuard, || true))
        && (group_empty() || strikes(Mutant::ProofIgnoresGroup, || true))
}

/// Whether `pid`, started at `start`, is a zombie guard that exited with
/// [`TREE_GONE_EXIT`] — only once its command's whole tree was gone — and
/// waits to be reaped (its supervisor died, and PID 1 reaps late: up to 2 s
/// on some machines, never on others). A status this process may not read
/// shows as 0, never as that code.
fn guard_exited_with_its_tree(pid: u32, start: u64) -> bool {
    host::zombie_exit(pid) == Some((start, i32::from(TREE_GONE_EXIT) << 8))
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
            (hostname().as_str(), host::command_text(pid).as_str())
        );
        assert_eq!(me.pid_ns, host::own_pid_namespace());
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
        let h = holder(Binding::Process {
            pid,
            pgid: None,
            guard: None,
        });
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

    /// A holder as each platform records it: boot ids, pid namespaces and
    /// start times in the form Linux and macOS give them.
    fn recorded(platform: &str) -> (Holder, Here) {
        let (boot_id, pid_ns, start) = match platform {
            // /proc/sys/kernel/random/boot_id, the inode of /proc/PID/ns/pid,
            // clock ticks since boot.
            "linux" => ("0f4c7b4e-3a1d-4a55-9b0e-6c2f1d7e8a90", 4_026_531_836, 1_234_567),
            // kern.bootsessionuuid, the one pid space, microseconds since
            // the epoch.
            _ => ("5E1B2C3D-4F60-4A7B-8C9D-0E1F2A3B4C5D", 0, 1_764_590_000_123_456),
        };
        let holder = Holder {
            host: "box".into(),
            boot_id: boot_id.into(),
            pid_ns: Some(pid_ns),
            pid: 4242,
            start_time: Some(start),
            cmdline: "agent".into(),
            pgid: Some(4242),
            guard: Some(GuardProcess {
                pid: 4241,
                start_time: start - 1,
            }),
            bound: true,
        };
        let here = Here {
            host: "box".into(),
            boot_id: Some(boot_id.into()),
            pid_ns: Some(pid_ns),
            pids_are_ours: true,
        };
        (holder, here)
    }

    /// What a pid shows now, against what the record says.
    #[derive(Clone, Copy)]
    enum Now {
        Gone,
        Same,
        Reused,
        Unreadable,
        /// A zombie (its start time still reads the same) whose status
        /// says the guard's tree was gone (`true`) or not (killed).
        Exited(bool),
    }

    fn reading(now: Now, recorded: u64) -> io::Result<u64> {
        match now {
            Now::Gone => Err(io::Error::new(io::ErrorKind::NotFound, "no such process")),
            Now::Same | Now::Exited(_) => Ok(recorded),
            Now::Reused => Ok(recorded + 1),
            Now::Unreadable => Err(io::Error::from(io::ErrorKind::PermissionDenied)),
        }
    }

    #[test]
    fn proof_of_death_reads_the_same_from_both_platforms_records() {
        let gone = || Err(io::Error::new(io::ErrorKind::NotFound, "no such process"));
        for platform in ["linux", "macos"] {
            let (holder, here) = recorded(platform);
            let guard = holder.guard.unwrap();
            // The supervisor's pid and the guard's, each as `now` says.
            let judge_both = |h: &Holder, here: &Here, sup: Now, grd: Now, empty: bool| {
                let start = h.start_time.unwrap_or_default();
                gone_by_evidence(
                    h,
                    here,
                    |pid| {
                        if pid == guard.pid {
                            reading(grd, guard.start_time)
                        } else {
                            reading(sup, start)
                        }
                    },
                    |pid, start| pid == guard.pid && start == guard.start_time && matches!(grd, Now::Exited(true)),
                    |_| empty,
                )
            };
            let judge = |h: &Holder, here: &Here, sup: Now, empty: bool| judge_both(h, here, sup, Now::Gone, empty);
            assert!(
                judge(&holder, &here, Now::Gone, true),
                "{platform}: pid gone, group empty"
            );
            assert!(judge(&holder, &here, Now::Reused, true), "{platform}: pid reused");
            assert!(!judge(&holder, &here, Now::Same, true), "{platform}: still running");
            assert!(
                !judge(&holder, &here, Now::Gone, false),
                "{platform}: its group lives on"
            );
            assert!(
                !judge(&holder, &here, Now::Unreadable, true),
                "{platform}: unreadable is no proof"
            );
            // The guard keeps what left the group: while it lives, or cannot
            // be read, the tree may live.
            assert!(
                !judge_both(&holder, &here, Now::Gone, Now::Same, true),
                "{platform}: its guard lives on"
            );
            assert!(
                !judge_both(&holder, &here, Now::Gone, Now::Unreadable, true),
                "{platform}: an unreadable guard is no proof"
            );
            assert!(
                judge_both(&holder, &here, Now::Gone, Now::Reused, true),
                "{platform}: the guard's pid reused"
            );
            assert!(
                judge_both(&holder, &here, Now::Gone, Now::Exited(true), true),
                "{platform}: the guard exited with its tree gone, not yet reaped"
            );
            assert!(
                !judge_both(&holder, &here, Now::Gone, Now::Exited(false), true),
                "{platform}: the guard killed, not yet reaped: its orphans may run"
            );
            let no_guard = Holder {
                guard: None,
                ..holder.clone()
            };
            assert!(
                judge_both(&no_guard, &here, Now::Gone, Now::Same, true),
                "{platform}: no guard recorded"
            );

            let no_group = Holder {
                pgid: None,
                ..holder.clone()
            };
            assert!(
                judge(&no_group, &here, Now::Gone, false),
                "{platform}: no group recorded"
            );
            // Where the record cannot be judged from here: never proof.
            let here_but = |change: fn(&mut Here)| {
                let mut h = here.clone();
                change(&mut h);
                (holder.clone(), h)
            };
            let holder_but = |change: fn(&mut Holder)| {
                let mut h = holder.clone();
                change(&mut h);
                (h, here.clone())
            };
            let unjudgeable = [
                ("another boot", here_but(|h| h.boot_id = Some("another".into()))),
                ("boot unknown here", here_but(|h| h.boot_id = None)),
                ("another pid namespace", here_but(|h| h.pid_ns = Some(4_026_532_000))),
                ("a pid space not ours", here_but(|h| h.pids_are_ours = false)),
                ("another host", here_but(|h| h.host = "laptop".into())),
                ("no start time recorded", holder_but(|h| h.start_time = None)),
                ("TTL only", holder_but(|h| h.bound = false)),
            ];
            for (what, (holder, here)) in unjudgeable {
                assert!(!judge(&holder, &here, Now::Gone, true), "{platform}: {what}");
            }
        }
        // A record from one platform read on the other never matches: a
        // laptop's grant is not judged by a Linux box's pids.
        let (linux, _) = recorded("linux");
        let (_, mac) = recorded("macos");
        assert!(!gone_by_evidence(&linux, &mac, |_| gone(), |_, _| true, |_| true));
    }
}
