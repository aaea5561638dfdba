//! The PostgreSQL store: leases and a task queue shared by many machines.
//!
//! - **Clock**: every expiry is computed and judged on the server's clock
//!   (`clock_timestamp()`, see `clock`), never the client's. This crate's
//!   tests shift it with a `ClockSkew` (feature `test-clock`), sent to the
//!   server as the session setting `leasehold.skew_us` and added there; a
//!   build for use has neither the option nor the addition.
//! - **Tokens** come from `lease_name.last_token` (and `task.token`),
//!   incremented in the same transaction as the grant — not from a
//!   sequence, which is not transactional and can go backwards after a
//!   crash or failover. `synchronous_commit` is on for every session, so a
//!   token is durable (on the primary, and on synchronous standbys if any)
//!   before it is returned.
//! - **Serialization**: every lease operation that may change a name takes a
//!   transaction-scoped advisory lock on it, then row locks; renewals take
//!   the row lock alone (one statement on the happy path). Task claims use
//!   `FOR UPDATE SKIP LOCKED` on a partial index in claim order. Record
//!   writes take turns on the one row of `record_version`, and read the
//!   server's clock for their `not_after` once it is their turn (see
//!   `record`).
//! - **TLS**: rustls, as `sslmode` / `sslrootcert` ask (see `tls`).
//! - **Connections**: a small pool of lazily opened connections (`pool`),
//!   each a `Mutex<Client>` with its own prepared-statement cache. A
//!   connection found broken before `COMMIT` was sent is replaced and the
//!   transaction retried (nothing was committed; `transact`, with what a
//!   failure means for the user in `classify`). A connection lost
//!   *during* `COMMIT` leaves the outcome unknown: that is reported as
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
//!   named by the URL parameter `?schema=NAME` (default `leasehold`; the
//!   URL is read in `url`).

mod kind;
pub use kind::KIND;

#[cfg(feature = "backend")]
mod classify;
#[cfg(feature = "backend")]
mod clock;
#[cfg(feature = "backend")]
mod db;
#[cfg(feature = "backend")]
mod lease;
#[cfg(feature = "backend")]
mod notify;
#[cfg(feature = "backend")]
mod pool;
#[cfg(feature = "backend")]
mod record;
#[cfg(feature = "backend")]
mod register;
#[cfg(feature = "backend")]
mod schema;
#[cfg(feature = "backend")]
mod task;
#[cfg(feature = "backend")]
mod tls;
#[cfg(feature = "backend")]
mod transact;
#[cfg(feature = "backend")]
mod url;

#[cfg(feature = "backend")]
use std::sync::atomic::AtomicUsize;
#[cfg(feature = "backend")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "backend")]
use std::time::Duration;

#[cfg(feature = "backend")]
#[cfg(feature = "test-clock")]
use leasehold_backend::ClockSkew;
#[cfg(feature = "backend")]
use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, StoreBackup, StoreBackupParams, StoreInfo, TokensBumpParams, TokensBumped, WaitTopic,
    WaiterEnqueueParams, WaiterTicket,
};
#[cfg(feature = "backend")]
use leasehold_backend::{
    Claim, QueueStats, Task, TaskAdd, TaskAddParams, TaskBackend, TaskClaimParams, TaskCompleteAndClaim,
    TaskCompleteAndClaimParams, TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskIdParams,
    TaskListParams, TaskPurgeParams, TaskRef, TaskRetry, TaskStatsParams, TaskUpdate, WaiterRemoveParams,
};
#[cfg(feature = "backend")]
use leasehold_backend::{
    Record, RecordBackend, RecordKey, RecordListParams, RecordWrite, RecordWriteParams, StoreTime,
};

#[cfg(feature = "backend")]
use crate::db::Result;
#[cfg(feature = "backend")]
use crate::pool::Slot;
#[cfg(feature = "backend")]
use crate::transact::Kind;
#[cfg(feature = "backend")]
use crate::url::parse_url;

#[cfg(feature = "backend")]
pub use register::STORE;
#[cfg(feature = "backend")]
pub use schema::VERSION as SCHEMA_VERSION;
#[cfg(feature = "backend")]
#[doc(hidden)]
pub use schema::objects as schema_objects;

/// The schema used when the URL names none.
#[cfg(feature = "backend")]
pub const DEFAULT_SCHEMA: &str = "leasehold";

/// How to open a PostgreSQL store.
#[cfg(feature = "backend")]
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

#[cfg(feature = "backend")]
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

/// The PostgreSQL store.
#[cfg(feature = "backend")]
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

#[cfg(feature = "backend")]
impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.notifier.stop();
    }
}

