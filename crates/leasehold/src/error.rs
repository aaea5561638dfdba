use leasehold_backend::BackendError;

/// What can go wrong in the library (contention is a value, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed; see [`BackendError`] for the kinds.
    #[error(transparent)]
    Store(#[from] BackendError),

    /// A process a grant was to be bound to cannot be read.
    #[error("{0}; a grant can only be bound to a live process whose identity is readable in /proc")]
    Process(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
