//! Exit codes: the contract scripts rely on (README, "Exit codes") — and
//! the one place that derives them from the kind of an error.

use std::fmt;

use leasehold::ErrorKind;

/// What an error concerns: the same kind means another exit code for a
/// store than for a local file (a full disk under the store is "store
/// unavailable", 69; under a state file a plain failure, 1 — the store is
/// not involved, so 69 would mislead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// The store (`--store`).
    Store,
    /// A state file, its lock or fence record (`write`, `update`).
    File,
    /// A lock file (`lock`).
    Lock,
}

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

    /// The exit code of an error of `kind` about `subject`.
    #[must_use]
    pub fn of(kind: ErrorKind, subject: Subject) -> Self {
        match (kind, subject) {
            (ErrorKind::Held, _) => ExitCode::Held,
            (ErrorKind::Lost, _) => ExitCode::Lost,
            (ErrorKind::Stale, _) => ExitCode::StaleToken,
            (ErrorKind::Corrupt, _) | (ErrorKind::InvalidInput, Subject::File) => ExitCode::DataError,
            (ErrorKind::Busy | ErrorKind::Unavailable | ErrorKind::Auth, _)
            | (ErrorKind::DiskFull | ErrorKind::ReadOnly | ErrorKind::Permission, Subject::Store) => {
                ExitCode::Unavailable
            }
            (ErrorKind::InvalidInput | ErrorKind::Unsupported, _) => ExitCode::Usage,
            _ => ExitCode::Failure,
        }
    }
}

/// The exit code of a process ended by signal `signal`: 128 + its number,
/// as shells report death by a signal (`leasehold::supervise::child`
/// reports a command's the same way).
#[must_use]
pub fn by_signal(signal: i32) -> u8 {
    u8::try_from(signal).map_or(u8::MAX, |n| 128u8.saturating_add(n))
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}
