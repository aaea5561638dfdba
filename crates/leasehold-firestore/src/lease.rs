//! Lease operations on Firestore: each reads one name's document (and the
//! store's document when the name is new), plans with
//! `leasehold_backend::plan` (the algorithm every store applies), applies
//! the plan to the document in memory and commits it in ONE atomic commit
//! whose precondition is that the document is still as it was read (its
//! update time; "does not exist" for a new one). A commit whose
//! precondition failed wrote nothing: someone else changed the name in
//! between, so read and decide again — optimistic concurrency, as the etcd
//! store does with compares.
//!
//! **The clock is the server's.** Every decision is taken at the
//! `readTime` Firestore returned with the read it is based on: a grant is
//! live while its `expires_us` (the read time of the decision that made or
//! extended it, plus its TTL) is after the read time of the decision that
//! looks at it. The commit lands after that read, so a grant never lasts
//! longer on the server than its TTL after its commit, and a client's
//! clock never enters a decision.

use std::time::Duration;

use leasehold_backend::plan::{self, Acquire, Apply, Entry, HISTORY_PER_NAME, NewGrant, NewWaiter, Op, Plan, Seen};
use leasehold_backend::unix_ms::from_ms;
use leasehold_backend::{
    Grant, HistoryEntry, HistoryEvent, Holder, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, QueuedWaiter, Token, TokensBumpParams, TokensBumpRefused, TokensBumped, WaiterEnqueueParams,
    WaiterTicket, duration_millis, signed,
};

use crate::layout::{CHUNK, CHUNKS_KEPT, GrantRec, HistoryRec, Layout, State, WaiterRec};
use crate::rest::{self, Doc, Field, Precondition, Rest, ServerTime, Write};

/// How often one call re-reads and re-decides after losing a race before
/// it gives up with an error.
const MAX_ROUNDS: u32 = 200;

#[derive(Debug)]
pub enum Error {
    Rest(rest::Error),
    /// A document this code could not have written.
    Corrupt(String),
    /// Lost the race `MAX_ROUNDS` times in a row.
    Contended(String),
}

