//! What can go wrong in a store, typed once.
//!
//! Every failure carries an [`ErrorKind`] — the one thing callers decide
//! on: the CLI derives its exit code from it (in one place,
//! `leasehold-cli/src/exit_codes.rs`), a Python binding its exception
//! class, a worker whether to retry — together with the store it concerns,
//! what happened, what to do next in the library's terms, and the
//! underlying error as its [`std::error::Error::source`]. Where the next
//! step is an option of the caller's (another store, allowing a network
//! filesystem), it is a [`Remedy`], which each front end words its own way
//! (the CLI as a flag).

use std::fmt;

/// The kind of a failure (or of a refusal, where a front end turns one into
/// an error: held, lost, stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another holder has the lease or lock.
    Held,
    /// The grant or claim is gone: released, expired, taken over, or not
    /// the caller's.
    Lost,
    /// A fencing token was refused: a newer one has written.
    Stale,
    /// The store is locked by another writer for longer than the caller
    /// waits; nothing was changed — retry.
    Busy,
    /// The store cannot be used right now: down, unreachable, a connection
    /// lost (the outcome of a write then unknown, never reported as done).
    Unavailable,
    /// The store's data is damaged, not a leasehold store, or written by a
    /// newer leasehold: left exactly as found.
    Corrupt,
    /// The disk is full; nothing was changed.
    DiskFull,
    /// The store (or its filesystem) is read-only; nothing was changed.
    ReadOnly,
    /// Permission denied by the operating system.
    Permission,
    /// The server refused the credentials or certificates, or the
    /// certificates could not be verified.
    Auth,
    /// This store (or this build) cannot do it at all.
    Unsupported,
    /// A malformed URL, a parameter out of its limit, a file named in a URL
    /// that cannot be read: refused before anything was written.
    InvalidInput,
    /// Something outside the store failed: an I/O error on a local file, a
    /// helper process.
    Failed,
}

impl ErrorKind {
    /// A word for messages and logs (`unavailable`, `disk full`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Held => "held",
            ErrorKind::Lost => "lost",
            ErrorKind::Stale => "stale",
            ErrorKind::Busy => "busy",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::DiskFull => "disk full",
            ErrorKind::ReadOnly => "read-only",
            ErrorKind::Permission => "permission denied",
            ErrorKind::Auth => "authentication failed",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Failed => "failed",
        }
    }

    /// The error class the language packages raise for this kind — the
    /// Python package's exceptions and the Node.js package's errors share
    /// these names (`pyleasehold.StoreUnavailable`, `leasehold.StoreUnavailable`).
    #[must_use]
    pub fn class_name(self) -> &'static str {
        match self {
            ErrorKind::Held => "Held",
            ErrorKind::Lost => "LeaseLost",
            ErrorKind::Stale => "StaleToken",
            ErrorKind::Busy => "StoreBusy",
            ErrorKind::Unavailable => "StoreUnavailable",
            ErrorKind::Corrupt => "BadData",
            ErrorKind::DiskFull => "DiskFull",
            ErrorKind::ReadOnly => "ReadOnly",
            ErrorKind::Permission => "PermissionDenied",
            ErrorKind::Auth => "AuthFailed",
            ErrorKind::Unsupported => "Unsupported",
            ErrorKind::InvalidInput => "InvalidInput",
            ErrorKind::Failed => "Failed",
        }
    }

    /// Whether the same call may succeed later unchanged (the store may come
    /// back, the lock be let go): busy and unavailable.
    #[must_use]
    pub fn is_transient(self) -> bool {
        matches!(self, ErrorKind::Busy | ErrorKind::Unavailable)
    }

    /// Whether the store cannot be used right now — for a reason that
    /// passes or that an operator fixes (a full disk, a read-only mount,
    /// permissions, credentials) — with nothing changed: a long-running
    /// worker waits and tries again, a one-shot command reports it (the
    /// CLI's exit 69).
    #[must_use]
    pub fn is_store_unusable(self) -> bool {
        matches!(
            self,
            ErrorKind::Busy
                | ErrorKind::Unavailable
                | ErrorKind::DiskFull
                | ErrorKind::ReadOnly
                | ErrorKind::Permission
                | ErrorKind::Auth
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A next step that is an option of the caller's: each front end says it
/// in its own terms (the library names the option, the CLI the flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// Use another store (another path, URL or cluster).
    AnotherStore,
    /// Allow a store or lock on a network filesystem, accepting the risk.
    AllowNetworkFs,
    /// Use fewer connections at once.
    FewerConnections,
}

impl Remedy {
    /// The remedy in the library's terms.
    #[must_use]
    pub fn library_words(self) -> &'static str {
        match self {
            Remedy::AnotherStore => "open another store",
            Remedy::AllowNetworkFs => {
                "allow network filesystems (StoreOptions::allow_network_fs, LockOptions::allow_network_fs) if you accept the risk"
            }
            Remedy::FewerConnections => "use fewer connections at once",
        }
    }
}

