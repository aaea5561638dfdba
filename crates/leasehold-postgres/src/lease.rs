//! Lease operations, each inside one transaction opened by the caller:
//! read what the decision needs, plan it with `leasehold_backend::plan`
//! (the algorithm every store applies), apply the plan through [`Writer`].
//!
//! PostgreSQL's concurrency: every operation that may change a name
//! first takes a transaction-scoped advisory lock on it (so two acquirers
//! of a name never both see it free, and waiter ids grow in queue order),
//! then reads its grants `FOR UPDATE` (so a concurrent renewal, which takes
//! only the row lock, is seen as it committed). A renewal of a live grant
//! is one `UPDATE`; only a refusal takes the name lock, to record it.
//!
//! Every change that may unblock a waiter (release, expiry cleanup, fast
//! takeover, a waiter leaving the queue) also sends a notification on
//! commit (`Db::notify`).
//!
//! A grant is live while its `expires_at` lies ahead of the store's now
//! (the server clock). Expired rows are removed — and recorded as
//! `expired` — by the next writer that looks at the name; readers filter.

use std::time::{Duration, SystemTime};

use leasehold_backend::plan::{self, Acquire, Apply, Entry, HISTORY_PER_NAME, NewGrant, NewWaiter, Plan, Seen};
use leasehold_backend::rules;
use leasehold_backend::{
    Grant, HistoryEntry, HistoryEvent, Holder, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, Mode, QueuedWaiter, Token, TokensBumpParams, TokensBumpRefused, TokensBumped, WaiterEnqueueParams,
    WaiterTicket, Watched, duration_millis, signed, stored_millis,
};
use postgres::Row as PgRow;

use crate::clock::{NOW, micros, plus, until};
use crate::db::{Db, Error, Result};
use crate::notify;

fn mode_columns(mode: Mode) -> (bool, Option<i64>) {
    match mode {
        Mode::Exclusive => (true, None),
        Mode::Shared { limit } => (false, limit.map(i64::from)),
    }
}

fn mode_from_columns(exclusive: bool, limit: Option<i64>) -> Mode {
    if exclusive {
        Mode::Exclusive
    } else {
        Mode::Shared {
            limit: limit.map(|l| l as u32),
        }
    }
}

fn holder_json(h: &Holder) -> String {
    serde_json::to_string(h).expect("a holder always serializes")
}

const GRANT_COLUMNS: &str =
    "name, token, owner, owner_explicit, exclusive, shared_limit, holder::text, acquired_at, ttl_ms, expires_at";

/// A grant row, live while its expiry (server clock) lies ahead of `now`.
fn read_row(r: &PgRow, now: SystemTime) -> Result<Seen> {
    let name: String = r.get(0);
    let name = LeaseName::stored(name.clone())
        .map_err(|_| Error::BadRow(format!("lease_grant holds an invalid name {name:?}")))?;
    let holder: Holder = serde_json::from_str(r.get::<_, &str>(6))
        .map_err(|e| Error::BadRow(format!("grant of {name} has an unreadable holder record: {e}")))?;
    let expires_at: SystemTime = r.get(9);
    let grant = Grant {
        name,
        token: Token(r.get::<_, i64>(1) as u64),
        owner: r.get(2),
        owner_explicit: r.get(3),
        mode: mode_from_columns(r.get(4), r.get(5)),
        holder,
        acquired_at: r.get(7),
        ttl: stored_millis(r.get(8)),
        expires_in: until(expires_at, now),
    };
    Ok((grant, expires_at > now))
}

/// Take the name's lock for the rest of the transaction; returns the
/// store's now as of after the wait.
fn lock(db: &mut Db<'_>, name: &LeaseName) -> Result<SystemTime> {
    let key = format!("leasehold/{}/lease/{}", db.schema, name.as_str());
    Ok(db.query_one(&lock_sql(), &[&key])?.get(0))
}

/// Take the lock `$1`; the store's now after the wait.
fn lock_sql() -> String {
    format!("SELECT {NOW} AS now FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l")
}

/// The grants of `name`, oldest first; `lock_rows` reads them FOR UPDATE.
fn rows(db: &mut Db<'_>, now: SystemTime, name: &LeaseName, lock_rows: bool) -> Result<Vec<Seen>> {
    db.query(&rows_sql(lock_rows), &[&name.as_str()])?
        .iter()
        .map(|r| read_row(r, now))
        .collect()
}

