//! How a run under a lease ended: the facts, and the one wording of each
//! outcome. Front ends (`leasehold run`, Python's `store.run`, a schedule)
//! map an outcome to an exit code, an exception or a JSON document; none
//! words it again. The table of those mappings is in docs/ARCHITECTURE.md
//! ("Outcomes").

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::Finished;
use crate::{Error, ErrorKind, Grant, Held, LeaseName, Loss, Token, format_duration};

/// What [`run`](super::run) did.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "returned once per run")]
pub enum RunOutcome {
    /// The lease is held by others; nothing ran. (Also a wait ended by
    /// [`LeaseRun::cancel`](super::LeaseRun::cancel).)
    Held(Held),
    /// The lease was granted: what became of the command.
    Ran(Ran),
}

/// A run under a granted lease.
#[derive(Debug)]
pub struct Ran {
    pub grant: Grant,
    /// The command's own exit code (128+N for signal N) when it ran to its
    /// own end; otherwise why it did not.
    pub ended: std::result::Result<u8, RunError>,
    /// What the guard reported, with the output collected under
    /// [`Output::Collect`](super::Output::Collect) (empty when the command
    /// never started). `ended` is its reading.
    pub finished: Finished,
    /// Releasing the grant failed; it expires by its TTL.
    pub release_error: Option<Error>,
}

/// The warning for a grant whose release failed after a run ([`Ran::release_error`]),
/// with the store's error as the front end words it: the one wording of it.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations, reason = "a wording, made and printed at once")]
pub struct ReleaseFailed<'a> {
    pub name: &'a LeaseName,
    pub token: Token,
    pub error: &'a dyn fmt::Display,
}

impl fmt::Display for ReleaseFailed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not release {} (token {}): {}; it expires by its TTL",
            self.name, self.token, self.error
        )
    }
}

/// Why a command under a lease did not run to its own end. `Display` is
/// the one wording; the fields are the facts a front end may show apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The grant could no longer be trusted by the time the store answered
    /// (its trust window had closed: the store answered late, or this
    /// process did not run meanwhile), so the command was not started; the
    /// grant was released.
    LostBeforeStart { name: LeaseName, token: Token, loss: Loss },
    /// The lease was granted `late` after [`LeaseRun::start_by`]
    /// (`leasehold cron`'s `--deadline`), so the command was not started;
    /// the grant was released.
    ///
    /// [`LeaseRun::start_by`]: super::LeaseRun::start_by
    TooLate { name: LeaseName, late: Duration },
    /// The grant was lost while the command ran; the command was stopped
    /// before the lease could pass on.
    Lost {
        name: LeaseName,
        token: Token,
        loss: Loss,
        grace: Duration,
    },
    /// The command wrote nothing to stdout or stderr (and did not touch
    /// `progress_file`) for `limit`, so it was stopped. The lease was not
    /// lost.
    Stalled {
        limit: Duration,
        progress_file: Option<PathBuf>,
        grace: Duration,
    },
    /// The caller stopped the command ([`Stop::Shutdown`](super::Stop::Shutdown):
    /// a cancel after the lease was granted, a `KeyboardInterrupt`).
    Interrupted { grace: Duration },
    /// The command ran past a host's timeout ([`run_hosted`](super::run_hosted):
    /// `store.run`'s `timeout`), so it was stopped as a lost lease stops
    /// one; the lease was released once every process of it was gone.
    TimedOut {
        /// The command's program, as given.
        program: String,
        name: LeaseName,
        limit: Duration,
        grace: Duration,
    },
    /// The command could not be started: `code` is the shell's (127 not
    /// found, 126 otherwise), `message` the reason.
    CouldNotStart { code: u8, message: String },
    /// The guard process died. `tree_stopped`: this process had adopted
    /// its orphans and stopped the command's whole tree (the lease was
    /// then released); otherwise the command's process group was killed,
    /// but what had left it may run on, so the lease was not released: it
    /// was kept, unrenewed, until the store expired it.
    GuardDied { name: LeaseName, tree_stopped: bool },
}