/// How a message reads; the kind decides the exit code, the form only the
/// words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `store S is unavailable: REASON. HINT`
    Unavailable,
    /// `store S is corrupt or not a leasehold store: REASON. It was left untouched; HINT`
    Corrupt,
    /// `store S has schema version N, newer than … (up to M); HINT`
    TooNew,
    /// `WHAT is not supported by the S store: HINT`
    Unsupported,
    /// `invalid store URL "U": REASON`
    Url,
    /// `REASON; nothing was changed` (a limit, or a plain statement)
    Plain,
    /// As `Plain`: a store no longer at its path
    /// ([`BackendError::store_replaced`]).
    Replaced,
}

/// What to do about a name's token counter below a token its history
/// records granted (a damaged store: SQLite and PostgreSQL say it alike).
pub const DAMAGED_COUNTER_HINT: &str = "restore the store from a backup (README.md \"Restoring a store\"), or raise every counter above the tokens it issued with `leasehold migrate --bump-tokens N`";

/// What is wrong with the token counter of `name` — `counted` (`None`:
/// missing) below `granted`, the newest token its history records granted
/// (one wording, for every store that keeps both).
#[must_use]
pub fn damaged_counter(name: &str, counted: Option<i64>, granted: i64) -> String {
    match counted {
        None => format!(
            "the token counter of {name} is missing (its lease_name row lost or its key damaged), but its history records token {granted} granted"
        ),
        Some(t) => format!("the token counter of {name} says {t}, but its history records token {granted} granted"),
    }
}

/// What to do when a store's file was deleted or replaced under a process
/// that used it (one wording, for [`BackendError::store_replaced`] and
/// [`LostReason::StoreReplaced`](crate::LostReason::StoreReplaced)).
pub const STORE_REPLACED_HINT: &str = "put the store's file back if it was removed by mistake; if the store now at the path is to be used, first run `leasehold migrate --bump-tokens N` on it (README.md \"Restoring a store\"), since tokens the old store issued may be in sinks";

/// Whether an I/O error is a read, write or connect that ran out of its
/// time: a socket timeout reads `EAGAIN` ("Resource temporarily
/// unavailable") on Linux, `ETIMEDOUT` for a connect.
#[must_use]
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// `timed out after N s` (or ms): what every network store says of a
/// request that got no answer in its time, in place of the operating
/// system's words for it.
#[must_use]
pub fn timed_out(after: std::time::Duration) -> String {
    if after.subsec_millis() == 0 && after.as_secs() > 0 {
        format!("timed out after {} s", after.as_secs())
    } else {
        format!("timed out after {} ms", after.as_millis())
    }
}

