//! How a supervised command ended: what the guard reported and its output
//! ([`Finished`]), and the one reading of it ([`Ending`]).

use super::Stop;
use crate::LostReason;

/// What the command produced and how it ended.
#[derive(Debug)]
pub struct Finished<L = LostReason> {
    /// Its exit code (128+N for signal N); `None` if the guard died.
    pub code: Option<u8>,
    /// The signal that ended it, when one did (`code` is then 128+N): a
    /// front end that reports exit codes and signals apart (Node.js's
    /// `{ code, signal }`) needs it, as `exit 143` is not SIGTERM.
    pub signal: Option<u8>,
    /// Why we stopped it, if we did.
    pub stopped: Option<Stop<L>>,
    /// It could not be started: the shell's code (127/126) and why.
    pub spawn_error: Option<(u8, String)>,
    /// With `Output::Collect`: stdout, and whether it exceeded the limit.
    pub stdout: Vec<u8>,
    pub stdout_overflow: bool,
    /// With `Output::Collect`: the end of stderr.
    pub stderr_tail: Vec<u8>,
    /// With `Output::Capture`: all of stderr (stdout is in `stdout`).
    pub stderr: Vec<u8>,
    /// The guard died, and processes of the command's tree that had left
    /// its process group may still run where nothing can find them (this
    /// process did not adopt the guard's orphans:
    /// [`Supervised::adopt_orphans`](super::Supervised::adopt_orphans)). A lease must then not be released.
    pub tree_may_live: bool,
}

/// How a command ended, as [`Finished::ending`] reads the guard's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a, L = LostReason> {
    /// We stopped it, for this reason (its exit code is then the
    /// signal's, not its own).
    Stopped(&'a Stop<L>),
    /// It could not be started: the shell's code (127/126) and why.
    CouldNotStart { code: u8, message: &'a str },
    /// It exited by itself with this code (128+N for signal N).
    Exited(u8),
    /// The guard died; the command's group was killed.
    GuardDied,
}

impl<L> Finished<L> {
    /// How the command ended, in the order that decides it — a stop of
    /// ours, then a start that failed, then its own exit, else a dead
    /// guard: the one reading of the report for every supervisor
    /// ([`run`](crate::supervise::run), the worker).
    #[must_use]
    pub fn ending(&self) -> Ending<'_, L> {
        if let Some(stop) = &self.stopped {
            Ending::Stopped(stop)
        } else if let Some((code, message)) = &self.spawn_error {
            Ending::CouldNotStart { code: *code, message }
        } else {
            self.code.map_or(Ending::GuardDied, Ending::Exited)
        }
    }
}

impl<L> Default for Finished<L> {
    fn default() -> Self {
        Self {
            code: None,
            signal: None,
            stopped: None,
            spawn_error: None,
            stdout: Vec::new(),
            stdout_overflow: false,
            stderr_tail: Vec::new(),
            stderr: Vec::new(),
            tree_may_live: false,
        }
    }
}