impl RunError {
    /// The kind of failure, as the library classifies every error: a lost
    /// grant is [`ErrorKind::Lost`]; the rest are [`ErrorKind::Failed`].
    /// (A front end that tells a stall or an interrupt apart matches the
    /// variant.)
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            RunError::LostBeforeStart { .. } | RunError::Lost { .. } => ErrorKind::Lost,
            RunError::Stalled { .. }
            | RunError::Interrupted { .. }
            | RunError::TimedOut { .. }
            | RunError::CouldNotStart { .. }
            | RunError::TooLate { .. }
            | RunError::GuardDied { .. } => ErrorKind::Failed,
        }
    }

    /// The name of the error class a front end raises for it (Python's
    /// exceptions, Node.js's errors): its kind's
    /// ([`ErrorKind::class_name`]), but for the outcomes that have a class
    /// of their own — a stall (`Stalled`) and a timeout (`RunTimeout`),
    /// both a `Failed`. (An interrupt is the host's own: Python raises
    /// `KeyboardInterrupt`, Node.js the `AbortSignal`'s reason.)
    #[must_use]
    pub fn class_name(&self) -> &'static str {
        match self {
            RunError::Stalled { .. } => "Stalled",
            RunError::TimedOut { .. } => "RunTimeout",
            _ => self.kind().class_name(),
        }
    }

    /// Whether leasehold stopped a command that had started (so its work
    /// may be incomplete, and running it again is the remedy): a loss, a
    /// stall, an interrupt or a timeout.
    #[must_use]
    pub fn stopped_it(&self) -> bool {
        matches!(
            self,
            RunError::Lost { .. } | RunError::Stalled { .. } | RunError::Interrupted { .. } | RunError::TimedOut { .. }
        )
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stopped = |f: &mut fmt::Formatter<'_>, grace: &Duration| {
            write!(
                f,
                ". The command was stopped (SIGTERM, then SIGKILL after {}); its work may be incomplete — the next holder gets a new token",
                format_duration(*grace)
            )
        };
        match self {
            RunError::LostBeforeStart { name, token, loss } => write!(
                f,
                "lost the lease {name} (token {token}) before the command could start: {loss}. The command was not started; the next holder gets a new token"
            ),
            RunError::TooLate { name, late } => write!(
                f,
                "the lease {name} was granted {} after the command had to start by; the command was not started and the lease was released",
                format_duration(*late)
            ),
            RunError::Lost {
                name,
                token,
                loss,
                grace,
            } => {
                write!(f, "lost the lease {name} (token {token}) while the command ran: {loss}")?;
                stopped(f, grace)
            }
            RunError::Stalled {
                limit,
                progress_file,
                grace,
            } => {
                f.write_str("the command stalled: it wrote nothing to stdout or stderr")?;
                if let Some(path) = progress_file {
                    write!(f, " and did not touch {}", path.display())?;
                }
                write!(f, " for {}", format_duration(*limit))?;
                stopped(f, grace)
            }
            RunError::Interrupted { grace } => {
                f.write_str("run was asked to shut down")?;
                stopped(f, grace)
            }
            RunError::TimedOut {
                program,
                name,
                limit,
                grace,
            } => write!(
                f,
                "{program} ran past its timeout of {}: it was stopped (SIGTERM, then SIGKILL after {}) and the lease \
                 {name} released once the command and every process it started were gone; its work may be incomplete",
                format_duration(*limit),
                format_duration(*grace),
            ),
            RunError::CouldNotStart { message, .. } => f.write_str(message),
            RunError::GuardDied {
                name,
                tree_stopped: true,
            } => write!(
                f,
                "the guard process of {name} died unexpectedly; the command's whole tree was stopped, what had left its process group too"
            ),
            RunError::GuardDied {
                name,
                tree_stopped: false,
            } => write!(
                f,
                "the guard process of {name} died unexpectedly; the command's process group was killed, but processes that had left it may still run, so the lease was not released: it was left to expire by its TTL, which it now has"
            ),
        }
    }
}

impl std::error::Error for RunError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LostReason;

    fn name() -> LeaseName {
        LeaseName::new("nightly").unwrap()
    }

    /// Each wording names what happened, to what, and what follows; a
    /// front end prints it as it is.
    #[test]
    fn each_outcome_says_what_happened_to_what() {
        let grace = Duration::from_secs(5);
        let cases = [
            (
                RunError::LostBeforeStart {
                    name: name(),
                    token: Token(7),
                    loss: Loss::Refused(LostReason::Expired),
                },
                "lost the lease nightly (token 7) before the command could start: the store refused a renewal: its TTL ran out. The command was not started; the next holder gets a new token",
            ),
            (
                RunError::Lost {
                    name: name(),
                    token: Token(7),
                    loss: Loss::Refused(LostReason::Gone),
                    grace,
                },
                "lost the lease nightly (token 7) while the command ran: the store refused a renewal: ",
            ),
            (
                RunError::Stalled {
                    limit: Duration::from_secs(60),
                    progress_file: Some("/tmp/p".into()),
                    grace,
                },
                "the command stalled: it wrote nothing to stdout or stderr and did not touch /tmp/p for 1m. The command was stopped (SIGTERM, then SIGKILL after 5s)",
            ),
            (
                RunError::Interrupted { grace },
                "run was asked to shut down. The command was stopped",
            ),
            (
                RunError::TimedOut {
                    program: "./job.sh".into(),
                    name: name(),
                    limit: Duration::from_millis(1500),
                    grace,
                },
                "./job.sh ran past its timeout of 1s 500ms: it was stopped (SIGTERM, then SIGKILL after 5s) and the lease nightly released once",
            ),
            (
                RunError::CouldNotStart {
                    code: 127,
                    message: "cannot run nope: not found".into(),
                },
                "cannot run nope: not found",
            ),
            (
                RunError::GuardDied {
                    name: name(),
                    tree_stopped: true,
                },
                "the guard process of nightly died unexpectedly; the command's whole tree was stopped",
            ),
            (
                RunError::GuardDied {
                    name: name(),
                    tree_stopped: false,
                },
                "the guard process of nightly died unexpectedly; the command's process group was killed, but processes that had left it may still run, so the lease was not released",
            ),
        ];
        for (error, start) in cases {
            let said = error.to_string();
            assert!(said.starts_with(start), "{said:?} does not start with {start:?}");
            assert_eq!(
                error.kind() == ErrorKind::Lost,
                said.starts_with("lost the lease"),
                "{said}"
            );
            assert_eq!(
                error.stopped_it(),
                said.contains("The command was stopped") || said.contains("it was stopped"),
                "{said}"
            );
        }
    }
}