/// A store failed (as opposed to contention, which is a value). See the
/// module docs.
#[derive(Debug)]
pub struct BackendError {
    kind: ErrorKind,
    form: Form,
    store: String,
    reason: String,
    hint: String,
    remedy: Option<Remedy>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl BackendError {
    /// A failure of `kind` concerning `store`: `reason` says what happened,
    /// [`BackendError::hint`] what to do.
    #[must_use]
    pub fn new(kind: ErrorKind, store: impl Into<String>, reason: impl Into<String>) -> Self {
        let form = match kind {
            ErrorKind::Corrupt => Form::Corrupt,
            ErrorKind::Unsupported => Form::Unsupported,
            ErrorKind::InvalidInput | ErrorKind::Held | ErrorKind::Lost | ErrorKind::Stale | ErrorKind::Failed => {
                Form::Plain
            }
            ErrorKind::Busy
            | ErrorKind::Unavailable
            | ErrorKind::DiskFull
            | ErrorKind::ReadOnly
            | ErrorKind::Permission
            | ErrorKind::Auth => Form::Unavailable,
        };
        Self {
            kind,
            form,
            store: store.into(),
            reason: reason.into(),
            hint: String::new(),
            remedy: None,
            source: None,
        }
    }

    /// A failure of `kind` that concerns something beside the store (a
    /// backup's destination): said plainly — `REASON; nothing was changed.
    /// HINT` — where [`BackendError::new`] would say the store is
    /// unavailable. Its kind still decides (a full disk is
    /// [`ErrorKind::DiskFull`]).
    #[must_use]
    pub fn plain(kind: ErrorKind, store: impl Into<String>, reason: impl Into<String>) -> Self {
        let mut e = Self::new(kind, store, reason);
        e.form = Form::Plain;
        e
    }

    /// The store was written by a newer leasehold (kind [`ErrorKind::Corrupt`]:
    /// its data is not this version's to read).
    #[must_use]
    pub fn schema_too_new(store: impl Into<String>, found: i64, supported: i64) -> Self {
        let mut e = Self::new(
            ErrorKind::Corrupt,
            store,
            format!("has schema version {found}, newer than this leasehold understands (up to {supported})"),
        )
        .hint("upgrade leasehold")
        .remedy(Remedy::AnotherStore);
        e.form = Form::TooNew;
        e
    }

    /// The URL of a store (or one of its options) is malformed: `reason`
    /// says how (a message, or a store's typed reason).
    #[must_use]
    pub fn invalid_url(url: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        let mut e = Self::new(ErrorKind::InvalidInput, url, reason.to_string());
        e.form = Form::Url;
        e
    }

    /// `store` refused a token bump (kind [`ErrorKind::InvalidInput`]): the
    /// refusal says why, as the reason.
    #[must_use]
    pub fn tokens_bump_refused(store: impl Into<String>, refused: crate::TokensBumpRefused) -> Self {
        Self::new(ErrorKind::InvalidInput, store, refused.to_string())
    }

    /// The store this process opened is no longer the one at its path:
    /// its file was deleted or replaced (`what` says which) — kind
    /// [`ErrorKind::Lost`], since every grant and claim the process held
    /// there is gone with it, and retrying cannot bring it back. Said
    /// plainly, with [`STORE_REPLACED_HINT`].
    #[must_use]
    pub fn store_replaced(store: impl Into<String>, what: &str) -> Self {
        let store = store.into();
        let reason = format!(
            "store {store} is no longer the store this process opened: {what}, so the grants and claims this process held in it are lost"
        );
        let mut e = Self::new(ErrorKind::Lost, store, reason).hint(STORE_REPLACED_HINT);
        e.form = Form::Replaced;
        e
    }

    /// Whether this is [`BackendError::store_replaced`]: a long-lived
    /// process (a daemon) stops on it rather than retrying, since the
    /// store it opened will not come back at its path.
    #[must_use]
    pub fn is_store_replaced(&self) -> bool {
        self.form == Form::Replaced
    }

    /// `what` is not supported by `store`.
    #[must_use]
    pub fn unsupported(store: impl Into<String>, what: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, store, what).hint(hint)
    }

