//! Lease operations, each run inside one transaction opened by the caller
//! (`BEGIN IMMEDIATE` for every operation that may write): read what the
//! decision needs, plan it with `leasehold_backend::plan`, apply the plan
//! through [`Writer`].
//!
//! A grant row is live while it belongs to this boot and its `expires_ns`
//! (boot clock) lies ahead. Expired rows are removed — and recorded as
//! `expired` — by the next writer that looks at the name; readers just
//! filter them out.

use std::time::{Duration, SystemTime};

use leasehold_backend::plan::{
    self, Acquire, Apply, Entry, HISTORY_PER_NAME, HISTORY_PRUNE_EVERY, Issued, NewGrant, NewWaiter, Plan, Seen,
};
use leasehold_backend::unix_ms::{from_ms, to_ms};
use leasehold_backend::{
    Grant, HistoryEntry, HistoryEvent, Holder, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, Mode, QueuedWaiter, Token, TokensBumpParams, TokensBumpRefused, TokensBumped, WaiterEnqueueParams,
    WaiterTicket, duration_millis, duration_nanos, signed, stored_millis,
};
use rusqlite::{OptionalExtension, Transaction, params};

use crate::Now;

#[derive(Debug)]
pub(crate) enum Error {
    Sqlite(rusqlite::Error),
    /// A row that this code could not have written (damaged or edited).
    BadRow(String),
    /// A name's token counter below a token its history says was issued
    /// (or missing): issuing from it would reissue tokens ([`counter`]).
    Counter(String),
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sqlite(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// Where on the boot clock a grant or a claim of `ttl` taken `now` expires.
pub(crate) fn expires_at(now: &Now, ttl: Duration) -> i64 {
    now.ns.saturating_add(signed(duration_nanos(ttl)))
}

fn mode_columns(mode: Mode) -> (bool, Option<u32>) {
    match mode {
        Mode::Exclusive => (true, None),
        Mode::Shared { limit } => (false, limit),
    }
}

fn mode_from_columns(exclusive: bool, limit: Option<u32>) -> Mode {
    if exclusive {
        Mode::Exclusive
    } else {
        Mode::Shared { limit }
    }
}

const GRANT_COLUMNS: &str =
    "name, token, owner, owner_explicit, exclusive, shared_limit, holder, acquired_ms, ttl_ms, boot_id, expires_ns";

/// A grant row, live while it belongs to this boot and its expiry (boot
/// clock) lies ahead.
fn read_row(r: &rusqlite::Row<'_>, now: &Now) -> rusqlite::Result<Result<Seen>> {
    let name: String = r.get(0)?;
    let holder_json: String = r.get(6)?;
    let boot_id: String = r.get(9)?;
    let expires_ns: i64 = r.get(10)?;
    let Ok(name) = LeaseName::stored(name.clone()) else {
        return Ok(Err(Error::BadRow(format!(
            "lease_grant holds an invalid name {name:?}"
        ))));
    };
    let holder: Holder = match serde_json::from_str(&holder_json) {
        Ok(h) => h,
        Err(e) => {
            return Ok(Err(Error::BadRow(format!(
                "grant of {name} has an unreadable holder record: {e}"
            ))));
        }
    };
    let remaining = if boot_id == now.boot_id {
        expires_ns.saturating_sub(now.ns).max(0)
    } else {
        0
    };
    let grant = Grant {
        name,
        token: Token(r.get::<_, i64>(1)? as u64),
        owner: r.get(2)?,
        owner_explicit: r.get(3)?,
        mode: mode_from_columns(r.get(4)?, r.get(5)?),
        holder,
        acquired_at: from_ms(r.get(7)?),
        ttl: stored_millis(r.get(8)?),
        expires_in: Duration::from_nanos(remaining.unsigned_abs()),
    };
    Ok(Ok((grant, remaining > 0)))
}

/// The statement reading the grant rows of a name.
pub(crate) fn rows_sql() -> String {
    format!("SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = ?1 ORDER BY token")
}

fn rows(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<Seen>> {
    let mut stmt = tx.prepare_cached(&rows_sql())?;
    let rows = stmt.query_map([name.as_str()], |r| read_row(r, now))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

fn row(tx: &Transaction<'_>, now: &Now, name: &LeaseName, token: Token) -> Result<Option<Seen>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = ?1 AND token = ?2"
    ))?;
    match stmt
        .query_row(params![name.as_str(), token.0 as i64], |r| read_row(r, now))
        .optional()?
    {
        Some(row) => Ok(Some(row?)),
        None => Ok(None),
    }
}

fn delete_grant(tx: &Transaction<'_>, name: &LeaseName, token: Token) -> Result<()> {
    tx.prepare_cached("DELETE FROM lease_grant WHERE name = ?1 AND token = ?2")?
        .execute(params![name.as_str(), token.0 as i64])?;
    Ok(())
}

fn record(
    tx: &Transaction<'_>,
    name: &LeaseName,
    event: HistoryEvent,
    token: Option<Token>,
    owner: Option<&str>,
    detail: &str,
) -> Result<()> {
    // A name's ids run without gaps (each the name's highest + 1; only the
    // oldest are ever deleted), so the newest HISTORY_PER_NAME are those
    // above `id - HISTORY_PER_NAME`: pruning is one range delete, not a
    // walk over the name's entries to find where they start; and it is
    // done at every HISTORY_PRUNE_EVERY-th id only, as the bound allows.
    // The id is read first, not computed inside the INSERT: an INSERT that
    // selects from its own table, or returns what it wrote, goes through a
    // temporary table.
    let id: i64 = tx
        .prepare_cached("SELECT coalesce(max(id), 0) + 1 FROM lease_history WHERE name = ?1")?
        .query_row([name.as_str()], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO lease_history (name, id, at_ms, event, token, owner, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        name.as_str(),
        id,
        to_ms(SystemTime::now()),
        event.as_str(),
        token.map(|t| t.0 as i64),
        owner,
        detail
    ])?;
    if id % i64::from(HISTORY_PRUNE_EVERY) == 0 && id > i64::from(HISTORY_PER_NAME) {
        tx.prepare_cached("DELETE FROM lease_history WHERE name = ?1 AND id <= ?2")?
            .execute(params![name.as_str(), id - i64::from(HISTORY_PER_NAME)])?;
    }
    Ok(())
}

/// Live waiters of `name` in FIFO order; expired registrations are removed.
fn waiters(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<QueuedWaiter>> {
    tx.prepare_cached("DELETE FROM lease_waiter WHERE name = ?1 AND (boot_id != ?2 OR expires_ns <= ?3)")?
        .execute(params![name.as_str(), now.boot_id, now.ns])?;
    live_waiters(tx, now, name)
}

/// The waiters of `name` live by the store's clock, in FIFO order, with
/// the processes that wait (only reads).
fn live_waiters(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<QueuedWaiter>> {
    waiters_before(tx, now, name, i64::MAX, usize::MAX)
}

/// The live waiters of `name` queued before ticket `before`, in FIFO
/// order; only the first `proved` with who waits (decoding each record is
/// what a waiter's reading would otherwise spend on a long queue).
fn waiters_before(
    tx: &Transaction<'_>,
    now: &Now,
    name: &LeaseName,
    before: i64,
    proved: usize,
) -> Result<Vec<QueuedWaiter>> {
    let mut stmt = tx.prepare_cached(
        "SELECT id, exclusive, shared_limit, holder FROM lease_waiter \
         WHERE name = ?1 AND boot_id = ?2 AND expires_ns > ?3 AND id < ?4 ORDER BY id",
    )?;
    let mut rows = stmt.query(params![name.as_str(), now.boot_id, now.ns, before])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let ticket = WaiterTicket(r.get::<_, i64>(0)? as u64);
        let mode = mode_from_columns(r.get(1)?, r.get(2)?);
        let holder = if out.len() < proved {
            let holder = r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
            Some(serde_json::from_str(holder).map_err(|e| {
                Error::BadRow(format!(
                    "waiter {} of {name} has an unreadable holder record: {e}",
                    ticket.0
                ))
            })?)
        } else {
            None
        };
        out.push(QueuedWaiter { ticket, mode, holder });
    }
    Ok(out)
}

fn insert_waiter(tx: &Transaction<'_>, now: &Now, name: &LeaseName, w: &NewWaiter) -> Result<WaiterTicket> {
    let (exclusive, limit) = mode_columns(w.mode);
    let holder = serde_json::to_string(&w.holder).expect("a holder always serializes");
    tx.prepare_cached(
        "INSERT INTO lease_waiter (name, exclusive, shared_limit, holder, boot_id, expires_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![name.as_str(), exclusive, limit, holder, now.boot_id, expires_at(now, w.ttl)])?;
    Ok(WaiterTicket(tx.last_insert_rowid() as u64))
}

/// Applies a plan to one name inside the caller's transaction; keeps the
/// token and ticket it issued, and the grant it wrote as it would now read
/// it back (rows the transaction just wrote are not read again).
struct Writer<'a> {
    tx: &'a Transaction<'a>,
    now: &'a Now,
    name: &'a LeaseName,
    /// The grant rows the plan was made from.
    seen: &'a [Seen],
    issued: Option<Token>,
    ticket: Option<WaiterTicket>,
    written: Option<Grant>,
}

impl<'a> Writer<'a> {
    fn new(tx: &'a Transaction<'a>, now: &'a Now, name: &'a LeaseName, seen: &'a [Seen]) -> Self {
        Self {
            tx,
            now,
            name,
            seen,
            issued: None,
            ticket: None,
            written: None,
        }
    }

    /// The grant `token`, as the plan wrote it.
    fn grant(self, token: Issued<Token>) -> Result<Grant> {
        let token = token.resolve(self.issued);
        self.written.filter(|g| g.token == token).ok_or_else(|| {
            Error::BadRow(format!(
                "grant {token} of {} vanished inside its transaction",
                self.name
            ))
        })
    }

    /// What reading a grant back would give for the TTL written for it
    /// now: the TTL in whole milliseconds, the time left on the boot clock.
    fn timing(&self, ttl: Duration) -> (i64, Duration, i64) {
        let expires = expires_at(self.now, ttl);
        let ttl_ms = signed(duration_millis(ttl));
        let left = Duration::from_nanos(expires.saturating_sub(self.now.ns).max(0).unsigned_abs());
        (ttl_ms, left, expires)
    }
}

impl Apply for Writer<'_> {
    type Error = Error;

    fn remove_grant(&mut self, token: Token, _live: bool) -> Result<()> {
        delete_grant(self.tx, self.name, token)
    }

    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<()> {
        let (ttl_ms, left, expires) = self.timing(ttl);
        let holder_json = holder.map(|h| serde_json::to_string(h).expect("a holder always serializes"));
        self.tx
            .prepare_cached(
                "UPDATE lease_grant SET expires_ns = ?3, ttl_ms = ?4, holder = coalesce(?5, holder) \
                 WHERE name = ?1 AND token = ?2",
            )?
            .execute(params![
                self.name.as_str(),
                token.0 as i64,
                expires,
                ttl_ms,
                holder_json
            ])?;
        // Only live grants are extended, and a live grant is of this boot.
        self.written = self.seen.iter().find(|(g, _)| g.token == token).map(|(g, _)| Grant {
            holder: holder.unwrap_or(&g.holder).clone(),
            ttl: stored_millis(ttl_ms),
            expires_in: left,
            ..g.clone()
        });
        Ok(())
    }

    fn insert_grant(&mut self, g: &NewGrant) -> Result<()> {
        // Read, then write the counter (the transaction holds the write
        // lock): an upsert RETURNING the new value would go through a
        // temporary table.
        let newest = counter(self.tx, self.name)?.map_or(0, |t| t.0 as i64);
        let mut token = newest.max(token_floor(self.tx)?) + 1;
        // Planted bug (scripts/mutants): the previous token, issued again.
        if leasehold_backend::mutant::strikes(leasehold_backend::mutant::Mutant::ReissueToken, || newest > 0) {
            token = newest;
        }
        self.tx
            .prepare_cached(
                "INSERT INTO lease_name (name, last_token) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO UPDATE SET last_token = excluded.last_token",
            )?
            .execute(params![self.name.as_str(), token])?;
        let (exclusive, limit) = mode_columns(g.mode);
        let (ttl_ms, left, expires) = self.timing(g.ttl);
        let acquired_ms = to_ms(SystemTime::now());
        self.tx
            .prepare_cached(&format!(
                "INSERT INTO lease_grant ({GRANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
            ))?
            .execute(params![
                self.name.as_str(),
                token,
                g.owner.label,
                g.owner.explicit,
                exclusive,
                limit,
                serde_json::to_string(&g.holder).expect("a holder always serializes"),
                acquired_ms,
                ttl_ms,
                self.now.boot_id,
                expires,
            ])?;
        let token = Token(token as u64);
        self.issued = Some(token);
        self.written = Some(Grant {
            name: self.name.clone(),
            token,
            owner: g.owner.label.clone(),
            owner_explicit: g.owner.explicit,
            mode: mode_from_columns(exclusive, limit),
            holder: g.holder.clone(),
            acquired_at: from_ms(acquired_ms),
            ttl: stored_millis(ttl_ms),
            expires_in: left,
        });
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE lease_waiter SET expires_ns = ?2 WHERE id = ?1")?
            .execute(params![ticket.0 as i64, expires_at(self.now, ttl)])?;
        Ok(())
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<()> {
        self.ticket = Some(insert_waiter(self.tx, self.now, self.name, w)?);
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<()> {
        waiter_remove(self.tx, self.name, ticket)
    }

    fn record(&mut self, e: &Entry) -> Result<()> {
        let token = e.token.resolve(self.issued);
        record(self.tx, self.name, e.event, Some(token), e.owner.as_deref(), &e.detail)
    }
}

pub(crate) fn acquire(tx: &Transaction<'_>, now: &Now, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
    let rows = rows(tx, now, &p.name)?;
    let queue = waiters(tx, now, &p.name)?;
    let plan = plan::acquire(p, &rows, &queue);
    let mut w = Writer::new(tx, now, &p.name, &rows);
    plan.apply(&mut w)?;
    Ok(match plan.outcome {
        Acquire::Acquired(token) => LeaseAcquire::Acquired(w.grant(token)?),
        Acquire::Held(waiting) => {
            let ticket = w.ticket;
            LeaseAcquire::Held(waiting.held(rows.into_iter().map(|(g, _)| g), ticket))
        }
    })
}

/// Read the grant of `token` (with whether it is live), plan with it,
/// apply the plan; the grant the plan wrote (if it did) and its outcome.
/// Without the grant, the planner also gets how the history says it
/// ended (`plan::ENDINGS`), when `ending` asks for it.
fn by_token<T>(
    tx: &Transaction<'_>,
    now: &Now,
    (name, token): (&LeaseName, Token),
    ending: bool,
    planner: impl FnOnce(Option<&Seen>, Option<HistoryEvent>) -> Plan<T>,
) -> Result<(Option<Grant>, T)> {
    let found = row(tx, now, name, token)?;
    let ended = match found {
        None if ending => ended(tx, name, token)?,
        _ => None,
    };
    let plan = planner(found.as_ref(), ended);
    let mut w = Writer::new(tx, now, name, found.as_slice());
    plan.apply(&mut w)?;
    Ok((w.written, plan.outcome))
}

/// How the grant of `token` ended, by the newest of `plan::ENDINGS`
/// recorded for it (a scan of the name's history, pruned to
/// `HISTORY_PER_NAME` entries: only for a token the store no longer has).
fn ended(tx: &Transaction<'_>, name: &LeaseName, token: Token) -> Result<Option<HistoryEvent>> {
    let endings = plan::ENDINGS.map(|e| format!("'{}'", e.as_str())).join(", ");
    let event: Option<String> = tx
        .prepare_cached(&format!(
            "SELECT event FROM lease_history WHERE name = ?1 AND token = ?2 AND event IN ({endings}) \
             ORDER BY id DESC LIMIT 1"
        ))?
        .query_row(params![name.as_str(), token.0 as i64], |r| r.get(0))
        .optional()?;
    event
        .map(|e| HistoryEvent::parse(&e).ok_or_else(|| Error::BadRow(format!("unknown history event {e:?}"))))
        .transpose()
}

pub(crate) fn renew(tx: &Transaction<'_>, now: &Now, p: &LeaseRenewParams) -> Result<LeaseRenew> {
    Ok(
        match by_token(tx, now, (&p.name, p.token), true, |found, ended| {
            plan::renew(p, found, ended)
        })? {
            (Some(grant), Ok(())) => LeaseRenew::Renewed(grant),
            (None, Ok(())) => {
                return Err(Error::BadRow(format!(
                    "grant {} of {} vanished inside its transaction",
                    p.token, p.name
                )));
            }
            (_, Err(reason)) => LeaseRenew::Lost(reason),
        },
    )
}

pub(crate) fn release(tx: &Transaction<'_>, now: &Now, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
    let (_, outcome) = by_token(tx, now, (&p.name, p.token), true, |found, ended| {
        plan::release(p, found, ended)
    })?;
    Ok(outcome.map_or_else(LeaseRelease::Lost, |()| LeaseRelease::Released))
}

/// The floor of `--bump-tokens` (0 before any bump).
fn token_floor(tx: &Transaction<'_>) -> Result<i64> {
    Ok(tx
        .prepare_cached("SELECT floor FROM lease_token_floor WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Raise the floor above every counter and the floor itself, by `p.by`.
pub(crate) fn tokens_bump(
    tx: &Transaction<'_>,
    p: &TokensBumpParams,
) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
    // The history's grants too: a counter lost or lowered by damage
    // (`counter`) is repaired by a bump above every token still recorded.
    let newest: i64 = tx.query_row(
        "SELECT max((SELECT coalesce(max(last_token), 0) FROM lease_name), \
                    (SELECT coalesce(max(token), 0) FROM lease_history WHERE event = 'granted'))",
        [],
        |r| r.get(0),
    )?;
    let highest = Token(newest.max(token_floor(tx)?) as u64);
    let floor = match p.floor_above(highest) {
        Ok(floor) => floor,
        Err(reason) => return Ok(Err(reason)),
    };
    tx.execute(
        "INSERT INTO lease_token_floor (id, floor) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET floor = excluded.floor",
        params![floor.0 as i64],
    )?;
    Ok(Ok(TokensBumped { highest, floor }))
}

/// The newest token issued for `name` as its history records it: the
/// token of its newest `granted` entry (each grant has a larger token than
/// every earlier one, so the newest is the largest). Refused stale tokens
/// are recorded too, but as the caller gave them — never counted here.
/// Walks back from the newest entry to the first grant: one or two rows
/// unless the name has only been refused lately (at most
/// `HISTORY_PER_NAME`).
fn newest_granted(tx: &Transaction<'_>, name: &LeaseName) -> Result<Option<i64>> {
    Ok(tx
        .prepare_cached(
            "SELECT token FROM lease_history WHERE name = ?1 AND event = 'granted' ORDER BY id DESC LIMIT 1",
        )?
        .query_row([name.as_str()], |r| r.get::<_, Option<i64>>(0))
        .optional()?
        .flatten())
}

/// The token counter of `name`, checked against its history: a damaged
/// store (a `lease_name` row lost or with a damaged key, a counter
/// lowered) must never issue a token at or below one it issued, and
/// `status` must not call a granted name never granted (issue 39, item
/// 11). A counter below the newest grant in the history is refused as
/// damage ([`Error::Counter`], the CLI's exit 65) — not repaired from the
/// history, which is pruned and may be damaged too — unless the store's
/// floor (`migrate --bump-tokens`, the repair the refusal names) is above
/// it: then every token issued is above both, and the counter is taken
/// as the larger of the two.
fn counter(tx: &Transaction<'_>, name: &LeaseName) -> Result<Option<Token>> {
    let last = last_token(tx, name)?;
    let Some(granted) = newest_granted(tx, name)? else {
        return Ok(last);
    };
    let counted = last.map_or(0, |t| t.0 as i64);
    if counted >= granted {
        return Ok(last);
    }
    if token_floor(tx)? >= granted {
        return Ok(Some(Token(counted.max(granted) as u64)));
    }
    Err(Error::Counter(leasehold_backend::damaged_counter(
        name.as_str(),
        last.map(|t| t.0 as i64),
        granted,
    )))
}

/// For `doctor`: every name whose counter [`counter`] would refuse, said
/// as it says it — a scan of the whole history (`list` reads only the
/// counters, so a name whose counter row is lost is missing from it).
pub(crate) fn counters_below_history(conn: &rusqlite::Connection) -> Result<Vec<String>> {
    let floor: i64 = conn
        .prepare_cached("SELECT floor FROM lease_token_floor WHERE id = 1")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let mut stmt = conn.prepare(
        "SELECT h.name, max(h.token), n.last_token FROM lease_history h LEFT JOIN lease_name n ON n.name = h.name \
         WHERE h.event = 'granted' GROUP BY h.name \
         HAVING max(h.token) > coalesce(n.last_token, 0) AND max(h.token) > ?1 ORDER BY h.name",
    )?;
    let rows = stmt.query_map([floor], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<i64>>(2)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (name, granted, last) = row?;
        out.push(leasehold_backend::damaged_counter(&name, last, granted));
    }
    Ok(out)
}

fn last_token(tx: &Transaction<'_>, name: &LeaseName) -> Result<Option<Token>> {
    Ok(tx
        .prepare_cached("SELECT last_token FROM lease_name WHERE name = ?1")?
        .query_row([name.as_str()], |r| r.get::<_, i64>(0))
        .optional()?
        .map(|t| Token(t as u64)))
}

pub(crate) fn fence(tx: &Transaction<'_>, now: &Now, p: &LeaseFenceParams) -> Result<LeaseFence> {
    let newest = counter(tx, &p.name)?;
    let (_, outcome) = by_token(tx, now, (&p.name, p.token), false, |found, _| {
        plan::fence(p, newest, found)
    })?;
    Ok(outcome)
}

pub(crate) fn waiter_enqueue(tx: &Transaction<'_>, now: &Now, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
    let w = NewWaiter {
        mode: p.mode,
        holder: p.holder.clone(),
        ttl: p.ttl,
    };
    insert_waiter(tx, now, &p.name, &w)
}

pub(crate) fn waiter_remove(tx: &Transaction<'_>, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
    tx.prepare_cached("DELETE FROM lease_waiter WHERE name = ?1 AND id = ?2")?
        .execute(params![name.as_str(), ticket.0 as i64])?;
    Ok(())
}

pub(crate) fn get(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Option<LeaseState>> {
    state(tx, now, name, i64::MAX, usize::MAX)
}

/// [`get`] as a waiter reads it (`Backend::lease_waiting`): the waiters
/// ahead of `ticket` only, the first `proved` of them with who waits.
pub(crate) fn waiting(
    tx: &Transaction<'_>,
    now: &Now,
    name: &LeaseName,
    ticket: WaiterTicket,
    proved: usize,
) -> Result<Option<LeaseState>> {
    state(tx, now, name, i64::try_from(ticket.0).unwrap_or(i64::MAX), proved)
}

/// A name's state with its waiters queued before `before` (the first
/// `proved` of them with who waits).
fn state(tx: &Transaction<'_>, now: &Now, name: &LeaseName, before: i64, proved: usize) -> Result<Option<LeaseState>> {
    let Some(last_token) = counter(tx, name)? else {
        return Ok(None);
    };
    let grants = rows(tx, now, name)?
        .into_iter()
        .filter_map(|(g, live)| live.then_some(g))
        .collect();
    Ok(Some(LeaseState {
        name: name.clone(),
        last_token,
        grants,
        waiters: waiters_before(tx, now, name, before, proved)?,
    }))
}

pub(crate) fn list(tx: &Transaction<'_>, now: &Now, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
    let sql = if p.live_only {
        "SELECT DISTINCT name FROM lease_grant WHERE boot_id = ?1 AND expires_ns > ?2 ORDER BY name"
    } else {
        "SELECT name FROM lease_name WHERE ?1 IS NOT NULL AND ?2 IS NOT NULL ORDER BY name"
    };
    let names = tx
        .prepare_cached(sql)?
        .query_map(params![now.boot_id, now.ns], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let name = LeaseName::stored(name.clone())
            .map_err(|_| Error::BadRow(format!("invalid lease name {name:?} in the store")))?;
        if let Some(state) = get(tx, now, &name)? {
            out.push(state);
        }
    }
    Ok(out)
}

pub(crate) fn history(tx: &Transaction<'_>, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
    let mut stmt = tx.prepare_cached(
        "SELECT at_ms, event, token, owner, detail FROM lease_history WHERE name = ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![p.name.as_str(), i64::from(p.limit)], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (at, event, token, owner, detail) = row?;
        let event =
            HistoryEvent::parse(&event).ok_or_else(|| Error::BadRow(format!("unknown history event {event:?}")))?;
        out.push(HistoryEntry {
            at: from_ms(at),
            event,
            token: token.map(|t| Token(t as u64)),
            owner,
            detail,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use leasehold_backend::Mode;
    use leasehold_backend_tests::params;
    use rusqlite::{Connection, TransactionBehavior};

    use super::*;

    /// The grant an operation returns is the one it wrote, not read back:
    /// it must be exactly what reading it back at the same moment gives.
    #[test]
    fn a_written_grant_is_returned_as_it_reads_back() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::schema::prepare(&mut conn).unwrap().unwrap();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let now = Now {
            boot_id: "boot".into(),
            ns: 5_000_000_123,
            wall: SystemTime::now(),
        };
        let read_back = |g: &Grant| row(&tx, &now, &g.name, g.token).unwrap().unwrap().0;
        let shared = LeaseAcquireParams {
            owner: params::explicit("alice"),
            mode: Mode::Shared { limit: Some(3) },
            // Sub-millisecond parts are not stored.
            ttl: Duration::from_micros(2_500_700),
            ..params::acquire("job")
        };
        for p in [params::acquire("solo"), shared.clone()] {
            let LeaseAcquire::Acquired(granted) = acquire(&tx, &now, &p).unwrap() else {
                panic!("held")
            };
            assert_eq!(granted, read_back(&granted), "granted");
        }
        let again = LeaseAcquireParams {
            holder: Holder {
                cmdline: "another command line".into(),
                ..params::holder()
            },
            ..shared
        };
        let LeaseAcquire::Acquired(reacquired) = acquire(&tx, &now, &again).unwrap() else {
            panic!("held")
        };
        assert_eq!(reacquired.holder.cmdline, "another command line");
        assert_eq!(reacquired, read_back(&reacquired), "re-acquired");
        let renew = LeaseRenewParams {
            owner: Some("alice".into()),
            ttl: Duration::from_nanos(7_000_999_999),
            ..params::renew("job", reacquired.token)
        };
        let LeaseRenew::Renewed(renewed) = super::renew(&tx, &now, &renew).unwrap() else {
            panic!("lost")
        };
        assert_eq!(renewed, read_back(&renewed), "renewed");
    }
}
