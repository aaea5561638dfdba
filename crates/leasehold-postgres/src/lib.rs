//! The PostgreSQL store: leases and a task queue shared by many machines.
//!
//! - **Clock**: every expiry is computed and judged on the server's clock
//!   (`clock_timestamp()`), never the client's. This crate's tests shift
//!   it with a `ClockSkew` (feature `test-clock`), sent to the server as
//!   the session setting `leasehold.skew_us` and added there; a build for
//!   use has neither the option nor the addition.
//! - **Tokens** come from `lease_name.last_token` (and `task.token`),
//!   incremented in the same transaction as the grant — not from a
//!   sequence, which is not transactional and can go backwards after a
//!   crash or failover. `synchronous_commit` is on for every session, so a
//!   token is durable (on the primary, and on synchronous standbys if any)
//!   before it is returned.
//! - **Serialization**: every lease operation that may change a name takes a
//!   transaction-scoped advisory lock on it, then row locks; renewals take
//!   the row lock alone (one statement on the happy path). Task claims use
//!   `FOR UPDATE SKIP LOCKED` on a partial index in claim order.
//! - **TLS**: rustls, as `sslmode` / `sslrootcert` ask (see `tls`).
//! - **Connections**: a small pool of lazily opened connections, each a
//!   `Mutex<Client>` with its own prepared-statement cache. A connection
//!   found broken before `COMMIT` was sent is replaced and the transaction
//!   retried (nothing was committed). A connection lost *during* `COMMIT`
//!   leaves the outcome unknown: that is reported as
//!   [`ErrorKind::Unavailable`], never as success (the task queue's
//!   completion re-checks by token first, see `task::complete`).
//! - **One round trip** for the task queue's hot operations (claim,
//!   heartbeat, complete): each is one statement that commits on its own,
//!   without `BEGIN` and `COMMIT` (`PostgresBackend::single`). Such a
//!   statement, once sent, is like a `COMMIT`: a connection lost before
//!   its answer leaves the outcome unknown (unavailable, as above), while
//!   an error the server answers with means nothing was changed (retried
//!   as a transaction is). So that a connection the server dropped while
//!   it sat idle in the pool (a restart) is not taken for that, one idle
//!   for more than a second is checked first (a round trip).
//! - **Waiting**: transactions that may unblock a waiter send
//!   `pg_notify` (delivered on commit); `wait_for_change` wakes on them
//!   through one LISTEN connection per process (see `notify`). Waiters
//!   still re-read the store, and poll when notifications are missed.
//! - **Schema**: created and migrated on open (see `schema`), in the schema
//!   named by the URL parameter `?schema=NAME` (default `leasehold`).

mod lease;
mod notify;
mod register;
mod schema;
mod task;
mod tls;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

#[cfg(feature = "test-clock")]
use leasehold_backend::ClockSkew;
use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Remedy, StoreInfo, TokensBumpParams, TokensBumped, WaitTopic, WaiterEnqueueParams,
    WaiterTicket, Watched,
};
use leasehold_backend::{
    Claim, QueueStats, Task, TaskAdd, TaskAddParams, TaskBackend, TaskClaimParams, TaskCompleteAndClaim,
    TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskIdParams,
    TaskListParams, TaskPurgeParams, TaskRef, TaskRetry, TaskStatsParams, TaskUpdate, WaiterRemoveParams,
};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

pub use register::STORE;
pub use schema::VERSION as SCHEMA_VERSION;
#[doc(hidden)]
pub use schema::objects as schema_objects;

/// The store's "now" in SQL: the server's clock.
#[cfg(not(feature = "test-clock"))]
pub(crate) const NOW: &str = "clock_timestamp()";
/// The store's "now" in SQL: the server's clock plus the test skew.
#[cfg(feature = "test-clock")]
pub(crate) const NOW: &str = "(clock_timestamp() + coalesce(nullif(current_setting('leasehold.skew_us', true), ''), '0')::bigint * interval '1 microsecond')";

/// The schema used when the URL names none.
pub const DEFAULT_SCHEMA: &str = "leasehold";

/// How to open a PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Connections opened at most (lazily). Size it for the concurrency of
    /// one process (`work --concurrency N` needs N + 1).
    pub pool_size: usize,
    /// How long a lock wait may take before the operation fails as
    /// unavailable (PostgreSQL's `lock_timeout`).
    pub lock_timeout: Duration,
    /// Connect timeout, unless the URL sets `connect_timeout`.
    pub connect_timeout: Duration,
    /// Shift of the server's clock as seen by this store, for tests.
    #[cfg(feature = "test-clock")]
    pub skew: ClockSkew,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_size: 9,
            lock_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            #[cfg(feature = "test-clock")]
            skew: ClockSkew::default(),
        }
    }
}

