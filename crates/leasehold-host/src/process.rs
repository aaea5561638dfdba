//! A process named in a message — "the store's write lock is held by pid
//! 4242 (`leasehold run wedge …`), which is stopped" — as the kernel
//! describes it: its command line and its scheduling state. Read when a
//! message needs it (a lock stays held, a renewal goes unanswered), never
//! on a hot path.

use std::fmt;

/// What a process is doing, as the kernel reports it (Linux: field 3 of
/// `/proc/PID/stat`; macOS: `pbi_status` of `proc_pidinfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// On a CPU or ready for one (`R`).
    Running,
    /// Waiting for an event: a timer, a read, a lock (`S`).
    Sleeping,
    /// Waiting for the disk, uninterruptibly (`D`).
    DiskWait,
    /// Stopped by a signal: SIGSTOP, or SIGTSTP/SIGTTIN/SIGTTOU from a
    /// terminal (`T`). It does nothing until SIGCONT.
    Stopped,
    /// Stopped by a debugger or tracer (`t`).
    Traced,
    /// Exited, not yet reaped (`Z`).
    Zombie,
    /// Any other state (`X`, `I`, `P`, …, or one a later kernel adds).
    Other,
}

impl ProcessState {
    /// The state of a `/proc/PID/stat` state letter. Apart from the reading,
    /// so that every platform tests it.
    #[must_use]
    pub fn from_stat_letter(letter: char) -> Self {
        match letter {
            'R' => ProcessState::Running,
            'S' => ProcessState::Sleeping,
            'D' => ProcessState::DiskWait,
            'T' => ProcessState::Stopped,
            't' => ProcessState::Traced,
            'Z' => ProcessState::Zombie,
            _ => ProcessState::Other,
        }
    }

    /// Whether the process can make no progress until someone acts on it:
    /// stopped or held by a debugger. What it holds stays held.
    #[must_use]
    pub fn is_halted(self) -> bool {
        matches!(self, ProcessState::Stopped | ProcessState::Traced)
    }
}

impl fmt::Display for ProcessState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProcessState::Running => "running",
            ProcessState::Sleeping => "sleeping (waiting for an event)",
            ProcessState::DiskWait => "waiting for the disk",
            ProcessState::Stopped => "stopped (SIGSTOP, or a terminal's stop signal)",
            ProcessState::Traced => "stopped by a debugger or tracer",
            ProcessState::Zombie => "exited (not yet reaped)",
            ProcessState::Other => "in an unusual state",
        })
    }
}

/// The longest command line a [`ProcessReport`] shows (the CLI's tables
/// cut at the same length).
pub const COMMAND_SHOWN: usize = 60;

/// A process as a message names it: pid, command line (cut), state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessReport {
    pub pid: u32,
    /// Its command line, readable and cut to [`COMMAND_SHOWN`] characters;
    /// empty when it cannot be read (gone, or not ours to read).
    pub command: String,
    /// `None` when this platform cannot tell, or the process is gone.
    pub state: Option<ProcessState>,
    /// It is this very process (another connection or thread of it).
    pub this_process: bool,
}

impl ProcessReport {
    /// Describe `pid` as the kernel does now.
    #[must_use]
    pub fn read(pid: u32) -> Self {
        Self {
            pid,
            command: crate::shorten(&super::command_text(pid), COMMAND_SHOWN),
            state: super::process_state(pid),
            this_process: pid == std::process::id(),
        }
    }

    /// What to do about a process that holds something everyone waits for.
    #[must_use]
    pub fn remedy(&self) -> String {
        let pid = self.pid;
        match self.state {
            Some(ProcessState::Stopped) => {
                format!("resume it (kill -CONT {pid}) or end it (kill {pid}); nothing else can release what it holds")
            }
            Some(ProcessState::Traced) => {
                format!("let its debugger continue or detach, or end it (kill {pid})")
            }
            _ if self.this_process => {
                "another store handle of this same program holds it: one of its threads is stuck inside a write".into()
            }
            _ => {
                format!("find out what pid {pid} is doing (it may be busy, or waiting on something itself), or end it")
            }
        }
    }
}

/// `pid 4242 (`leasehold run wedge …`), which is stopped (…)`.
impl fmt::Display for ProcessReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.this_process {
            write!(f, "this process (pid {})", self.pid)?;
        } else {
            write!(f, "pid {}", self.pid)?;
        }
        if !self.command.is_empty() && !self.this_process {
            write!(f, " (`{}`)", self.command)?;
        }
        match self.state {
            Some(state) => write!(f, ", which is {state}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_letters_are_read_as_linux_writes_them() {
        assert_eq!(ProcessState::from_stat_letter('T'), ProcessState::Stopped);
        assert_eq!(ProcessState::from_stat_letter('t'), ProcessState::Traced);
        assert_eq!(ProcessState::from_stat_letter('S'), ProcessState::Sleeping);
        assert_eq!(ProcessState::from_stat_letter('I'), ProcessState::Other);
        assert!(ProcessState::Stopped.is_halted() && ProcessState::Traced.is_halted());
        assert!(!ProcessState::Sleeping.is_halted() && !ProcessState::Running.is_halted());
    }

    #[test]
    fn a_report_names_the_pid_the_command_and_the_state() {
        let report = ProcessReport {
            pid: 4242,
            command: "leasehold run wedge -- ./nightly.sh".into(),
            state: Some(ProcessState::Stopped),
            this_process: false,
        };
        assert_eq!(
            report.to_string(),
            "pid 4242 (`leasehold run wedge -- ./nightly.sh`), which is stopped (SIGSTOP, or a terminal's stop signal)"
        );
        assert!(report.remedy().contains("kill -CONT 4242"));
        let unknown = ProcessReport {
            command: String::new(),
            state: None,
            ..report
        };
        assert_eq!(
            unknown.to_string(),
            "pid 4242",
            "nothing invented when nothing could be read"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_stopped_child_is_reported_stopped_and_a_running_one_not() {
        use std::process::Command;
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let state = || ProcessReport::read(pid).state;
        let waited = |want: ProcessState| {
            (0..400).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                state() == Some(want)
            })
        };
        assert!(waited(ProcessState::Sleeping), "{:?}", state());
        let target = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(target, rustix::process::Signal::STOP).unwrap();
        assert!(waited(ProcessState::Stopped), "{:?}", state());
        let report = ProcessReport::read(pid);
        assert_eq!(report.command, "sleep 30");
        assert!(report.to_string().contains("which is stopped"), "{report}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(ProcessReport::read(pid).state, None, "gone: nothing said");
    }
}
