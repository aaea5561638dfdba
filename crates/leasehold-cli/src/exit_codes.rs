//! Exit codes: the contract scripts rely on (DESIGN.md §8, README).

use std::fmt;

/// Why `leasehold` stopped. `run`, `lock`, `fence` and `work` pass their
/// command's own code through instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    Success = 0,
    /// An unexpected failure.
    Failure = 1,
    /// Bad arguments or input that is not ours to fix.
    Usage = 2,
    /// No task is available to claim.
    #[allow(dead_code, reason = "returned by `task claim`, which lands with the queue")]
    NothingToClaim = 10,
    /// Another process holds the lease or lock.
    Held = 11,
    /// The grant is lost, or the caller is not its holder.
    Lost = 12,
    /// A stale fencing token was refused.
    StaleToken = 13,
    /// No such task (`task show`, `task retry`). Token-scoped operations
    /// on a task that is gone say 12 instead: the caller's claim is lost.
    NotFound = 14,
    /// Bad data: a corrupt store, state file or input.
    DataError = 65,
    /// The store is unavailable.
    Unavailable = 69,
    /// The lease was lost while the command ran; the command was stopped.
    LeaseLostWhileRunning = 75,
}

impl ExitCode {
    #[must_use]
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}