fn rows_sql(lock_rows: bool) -> String {
    format!(
        "SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = $1 ORDER BY token{}",
        if lock_rows { " FOR UPDATE" } else { "" }
    )
}

fn row_sql() -> String {
    format!("SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = $1 AND token = $2 FOR UPDATE")
}

fn row(db: &mut Db<'_>, now: SystemTime, name: &LeaseName, token: Token) -> Result<Option<Seen>> {
    db.query_opt(&row_sql(), &[&name.as_str(), &(token.0 as i64)])?
        .map(|r| read_row(&r, now))
        .transpose()
}

/// Append a history entry and keep the newest [`HISTORY_PER_NAME`] of the
/// name, in one statement: `$1` name, `$2` event, `$3` token, `$4` owner,
/// `$5` detail, `$6` how many older entries to keep
/// (`HISTORY_PER_NAME - 1`). The delete sees the name's entries as before
/// the insert (one snapshot), and the new entry has the highest id (ids
/// come from a sequence, and the name's lock orders its writers).
pub(crate) const RECORD_SQL: &str = "WITH added AS (INSERT INTO lease_history (name, at, event, token, owner, detail) \
     VALUES ($1, clock_timestamp(), $2, $3, $4, $5) RETURNING id) \
     DELETE FROM lease_history WHERE name = $1 AND id <= \
     (SELECT id FROM lease_history WHERE name = $1 ORDER BY id DESC LIMIT 1 OFFSET $6)";

fn record(
    db: &mut Db<'_>,
    name: &LeaseName,
    event: HistoryEvent,
    token: Option<Token>,
    owner: Option<&str>,
    detail: &str,
) -> Result<()> {
    db.execute(
        RECORD_SQL,
        &[
            &name.as_str(),
            &event.as_str(),
            &token.map(|t| t.0 as i64),
            &owner,
            &detail,
            &(i64::from(HISTORY_PER_NAME) - 1),
        ],
    )?;
    Ok(())
}

/// Remove the expired waiter registrations of `$1` (expired as of `$2`),
/// notify `$3`/`$4` if there were any (those behind a dead waiter may fit
/// now), and read the others in FIFO order with the processes that wait —
/// one statement; with no waiters left, one row of NULLs.
pub(crate) const WAITERS_SQL: &str = "WITH gone AS (DELETE FROM lease_waiter WHERE name = $1 AND expires_at <= $2 RETURNING id), \
     woken AS (SELECT pg_notify($3, $4) FROM (SELECT 1 FROM gone LIMIT 1) x) \
     SELECT w.id, w.exclusive, w.shared_limit, w.holder::text, (SELECT count(*) FROM woken) \
     FROM (SELECT 1) AS one LEFT JOIN lease_waiter w ON w.name = $1 AND w.expires_at > $2 ORDER BY w.id";

/// A waiter row (`id`, `exclusive`, `shared_limit`, `holder::text`).
fn read_waiter(r: &PgRow, name: &LeaseName) -> Result<QueuedWaiter> {
    let ticket = WaiterTicket(r.get::<_, i64>(0) as u64);
    // No holder: a waiter's reading that asked for only the first few
    // (`waiting`).
    let holder = r
        .get::<_, Option<&str>>(3)
        .map(|holder| {
            serde_json::from_str(holder).map_err(|e| {
                Error::BadRow(format!(
                    "waiter {} of {name} has an unreadable holder record: {e}",
                    ticket.0
                ))
            })
        })
        .transpose()?;
    Ok(QueuedWaiter {
        ticket,
        mode: mode_from_columns(r.get(1), r.get(2)),
        holder,
    })
}

/// Live waiters of `name` in FIFO order; expired registrations are removed.
fn waiters(db: &mut Db<'_>, now: SystemTime, name: &LeaseName) -> Result<Vec<QueuedWaiter>> {
    let channel = db.channel().to_owned();
    let payload = notify::payload(&Watched::Lease(name.clone()));
    db.query(WAITERS_SQL, &[&name.as_str(), &now, &channel, &payload])?
        .iter()
        .filter(|r| r.get::<_, Option<i64>>(0).is_some())
        .map(|r| read_waiter(r, name))
        .collect()
}