/// Prepared statements by SQL text. The texts are long (a claim's is 2 KiB)
/// and looked up at every statement: hashing them with the standard
/// library's hasher was a sixth of a claim's client-side instructions, so
/// they are hashed a word at a time (the mixing of rustc's own hasher); a
/// collision only costs a comparison.
type Statements = HashMap<String, Statement, BuildHasherDefault<WordHasher>>;

#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(last));
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// One pooled connection and what belongs to it.
#[derive(Default)]
struct Slot {
    client: Option<Client>,
    /// Prepared statements of this connection, by SQL text.
    cache: Statements,
    /// The skew last sent as `leasehold.skew_us`.
    #[cfg(feature = "test-clock")]
    skew_us: Option<i64>,
    /// When the connection last ran an operation.
    used: Option<Instant>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("connected", &self.client.is_some())
            .field("statements", &self.cache.len())
            .finish_non_exhaustive()
    }
}

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PostgresBackend {
    /// The URL without its password, for messages.
    display: String,
    schema: String,
    config: postgres::Config,
    tls: tls::Tls,
    options: PostgresOptions,
    slots: Vec<Mutex<Slot>>,
    next: AtomicUsize,
    /// The LISTEN/NOTIFY channel of this schema.
    channel: String,
    /// Wake-ups for waiters (a listener thread, started on the first wait).
    notifier: Arc<notify::Notifier>,
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.notifier.stop();
    }
}

/// A failure inside an operation, before it is mapped for the user.
#[derive(Debug)]
pub(crate) enum Error {
    Pg(postgres::Error),
    /// A row this code could not have written.
    BadRow(String),
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Self {
        Error::Pg(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// Where an operation's statements run: inside a transaction, or — for an
/// operation that is one write statement — on the session itself, where
/// the statement commits on its own: one round trip instead of three
/// (`BEGIN`, the statement, `COMMIT`).
enum Conn<'a> {
    Tx(postgres::Transaction<'a>),
    Auto(&'a mut Client),
}

/// One operation on a pooled connection, with its statement cache.
pub(crate) struct Db<'a> {
    conn: Conn<'a>,
    cache: &'a mut Statements,
    pub(crate) schema: &'a str,
    channel: &'a str,
    /// On the session itself: whether a statement was sent, after which a
    /// lost connection leaves the outcome unknown.
    sent: bool,
}

impl Db<'_> {
    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let s = match &mut self.conn {
            Conn::Tx(tx) => tx.prepare(sql)?,
            Conn::Auto(client) => client.prepare(sql)?,
        };
        self.cache.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Run `sql` (prepared once per connection) with `f`, on the
    /// transaction or the session.
    fn run<T>(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut dyn GenericClientDyn, &Statement) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let s = self.statement(sql)?;
        let client: &mut dyn GenericClientDyn = match &mut self.conn {
            Conn::Tx(tx) => tx,
            Conn::Auto(client) => {
                self.sent = true;
                *client
            }
        };
        Ok(f(client, &s)?)
    }

    pub(crate) fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.run(sql, |c, s| c.query(s, params))
    }

    pub(crate) fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.run(sql, |c, s| c.query_one(s, params))
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        self.run(sql, |c, s| c.query_opt(s, params))
    }

    pub(crate) fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.run(sql, |c, s| c.execute(s, params))
    }

    /// The channel this store's notifications go to.
    pub(crate) fn channel(&self) -> &str {
        self.channel
    }

    /// Wake the waiters on `what` once this transaction commits (nothing
    /// is sent if it rolls back; repeats within one transaction fold).
    pub(crate) fn notify(&mut self, what: &Watched) -> Result<()> {
        let payload = notify::payload(what);
        let channel = self.channel.to_owned();
        self.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])?;
        Ok(())
    }

    /// The store's now (the server's clock).
    pub(crate) fn now(&mut self) -> Result<SystemTime> {
        Ok(self.query_one(&format!("SELECT {NOW}"), &[])?.get(0))
    }
}

