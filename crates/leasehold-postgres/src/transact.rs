//! Running an operation: in one transaction (or, for a single write
//! statement, on the session), retried on a fresh connection when it failed
//! before anything could have been committed, never when the outcome is
//! unknown.

use std::time::{Duration, Instant};

use leasehold_backend::BackendError;

use crate::PostgresBackend;
use crate::classify::{connection_lost, retryable};
use crate::db::{Conn, Db, Error, Result};
use crate::pool::Slot;

/// How one attempt at a transaction failed.
enum Failure {
    /// Before `COMMIT`: nothing was changed.
    Op(Error),
    /// `COMMIT` was sent and no answer came: the outcome is unknown.
    Commit(postgres::Error),
}

/// Whether a transaction writes (and how its commit may fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
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
    /// Run `f` in one transaction; commit it only if `f` says so.
    ///
    /// A transaction that failed before `COMMIT` was sent changed nothing,
    /// so after a lost connection, a deadlock or a serialization failure it
    /// is simply run again (on a new connection if needed). A failure of
    /// the `COMMIT` of a write leaves the outcome unknown and is never
    /// retried here: it is reported as unavailable.
    pub(crate) fn transact<T>(
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
                Err(Failure::Op(Error::Counter(reason))) => {
                    return Err(self.corrupt(reason).hint(leasehold_backend::DAMAGED_COUNTER_HINT));
                }
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

    pub(crate) fn write<T>(&self, mut f: impl FnMut(&mut Db<'_>) -> Result<T>) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Write, |db| f(db).map(|v| (v, true)))
    }

    pub(crate) fn read<T>(&self, mut f: impl FnMut(&mut Db<'_>) -> Result<T>) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Read, |db| f(db).map(|v| (v, true)))
    }

    /// Run `f` — one write statement, and only reads after it — on the
    /// session, where the statement commits on its own: one round trip.
    /// A connection lost once the statement was sent leaves the outcome
    /// unknown, reported as unavailable as for a failed `COMMIT`; an error
    /// the server answered with (it rolled the statement back) is retried
    /// as a transaction's would be.
    pub(crate) fn single<T>(
        &self,
        mut f: impl FnMut(&mut Db<'_>) -> Result<T>,
    ) -> std::result::Result<T, BackendError> {
        self.transact(Kind::Single, |db| f(db).map(|v| (v, true)))
    }
}
