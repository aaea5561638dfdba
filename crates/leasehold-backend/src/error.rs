/// A store failed (as opposed to contention, which is a value).
///
/// Each variant names the store and says what to do next; the CLI maps the
/// variant to an exit code (`Unavailable` → 69, `Corrupt`/`SchemaTooNew` →
/// 65, `Unsupported`/`InvalidUrl`/`InvalidInput` → 2).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The store cannot be reached or used right now (down, locked for too
    /// long, disk full, read-only, refused filesystem). Nothing was changed.
    #[error("store {store} is unavailable: {reason}. {hint}")]
    Unavailable {
        store: String,
        reason: String,
        hint: String,
    },

    /// The store's data is damaged or not a leasehold store. It is left
    /// exactly as found.
    #[error("store {store} is corrupt or not a leasehold store: {reason}. It was left untouched; {hint}")]
    Corrupt {
        store: String,
        reason: String,
        hint: String,
    },

    /// The store was written by a newer leasehold.
    #[error(
        "store {store} has schema version {found}, newer than this leasehold understands (up to {supported}); upgrade leasehold, or use another --store"
    )]
    SchemaTooNew { store: String, found: i64, supported: i64 },

    /// The backend cannot do this at all.
    #[error("{what} is not supported by the {store} store: {hint}")]
    Unsupported { store: String, what: String, hint: String },

    /// The store URL or its options are malformed.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },

    /// A parameter lies outside its limit (`crate::limits`); refused before
    /// anything was written.
    #[error("{0}; nothing was changed")]
    InvalidInput(#[from] crate::limits::OutOfRange),
}