impl From<rest::Error> for Error {
    fn from(e: rest::Error) -> Self {
        Error::Rest(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

fn micros(d: Duration) -> i64 {
    signed(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A new name's document is made with the store's document as read (a
/// new name starts above its floor, and its creation writes it).
struct Creation {
    store: Option<Doc>,
}

/// One name as read: its document (if any), what it holds, and when.
struct Snapshot {
    doc: Option<Doc>,
    /// Set when the name's document is missing: its creation.
    creation: Option<Creation>,
    newest: u64,
    state: State,
    now: ServerTime,
}

impl Snapshot {
    fn grant(&self, name: &LeaseName, g: &GrantRec) -> Grant {
        Grant {
            name: name.clone(),
            token: Token(g.token),
            owner: g.owner.clone(),
            owner_explicit: g.owner_explicit,
            mode: g.mode,
            holder: g.holder.clone(),
            acquired_at: from_ms(g.acquired_ms),
            ttl: Duration::from_millis(g.ttl_ms),
            expires_in: Duration::from_micros(u64::try_from(g.expires_us - self.now.0).unwrap_or(0)),
        }
    }

    fn live(&self, g: &GrantRec) -> bool {
        g.expires_us > self.now.0
    }

    /// The grant rows as the planners read them.
    fn seen(&self, name: &LeaseName) -> Vec<Seen> {
        self.state
            .grants
            .iter()
            .map(|g| (self.grant(name, g), self.live(g)))
            .collect()
    }

    fn queue(&self) -> Vec<QueuedWaiter> {
        self.state.waiters.iter().map(queued).collect()
    }

    fn last_token(&self) -> Option<Token> {
        (self.newest > 0).then_some(Token(self.newest))
    }

    /// Whether `ops` only refresh waiter registrations that still have
    /// more than half of the TTL they ask for: then nothing needs writing
    /// yet. A waiter asks again well within that half, so its place is
    /// kept, and a crowd of waiters writes the name's one document a
    /// fraction as often (each write is a commit the holder's renewal may
    /// have to retry after).
    fn fresh_enough(&self, ops: &[Op]) -> bool {
        ops.iter().all(|op| match op {
            Op::RefreshWaiter { ticket, ttl } => self
                .state
                .waiters
                .iter()
                .any(|w| w.ticket == ticket.0 && w.expires_us - self.now.0 > micros(*ttl) / 2),
            _ => false,
        })
    }
}

fn queued(w: &WaiterRec) -> QueuedWaiter {
    QueuedWaiter {
        ticket: WaiterTicket(w.ticket),
        mode: w.mode,
        holder: Some(w.holder.clone()),
    }
}

/// A name's document being changed by a plan.
struct Draft {
    state: State,
    newest: u64,
    now: ServerTime,
    /// The token this plan issued, the waiter ticket it issued.
    issued: Option<Token>,
    ticket: Option<WaiterTicket>,
}

impl Draft {
    fn new(snap: &Snapshot) -> Self {
        Self {
            state: snap.state.clone(),
            newest: snap.newest,
            now: snap.now,
            issued: None,
            ticket: None,
        }
    }

    fn grant_mut(&mut self, token: Token) -> Result<&mut GrantRec> {
        self.state
            .grants
            .iter_mut()
            .find(|g| g.token == token.0)
            .ok_or_else(|| Error::Corrupt(format!("a plan named grant {token}, which the document does not hold")))
    }
}

impl Apply for Draft {
    type Error = Error;

    fn remove_grant(&mut self, token: Token, _live: bool) -> Result<()> {
        self.state.grants.retain(|g| g.token != token.0);
        Ok(())
    }

    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<()> {
        let now = self.now.0;
        let g = self.grant_mut(token)?;
        g.expires_us = now.saturating_add(micros(ttl));
        g.ttl_ms = duration_millis(ttl);
        if let Some(h) = holder {
            g.holder = h.clone();
        }
        Ok(())
    }

    /// The next token: above the newest one and above the name's floor.
    fn insert_grant(&mut self, g: &NewGrant) -> Result<()> {
        let token = self.newest.max(self.state.floor) + 1;
        self.newest = token;
        self.issued = Some(Token(token));
        self.state.grants.push(GrantRec {
            token,
            owner: g.owner.label.clone(),
            owner_explicit: g.owner.explicit,
            mode: g.mode,
            holder: g.holder.clone(),
            acquired_ms: self.now.0 / 1000,
            ttl_ms: duration_millis(g.ttl),
            expires_us: self.now.0.saturating_add(micros(g.ttl)),
        });
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<()> {
        let now = self.now.0;
        if let Some(w) = self.state.waiters.iter_mut().find(|w| w.ticket == ticket.0) {
            w.expires_us = now.saturating_add(micros(ttl));
        }
        Ok(())
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<()> {
        self.state.tickets += 1;
        self.ticket = Some(WaiterTicket(self.state.tickets));
        self.state.waiters.push(WaiterRec {
            ticket: self.state.tickets,
            mode: w.mode,
            holder: w.holder.clone(),
            expires_us: self.now.0.saturating_add(micros(w.ttl)),
        });
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<()> {
        self.state.waiters.retain(|w| w.ticket != ticket.0);
        Ok(())
    }

    fn record(&mut self, e: &Entry) -> Result<()> {
        self.state.seq += 1;
        self.state.recent.push(HistoryRec {
            at_ms: self.now.0 / 1000,
            event: e.event.as_str().to_owned(),
            token: Some(e.token.resolve(self.issued).0),
            owner: e.owner.clone(),
            detail: e.detail.clone(),
        });
        Ok(())
    }
}

fn decode_history(doc: &Doc, json: &str) -> Result<Vec<HistoryRec>> {
    serde_json::from_str(json).map_err(|e| Error::Corrupt(format!("{} holds unreadable history: {e}", doc.name)))
}

fn entry(r: &HistoryRec) -> Result<HistoryEntry> {
    Ok(HistoryEntry {
        at: from_ms(r.at_ms),
        event: HistoryEvent::parse(&r.event)
            .ok_or_else(|| Error::Corrupt(format!("unknown history event {:?}", r.event)))?,
        token: r.token.map(Token),
        owner: r.owner.clone(),
        detail: r.detail.clone(),
    })
}

/// What the store's document holds: the floor new names start above, and
/// how many names were ever made (both 0 while it does not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreDoc {
    pub floor: u64,
    pub names: u64,
}

impl StoreDoc {
    pub fn of(doc: Option<&Doc>) -> Self {
        let field = |f: &str| u64::try_from(doc.and_then(|d| d.int(f)).unwrap_or(0)).unwrap_or(0);
        Self {
            floor: field("floor"),
            names: field("names"),
        }
    }

    /// The write that makes the store's document this, if it is still as
    /// `read` (a bump and a name's creation both write it so).
    fn write(self, conn: &Conn<'_>, read: Option<&Doc>) -> Write {
        Write::Set {
            name: conn.rest.doc_name(&conn.layout.store()),
            fields: vec![
                ("floor", Field::Int(signed(self.floor))),
                ("names", Field::Int(signed(self.names))),
            ],
            precondition: Precondition::of(read),
        }
    }
}

/// The client and the layout, for one call.
pub struct Conn<'a> {
    pub rest: &'a Rest,
    pub layout: &'a Layout,
}

impl Conn<'_> {
    fn decode(doc: Doc, now: ServerTime) -> Result<Snapshot> {
        let doc_name = doc.name.clone();
        let corrupt = |what: &str| Error::Corrupt(format!("{doc_name}: {what}"));
        let newest = doc.int("newest").ok_or_else(|| corrupt("no integer field `newest`"))?;
        let state = doc.str("state").ok_or_else(|| corrupt("no string field `state`"))?;
        let mut state: State =
            serde_json::from_str(state).map_err(|e| corrupt(&format!("field `state` is unreadable: {e}")))?;
        // Expired waiter registrations are left out as they are read.
        state.waiters.retain(|w| w.expires_us > now.0);
        Ok(Snapshot {
            doc: Some(doc),
            creation: None,
            newest: u64::try_from(newest).map_err(|_| corrupt("a negative `newest`"))?,
            state,
            now,
        })
    }

    /// Read one name's document, and the store's when the name has none.
    fn snapshot(&self, name: &LeaseName) -> Result<Snapshot> {
        if let Some(snap) = self.snapshot_existing(name)? {
            return Ok(snap);
        }
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let store_name = self.rest.doc_name(&self.layout.store());
        let (mut docs, now) = self.rest.batch_get(&[doc_name, store_name], None)?;
        let store = docs.pop().flatten();
        if let Some(doc) = docs.pop().flatten() {
            return Self::decode(doc, now);
        }
        Ok(Snapshot {
            doc: None,
            state: State {
                floor: StoreDoc::of(store.as_ref()).floor,
                ..State::default()
            },
            creation: Some(Creation { store }),
            newest: 0,
            now,
        })
    }

    /// Commit `draft` over `snap`: `Ok(false)` when a precondition failed
    /// (nothing was written; decide again).
    fn commit(&self, name: &LeaseName, snap: &Snapshot, mut draft: Draft) -> Result<bool> {
        let mut writes = Vec::new();
        // Whole chunks of history move out of the name's document; the
        // oldest chunk beyond those kept goes.
        while draft.state.recent.len() as u64 >= CHUNK {
            let first = draft.state.seq - draft.state.recent.len() as u64;
            let chunk = first / CHUNK;
            let entries: Vec<HistoryRec> = draft.state.recent.drain(..CHUNK as usize).collect();
            writes.push(Write::Set {
                name: self.rest.doc_name(&self.layout.chunk(name, chunk)),
                fields: vec![("entries", Field::Str(to_json(&entries)))],
                precondition: Precondition::None,
            });
            if chunk >= CHUNKS_KEPT {
                writes.push(Write::Delete {
                    name: self.rest.doc_name(&self.layout.chunk(name, chunk - CHUNKS_KEPT)),
                    precondition: Precondition::None,
                });
            }
        }
        writes.push(Write::Set {
            name: self.rest.doc_name(&self.layout.name(name)),
            fields: vec![
                ("name", Field::Str(name.as_str().to_owned())),
                ("newest", Field::Int(signed(draft.newest))),
                ("state", Field::Str(to_json(&draft.state))),
            ],
            precondition: Precondition::of(snap.doc.as_ref()),
        });
        if let Some(Creation { store }) = &snap.creation {
            // A new name: counted in the store's document, which a bump
            // reads and writes under the same kind of precondition.
            let mut counted = StoreDoc::of(store.as_ref());
            counted.names += 1;
            writes.push(counted.write(self, store.as_ref()));
        }
        match self.rest.commit(&writes) {
            Ok(_) => Ok(true),
            Err(rest::Error::Conflict) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    pub fn acquire(&self, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
        let name = &p.name;
        rounds(
            || format!("acquiring {name}"),
            Turn::Patient,
            || {
                let snap = self.snapshot(name)?;
                let seen = snap.seen(name);
                let plan = plan::acquire(p, &seen, &snap.queue());
                let mut draft = Draft::new(&snap);
                plan.apply(&mut draft)?;
                let writes = !plan.ops.is_empty() && !snap.fresh_enough(&plan.ops);
                let outcome = match plan.outcome {
                    Acquire::Acquired(token) => {
                        // The grant as it is once committed (or as read,
                        // for a plan that writes nothing).
                        let token = token.resolve(draft.issued);
                        let g = draft
                            .state
                            .grants
                            .iter()
                            .find(|g| g.token == token.0)
                            .ok_or_else(|| Error::Corrupt(format!("grant {token} of {name} vanished")))?;
                        LeaseAcquire::Acquired(snap.grant(name, g))
                    }
                    Acquire::Held(waiting) => {
                        LeaseAcquire::Held(waiting.held(seen.into_iter().map(|(g, _)| g), draft.ticket))
                    }
                };
                if writes && !self.commit(name, &snap, draft)? {
                    return Ok(None);
                }
                Ok(Some(outcome))
            },
        )
    }

    /// One token-scoped operation, read–plan–commit in rounds: the grant
    /// of `token` as written (else as found) and the outcome. Without the
    /// token's grant the planner also gets how the name's history says it
    /// ended (`plan::ENDINGS`), when `ending` asks for it.
    fn by_token<T>(
        &self,
        (name, token, op): (&LeaseName, Token, &str),
        ending: bool,
        planner: impl Fn(Option<Token>, Option<&Seen>, Option<HistoryEvent>) -> Plan<T>,
    ) -> Result<(Option<Grant>, T)> {
        rounds(
            || format!("{op} {name} token {token}"),
            Turn::Prompt,
            || {
                let snap = self.snapshot(name)?;
                let found = snap.state.grants.iter().find(|g| g.token == token.0);
                let seen = found.map(|g| (snap.grant(name, g), snap.live(g)));
                let ended = match found {
                    None if ending => self.ended(name, &snap, token)?,
                    _ => None,
                };
                let plan = planner(snap.last_token(), seen.as_ref(), ended);
                let mut draft = Draft::new(&snap);
                plan.apply(&mut draft)?;
                let written = draft.state.grants.iter().find(|g| g.token == token.0).cloned();
                if !plan.ops.is_empty() && !self.commit(name, &snap, draft)? {
                    return Ok(None);
                }
                Ok(Some((written.map(|g| snap.grant(name, &g)), plan.outcome)))
            },
        )
    }

    pub fn renew(&self, p: &LeaseRenewParams) -> Result<LeaseRenew> {
        let at = (&p.name, p.token, "renewing");
        match self.by_token(at, true, |_, found, ended| plan::renew(p, found, ended))? {
            (Some(grant), Ok(())) => Ok(LeaseRenew::Renewed(grant)),
            (None, Ok(())) => Err(Error::Corrupt(format!(
                "grant {} of {} vanished from its renewal",
                p.token, p.name
            ))),
            (_, Err(reason)) => Ok(LeaseRenew::Lost(reason)),
        }
    }

    pub fn release(&self, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
        let at = (&p.name, p.token, "releasing");
        let (_, outcome) = self.by_token(at, true, |_, found, ended| plan::release(p, found, ended))?;
        Ok(outcome.map_or_else(LeaseRelease::Lost, |()| LeaseRelease::Released))
    }

    pub fn fence(&self, p: &LeaseFenceParams) -> Result<LeaseFence> {
        let at = (&p.name, p.token, "fencing");
        let (_, outcome) = self.by_token(at, false, |newest, found, _| plan::fence(p, newest, found))?;
        Ok(outcome)
    }

    pub fn waiter_enqueue(&self, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
        let w = NewWaiter {
            mode: p.mode,
            holder: p.holder.clone(),
            ttl: p.ttl,
        };
        rounds(
            || format!("queueing for {}", p.name),
            Turn::Patient,
            || {
                let snap = self.snapshot(&p.name)?;
                let mut draft = Draft::new(&snap);
                draft.enqueue_waiter(&w)?;
                let ticket = draft.ticket.expect("enqueued");
                Ok(self.commit(&p.name, &snap, draft)?.then_some(ticket))
            },
        )
    }

    pub fn waiter_remove(&self, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
        rounds(
            || format!("leaving the queue of {name}"),
            Turn::Prompt,
            || {
                let snap = self.snapshot(name)?;
                if !snap.state.waiters.iter().any(|w| w.ticket == ticket.0) {
                    return Ok(Some(()));
                }
                let mut draft = Draft::new(&snap);
                draft.remove_waiter(ticket)?;
                Ok(self.commit(name, &snap, draft)?.then_some(()))
            },
        )
    }

    fn state(name: &LeaseName, snap: &Snapshot) -> Option<LeaseState> {
        let last_token = snap.last_token()?;
        Some(LeaseState {
            name: name.clone(),
            last_token,
            grants: snap
                .state
                .grants
                .iter()
                .filter(|g| snap.live(g))
                .map(|g| snap.grant(name, g))
                .collect(),
            waiters: snap.queue(),
        })
    }

    pub fn get(&self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let snap = self.snapshot(name)?;
        Ok(Self::state(name, &snap))
    }

    pub fn list(&self, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
        let mut out = Vec::new();
        for (name, snap) in self.every_name()? {
            if let Some(state) = Self::state(&name, &snap)
                && (!p.live_only || !state.grants.is_empty())
            {
                out.push(state);
            }
        }
        out.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        Ok(out)
    }

    /// The newest `limit` history entries of `name`, newest first: the
    /// document's own, then its chunks read at the same time.
    fn entries(&self, name: &LeaseName, snap: &Snapshot, limit: u32) -> Result<Vec<HistoryEntry>> {
        let limit = limit as usize;
        let mut out = Vec::new();
        for r in snap.state.recent.iter().rev().take(limit) {
            out.push(entry(r)?);
        }
        // Chunks are numbered from 0 and the newest `CHUNKS_KEPT` are kept:
        // those needed are named, not searched for.
        let flushed = (snap.state.seq - snap.state.recent.len() as u64) / CHUNK;
        let need = ((limit - out.len()) as u64)
            .div_ceil(CHUNK)
            .min(flushed)
            .min(CHUNKS_KEPT);
        if out.len() < limit && need > 0 {
            let names: Vec<String> = (flushed - need..flushed)
                .rev()
                .map(|c| self.rest.doc_name(&self.layout.chunk(name, c)))
                .collect();
            let (chunks, _) = self.rest.batch_get(&names, Some(snap.now))?;
            'chunks: for doc in chunks.iter().flatten() {
                let json = doc
                    .str("entries")
                    .ok_or_else(|| Error::Corrupt(format!("{} has no `entries`", doc.name)))?;
                for r in decode_history(doc, json)?.iter().rev() {
                    if out.len() == limit {
                        break 'chunks;
                    }
                    out.push(entry(r)?);
                }
            }
        }
        Ok(out)
    }

    /// How the grant of `token` ended, by the newest of `plan::ENDINGS`
    /// recorded for it (only for a token the store no longer has).
    fn ended(&self, name: &LeaseName, snap: &Snapshot, token: Token) -> Result<Option<HistoryEvent>> {
        let entries = self.entries(name, snap, HISTORY_PER_NAME)?;
        Ok(plan::ending(entries.iter().map(|e| (e.event, e.token)), token))
    }

    pub fn history(&self, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
        let snap = self.snapshot_existing(&p.name)?;
        match snap {
            Some(snap) => self.entries(&p.name, &snap, p.limit),
            None => Ok(Vec::new()),
        }
    }

    /// Every name with its document, as one query read them.
    fn every_name(&self) -> Result<Vec<(LeaseName, Snapshot)>> {
        let (docs, now) = self.rest.list(&self.layout.leases_parent(), "leases")?;
        docs.into_iter()
            .map(|doc| {
                let stored = doc
                    .str("name")
                    .ok_or_else(|| Error::Corrupt(format!("{} has no `name`", doc.name)))?;
                let name = LeaseName::stored(stored)
                    .map_err(|e| Error::Corrupt(format!("{} names {stored:?}: {e}", doc.name)))?;
                Ok((name, Self::decode(doc, now)?))
            })
            .collect()
    }

    /// A name's document, if it has one (a read that never creates).
    fn snapshot_existing(&self, name: &LeaseName) -> Result<Option<Snapshot>> {
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let (mut docs, now) = self.rest.batch_get(std::slice::from_ref(&doc_name), None)?;
        docs.pop().flatten().map(|doc| Self::decode(doc, now)).transpose()
    }

    /// Raise the floor: first the store's, which every name made from
    /// then on starts above (a creation commits under the precondition
    /// that the store's document is as it read it), then every existing
    /// name's own, each under its precondition. Tokens issued while a bump
    /// runs are not bounded by it; every token issued after it returns is
    /// above its floor, and per name tokens only grow in any case.
    pub fn tokens_bump(&self, p: &TokensBumpParams) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
        let highest = self
            .every_name()?
            .iter()
            .map(|(_, snap)| snap.newest)
            .max()
            .unwrap_or(0);
        let store_name = self.rest.doc_name(&self.layout.store());
        let raised = rounds(
            || "raising the token floor".to_owned(),
            Turn::Prompt,
            || {
                let (mut docs, _) = self.rest.batch_get(std::slice::from_ref(&store_name), None)?;
                let store = docs.pop().flatten();
                let mut raised = StoreDoc::of(store.as_ref());
                let highest = Token(highest.max(raised.floor));
                let new_floor = match p.floor_above(highest) {
                    Ok(f) => f,
                    Err(refused) => return Ok(Some(Err(refused))),
                };
                raised.floor = new_floor.0;
                match self.rest.commit(&[raised.write(self, store.as_ref())]) {
                    Ok(_) => Ok(Some(Ok(TokensBumped {
                        highest,
                        floor: new_floor,
                    }))),
                    Err(rest::Error::Conflict) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )?;
        let Ok(bumped) = raised else {
            return Ok(raised);
        };
        // Every name made before the store's floor was raised is listed
        // now; those made since start above it.
        for (name, listed) in self.every_name()? {
            let mut snap = Some(listed);
            rounds(
                || format!("raising the token floor of {name}"),
                Turn::Prompt,
                || {
                    let snap = match snap.take() {
                        Some(s) => s,
                        None => self.snapshot(&name)?,
                    };
                    if snap.state.floor >= bumped.floor.0 {
                        return Ok(Some(()));
                    }
                    let mut draft = Draft::new(&snap);
                    draft.state.floor = bumped.floor.0;
                    Ok(self.commit(&name, &snap, draft)?.then_some(()))
                },
            )?;
        }
        Ok(Ok(bumped))
    }

    /// The update time of a name's document (`None` while it has none):
    /// what a waiter polls.
    pub fn version(&self, name: &LeaseName) -> Result<Option<String>> {
        let doc_name = self.rest.doc_name(&self.layout.name(name));
        let (mut docs, _) = self.rest.batch_get(std::slice::from_ref(&doc_name), None)?;
        Ok(docs.pop().flatten().map(|d| d.update_time))
    }
}

/// Who is retrying after a lost race, which says how long it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// A holder's renewal, release or fence, or a write that must land
    /// soon: it tries again at once, or within 4 ms.
    Prompt,
    /// An acquirer or a waiter keeping its place: it steps back longer
    /// (up to 256 ms), so that a crowd of waiters on a name never keeps
    /// the holder's renewal from landing.
    Patient,
}

/// Run `round` until it commits (`Some`), at most `MAX_ROUNDS` times,
/// waiting a little more after each lost race.
pub fn rounds<T>(what: impl FnOnce() -> String, turn: Turn, mut round: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    for n in 0..MAX_ROUNDS {
        if let Some(done) = round()? {
            return Ok(done);
        }
        std::thread::sleep(backoff(n, turn));
    }
    Err(Error::Contended(what()))
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("leasehold's own documents always serialize")
}

/// The wait after the `n`th lost race in a row: up to 1, 2, 4 … ms
/// (at most 4 ms for a prompt turn, 256 ms for a patient one), spread so
/// that racers do not meet again at once.
fn backoff(n: u32, turn: Turn) -> Duration {
    use std::hash::{BuildHasher, RandomState};
    let cap = 1u64 << n.min(if turn == Turn::Prompt { 2 } else { 8 });
    let spread = RandomState::new().hash_one(std::time::Instant::now()) % (cap * 1000);
    Duration::from_micros(spread)
}
