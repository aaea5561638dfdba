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
    Process(String),

    /// A duration the library itself uses (a wait, the poll interval) is
    /// outside its limit (`leasehold::limits`); refused before anything
    /// was done. Durations passed on to the store are checked there
    /// (a [`BackendError`] of kind [`ErrorKind::InvalidInput`]).
    #[error("{0}; nothing was changed")]
    InvalidInput(#[from] leasehold_backend::limits::OutOfRange),

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
            Error::Process(_) | Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::Supervise(e) => e.kind(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