fn insert_waiter(db: &mut Db<'_>, now: SystemTime, name: &LeaseName, w: &NewWaiter) -> Result<WaiterTicket> {
    let (exclusive, limit) = mode_columns(w.mode);
    let id: i64 = db
        .query_one(
            "INSERT INTO lease_waiter (name, exclusive, shared_limit, holder, expires_at) \
             VALUES ($1, $2, $3, $4::text::jsonb, $5) RETURNING id",
            &[
                &name.as_str(),
                &exclusive,
                &limit,
                &holder_json(&w.holder),
                &plus(now, w.ttl),
            ],
        )?
        .get(0);
    Ok(WaiterTicket(id as u64))
}

/// Applies a plan to one name, under its lock; keeps the grant it wrote
/// (as the statement returned it) and the ticket it issued. Every change
/// that may unblock a waiter notifies.
struct Writer<'a, 'c> {
    db: &'a mut Db<'c>,
    now: SystemTime,
    name: &'a LeaseName,
    written: Option<Grant>,
    ticket: Option<WaiterTicket>,
}

impl<'a, 'c> Writer<'a, 'c> {
    fn new(db: &'a mut Db<'c>, now: SystemTime, name: &'a LeaseName) -> Self {
        Self {
            db,
            now,
            name,
            written: None,
            ticket: None,
        }
    }

    fn written(&mut self) -> Result<Grant> {
        self.written
            .take()
            .ok_or_else(|| Error::BadRow(format!("the grant written for {} vanished", self.name)))
    }
}

impl Apply for Writer<'_, '_> {
    type Error = Error;

    fn remove_grant(&mut self, token: Token, _live: bool) -> Result<()> {
        let channel = self.db.channel().to_owned();
        let payload = notify::payload(&Watched::Lease(self.name.clone()));
        self.db.execute(
            REMOVE_GRANT_SQL,
            &[&self.name.as_str(), &(token.0 as i64), &channel, &payload],
        )?;
        Ok(())
    }

    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<()> {
        let r = self.db.query_one(
            &format!(
                "UPDATE lease_grant SET expires_at = $3, ttl_ms = $4, holder = coalesce($5::text::jsonb, holder) \
                 WHERE name = $1 AND token = $2 RETURNING {GRANT_COLUMNS}"
            ),
            &[
                &self.name.as_str(),
                &(token.0 as i64),
                &plus(self.now, ttl),
                &signed(duration_millis(ttl)),
                &holder.map(holder_json),
            ],
        )?;
        self.written = Some(read_row(&r, self.now)?.0);
        Ok(())
    }