/// The calls `Db` makes, on a transaction or a client alike
/// (`postgres::GenericClient` has generic methods, so it is not
/// dyn-compatible).
trait GenericClientDyn {
    fn query(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Vec<Row>, postgres::Error>;
    fn query_one(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Row, postgres::Error>;
    fn query_opt(
        &mut self,
        s: &Statement,
        p: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error>;
    fn execute(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<u64, postgres::Error>;
}

impl<C: postgres::GenericClient> GenericClientDyn for C {
    fn query(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Vec<Row>, postgres::Error> {
        postgres::GenericClient::query(self, s, p)
    }
    fn query_one(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<Row, postgres::Error> {
        postgres::GenericClient::query_one(self, s, p)
    }
    fn query_opt(
        &mut self,
        s: &Statement,
        p: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<Row>, postgres::Error> {
        postgres::GenericClient::query_opt(self, s, p)
    }
    fn execute(&mut self, s: &Statement, p: &[&(dyn ToSql + Sync)]) -> std::result::Result<u64, postgres::Error> {
        postgres::GenericClient::execute(self, s, p)
    }
}

/// How one attempt at a transaction failed.
enum Failure {
    /// Before `COMMIT`: nothing was changed.
    Op(Error),
    /// `COMMIT` was sent and no answer came: the outcome is unknown.
    Commit(postgres::Error),
}

/// Whether a transaction writes (and how its commit may fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    /// One write statement on the session, committing on its own (and
    /// reads after it): see [`PostgresBackend::single`].
    Single,
}

/// A connection idle for longer than this is checked (one round trip)
/// before a [`Kind::Single`] statement is sent on it: a statement that
/// commits on its own cannot be retried after a lost connection, so a
/// connection the server dropped while it sat in the pool (a restart) is
/// found out first, as `BEGIN` finds it out for a transaction.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How many times a transaction is retried after a broken connection, a
/// deadlock or a serialization failure before the error is reported.
const ATTEMPTS: u32 = 3;

impl PostgresBackend {
    /// Connect to the store at `url` (`postgres://…` or `postgresql://…`,
    /// libpq-style parameters, plus `schema=NAME`), creating or migrating
    /// its schema if needed.
    ///
    /// # Errors
    /// A [`BackendError`] whose [`kind`](BackendError::kind) says what
    /// happened, each with what to do:
    /// - [`ErrorKind::InvalidInput`]: malformed URL, bad schema name, an
    ///   unknown `sslmode`, or root certificates that cannot be read.
    /// - [`ErrorKind::Unavailable`]: unreachable, database missing.
    /// - [`ErrorKind::Auth`] or [`ErrorKind::Permission`]: credentials,
    ///   certificates or privileges refused.
    /// - [`ErrorKind::Corrupt`]: migrated by a newer leasehold, or the
    ///   schema holds tables of something else.
    pub fn open(url: &str, options: PostgresOptions) -> std::result::Result<Self, BackendError> {
        let parsed = parse_url(url)?;
        let parsed_schema = parsed.schema.clone();
        let pool_size = options.pool_size.max(1);
        let backend = Self {
            display: parsed.display,
            schema: parsed.schema,
            config: parsed.config,
            tls: parsed.tls,
            slots: (0..pool_size).map(|_| Mutex::new(Slot::default())).collect(),
            next: AtomicUsize::new(0),
            channel: notify::channel(&parsed_schema),
            notifier: notify::Notifier::new(),
            options,
        };
        let mut slot = backend.slot_at(0);
        let client = backend.connect(&mut slot)?;
        schema::prepare(client, &backend.schema).map_err(|e| backend.map_schema_error(e))?;
        drop(slot);
        Ok(backend)
    }

    /// The PostgreSQL schema holding this store's tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    fn slot_at(&self, i: usize) -> MutexGuard<'_, Slot> {
        // A panic mid-transaction drops the Transaction, which rolls back.
        self.slots[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A free connection slot, or (all busy) wait for one.
    fn slot(&self) -> MutexGuard<'_, Slot> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        for k in 0..n {
            match self.slots[(start + k) % n].try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        self.slot_at(start)
    }

    /// The slot's connection, connecting (and setting the session up) if
    /// needed (with the current test skew sent, under `test-clock`).
    fn connect<'s>(&self, slot: &'s mut Slot) -> std::result::Result<&'s mut Client, BackendError> {
        if slot.client.as_ref().is_some_and(Client::is_closed) {
            slot.client = None;
        }
        if slot.client.is_none() {
            slot.cache.clear();
            #[cfg(feature = "test-clock")]
            {
                slot.skew_us = None;
            }
            let mut client = self.tls.connect(&self.config).map_err(|e| self.map_error(e))?;
            // synchronous_commit on: a token is durable before it is
            // returned, whatever the database's or role's default.
            let setup = format!(
                "SET synchronous_commit = on; SET lock_timeout = {}; \
                 SET idle_in_transaction_session_timeout = '60s'; SET search_path = {}, pg_catalog",
                self.options.lock_timeout.as_millis().max(1),
                quote_ident(&self.schema)
            );
            client.batch_execute(&setup).map_err(|e| self.map_error(e))?;
            slot.client = Some(client);
        }
        #[cfg(feature = "test-clock")]
        {
            let skew = micros(self.options.skew.get());
            let client = slot.client.as_mut().expect("connected above");
            if slot.skew_us != Some(skew) {
                client
                    .execute(
                        "SELECT set_config('leasehold.skew_us', $1, false)",
                        &[&skew.to_string()],
                    )
                    .map_err(|e| self.map_error(e))?;
                slot.skew_us = Some(skew);
            }
        }
        Ok(slot.client.as_mut().expect("connected above"))
    }

    /// Run `f` in one transaction; commit it only if `f` says so.
    ///
    /// A transaction that failed before `COMMIT` was sent changed nothing,
    /// so after a lost connection, a deadlock or a serialization failure it
    /// is simply run again (on a new connection if needed). A failure of
    /// the `COMMIT` of a write leaves the outcome unknown and is never
    /// retried here: it is reported as unavailable.
    fn transact<T>(
        &self,
        kind: Kind,
        mut f: impl FnMut(&mut Db<'_>) -> Result<(T, bool)>,
    ) -> std::result::Result<T, BackendError> {
        let mut attempt = 0;
        // One slot for every attempt: after a server restart the other
        // pooled connections may be just as stale, and rotating through
        // them could use up the attempts without ever reconnecting.
        let mut guard = self.slot();
        loop {
            attempt += 1;
            let slot = &mut *guard;
            if kind == Kind::Single
                && slot.used.is_some_and(|t| t.elapsed() > IDLE_CHECK)
                && let Some(client) = &mut slot.client
                && client.is_valid(self.options.connect_timeout).is_err()
            {
                slot.client = None;
            }
            self.connect(slot)?;
            let outcome = Self::attempt(slot, &self.schema, &self.channel, kind, &mut f);
            slot.used = Some(Instant::now());
            let e = match outcome {
                Ok(value) => return Ok(value),
                Err(Failure::Commit(e)) => {
                    slot.client = None;
                    return Err(self.ambiguous(e));
                }
                Err(Failure::Op(Error::BadRow(reason))) => return Err(self.corrupt(reason)),
                Err(Failure::Op(Error::Pg(e))) => e,
            };
            if connection_lost(&e) {
                slot.client = None;
            }
            if !(retryable(&e) && attempt < ATTEMPTS) {
                return Err(self.map_error(e));
            }
        }
    }

    fn attempt<T>(
        slot: &mut Slot,
        schema: &str,
        channel: &str,
        kind: Kind,
        f: &mut impl FnMut(&mut Db<'_>) -> Result<(T, bool)>,
    ) -> std::result::Result<T, Failure> {
        let client = slot.client.as_mut().expect("connected by the caller");
        if kind == Kind::Single {
            let mut db = Db {
                conn: Conn::Auto(client),
                cache: &mut slot.cache,
                schema,
                channel,
                sent: false,
            };
            return match f(&mut db) {
                Ok((value, commit)) => {
                    debug_assert!(commit, "a single statement commits on its own");
                    Ok(value)
                }
                // No answer from the server once a statement was sent: it
                // may have committed. An error the server sent means it
                // did not.
                Err(Error::Pg(e)) if db.sent && e.as_db_error().is_none() => Err(Failure::Commit(e)),
                Err(e) => Err(Failure::Op(e)),
            };
        }
        let mut builder = client.build_transaction();
        if kind == Kind::Read {
            builder = builder
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true);
        }
        let tx = builder.start().map_err(|e| Failure::Op(Error::Pg(e)))?;
        let mut db = Db {
            conn: Conn::Tx(tx),
            cache: &mut slot.cache,
            schema,
            channel,
            sent: false,
        };
        let (value, commit) = f(&mut db).map_err(Failure::Op)?;
        let Db { conn: Conn::Tx(tx), .. } = db else {
            unreachable!("a transaction was started above")
        };
        match (commit, kind) {
            (true, Kind::Write | Kind::Single) => tx.commit().map_err(Failure::Commit)?,
            (true, Kind::Read) => tx.commit().map_err(|e| Failure::Op(Error::Pg(e)))?,
            (false, _) => tx.rollback().map_err(|e| Failure::Op(Error::Pg(e)))?,
        }
        Ok(value)
    }

    fn write<T>(&self, mut f: impl FnMut(&mut Db<'_>) -> Result<T>) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Write, |db| f(db).map(|v| (v, true)))
    }

    fn read<T>(&self, mut f: impl FnMut(&mut Db<'_>) -> Result<T>) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Read, |db| f(db).map(|v| (v, true)))
    }

    /// Run `f` — one write statement, and only reads after it — on the
    /// session, where the statement commits on its own: one round trip.
    /// A connection lost once the statement was sent leaves the outcome
    /// unknown, reported as unavailable as for a failed `COMMIT`; an error
    /// the server answered with (it rolled the statement back) is retried
    /// as a transaction's would be.
    fn single<T>(&self, mut f: impl FnMut(&mut Db<'_>) -> Result<T>) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Single, |db| f(db).map(|v| (v, true)))
    }

    fn failure(&self, kind: ErrorKind, reason: String, hint: &str) -> BackendError {
        BackendError::new(kind, &self.display, reason).hint(hint)
    }

    fn ambiguous(&self, e: postgres::Error) -> BackendError {
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

    fn corrupt(&self, reason: String) -> BackendError {
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
    fn map_error(&self, e: postgres::Error) -> BackendError {
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

    fn map_schema_error(&self, e: schema::Error) -> BackendError {
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
fn detail(e: &postgres::Error) -> String {
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
fn retryable(e: &postgres::Error) -> bool {
    connection_lost(e)
        || e.code()
            .is_some_and(|c| *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE)
}

/// The connection is gone (closed, reset, or the server shutting down).
fn connection_lost(e: &postgres::Error) -> bool {
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

/// `"name"`, for a schema name already checked by `valid_schema`.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{name}\"")
}

/// A schema name leasehold accepts: a plain lower-case identifier, so it
/// needs no quoting rules and means the same in psql.
fn valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
        && !name.starts_with("pg_")
}

struct ParsedUrl {
    config: postgres::Config,
    tls: tls::Tls,
    schema: String,
    display: String,
}

/// Split `schema=NAME` off the URL's query (leasehold's own parameter) and
/// parse the rest as a libpq URL.
fn parse_url(url: &str) -> std::result::Result<ParsedUrl, BackendError> {
    let invalid = |reason: String| BackendError::invalid_url(redact(url), reason);
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut schema, mut sslmode, mut root_cert, mut cert, mut key) = (None, None, None, None, None);
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", value)) => schema = Some(value.to_owned()),
            // TLS is leasehold's (rustls): these are read here.
            Some(("sslmode", value)) => sslmode = Some(value.to_owned()),
            Some(("sslrootcert", value)) => root_cert = Some(value.to_owned()),
            Some(("sslcert", value)) => cert = Some(value.to_owned()),
            Some(("sslkey", value)) => key = Some(value.to_owned()),
            _ => rest.push(pair),
        }
    }
    let verify = match sslmode.as_deref() {
        None | Some("disable" | "allow" | "prefer") => None,
        Some("require" | "verify-full") => Some(tls::Verify::Full),
        Some("verify-ca") => Some(tls::Verify::Chain),
        Some(other) => {
            return Err(invalid(format!(
                "sslmode={other}: use disable, prefer, require, verify-ca or verify-full"
            )));
        }
    };
    let client = match (cert.as_deref(), key.as_deref()) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => {
            return Err(invalid(
                "sslcert=PATH needs sslkey=PATH too: the certificate's private key (PEM)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "sslkey=PATH needs sslcert=PATH too: the certificate of that key (PEM)".into(),
            ));
        }
    };
    let tls = match verify {
        None if client.is_some() => {
            return Err(invalid(format!(
                "a client certificate (sslcert, sslkey) needs TLS, which {} does not give in leasehold: add sslmode=verify-full (or require, verify-ca)",
                sslmode.map_or_else(|| "a URL without sslmode".to_owned(), |m| format!("sslmode={m}"))
            )));
        }
        None => tls::Tls::Off,
        Some(v) => tls::connector(v, root_cert.as_deref(), client).map_err(&invalid)?,
    };
    let schema = schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
    if !valid_schema(&schema) {
        return Err(invalid(format!(
            "schema {schema:?} is not a plain lower-case identifier (a-z, 0-9, _; not starting with a digit or pg_; at most 63 bytes)"
        )));
    }
    let libpq = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    let mut config = postgres::Config::from_str(&libpq).map_err(|e| invalid(e.to_string()))?;
    // As libpq: the password from the environment when the URL has none
    // (so it need not be in the URL, nor on a command line).
    if config.get_password().is_none()
        && let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty())
    {
        config.password(password.as_encoded_bytes());
    }
    config.ssl_mode(match verify {
        Some(_) => postgres::config::SslMode::Require,
        None => postgres::config::SslMode::Disable,
    });
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PostgresOptions::default().connect_timeout);
    }
    // Notice a dead server or network within seconds, not the kernel's
    // default of hours.
    config.keepalives_idle(Duration::from_secs(10));
    config.tcp_user_timeout(Duration::from_secs(20));
    if config.get_application_name().is_none() {
        config.application_name("leasehold");
    }
    let display = redact(&libpq);
    let display = if schema == DEFAULT_SCHEMA {
        display
    } else {
        format!("{display} (schema {schema})")
    };
    Ok(ParsedUrl {
        config,
        tls,
        schema,
        display,
    })
}

/// The URL with its password replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let redacted = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = tail
        .split('&')
        .map(|p| {
            if p.starts_with("password=") || p.contains("?password=") {
                p.split_once("password=")
                    .map_or(p.to_owned(), |(a, _)| format!("{a}password=***"))
            } else {
                p.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{scheme}://{redacted}{tail}")
}

/// Microseconds of a duration for SQL interval arithmetic, capped at the
/// longest duration the limits admit (a century): the seam refuses longer
/// ones, and the cap keeps every sum inside timestamptz's range anyway.
pub(crate) fn micros(d: Duration) -> i64 {
    const CAP: u128 = leasehold_backend::limits::CENTURY.as_micros();
    d.as_micros().min(CAP) as i64
}

/// `at + d` as the server computes it (`micros(d)` later), for a time
/// written as a parameter.
pub(crate) fn plus(at: SystemTime, d: Duration) -> SystemTime {
    leasehold_backend::later(at, Duration::from_micros(micros(d).unsigned_abs()))
}

/// `a - b`, or zero when `b` is later.
pub(crate) fn until(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or(Duration::ZERO)
}

impl Backend for PostgresBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: true,
            host_local: false,
            reopenable: true,
        }
    }

    fn describe(&self) -> std::result::Result<StoreInfo, BackendError> {
        let schema = self.schema.clone();
        let (version, facts) = self.read(|db| {
            let version: i32 = db.query_one("SELECT version FROM leasehold_schema", &[])?.get(0);
            let row = db.query_one(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'), \
                 pg_is_in_recovery(), current_setting('synchronous_standby_names'), current_user, current_database()",
                &[],
            )?;
            let standbys: String = row.get(3);
            let facts = vec![
                ("server version".to_owned(), row.get::<_, String>(0)),
                ("database".to_owned(), row.get::<_, String>(5)),
                ("role".to_owned(), row.get::<_, String>(4)),
                ("schema".to_owned(), schema.clone()),
                ("synchronous_commit".to_owned(), row.get::<_, String>(1)),
                (
                    "standby".to_owned(),
                    if row.get::<_, bool>(2) {
                        "yes (read-only!)"
                    } else {
                        "no (primary)"
                    }
                    .to_owned(),
                ),
                (
                    "synchronous standbys".to_owned(),
                    if standbys.is_empty() {
                        "none: a failover to an asynchronous replica can lose the last grants (see docs/POSTGRES.md)"
                            .to_owned()
                    } else {
                        standbys
                    },
                ),
                ("connections".to_owned(), format!("up to {}", self.slots.len())),
                ("TLS".to_owned(), self.tls.label()),
            ];
            Ok((version, facts))
        })?;
        Ok(StoreInfo {
            kind: "postgres",
            location: self.display.clone(),
            schema_version: u32::try_from(version).ok(),
            facts,
            problems: Vec::new(),
        })
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> std::result::Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.write(|db| lease::acquire(db, params))
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> std::result::Result<LeaseRenew, BackendError> {
        params.check()?;
        self.write(|db| lease::renew(db, params))
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> std::result::Result<LeaseRelease, BackendError> {
        self.write(|db| lease::release(db, params))
    }

    fn lease_fence(&self, params: &LeaseFenceParams) -> std::result::Result<LeaseFence, BackendError> {
        self.write(|db| lease::fence(db, params))
    }

    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> std::result::Result<WaiterTicket, BackendError> {
        params.check()?;
        self.write(|db| lease::waiter_enqueue(db, params))
    }

    fn waiter_remove(&self, p: &WaiterRemoveParams) -> std::result::Result<(), BackendError> {
        self.write(|db| lease::waiter_remove(db, &p.name, p.ticket))
    }

    fn lease_get(&self, name: &LeaseName) -> std::result::Result<Option<LeaseState>, BackendError> {
        self.read(|db| {
            let now = db.now()?;
            lease::get(db, now, name)
        })
    }

    fn lease_list(&self, params: &LeaseListParams) -> std::result::Result<Vec<LeaseState>, BackendError> {
        self.read(|db| lease::list(db, params))
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> std::result::Result<Vec<HistoryEntry>, BackendError> {
        self.read(|db| lease::history(db, params))
    }

    /// LISTEN/NOTIFY: returns on a notification for `topic` (or for a
    /// topic sharing its counter, see `notify`), when the listening
    /// connection was (re)established, or after `timeout`.
    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> std::result::Result<(), BackendError> {
        let (config, tls) = (self.config.clone(), self.tls.clone());
        self.notifier.wait(topic, timeout, &self.channel, move || {
            Box::new(move || tls.connect(&config).map_err(|e| detail(&e)))
        });
        Ok(())
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> std::result::Result<TokensBumped, BackendError> {
        self.write(|db| lease::tokens_bump(db, params))?
            .map_err(|reason| BackendError::new(ErrorKind::InvalidInput, &self.display, reason))
    }

    fn tasks(&self) -> Option<&dyn TaskBackend> {
        Some(self)
    }
}

impl TaskBackend for PostgresBackend {
    fn task_add(&self, params: &[TaskAddParams]) -> std::result::Result<Vec<TaskAdd>, BackendError> {
        TaskAddParams::check_all(params)?;
        self.transact(Kind::Write, |db| task::add(db, params))
    }

    fn task_claim(&self, params: &TaskClaimParams) -> std::result::Result<Option<Claim>, BackendError> {
        params.check()?;
        self.single(|db| task::claim(db, params))
    }

    fn task_heartbeat(&self, p: &TaskHeartbeatParams) -> std::result::Result<TaskUpdate, BackendError> {
        p.check()?;
        self.single(|db| task::heartbeat(db, &p.task, p.ttl))
    }

    fn task_complete(&self, p: &TaskCompleteParams) -> std::result::Result<TaskUpdate, BackendError> {
        let t = &p.task;
        match self.single(|db| task::complete(db, t, p.result.as_ref())) {
            Err(ambiguous) if ambiguous.kind() == ErrorKind::Unavailable => {
                // The commit may have happened: re-check by token. Only a
                // `done` task carrying this very token proves it did.
                match self.read(|db| task::completed_by(db, t)) {
                    Ok(true) => Ok(TaskUpdate::Applied),
                    _ => Err(ambiguous),
                }
            }
            other => other,
        }
    }

    fn task_complete_and_claim(
        &self,
        params: &[TaskCompleteAndClaimParams],
    ) -> std::result::Result<Vec<TaskCompleteAndClaim>, BackendError> {
        params.iter().try_for_each(|p| p.claim.check())?;
        let all = self.write(|db| {
            params
                .iter()
                .map(|p| {
                    let completed = task::complete(db, &p.complete.task, p.complete.result.as_ref())?;
                    let claim = task::claim(db, &p.claim)?;
                    Ok(TaskCompleteAndClaim { completed, claim })
                })
                .collect::<Result<Vec<_>>>()
        });
        match all {
            Err(ambiguous) if ambiguous.kind() == ErrorKind::Unavailable => {
                // As for `task_complete`: the commit may have happened. A
                // completion carrying its token proves it did (one
                // transaction: all of it did). The claims made in it are
                // unknown: they are left to expire, and come back with
                // their attempts counted.
                let done = self.read(|db| {
                    params
                        .iter()
                        .map(|p| task::completed_by(db, &p.complete.task))
                        .collect::<Result<Vec<_>>>()
                });
                match done {
                    Ok(done) if done.contains(&true) => Ok(done
                        .into_iter()
                        .map(|applied| TaskCompleteAndClaim {
                            completed: if applied {
                                TaskUpdate::Applied
                            } else {
                                TaskUpdate::Lost(leasehold_backend::TaskLost::Stale)
                            },
                            claim: None,
                        })
                        .collect()),
                    _ => Err(ambiguous),
                }
            }
            other => other,
        }
    }

    fn task_fail(&self, p: &TaskFailParams) -> std::result::Result<TaskFail, BackendError> {
        p.check()?;
        self.write(|db| task::fail(db, &p.task, &p.error, p.retry))
    }

    fn task_release(&self, t: &TaskRef) -> std::result::Result<TaskUpdate, BackendError> {
        self.write(|db| task::release(db, t))
    }

    fn task_retry(&self, p: &TaskIdParams) -> std::result::Result<TaskRetry, BackendError> {
        self.write(|db| task::retry(db, &p.queue, &p.id))
    }

    fn task_get(&self, p: &TaskIdParams) -> std::result::Result<Option<Task>, BackendError> {
        self.read(|db| task::get(db, &p.queue, &p.id))
    }

    fn task_list(&self, params: &TaskListParams) -> std::result::Result<Vec<Task>, BackendError> {
        if let Some((queue, state, page)) = params.paged()? {
            return self.read(|db| task::list_page(db, queue, state, page, params.limit));
        }
        self.read(|db| task::list(db, params))
    }

    fn task_stats(&self, p: &TaskStatsParams) -> std::result::Result<Vec<QueueStats>, BackendError> {
        self.read(|db| task::stats(db, p.queue.as_ref()))
    }

    fn task_purge(&self, p: &TaskPurgeParams) -> std::result::Result<u64, BackendError> {
        p.check()?;
        self.write(|db| task::purge(db, &p.queue, p.state, p.older_than))
    }
}

/// Reading the pgbench scripts of `bench/`, for the tests that check they
/// run the store's own statements.
#[cfg(test)]
mod bench_sql {
    /// The statements of a pgbench script (or of one statement), each with
    /// its whitespace squashed; a `\gset` ends a statement and is kept.
    /// The store's "now" is read as a build for use sends it: these tests
    /// run with the `test-clock` feature, whose `NOW` adds the test skew.
    pub(crate) fn statements(script: &str) -> Vec<String> {
        script
            .replace(crate::NOW, "clock_timestamp()")
            .lines()
            .filter(|l| !l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("\\gset", "\\gset;")
            .split(';')
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// `sql` with `$1`, `$2`, ... replaced by `values`.
    pub(crate) fn substitute(sql: &str, values: &[&str]) -> String {
        // From the last down, so that $1 does not match the start of $10.
        values
            .iter()
            .enumerate()
            .rev()
            .fold(sql.to_owned(), |s, (i, v)| s.replace(&format!("${}", i + 1), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_parameter_is_stripped_and_checked() {
        let p = parse_url("postgres://u:secret@db.internal:5433/leases?schema=team_a&connect_timeout=3").unwrap();
        assert_eq!(p.schema, "team_a");
        assert_eq!(p.config.get_dbname(), Some("leases"));
        assert_eq!(p.config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert!(!p.display.contains("secret"), "{}", p.display);
        assert_eq!(parse_url("postgresql://db/x").unwrap().schema, DEFAULT_SCHEMA);
        for bad in ["Team", "1a", "a-b", "pg_x", "x\"; DROP", ""] {
            assert!(
                parse_url(&format!("postgres://db/x?schema={bad}")).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(parse_url("postgres://db/x?sslmode=bogus").is_err());
        assert!(parse_url("postgres://db/x?sslmode=require&sslrootcert=/nonexistent.pem").is_err());
        assert!(parse_url("postgres://db/x?sslmode=verify-ca&sslrootcert=/dev/null").is_err());
        assert!(matches!(
            parse_url("postgres://db/x?sslmode=prefer").unwrap().tls,
            tls::Tls::Off
        ));
        // A client certificate needs its key, and TLS.
        let reason = |url: &str| match parse_url(url) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => e.reason().to_owned(),
            Err(e) => panic!("{url}: {e}"),
            Ok(_) => panic!("{url} was accepted"),
        };
        assert!(reason("postgres://db/x?sslmode=verify-full&sslcert=/c.pem").contains("needs sslkey=PATH"));
        assert!(reason("postgres://db/x?sslmode=verify-full&sslkey=/c.key").contains("needs sslcert=PATH"));
        assert!(reason("postgres://db/x?sslcert=/c.pem&sslkey=/c.key").contains("needs TLS"));
        assert!(reason("postgres://db/x?sslmode=disable&sslcert=/c.pem&sslkey=/c.key").contains("sslmode=disable"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://h/db?password=pw&x=1"),
            "postgres://h/db?password=***&x=1"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