    /// What to do next, in the library's terms.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = hint.into();
        self
    }

    /// A next step that is the caller's option (see [`Remedy`]).
    #[must_use]
    pub fn remedy(mut self, remedy: Remedy) -> Self {
        self.remedy = Some(remedy);
        self
    }

    /// The error underneath (a SQLite or PostgreSQL error, an I/O error).
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error underneath ([`BackendError::with_source`]), which the
    /// message already words.
    #[must_use]
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The store (or, for a malformed URL, the URL) it concerns.
    #[must_use]
    pub fn store(&self) -> &str {
        &self.store
    }

    /// What happened.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What to do next, in the library's terms (without the [`Remedy`]).
    #[must_use]
    pub fn hint_text(&self) -> &str {
        &self.hint
    }

    /// The limit a parameter broke, for [`ErrorKind::InvalidInput`] from
    /// [`crate::limits`].
    #[must_use]
    pub fn out_of_range(&self) -> Option<&crate::limits::OutOfRange> {
        self.source.as_deref().and_then(|e| e.downcast_ref())
    }

    #[must_use]
    pub fn remedy_of(&self) -> Option<Remedy> {
        self.remedy
    }

    /// The message with the remedy (if any) in the caller's own words —
    /// what a front end prints instead of [`fmt::Display`]'s library terms.
    #[must_use]
    pub fn message_with(&self, remedy_words: impl Fn(Remedy) -> String) -> String {
        let mut hint = self.hint.clone();
        if let Some(remedy) = self.remedy {
            if !hint.is_empty() {
                hint.push_str(", or ");
            }
            hint.push_str(&remedy_words(remedy));
        }
        let (store, reason) = (&self.store, &self.reason);
        let hint_after = |sep: &str| {
            if hint.is_empty() {
                String::new()
            } else {
                format!("{sep}{hint}")
            }
        };
        match self.form {
            Form::Unavailable => format!("store {store} is unavailable: {reason}.{}", hint_after(" ")),
            Form::Corrupt => format!(
                "store {store} is corrupt or not a leasehold store: {reason}. It was left untouched{}",
                hint_after("; ")
            ),
            Form::TooNew => format!("store {store} {reason}{}", hint_after("; ")),
            Form::Unsupported => format!("{reason} is not supported by the {store} store{}", hint_after(": ")),
            Form::Url => format!("invalid store URL {store:?}: {reason}{}", hint_after("; ")),
            Form::Plain | Form::Replaced => format!("{reason}; nothing was changed{}", hint_after(". ")),
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_with(|r| r.library_words().to_owned()))
    }
}

/// No `source()`: the reason already words the error underneath in the
/// library's terms, and every error prints its cause or chains it, never
/// both (a chain printer would say it twice). [`BackendError::cause`]
/// gives it to a program that inspects it.
impl std::error::Error for BackendError {}

impl From<crate::limits::OutOfRange> for BackendError {
    fn from(e: crate::limits::OutOfRange) -> Self {
        Self::new(ErrorKind::InvalidInput, String::new(), e.to_string()).with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_before_and_remedies_are_the_callers_words() {
        let e = BackendError::new(ErrorKind::DiskFull, "/s.db", "the disk is full").hint("free space");
        assert_eq!(
            e.to_string(),
            "store /s.db is unavailable: the disk is full. free space"
        );
        assert_eq!(e.kind(), ErrorKind::DiskFull);
        let e = BackendError::schema_too_new("/s.db", 9, 3);
        assert_eq!(
            e.to_string(),
            "store /s.db has schema version 9, newer than this leasehold understands (up to 3); upgrade leasehold, or open another store"
        );
        assert_eq!(
            e.message_with(|_| "use another --store".into()),
            "store /s.db has schema version 9, newer than this leasehold understands (up to 3); upgrade leasehold, or use another --store"
        );
        let io = std::io::Error::other("EIO");
        let e = BackendError::new(ErrorKind::Unavailable, "s", "I/O error").with_source(io);
        assert_eq!(e.cause().unwrap().to_string(), "EIO");
        assert!(std::error::Error::source(&e).is_none(), "worded, not chained");
    }
}