    fn insert_grant(&mut self, g: &NewGrant) -> Result<()> {
        let (exclusive, limit) = mode_columns(g.mode);
        let mut sql = insert_grant_sql();
        // Planted bug (scripts/mutants): the previous token, issued again
        // (struck when the statement is sent; it differs for a name that
        // had a token).
        if leasehold_backend::mutant::strikes(leasehold_backend::mutant::Mutant::ReissueToken, || true) {
            let reissuing = sql.replace("lease_name.last_token + 1", "lease_name.last_token");
            // A statement rewritten since would make this plant nothing.
            assert_ne!(
                reissuing, sql,
                "the reissue-token mutant no longer matches insert_grant_sql"
            );
            sql = reissuing;
        }
        let inserted = self.db.query_opt(
            &sql,
            &[
                &self.name.as_str(),
                &g.owner.label,
                &g.owner.explicit,
                &exclusive,
                &limit,
                &holder_json(&g.holder),
                &signed(duration_millis(g.ttl)),
                &plus(self.now, g.ttl),
            ],
        )?;
        let Some(inserted) = inserted else {
            // The counter was not sound: say how, from a fresh read.
            return Err(match counter(self.db, self.name) {
                Err(e) => e,
                Ok(_) => Error::BadRow(format!("no grant of {} was written", self.name)),
            });
        };
        self.written = Some(read_row(&inserted, self.now)?.0);
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<()> {
        self.db.execute(
            "UPDATE lease_waiter SET expires_at = $2 WHERE id = $1",
            &[&(ticket.0 as i64), &plus(self.now, ttl)],
        )?;
        Ok(())
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<()> {
        self.ticket = Some(insert_waiter(self.db, self.now, self.name, w)?);
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<()> {
        waiter_remove_locked(self.db, self.name, ticket)
    }

    fn record(&mut self, e: &Entry) -> Result<()> {
        let token = e.token.resolve(self.written.as_ref().map(|g| g.token));
        record(self.db, self.name, e.event, Some(token), e.owner.as_deref(), &e.detail)
    }
}

pub(crate) fn acquire(db: &mut Db<'_>, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
    let now = lock(db, &p.name)?;
    let rows = rows(db, now, &p.name, true)?;
    let queue = waiters(db, now, &p.name)?;
    let plan = plan::acquire(p, &rows, &queue);
    let mut w = Writer::new(db, now, &p.name);
    plan.apply(&mut w)?;
    Ok(match plan.outcome {
        Acquire::Acquired(_) => LeaseAcquire::Acquired(w.written()?),
        Acquire::Held(waiting) => LeaseAcquire::Held(waiting.held(rows.into_iter().map(|(g, _)| g), w.ticket)),
    })
}

const GRANT_COLUMNS_INSERT: &str =
    "name, token, owner, owner_explicit, exclusive, shared_limit, holder, acquired_at, ttl_ms, expires_at";

/// Take the next token of `$1` from its counter — above the token floor of
/// `--bump-tokens`, the value a new name starts from — and create the
/// grant, in one statement: `$2` owner, `$3` explicit, `$4` exclusive, `$5` shared
/// limit, `$6` holder (JSON), `$7` TTL (ms), `$8` expiry.
///
/// Only if the counter is sound ([`COUNTER_SQL`]'s rule): a counter
/// missing or below the newest token the name's history records granted,
/// with the floor not above it either, inserts nothing and returns no row
/// (then [`Writer::insert_grant`] refuses) — checked in the same statement,
/// at no round trip of its own.
pub(crate) fn insert_grant_sql() -> String {
    format!(
        "WITH c AS ({COUNTER_SQL}), \
         t AS (INSERT INTO lease_name (name, last_token) \
         SELECT $1, c.floor + 1 FROM c WHERE c.granted <= greatest(coalesce(c.counted, 0), c.floor) \
         ON CONFLICT (name) DO UPDATE SET last_token = greatest(lease_name.last_token + 1, excluded.last_token) \
         RETURNING last_token) \
         INSERT INTO lease_grant ({GRANT_COLUMNS_INSERT}) \
         SELECT $1, t.last_token, $2, $3, $4, $5, $6::text::jsonb, clock_timestamp(), $7, $8 FROM t \
         RETURNING {GRANT_COLUMNS}"
    )
}

/// A name's (`$1`) counter, the newest token its history records granted
/// (0: none), and the store's floor: the counter is sound when the newest
/// grant is at or below it or the floor. Grants are recorded in order of
/// their tokens, so the newest `granted` entry has the largest; refused
/// stale tokens are recorded as callers gave them and never counted.
pub(crate) const COUNTER_SQL: &str = "SELECT (SELECT last_token FROM lease_name WHERE name = $1) AS counted, \
     coalesce((SELECT token FROM lease_history WHERE name = $1 AND event = 'granted' ORDER BY id DESC LIMIT 1), 0) AS granted, \
     coalesce((SELECT floor FROM lease_token_floor WHERE id = 1), 0) AS floor";

/// The counter of `name` checked as [`COUNTER_SQL`] says (issue 39, item
/// 11): a damaged store never issues a token at or below one it issued,
/// and never calls a granted name never granted. `None`: never granted.
fn counter(db: &mut Db<'_>, name: &LeaseName) -> Result<Option<Token>> {
    let row = db.query_one(COUNTER_SQL, &[&name.as_str()])?;
    let (counted, granted, floor): (Option<i64>, i64, i64) = (row.get(0), row.get(1), row.get(2));
    if granted <= counted.unwrap_or(0) {
        return Ok(counted.map(|t| Token(t as u64)));
    }
    if granted <= floor {
        return Ok(Some(Token(counted.unwrap_or(0).max(granted) as u64)));
    }
    Err(Error::Counter(leasehold_backend::damaged_counter(
        name.as_str(),
        counted,
        granted,
    )))
}

/// For `doctor`: every name whose counter [`counter`] would refuse, said
/// as it says it — a scan of the whole history (`list` reads only the
/// counters, so a name whose counter row is lost is missing from it).
pub(crate) fn counters_below_history(db: &mut Db<'_>) -> Result<Vec<String>> {
    Ok(db
        .query(
            "SELECT h.name, max(h.token), n.last_token FROM lease_history h LEFT JOIN lease_name n ON n.name = h.name \
             WHERE h.event = 'granted' GROUP BY h.name, n.last_token \
             HAVING max(h.token) > coalesce(n.last_token, 0) \
             AND max(h.token) > coalesce((SELECT floor FROM lease_token_floor WHERE id = 1), 0) ORDER BY h.name",
            &[],
        )?
        .iter()
        .map(|r| leasehold_backend::damaged_counter(r.get(0), r.get(2), r.get(1)))
        .collect())
}

/// Delete grant `$2` of `$1` and notify `$3`/`$4` on commit, in one
/// statement.
pub(crate) const REMOVE_GRANT_SQL: &str =
    "WITH gone AS (DELETE FROM lease_grant WHERE name = $1 AND token = $2) SELECT pg_notify($3, $4)";

/// Take the name's lock, read the grant of `token` (with whether it is
/// live), plan with it (`planner` may read more, under the lock), apply
/// the plan; the plan's writer and outcome.
fn by_token<'a, 'c, T>(
    db: &'a mut Db<'c>,
    name: &'a LeaseName,
    token: Token,
    planner: impl FnOnce(&mut Db<'c>, Option<&Seen>) -> Result<Plan<T>>,
) -> Result<(Writer<'a, 'c>, T)> {
    let now = lock(db, name)?;
    let found = row(db, now, name, token)?;
    let plan = planner(db, found.as_ref())?;
    let mut w = Writer::new(db, now, name);
    plan.apply(&mut w)?;
    Ok((w, plan.outcome))
}

/// The common case of a renewal in one statement: a live grant, extended
/// under its row lock — `Some` when it was, to be committed. The owner
/// condition admits only what `rules::owner_verdict` admits; which grant
/// the caller names (`rules::scope_verdict`: a grant id is a hash SQL
/// does not compute) is checked on the row the statement returns, and
/// a row it refuses is `None`: the caller rolls the statement back and
/// judges the renewal with [`renew`], which records the refusal. So
/// anything this lets through is what `plan::renew` would renew, and
/// anything it holds back is judged there.
pub(crate) fn renew_in_place(db: &mut Db<'_>, p: &LeaseRenewParams) -> Result<Option<LeaseRenew>> {
    let renewed = db.query_opt(
        &format!(
            "UPDATE lease_grant SET expires_at = n.now + $3::bigint * interval '1 microsecond', ttl_ms = $4 \
             FROM (SELECT {NOW} AS now) AS n \
             WHERE name = $1 AND token = $2 AND expires_at > n.now \
             AND (owner = $5 OR ($5::text IS NULL AND NOT owner_explicit)) \
             RETURNING {}, n.now",
            prefixed_grant_columns()
        ),
        &[
            &p.name.as_str(),
            &(p.token.0 as i64),
            &micros(p.ttl),
            &signed(duration_millis(p.ttl)),
            &p.owner,
        ],
    )?;
    let Some(r) = renewed else { return Ok(None) };
    let now: SystemTime = r.get(10);
    let (grant, _) = read_row(&r, now)?;
    Ok(rules::scope_verdict(p.grant, &grant)
        .is_ok()
        .then_some(LeaseRenew::Renewed(grant)))
}

/// A renewal judged under the name's lock (a grant that is not live, one
/// the caller does not name, or a row that was busy: see
/// [`renew_in_place`]), its refusal recorded.
pub(crate) fn renew(db: &mut Db<'_>, p: &LeaseRenewParams) -> Result<LeaseRenew> {
    Ok(
        match by_token(db, &p.name, p.token, |db, found| {
            Ok(plan::renew(p, found, ended(db, &p.name, p.token, found)?))
        })? {
            (mut w, Ok(())) => LeaseRenew::Renewed(w.written()?),
            (_, Err(reason)) => LeaseRenew::Lost(reason),
        },
    )
}

/// The grant columns qualified by the table, for statements with a FROM.
fn prefixed_grant_columns() -> String {
    GRANT_COLUMNS
        .split(", ")
        .map(|c| format!("lease_grant.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn release(db: &mut Db<'_>, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
    let (_, outcome) = by_token(db, &p.name, p.token, |db, found| {
        Ok(plan::release(p, found, ended(db, &p.name, p.token, found)?))
    })?;
    Ok(outcome.map_or_else(LeaseRelease::Lost, |()| LeaseRelease::Released))
}

/// How the grant of `token` ended when the store no longer has it
/// (`found` is `None`): the newest of `plan::ENDINGS` recorded for it, if
/// the name's history still holds one.
fn ended(db: &mut Db<'_>, name: &LeaseName, token: Token, found: Option<&Seen>) -> Result<Option<HistoryEvent>> {
    if found.is_some() {
        return Ok(None);
    }
    let endings: Vec<&str> = plan::ENDINGS.iter().map(|e| e.as_str()).collect();
    let Some(row) = db.query_opt(
        "SELECT event FROM lease_history WHERE name = $1 AND token = $2 AND event = ANY($3) \
         ORDER BY id DESC LIMIT 1",
        &[&name.as_str(), &(token.0 as i64), &endings],
    )?
    else {
        return Ok(None);
    };
    let event: String = row.get(0);
    HistoryEvent::parse(&event)
        .map(Some)
        .ok_or_else(|| Error::BadRow(format!("unknown history event {event:?}")))
}

pub(crate) fn fence(db: &mut Db<'_>, p: &LeaseFenceParams) -> Result<LeaseFence> {
    let (_, outcome) = by_token(db, &p.name, p.token, |db, found| {
        Ok(plan::fence(p, counter(db, &p.name)?, found))
    })?;
    Ok(outcome)
}

/// Raise the token floor above every counter and the floor itself, by
/// `p.by`. The table lock waits for grants in flight and holds new ones
/// back until the commit, so none is issued between the read and the
/// floor; the reason when the bump is out of range.
pub(crate) fn tokens_bump(
    db: &mut Db<'_>,
    p: &TokensBumpParams,
) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
    db.execute("LOCK TABLE lease_name IN SHARE MODE", &[])?;
    // The history's grants too: a counter lost or lowered by damage
    // (`counter`) is repaired by a bump above every token still recorded.
    let highest: i64 = db
        .query_one(
            "SELECT greatest((SELECT coalesce(max(last_token), 0) FROM lease_name), \
             (SELECT coalesce(max(floor), 0) FROM lease_token_floor), \
             (SELECT coalesce(max(token), 0) FROM lease_history WHERE event = 'granted'))",
            &[],
        )?
        .get(0);
    let highest = Token(highest as u64);
    let floor = match p.floor_above(highest) {
        Ok(floor) => floor,
        Err(reason) => return Ok(Err(reason)),
    };
    db.execute(
        "INSERT INTO lease_token_floor (id, floor) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET floor = excluded.floor",
        &[&(floor.0 as i64)],
    )?;
    Ok(Ok(TokensBumped { highest, floor }))
}

pub(crate) fn waiter_enqueue(db: &mut Db<'_>, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
    let now = lock(db, &p.name)?;
    let w = NewWaiter {
        mode: p.mode,
        holder: p.holder.clone(),
        ttl: p.ttl,
    };
    insert_waiter(db, now, &p.name, &w)
}

pub(crate) fn waiter_remove(db: &mut Db<'_>, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
    lock(db, name)?;
    waiter_remove_locked(db, name, ticket)
}

fn waiter_remove_locked(db: &mut Db<'_>, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
    let gone = db.execute(
        "DELETE FROM lease_waiter WHERE name = $1 AND id = $2",
        &[&name.as_str(), &(ticket.0 as i64)],
    )?;
    if gone > 0 {
        // A waiter left the queue (gave up, or was granted): those behind
        // it may fit now.
        db.notify(&Watched::Lease(name.clone()))?;
    }
    Ok(())
}

pub(crate) fn get(db: &mut Db<'_>, now: SystemTime, name: &LeaseName) -> Result<Option<LeaseState>> {
    state(db, now, name, i64::MAX, i64::MAX)
}

/// [`get`] as a waiter reads it (`Backend::lease_waiting`): the waiters
/// ahead of `ticket` only, the first `proved` of them with who waits.
pub(crate) fn waiting(
    db: &mut Db<'_>,
    now: SystemTime,
    name: &LeaseName,
    ticket: WaiterTicket,
    proved: usize,
) -> Result<Option<LeaseState>> {
    let before = i64::try_from(ticket.0).unwrap_or(i64::MAX);
    state(db, now, name, before, i64::try_from(proved).unwrap_or(i64::MAX))
}

/// A name's state with its waiters queued before `before`, the first
/// `proved` of them with who waits (decoding every record at each of a
/// waiter's readings made a long queue cost its square).
fn state(db: &mut Db<'_>, now: SystemTime, name: &LeaseName, before: i64, proved: i64) -> Result<Option<LeaseState>> {
    let Some(last_token) = counter(db, name)? else {
        return Ok(None);
    };
    let grants = rows(db, now, name, false)?
        .into_iter()
        .filter_map(|(g, live)| live.then_some(g))
        .collect();
    let waiters = db
        .query(
            "SELECT id, exclusive, shared_limit, \
             CASE WHEN row_number() OVER (ORDER BY id) <= $4 THEN holder::text END \
             FROM lease_waiter WHERE name = $1 AND expires_at > $2 AND id < $3 ORDER BY id",
            &[&name.as_str(), &now, &before, &proved],
        )?
        .iter()
        .map(|r| read_waiter(r, name))
        .collect::<Result<_>>()?;
    Ok(Some(LeaseState {
        name: name.clone(),
        last_token,
        grants,
        waiters,
    }))
}

pub(crate) fn list(db: &mut Db<'_>, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
    let now = db.now()?;
    let names: Vec<String> = if p.live_only {
        db.query(
            "SELECT DISTINCT name FROM lease_grant WHERE expires_at > $1 ORDER BY name",
            &[&now],
        )?
    } else {
        db.query("SELECT name FROM lease_name ORDER BY name", &[])?
    }
    .iter()
    .map(|r| r.get(0))
    .collect();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = LeaseName::stored(name.clone())
            .map_err(|_| Error::BadRow(format!("invalid lease name {name:?} in the store")))?;
        if let Some(state) = get(db, now, &name)? {
            out.push(state);
        }
    }
    Ok(out)
}

pub(crate) fn history(db: &mut Db<'_>, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
    let rows = db.query(
        "SELECT at, event, token, owner, detail FROM lease_history WHERE name = $1 ORDER BY id DESC LIMIT $2",
        &[&p.name.as_str(), &i64::from(p.limit)],
    )?;
    rows.iter()
        .map(|r| {
            let event: String = r.get(1);
            let event =
                HistoryEvent::parse(&event).ok_or_else(|| Error::BadRow(format!("unknown history event {event:?}")))?;
            Ok(HistoryEntry {
                at: r.get(0),
                event,
                token: r.get::<_, Option<i64>>(2).map(|t| Token(t as u64)),
                owner: r.get(3),
                detail: r.get(4),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_sql::{statements, substitute};

    /// `bench/lease.sql`, which pgbench runs as the reference, holds the
    /// very statements an acquisition and a release of a free name send
    /// (parameters spelled as its literals, variables and expressions).
    #[test]
    fn the_pgbench_reference_runs_the_same_statements() {
        let name = "'pgb-' || :client_id";
        let lock = substitute(&lock_sql(), &["'leasehold/bench/lease/pgb-' || :client_id"]) + " \\gset";
        let (channel, payload) = ("'leasehold.bench'", r"E'lease\x3apgb-' || :client_id");
        let keep = (HISTORY_PER_NAME - 1).to_string();
        let record =
            |event: &str, detail: &str| substitute(RECORD_SQL, &[name, event, ":token", "'bench'", detail, &keep]);
        let holder = r#"'{"host":"bench","pid":1}'"#;
        let expected = [
            "BEGIN".to_owned(),
            lock.clone(),
            substitute(&rows_sql(true), &[name]),
            substitute(WAITERS_SQL, &[name, ":now", channel, payload]),
            substitute(
                &insert_grant_sql(),
                &[
                    name,
                    "'bench'",
                    "false",
                    "true",
                    "NULL",
                    holder,
                    "60000",
                    ":now::timestamptz + interval '60 s'",
                ],
            ) + " \\gset",
            record("'granted'", "'exclusive for 60.0s to bench:1'"),
            "COMMIT".to_owned(),
            "BEGIN".to_owned(),
            lock,
            substitute(&row_sql(), &[name, ":token"]),
            substitute(REMOVE_GRANT_SQL, &[name, ":token", channel, payload]),
            record("'released'", "'released by its holder'"),
            "COMMIT".to_owned(),
        ];
        assert_eq!(
            statements(include_str!("../bench/lease.sql")),
            expected.map(|s| statements(&s).join(" "))
        );
    }
}
