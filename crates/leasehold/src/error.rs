use leasehold_backend::{BackendError, ErrorKind};

/// What can go wrong in the library (contention is a value, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed; see [`BackendError`] for the kinds.
    #[error(transparent)]
    Store(#[from] BackendError),

    /// A process a grant was to be bound to cannot be read.
    #[error(
        "{0}; a grant can only be bound to a live process whose identity is readable (Linux: in /proc; macOS: through proc_pidinfo)"
    )]
    Process(std::io::Error),

    /// A candidate id already leads in a process that may still run
    /// ([`Store::campaign`](crate::Store::campaign)).
    #[error(transparent)]
    CandidateInUse(Box<crate::leadership::CandidateInUse>),

    /// A thread of the library panicked: a bug in leasehold.
    #[error("a {what} thread panicked ({message}); this is a bug in leasehold: please report it")]
    Panicked { what: &'static str, message: String },

    /// A duration the library itself uses (a wait, the poll interval) is
    /// outside its limit (`leasehold::limits`); refused before anything
    /// was done. Durations passed on to the store are checked there
    /// (a [`BackendError`] of kind [`ErrorKind::InvalidInput`]).
    #[error("{0}; nothing was changed")]
    InvalidInput(leasehold_backend::limits::OutOfRange),

    /// A wait for a name whose grant can end only after this process has
    /// ([`Vantage::encloses_this_process`](crate::identity::Vantage::encloses_this_process)):
    /// it would never end. Refused before queueing.
    #[error(
        "{name} is held by pid {pid} ({cmdline}) for a command this process is part of: it is released only after this process ends, so waiting for it would never end; nothing was changed. Inside `leasehold run`, the lease is already held for you (LEASEHOLD_NAME, LEASEHOLD_TOKEN); use another name for another lease"
    )]
    WaitsForItself {
        name: leasehold_backend::LeaseName,
        pid: u32,
        cmdline: String,
    },

    /// A supervised command's guard could not be found, started or told.
    #[error(transparent)]
    Supervise(#[from] crate::supervise::SuperviseError),
}

impl Error {
    /// What kind of failure this is (see [`ErrorKind`]).
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store(e) => e.kind(),
            Error::Process(_) | Error::InvalidInput(_) | Error::WaitsForItself { .. } => ErrorKind::InvalidInput,
            Error::Panicked { .. } => ErrorKind::Failed,
            Error::CandidateInUse { .. } => ErrorKind::Held,
            Error::Supervise(e) => e.kind(),
        }
    }
}

// Not `#[from]`, which would also make the range its source: the message
// says it already, and every error prints its cause or chains it, not both.
impl From<leasehold_backend::limits::OutOfRange> for Error {
    fn from(e: leasehold_backend::limits::OutOfRange) -> Self {
        Error::InvalidInput(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::io;

    use leasehold_backend::limits;
    use leasehold_host::symlinks::DirError;

    use super::*;
    use crate::files::FileError;
    use crate::lock::LockError;

    /// Every error says its cause once: in its message or as its
    /// `source()`, never both (a printer of the chain would repeat it, and
    /// the CLI no longer hides repeats) — and never neither.
    #[test]
    fn errors_print_their_cause_or_chain_it_never_both() {
        const CAUSE: &str = "the-cause-itself";
        let io = || io::Error::other(CAUSE);
        let path = || std::path::PathBuf::from("/f");
        let out_of_range = || limits::WAIT.check(std::time::Duration::MAX).unwrap_err();
        let errors: Vec<(&str, Box<dyn std::error::Error>)> = vec![
            (
                "FileError::Io",
                Box::new(FileError::Io {
                    path: path(),
                    op: "read it".into(),
                    error: io(),
                }),
            ),
            (
                "FileError::Unconfirmed",
                Box::new(FileError::Unconfirmed {
                    path: path(),
                    error: io(),
                }),
            ),
            (
                "LockError::Io",
                Box::new(LockError::Io {
                    op: "open",
                    path: path(),
                    error: io(),
                }),
            ),
            ("LockError::InvalidInput", Box::new(LockError::from(out_of_range()))),
            (
                "DirError::Create",
                Box::new(DirError::Create {
                    path: path(),
                    error: io(),
                }),
            ),
            (
                "DirError::Io",
                Box::new(DirError::Io {
                    path: path(),
                    error: io(),
                }),
            ),
            ("Error::Process", Box::new(Error::Process(io()))),
            ("Error::InvalidInput", Box::new(Error::from(out_of_range()))),
            (
                "BackendError",
                Box::new(Error::from(
                    BackendError::new(ErrorKind::Unavailable, "s", format!("I/O error ({})", io())).with_source(io()),
                )),
            ),
        ];
        for (what, e) in errors {
            let cause = if what.ends_with("InvalidInput") {
                out_of_range().to_string()
            } else {
                CAUSE.to_owned()
            };
            let printed = e.to_string().contains(&cause);
            let mut chained = false;
            let mut next = e.source();
            while let Some(c) = next {
                chained |= c.to_string().contains(&cause);
                next = c.source();
            }
            assert!(printed != chained, "{what}: printed {printed}, chained {chained}: {e}");
        }
    }
}
