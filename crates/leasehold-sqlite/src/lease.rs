//! Lease operations, each run inside one transaction opened by the caller
//! (`BEGIN IMMEDIATE` for every operation that may write).
//!
//! A grant row is live while it belongs to this boot and its `expires_ns`
//! (boot clock) lies ahead. Expired rows are removed — and recorded as
//! `expired` — by the next writer that looks at the name; readers just
//! filter them out.

use std::time::{Duration, SystemTime};

use leasehold_backend::failpoint;
use leasehold_backend::rules::{self, detail};
use leasehold_backend::unix_ms::{from_ms, to_ms};
use leasehold_backend::{
    Grant, Held, HistoryEntry, HistoryEvent, Holder, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, LostReason, Mode, Token, WaiterEnqueueParams, WaiterTicket, duration_millis, duration_nanos, signed,
    stored_millis,
};
use rusqlite::{OptionalExtension, Transaction, params};

use crate::Now;

/// History entries kept per name; older ones are pruned on insert.
const HISTORY_PER_NAME: i64 = 1000;

#[derive(Debug)]
pub(crate) enum Error {
    Sqlite(rusqlite::Error),
    /// A row that this code could not have written (damaged or edited).
    BadRow(String),
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sqlite(e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// A grant row with its expiry on the boot clock.
struct Row {
    grant: Grant,
    boot_id: String,
    expires_ns: i64,
}

impl Row {
    fn is_live(&self, now: &Now) -> bool {
        self.boot_id == now.boot_id && self.expires_ns > now.ns
    }
}

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

fn read_row(r: &rusqlite::Row<'_>, now: &Now) -> rusqlite::Result<std::result::Result<Row, String>> {
    let name: String = r.get(0)?;
    let holder_json: String = r.get(6)?;
    let boot_id: String = r.get(9)?;
    let expires_ns: i64 = r.get(10)?;
    let Ok(name) = LeaseName::new(name.clone()) else {
        return Ok(Err(format!("lease_grant holds an invalid name {name:?}")));
    };
    let holder: Holder = match serde_json::from_str(&holder_json) {
        Ok(h) => h,
        Err(e) => return Ok(Err(format!("grant of {name} has an unreadable holder record: {e}"))),
    };
    let remaining = if boot_id == now.boot_id {
        expires_ns.saturating_sub(now.ns).max(0)
    } else {
        0
    };
    Ok(Ok(Row {
        grant: Grant {
            name,
            token: Token(r.get::<_, i64>(1)? as u64),
            owner: r.get(2)?,
            owner_explicit: r.get(3)?,
            mode: mode_from_columns(r.get(4)?, r.get(5)?),
            holder,
            acquired_at: from_ms(r.get(7)?),
            ttl: stored_millis(r.get(8)?),
            expires_in: Duration::from_nanos(remaining.unsigned_abs()),
        },
        boot_id,
        expires_ns,
    }))
}

fn rows(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<Row>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = ?1 ORDER BY token"
    ))?;
    let rows = stmt.query_map([name.as_str()], |r| read_row(r, now))?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row?.map_err(Error::BadRow)?);
    }
    Ok(out)
}

fn row(tx: &Transaction<'_>, now: &Now, name: &LeaseName, token: Token) -> Result<Option<Row>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {GRANT_COLUMNS} FROM lease_grant WHERE name = ?1 AND token = ?2"
    ))?;
    match stmt
        .query_row(params![name.as_str(), token.0 as i64], |r| read_row(r, now))
        .optional()?
    {
        Some(row) => Ok(Some(row.map_err(Error::BadRow)?)),
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
    tx.prepare_cached(
        "INSERT INTO lease_history (name, id, at_ms, event, token, owner, detail) \
         SELECT ?1, coalesce(max(id), 0) + 1, ?2, ?3, ?4, ?5, ?6 FROM lease_history WHERE name = ?1",
    )?
    .execute(params![
        name.as_str(),
        to_ms(SystemTime::now()),
        event.as_str(),
        token.map(|t| t.0 as i64),
        owner,
        detail
    ])?;
    // Bounded growth: keep the newest HISTORY_PER_NAME entries of the name.
    tx.prepare_cached(
        "DELETE FROM lease_history WHERE name = ?1 AND id <= \
         (SELECT id FROM lease_history WHERE name = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
    )?
    .execute(params![name.as_str(), HISTORY_PER_NAME])?;
    Ok(())
}