#[cfg(feature = "backend")]
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
}

#[cfg(feature = "backend")]
impl Backend for PostgresBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: true,
            host_local: false,
            reopenable: true,
        }
    }

    /// PostgreSQL's own tools copy a database consistently while it is
    /// written, with what leasehold does not own (roles, settings): a
    /// copy by leasehold would be a worse `pg_dump`.
    fn store_backup(&self, _: &StoreBackupParams) -> std::result::Result<StoreBackup, BackendError> {
        Err(BackendError::unsupported(
            self.display.clone(),
            "a backup by leasehold",
            "use PostgreSQL's own: `pg_dump` (one database) or `pg_basebackup` (the whole server), \
             and after restoring one run `leasehold migrate --bump-tokens N` (docs/POSTGRES.md, \"Restoring from a backup\")",
        ))
    }

    fn describe(&self) -> std::result::Result<StoreInfo, BackendError> {
        let schema = self.schema.clone();
        let (version, facts, damaged) = self.read(|db| {
            let version: i32 = db.query_one("SELECT version FROM leasehold_schema", &[])?.get(0);
            let damaged = lease::counters_below_history(db)?;
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
            Ok((version, facts, damaged))
        })?;
        let problems = damaged
            .into_iter()
            .map(|damage| {
                (
                    "token counters".to_owned(),
                    format!(
                        "{damage}: it would be refused, as issuing from it would reissue tokens; {}",
                        leasehold_backend::DAMAGED_COUNTER_HINT
                    ),
                )
            })
            .collect();
        Ok(StoreInfo {
            kind: "postgres",
            location: self.display.clone(),
            schema_version: u32::try_from(version).ok(),
            facts,
            problems,
            warnings: Vec::new(),
        })
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> std::result::Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.write(|db| lease::acquire(db, params))
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> std::result::Result<LeaseRenew, BackendError> {
        params.check()?;
        // One statement when it can (a live grant the caller names),
        // rolled back and judged by the plan when it cannot.
        let in_place = self.transact(Kind::Write, |db| {
            lease::renew_in_place(db, params).map(|renewed| {
                let commit = renewed.is_some();
                (renewed, commit)
            })
        })?;
        match in_place {
            Some(renewed) => Ok(renewed),
            None => self.write(|db| lease::renew(db, params)),
        }
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

    fn lease_waiting(
        &self,
        name: &LeaseName,
        ticket: WaiterTicket,
        proved: usize,
    ) -> std::result::Result<Option<LeaseState>, BackendError> {
        self.read(|db| {
            let now = db.now()?;
            lease::waiting(db, now, name, ticket, proved)
        })
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
            Box::new(move || tls.connect(&config))
        });
        Ok(())
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> std::result::Result<TokensBumped, BackendError> {
        self.write(|db| lease::tokens_bump(db, params))?
            .map_err(|refused| BackendError::tokens_bump_refused(&self.display, refused))
    }

    fn tasks(&self) -> Option<&dyn TaskBackend> {
        Some(self)
    }

    fn records(&self) -> Option<&dyn RecordBackend> {
        Some(self)
    }
}

#[cfg(feature = "backend")]
impl RecordBackend for PostgresBackend {
    fn record_get(&self, key: &RecordKey) -> std::result::Result<Option<Record>, BackendError> {
        self.read(|db| record::get(db, key))
    }

    fn record_list(&self, params: &RecordListParams) -> std::result::Result<Vec<Record>, BackendError> {
        params.check()?;
        self.read(|db| record::list(db, params))
    }

    fn record_write(&self, params: &RecordWriteParams) -> std::result::Result<RecordWrite, BackendError> {
        params.check()?;
        self.transact(Kind::Write, |db| record::write(db, params))
    }

    /// The server's clock (`clock_timestamp()`), to the microsecond.
    fn record_clock(&self) -> std::result::Result<StoreTime, BackendError> {
        #[allow(
            clippy::redundant_closure_for_method_calls,
            reason = "Db::now is not general over the lifetime"
        )]
        self.read(|db| db.now()).map(StoreTime::exactly)
    }
}

#[cfg(feature = "backend")]
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
#[cfg(feature = "backend")]
#[cfg(test)]
mod bench_sql {
    /// The statements of a pgbench script (or of one statement), each with
    /// its whitespace squashed; a `\gset` ends a statement and is kept.
    /// The store's "now" is read as a build for use sends it: these tests
    /// run with the `test-clock` feature, whose `NOW` adds the test skew.
    pub(crate) fn statements(script: &str) -> Vec<String> {
        script
            .replace(crate::clock::NOW, "clock_timestamp()")
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
