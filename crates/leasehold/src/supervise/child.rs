//! What every starter of a command shares (`leasehold run`, `work`,
//! `lock`, the guard): exit codes (128+N for death by signal N, as shells
//! report it), spawn errors (127 not found, 126 not executable) and the
//! terminal's foreground.

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_host::ProcessState;
use rustix::process::{Pid, Signal};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// The shell's exit code for a command's status.
#[must_use]
pub fn exit_code(status: ExitStatus) -> u8 {
    Exit::from(status).shell_code()
}

/// How a command ended: the code it exited with, or the signal that
/// killed it (as the guard reports it; on Unix both fit in a byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(u8),
    Signal(u8),
}

impl Exit {
    /// The signal that ended the command, if one did.
    pub(crate) fn signal(self) -> Option<u8> {
        match self {
            Self::Code(_) => None,
            Self::Signal(sig) => Some(sig),
        }
    }

    /// The shell's exit code: the code, or 128+N for signal N.
    pub(crate) fn shell_code(self) -> u8 {
        match self {
            Self::Code(code) => code,
            Self::Signal(sig) => 128u8.saturating_add(sig),
        }
    }
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Self::Code(code as u8),
            (None, Some(sig)) => Self::Signal(sig as u8),
            // Neither: a stopped or continued status, never a final one.
            (None, None) => Self::Code(1),
        }
    }
}

/// The shell's exit code for a command that could not be started.
#[must_use]
pub fn spawn_error_code(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::NotFound => 127,
        _ => 126,
    }
}

/// The command line for messages.
#[must_use]
pub fn display(argv: &[OsString]) -> String {
    argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Whether stdin is a terminal whose foreground process group is ours: a
/// ^C typed there reaches every process in our group directly.
#[must_use]
pub fn terminal_foreground() -> bool {
    let stdin = io::stdin();
    let fd = stdin.as_fd();
    rustix::termios::isatty(fd) && rustix::termios::tcgetpgrp(fd).ok() == Some(rustix::process::getpgrp())
}

/// The terminal, while a command's process group owns it (as a shell
/// hands it to a job): ^C, ^\\ and reads from the terminal go straight to
/// the command. Dropping it takes the terminal back.
///
/// Job control is passed on as a shell expects of its job: when the
/// command's group leader stops (^Z sends SIGTSTP to the terminal's
/// foreground, the command), this process takes the terminal back and
/// stops its own group with SIGTSTP — the shell sees its job stopped and
/// gives its prompt back. When continued (`fg`, `bg`), it hands the
/// terminal to the command again if it is the foreground, and continues
/// the command. A watcher thread looks at the leader every 100 ms; a
/// process-wide SIGCONT handler (which does not keep SIGCONT from
/// continuing) tells it when it was continued. While this process is
/// stopped it renews nothing: a job stopped past its trust window has its
/// command stopped by the guard and the lease lost, as any stopped `run`.
#[derive(Debug)]
pub struct Terminal {
    ours: Pid,
    /// Ends the watcher thread.
    done: Arc<AtomicBool>,
    /// The SIGCONT handler, removed on drop.
    continued: Option<signal_hook::SigId>,
}

impl Terminal {
    /// Hand the terminal to `group` if we are its foreground.
    #[must_use]
    pub fn hand_to(group: Pid) -> Option<Self> {
        if !terminal_foreground() {
            return None;
        }
        let ours = rustix::process::getpgrp();
        rustix::termios::tcsetpgrp(io::stdin().as_fd(), group).ok()?;
        let done = Arc::new(AtomicBool::new(false));
        let woke = Arc::new(AtomicBool::new(false));
        let continued = signal_hook::flag::register(signal_hook::consts::SIGCONT, woke.clone()).ok();
        if continued.is_some() {
            let done = done.clone();
            std::thread::spawn(move || pass_job_control(ours, group, &done, &woke));
        }
        Some(Self { ours, done, continued })
    }
}

/// The watcher of [`Terminal`]: stop with the command, go on with it.
fn pass_job_control(ours: Pid, group: Pid, done: &AtomicBool, woke: &AtomicBool) {
    let stopped = || crate::host::process_state(group.as_raw_nonzero().get() as u32) == Some(ProcessState::Stopped);
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if done.load(Ordering::SeqCst) || !stopped() {
            continue;
        }
        take_terminal(ours);
        woke.store(false, Ordering::SeqCst);
        // Our job — this process and what shares its group — stops as the
        // shell expects of it; this thread stops here with it.
        let _ = rustix::process::kill_process_group(ours, Signal::TSTP);
        while !woke.load(Ordering::SeqCst) && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if done.load(Ordering::SeqCst) {
            return;
        }
        if terminal_foreground() {
            let _ = rustix::termios::tcsetpgrp(io::stdin().as_fd(), group);
        }
        let _ = rustix::process::kill_process_group(group, Signal::CONT);
    }
}

/// Make `ours` the terminal's foreground again.
fn take_terminal(ours: Pid) {
    // We are a background group now: tcsetpgrp would stop us with
    // SIGTTOU unless it is blocked for the call.
    block_sigttou(true);
    let _ = rustix::termios::tcsetpgrp(io::stdin().as_fd(), ours);
    block_sigttou(false);
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(id) = self.continued.take() {
            signal_hook::low_level::unregister(id);
        }
        take_terminal(self.ours);
    }
}

#[allow(unsafe_code, reason = "no safe API blocks a signal for one thread")]
fn block_sigttou(block: bool) {
    // SAFETY: sigemptyset/sigaddset initialise a local set; pthread_sigmask
    // changes only this thread's mask, with a valid set and no old set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGTTOU);
        let how = if block { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_128_plus_its_number_and_a_code_is_itself() {
        // Wait statuses as the kernel encodes them: the code in the second
        // byte, the signal in the low bits.
        assert_eq!(Exit::from(ExitStatus::from_raw(3 << 8)), Exit::Code(3));
        assert_eq!(Exit::from(ExitStatus::from_raw(9)), Exit::Signal(9));
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
        assert_eq!(Exit::Signal(200).shell_code(), 255);
    }
}
