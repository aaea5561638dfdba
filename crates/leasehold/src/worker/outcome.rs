//! How a task ended for a worker: the facts, and the one wording of each
//! outcome that every front end (`leasehold work`'s lines, a schedule's
//! history) and the task's recorded error use.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::{ClaimLost, Loss, format_duration};

/// When a task's claim was found lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostWhen {
    /// Before the job started: the claim's trust window had closed by the
    /// time the store answered (it answered late, or this process did not
    /// run meanwhile); nothing ran.
    Starting(Loss<ClaimLost>),
    /// While the job ran (the keeper's word); a command was stopped.
    Running(Loss<ClaimLost>),
    /// Just as the job finished: its report would be refused, so none was
    /// sent.
    Finishing(Loss<ClaimLost>),
    /// The store refused the report (done or fail).
    Reporting(ClaimLost),
    /// The store refused handing the claim back at shutdown.
    HandingBack(ClaimLost),
}

impl fmt::Display for LostWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostWhen::Starting(loss) => write!(
                f,
                "the claim was lost before the command could start ({loss}); it was not started"
            ),
            LostWhen::Running(loss) => write!(f, "the claim was lost ({loss}); the command was stopped"),
            LostWhen::Finishing(_) => f.write_str("the claim was lost as the command finished"),
            LostWhen::HandingBack(_) => f.write_str("the claim was lost while shutting down"),
            LostWhen::Reporting(ClaimLost::Deleted) => {
                f.write_str("the task was deleted while it ran; its report was dropped")
            }
            LostWhen::Reporting(ClaimLost::Expired) => {
                f.write_str("the claim expired before the report; the report was refused")
            }
            LostWhen::Reporting(ClaimLost::Taken) => f.write_str(
                "the claim was ended by someone else (done, failed or handed back with its token) before the report; the report was refused",
            ),
        }
    }
}

/// Why a task's job failed: what the task records as its error (`Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskFailure {
    /// The command exited with `code` (128+N for signal N); `stderr_tail`
    /// is the end of what it wrote to stderr, trimmed.
    Exited { code: u8, stderr_tail: String },
    /// The command could not be started: the shell's code (127 not found,
    /// 126 otherwise) and why.
    CouldNotStart { code: u8, message: String },
    /// The command wrote nothing for this long and was stopped.
    Stalled(Duration),
    /// The guard process died; the command was killed.
    GuardDied,
    /// A handler returned this error (with its causes, `: `-joined).
    Handler(String),
    /// A handler panicked with this message.
    Panicked(String),
}

impl TaskFailure {
    /// A handler's error, with every cause in its chain.
    #[must_use]
    pub fn handler(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut said = error.to_string();
        let mut cause = error.source();
        while let Some(c) = cause {
            said = format!("{said}: {c}");
            cause = c.source();
        }
        TaskFailure::Handler(said)
    }
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskFailure::Exited { code, stderr_tail } if stderr_tail.is_empty() => write!(f, "exit {code}"),
            TaskFailure::Exited { code, stderr_tail } => write!(f, "exit {code}: {stderr_tail}"),
            TaskFailure::CouldNotStart { code, message } => write!(f, "exit {code}: {message}"),
            TaskFailure::Stalled(limit) => write!(f, "stalled for {}", format_duration(*limit)),
            TaskFailure::GuardDied => f.write_str("the guard process died; the command was killed"),
            TaskFailure::Handler(error) => f.write_str(error),
            TaskFailure::Panicked(what) => write!(f, "the handler panicked: {what}"),
        }
    }
}

/// How a task ended for this worker. [`Outcome::kind`] is its label and
/// `Display` its detail (empty when there is nothing to add).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Reported done. `result_cut`: the command's stdout was longer than
    /// this many bytes; the result keeps that many, as a string.
    Done { result_cut: Option<usize> },
    /// Reported failed; retried at `retry_at`.
    Failed { error: TaskFailure, retry_at: SystemTime },
    /// Reported failed with no attempts left.
    Dead { error: TaskFailure },
    /// The claim was lost; the task comes back by expiry (or is gone).
    Lost(LostWhen),
    /// Handed back at shutdown, without charging the attempt.
    HandedBack,
}

impl Outcome {
    /// One word (or two) for the outcome: `done`, `failed`, `dead`,
    /// `lost`, `handed back`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Done { .. } => "done",
            Outcome::Failed { .. } => "failed",
            Outcome::Dead { .. } => "dead",
            Outcome::Lost(_) => "lost",
            Outcome::HandedBack => "handed back",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done { result_cut: None } => Ok(()),
            Outcome::Done {
                result_cut: Some(limit),
            } => write!(
                f,
                "stdout was longer than the result limit of {limit} bytes; the result keeps the first {limit} as a string"
            ),
            Outcome::Failed { error, retry_at } => {
                write!(f, "{error} (retry at {})", crate::json::rfc3339(*retry_at))
            }
            Outcome::Dead { error } => write!(f, "{error} (no attempts left)"),
            Outcome::Lost(when) => when.fmt(f),
            Outcome::HandedBack => f.write_str("work is shutting down"),
        }
    }
}