/// Remove the expired grants of `name` (recording each) and return the live ones.
fn sweep(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<Grant>> {
    let mut live = Vec::new();
    for row in rows(tx, now, name)? {
        if row.is_live(now) {
            live.push(row.grant);
        } else {
            expire(tx, &row)?;
        }
    }
    Ok(live)
}

fn expire(tx: &Transaction<'_>, row: &Row) -> Result<()> {
    let g = &row.grant;
    delete_grant(tx, &g.name, g.token)?;
    record(
        tx,
        &g.name,
        HistoryEvent::Expired,
        Some(g.token),
        Some(&g.owner),
        &detail::expired(g.ttl, &g.holder),
    )
}

struct Waiter {
    ticket: WaiterTicket,
    mode: Mode,
}

/// Live waiters of `name` in FIFO order; expired registrations are removed.
fn waiters(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Vec<Waiter>> {
    tx.prepare_cached("DELETE FROM lease_waiter WHERE name = ?1 AND (boot_id != ?2 OR expires_ns <= ?3)")?
        .execute(params![name.as_str(), now.boot_id, now.ns])?;
    let mut stmt =
        tx.prepare_cached("SELECT id, exclusive, shared_limit FROM lease_waiter WHERE name = ?1 ORDER BY id")?;
    let out = stmt
        .query_map([name.as_str()], |r| {
            Ok(Waiter {
                ticket: WaiterTicket(r.get::<_, i64>(0)? as u64),
                mode: mode_from_columns(r.get(1)?, r.get(2)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(out)
}

fn insert_waiter(
    tx: &Transaction<'_>,
    now: &Now,
    name: &LeaseName,
    mode: Mode,
    holder: &Holder,
    ttl: Duration,
) -> Result<WaiterTicket> {
    let (exclusive, limit) = mode_columns(mode);
    let holder = serde_json::to_string(holder).expect("a holder always serializes");
    tx.prepare_cached(
        "INSERT INTO lease_waiter (name, exclusive, shared_limit, holder, boot_id, expires_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![name.as_str(), exclusive, limit, holder, now.boot_id, expires_at(now, ttl)])?;
    Ok(WaiterTicket(tx.last_insert_rowid() as u64))
}

pub(crate) fn acquire(tx: &Transaction<'_>, now: &Now, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
    let name = &p.name;
    let mut live = sweep(tx, now, name)?;

    // Fast takeover: the caller proved these holders dead. Only tokens that
    // are still live here are removed, so a stale proof cannot evict a newer
    // grant.
    for token in &p.evict {
        if let Some(i) = live.iter().position(|g| g.token == *token) {
            let g = live.remove(i);
            delete_grant(tx, name, g.token)?;
            record(
                tx,
                name,
                HistoryEvent::FastTakeover,
                Some(g.token),
                Some(&g.owner),
                &detail::fast_takeover(&g.holder, &p.holder),
            )?;
        }
    }

    // Re-acquisition by the same explicit owner, or by the same process.
    if let Some((g, why)) = live
        .iter()
        .find_map(|g| rules::reacquires(p, &g.owner, g.owner_explicit, g.mode, &g.holder).map(|why| (g, why)))
    {
        let token = g.token;
        tx.prepare_cached(
            "UPDATE lease_grant SET expires_ns = ?3, ttl_ms = ?4, holder = ?5 WHERE name = ?1 AND token = ?2",
        )?
        .execute(params![
            name.as_str(),
            token.0 as i64,
            expires_at(now, p.ttl),
            signed(duration_millis(p.ttl)),
            serde_json::to_string(&p.holder).expect("a holder always serializes")
        ])?;
        return finish_grant(tx, now, p, token, HistoryEvent::Reacquired, why);
    }

    // FIFO: serve, in order, every waiter ahead that could be granted; the
    // first one that cannot blocks everyone behind it.
    let queue = waiters(tx, now, name)?;
    let mine = p.ticket.and_then(|t| queue.iter().position(|w| w.ticket == t));
    let ahead = &queue[..mine.unwrap_or(queue.len())];
    if let (Some(i), Some(t)) = (mine, p.ticket) {
        debug_assert_eq!(queue[i].ticket, t);
        tx.prepare_cached("UPDATE lease_waiter SET expires_ns = ?2 WHERE id = ?1")?
            .execute(params![t.0 as i64, expires_at(now, p.waiter_ttl)])?;
    }
    if !rules::admits(live.iter().map(|g| g.mode), ahead.iter().map(|w| w.mode), p.mode) {
        let waiters_ahead = ahead.len() as u32;
        let ticket = match (p.ticket, mine) {
            (Some(t), Some(_)) => Some(t),
            // The registration expired: re-make it, at the back.
            (Some(_), None) => Some(insert_waiter(tx, now, name, p.mode, &p.holder, p.waiter_ttl)?),
            (None, _) => None,
        };
        return Ok(LeaseAcquire::Held(Held {
            grants: live,
            waiters_ahead,
            ticket,
        }));
    }

    let token: i64 = tx
        .prepare_cached(
            "INSERT INTO lease_name (name, last_token) VALUES (?1, 1) \
             ON CONFLICT (name) DO UPDATE SET last_token = last_token + 1 RETURNING last_token",
        )?
        .query_row([name.as_str()], |r| r.get(0))?;
    let token = Token(token as u64);
    failpoint!("acquire", "token");
    let (exclusive, limit) = mode_columns(p.mode);
    tx.prepare_cached(&format!(
        "INSERT INTO lease_grant ({GRANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    ))?
    .execute(params![
        name.as_str(),
        token.0 as i64,
        p.owner.label,
        p.owner.explicit,
        exclusive,
        limit,
        serde_json::to_string(&p.holder).expect("a holder always serializes"),
        to_ms(SystemTime::now()),
        signed(duration_millis(p.ttl)),
        now.boot_id,
        expires_at(now, p.ttl),
    ])?;
    finish_grant(
        tx,
        now,
        p,
        token,
        HistoryEvent::Granted,
        &detail::granted(p.mode, p.ttl, &p.holder),
    )
}

/// The end of a successful acquisition (new or re-acquired): the acquirer
/// leaves the queue, the grant is recorded, and returned as stored.
fn finish_grant(
    tx: &Transaction<'_>,
    now: &Now,
    p: &LeaseAcquireParams,
    token: Token,
    event: HistoryEvent,
    detail: &str,
) -> Result<LeaseAcquire> {
    if let Some(t) = p.ticket {
        waiter_remove(tx, &p.name, t)?;
    }
    record(tx, &p.name, event, Some(token), Some(&p.owner.label), detail)?;
    let row = row(tx, now, &p.name, token)?
        .ok_or_else(|| Error::BadRow(format!("grant {token} of {} vanished inside its transaction", p.name)))?;
    Ok(LeaseAcquire::Acquired(row.grant))
}

/// Find the live grant a token-scoped operation acts on, or say why not
/// (recording the refusal).
fn live_grant(
    tx: &Transaction<'_>,
    now: &Now,
    name: &LeaseName,
    token: Token,
    owner: Option<&str>,
    op: &str,
) -> Result<std::result::Result<Row, LostReason>> {
    let reason = match row(tx, now, name, token)? {
        None => LostReason::Gone,
        Some(r) => match rules::owner_verdict(owner, &r.grant.owner, r.grant.owner_explicit) {
            Err(reason) => reason,
            Ok(()) if !r.is_live(now) => {
                expire(tx, &r)?;
                LostReason::Expired
            }
            Ok(()) => return Ok(Ok(r)),
        },
    };
    record(
        tx,
        name,
        HistoryEvent::StaleRefused,
        Some(token),
        owner,
        &detail::stale(op, reason),
    )?;
    Ok(Err(reason))
}

pub(crate) fn renew(tx: &Transaction<'_>, now: &Now, p: &LeaseRenewParams) -> Result<LeaseRenew> {
    if let Err(reason) = live_grant(tx, now, &p.name, p.token, p.owner.as_deref(), "renew")? {
        return Ok(LeaseRenew::Lost(reason));
    }
    tx.prepare_cached("UPDATE lease_grant SET expires_ns = ?3, ttl_ms = ?4 WHERE name = ?1 AND token = ?2")?
        .execute(params![
            p.name.as_str(),
            p.token.0 as i64,
            expires_at(now, p.ttl),
            signed(duration_millis(p.ttl))
        ])?;
    let row = row(tx, now, &p.name, p.token)?.ok_or_else(|| Error::BadRow("renewed grant vanished".into()))?;
    Ok(LeaseRenew::Renewed(row.grant))
}

pub(crate) fn release(tx: &Transaction<'_>, now: &Now, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
    match live_grant(tx, now, &p.name, p.token, p.owner.as_deref(), "release")? {
        Err(reason) => Ok(LeaseRelease::Lost(reason)),
        Ok(row) => {
            delete_grant(tx, &p.name, p.token)?;
            record(
                tx,
                &p.name,
                HistoryEvent::Released,
                Some(p.token),
                Some(&row.grant.owner),
                "released by its holder",
            )?;
            Ok(LeaseRelease::Released)
        }
    }
}

fn last_token(tx: &Transaction<'_>, name: &LeaseName) -> Result<Option<Token>> {
    Ok(tx
        .prepare_cached("SELECT last_token FROM lease_name WHERE name = ?1")?
        .query_row([name.as_str()], |r| r.get::<_, i64>(0))
        .optional()?
        .map(|t| Token(t as u64)))
}

pub(crate) fn fence(tx: &Transaction<'_>, now: &Now, p: &LeaseFenceParams) -> Result<LeaseFence> {
    let newest = last_token(tx, &p.name)?;
    let found = row(tx, now, &p.name, p.token)?;
    let plan = rules::fence_plan(p, newest, found.as_ref().map(|r| (r.grant.clone(), r.is_live(now))));
    if let (true, Some(r)) = (plan.expire_found, &found) {
        expire(tx, r)?;
    }
    record(
        tx,
        &p.name,
        plan.event,
        Some(p.token),
        plan.owner.as_deref(),
        &plan.detail,
    )?;
    Ok(plan.outcome)
}

pub(crate) fn waiter_enqueue(tx: &Transaction<'_>, now: &Now, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
    insert_waiter(tx, now, &p.name, p.mode, &p.holder, p.ttl)
}

pub(crate) fn waiter_remove(tx: &Transaction<'_>, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
    tx.prepare_cached("DELETE FROM lease_waiter WHERE name = ?1 AND id = ?2")?
        .execute(params![name.as_str(), ticket.0 as i64])?;
    Ok(())
}

pub(crate) fn get(tx: &Transaction<'_>, now: &Now, name: &LeaseName) -> Result<Option<LeaseState>> {
    let Some(last_token) = last_token(tx, name)? else {
        return Ok(None);
    };
    let grants = rows(tx, now, name)?
        .into_iter()
        .filter(|r| r.is_live(now))
        .map(|r| r.grant)
        .collect();
    let waiters: i64 = tx
        .prepare_cached("SELECT count(*) FROM lease_waiter WHERE name = ?1 AND boot_id = ?2 AND expires_ns > ?3")?
        .query_row(params![name.as_str(), now.boot_id, now.ns], |r| r.get(0))?;
    Ok(Some(LeaseState {
        name: name.clone(),
        last_token,
        grants,
        waiters: waiters as u32,
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
        let name = LeaseName::new(name.clone())
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
