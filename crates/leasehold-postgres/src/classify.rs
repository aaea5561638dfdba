//! What a PostgreSQL failure means for the user: its [`ErrorKind`], what
//! happened and what to do, and whether the same transaction may simply
//! run again.

use leasehold_backend::{BackendError, ErrorKind, Remedy};
use postgres::error::SqlState;

use crate::{PostgresBackend, schema, tls};

impl PostgresBackend {
    fn failure(&self, kind: ErrorKind, reason: String, hint: &str) -> BackendError {
        BackendError::new(kind, &self.display, reason).hint(hint)
    }

    pub(crate) fn ambiguous(&self, e: postgres::Error) -> BackendError {
        self.failure(
            ErrorKind::Unavailable,
            format!(
                "the connection was lost while committing ({}), so the change may or may not have been made",
                detail(&e)
            ),
            "nothing is reported as done; check the state once the server is back, and retry",
        )
        .with_source(e)
    }

    pub(crate) fn corrupt(&self, reason: String) -> BackendError {
        self.failure(
            ErrorKind::Corrupt,
            reason,
            &format!(
                "inspect the tables of schema {} with psql; a row was written by something other than leasehold",
                self.schema
            ),
        )
    }

    /// A store whose schema does not match its version: bad data, never
    /// repaired in place.
    fn damaged(&self, reason: String) -> BackendError {
        self.failure(
            ErrorKind::Corrupt,
            reason,
            &leasehold_backend::migration::damage_hint(&format!("schema {}", self.schema)),
        )
    }

    /// Map a PostgreSQL failure to its kind and what the user must do.
    pub(crate) fn map_error(&self, e: postgres::Error) -> BackendError {
        let (kind, reason, hint) = self.classify(&e);
        let error = if kind == ErrorKind::Corrupt {
            self.damaged(reason)
        } else {
            self.failure(kind, reason, &hint)
        };
        match hint.as_str() {
            FEWER_CONNECTIONS => error.remedy(Remedy::FewerConnections),
            _ => error,
        }
        .with_source(e)
    }

    fn classify(&self, e: &postgres::Error) -> (ErrorKind, String, String) {
        use ErrorKind::{Auth, Busy, Corrupt, Permission, ReadOnly, Unavailable};
        let user = self.config.get_user().unwrap_or("(default)");
        let db = self.config.get_dbname().unwrap_or("(the user's name)");
        let Some(c) = e.code().cloned() else {
            return if let Some((reason, hint)) = tls::failure(e, self.tls.client_cert()) {
                (Auth, reason, hint.to_owned())
            } else if detail(e).contains("password missing") {
                (
                    Auth,
                    format!("the server asks for a password for role {user:?}, and none was given"),
                    "set PGPASSWORD in the environment (or put it in the URL: postgres://USER:PASSWORD@HOST/DB, percent-encoded); see docs/POSTGRES.md".into(),
                )
            } else if connection_lost(e) {
                (
                    Unavailable,
                    format!("cannot reach or talk to the server: {}", detail(e)),
                    "check that PostgreSQL is running and reachable at the URL's host and port (pg_isready -h HOST -p PORT); nothing was changed".into(),
                )
            } else {
                (
                    Unavailable,
                    format!("PostgreSQL client error: {}", detail(e)),
                    "this is a bug in leasehold; please report it".into(),
                )
            };
        };
        if c == SqlState::UNDEFINED_TABLE || c == SqlState::UNDEFINED_COLUMN {
            // Checked at open, so dropped or altered under a running store.
            (Corrupt, format!("its schema is damaged: {}", detail(e)), String::new())
        } else if c == SqlState::INVALID_PASSWORD {
            (
                Auth,
                format!("authentication failed for role {user:?}: {}", detail(e)),
                "check the password (PGPASSWORD, or the URL's) and the user, and pg_hba.conf on the server".into(),
            )
        } else if c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            // pg_hba.conf refused this login, or its method (a client
            // certificate, a password) failed.
            (
                Auth,
                format!("the server refused role {user:?}: {}", detail(e)),
                if self.tls.client_cert() {
                    "with `cert` authentication the certificate's common name (CN) must be the role (or be mapped to it in pg_ident.conf): check the user in the URL and sslcert, and pg_hba.conf on the server"
                } else {
                    "check the user, and pg_hba.conf on the server; if it wants a client certificate, pass sslcert=PATH&sslkey=PATH (with sslmode=verify-full)"
                }
                .into(),
            )
        } else if c == SqlState::INVALID_CATALOG_NAME {
            (
                Unavailable,
                format!("database {db:?} does not exist"),
                format!("create it (createdb -O {user} {db}) or fix the database name in the URL"),
            )
        } else if c == SqlState::INSUFFICIENT_PRIVILEGE {
            (
                Permission,
                format!("permission denied: {}", detail(e)),
                format!(
                    "grant the role what docs/POSTGRES.md lists (e.g. GRANT USAGE, CREATE ON SCHEMA {} TO {user}), or migrate the schema once as its owner",
                    self.schema
                ),
            )
        } else if c == SqlState::LOCK_NOT_AVAILABLE {
            (
                Busy,
                format!(
                    "a lock was held by another session for longer than {:?}",
                    self.options.lock_timeout
                ),
                "retry; if it persists, look for a stuck session in pg_stat_activity (state 'idle in transaction')"
                    .into(),
            )
        } else if c == SqlState::TOO_MANY_CONNECTIONS {
            (
                Unavailable,
                "the server has no free connection slots".into(),
                FEWER_CONNECTIONS.into(),
            )
        } else if c == SqlState::READ_ONLY_SQL_TRANSACTION {
            (
                ReadOnly,
                "the server is read-only (a standby, or default_transaction_read_only)".into(),
                "point the URL at the primary (target_session_attrs=read-write with several hosts)".into(),
            )
        } else if connection_lost(e) {
            (
                Unavailable,
                format!("the connection was lost: {}", detail(e)),
                "the server is restarting or was stopped; retry when it is back (nothing was changed)".into(),
            )
        } else {
            (
                Unavailable,
                format!("PostgreSQL error: {}", detail(e)),
                "retry; if it persists, check the server's log".into(),
            )
        }
    }

    pub(crate) fn map_schema_error(&self, e: schema::Error) -> BackendError {
        match e {
            schema::Error::Pg(e) => self.map_error(e),
            schema::Error::TooNew(found) => BackendError::schema_too_new(&self.display, found, schema::VERSION),
            schema::Error::Foreign(reason) => self.failure(
                ErrorKind::Corrupt,
                reason,
                "choose a schema of its own for leasehold with ?schema=NAME in the URL",
            ),
            schema::Error::Damaged(reason) => self.damaged(reason),
        }
    }
}

/// The hint for a server without free connection slots, whose remedy is
/// the caller's (fewer connections at once).
const FEWER_CONNECTIONS: &str = "raise max_connections, or use a connection pooler";

/// The error with what PostgreSQL or the OS said (the client's own
/// `Display` stops at "db error" or "error connecting to server").
pub(crate) fn detail(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_owned();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Errors after which the same transaction may simply be run again.
pub(crate) fn retryable(e: &postgres::Error) -> bool {
    connection_lost(e)
        || e.code()
            .is_some_and(|c| *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE)
}

/// The connection is gone (closed, reset, or the server shutting down).
pub(crate) fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => std::error::Error::source(e).is_some_and(<dyn std::error::Error>::is::<std::io::Error>),
        Some(c) => {
            *c == SqlState::ADMIN_SHUTDOWN || *c == SqlState::CRASH_SHUTDOWN || *c == SqlState::CANNOT_CONNECT_NOW
        }
    }
}
