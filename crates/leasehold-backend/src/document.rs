//! A name kept as one document: what stores that hold each name's state in
//! one value, changed only by compare-and-set, share — Firestore (a
//! document with an update-time precondition) and Redis (a hash whose
//! version a script compares). The rest of such a store is storage code.
//!
//! Each operation reads the name's document and the server's time
//! ([`DocStore::snapshot`]), plans with [`crate::plan`] (the algorithm
//! every store applies), applies the plan to a [`Draft`] of the document in
//! memory and commits it in one atomic write conditional on the document
//! being still as it was read ([`DocStore::commit`]). A commit whose
//! condition failed wrote nothing: someone else changed the name in
//! between, so read and decide again — optimistic concurrency, in
//! [`rounds`].
//!
//! **The clock is the server's**: a snapshot's `now_us` is the server's
//! time of the read, and a grant is live while its `expires_us` (the time
//! of the decision that made or extended it, plus its TTL) is after the
//! `now_us` of the decision that looks at it. The commit lands after the
//! read, so a grant never lasts longer on the server than its TTL after
//! its commit, and a client's clock never enters a decision.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::plan::{self, Acquire, Apply, Entry, NewGrant, NewWaiter, Op, Plan, Seen};
use crate::unix_ms::from_ms;
use crate::{
    Grant, HistoryEntry, HistoryEvent, Holder, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams, LeaseState, Mode, QueuedWaiter, Token,
    WaiterEnqueueParams, WaiterTicket, duration_millis, signed,
};

/// How often one call re-reads and re-decides after losing a race before
/// it gives up with an error.
pub const MAX_ROUNDS: u32 = 200;

/// A grant as a name's document keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantRec {
    pub token: u64,
    pub owner: String,
    pub owner_explicit: bool,
    pub mode: Mode,
    pub holder: Holder,
    /// The server's time when it was granted (ms).
    pub acquired_ms: i64,
    pub ttl_ms: u64,
    /// The server's time at which it expires (µs): the time of the
    /// decision that granted or extended it, plus its TTL.
    pub expires_us: i64,
}

/// A waiter registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaiterRec {
    pub ticket: u64,
    pub mode: Mode,
    pub holder: Holder,
    pub expires_us: i64,
}

/// A history entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryRec {
    /// The server's time of the decision (ms).
    pub at_ms: i64,
    pub event: String,
    pub token: Option<u64>,
    pub owner: Option<String>,
    pub detail: String,
}

impl HistoryRec {
    /// The entry it records.
    ///
    /// # Errors
    /// An event this code does not know: the document was not written by it.
    pub fn entry(&self) -> Result<HistoryEntry, DocumentError> {
        Ok(HistoryEntry {
            at: from_ms(self.at_ms),
            event: HistoryEvent::parse(&self.event).ok_or_else(|| DocumentError::UnknownEvent(self.event.clone()))?,
            token: self.token.map(Token),
            owner: self.owner.clone(),
            detail: self.detail.clone(),
        })
    }
}

/// What in a name's document this code could not have written, or a plan
/// it could not apply to it: the store reports it as corrupt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// A history entry's event is none this code writes.
    #[error("unknown history event {0:?}")]
    UnknownEvent(String),
    /// A plan extends a grant the document does not hold.
    #[error("a plan named grant {0}, which the document does not hold")]
    NoSuchGrant(Token),
}

/// What a name's document holds besides its name and newest token.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Tokens issued from now on are above this (a `--bump-tokens` floor).
    #[serde(default)]
    pub floor: u64,
    /// The newest waiter ticket issued.
    #[serde(default)]
    pub tickets: u64,
    /// The number of history entries ever written.
    #[serde(default)]
    pub seq: u64,
    #[serde(default)]
    pub grants: Vec<GrantRec>,
    #[serde(default)]
    pub waiters: Vec<WaiterRec>,
    /// The newest entries not yet moved out of the document, oldest
    /// first: entries `seq - recent.len() + 1 ..= seq`. A commit moves
    /// them where the store keeps history (Firestore: whole chunks of
    /// them; Redis: all, to the name's list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<HistoryRec>,
}

fn micros(d: Duration) -> i64 {
    signed(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One name as read: its document's state, the newest token, the server's
/// time of the read (µs), and what the store needs to commit over it.
#[derive(Debug)]
pub struct Snapshot<R> {
    pub state: State,
    pub newest: u64,
    pub now_us: i64,
    pub read: R,
}

impl<R> Snapshot<R> {
    /// A name read with its state (expired waiter registrations are left
    /// out as they are read).
    pub fn new(mut state: State, newest: u64, now_us: i64, read: R) -> Self {
        state.waiters.retain(|w| w.expires_us > now_us);
        Self {
            state,
            newest,
            now_us,
            read,
        }
    }

    pub fn grant(&self, name: &LeaseName, g: &GrantRec) -> Grant {
        Grant {
            name: name.clone(),
            token: Token(g.token),
            owner: g.owner.clone(),
            owner_explicit: g.owner_explicit,
            mode: g.mode,
            holder: g.holder.clone(),
            acquired_at: from_ms(g.acquired_ms),
            ttl: Duration::from_millis(g.ttl_ms),
            expires_in: Duration::from_micros(u64::try_from(g.expires_us - self.now_us).unwrap_or(0)),
        }
    }

    pub fn live(&self, g: &GrantRec) -> bool {
        g.expires_us > self.now_us
    }

    /// The grant rows as the planners read them.
    pub fn seen(&self, name: &LeaseName) -> Vec<Seen> {
        self.state
            .grants
            .iter()
            .map(|g| (self.grant(name, g), self.live(g)))
            .collect()
    }

    pub fn queue(&self) -> Vec<QueuedWaiter> {
        self.state.waiters.iter().map(queued).collect()
    }

    pub fn last_token(&self) -> Option<Token> {
        (self.newest > 0).then_some(Token(self.newest))
    }

    /// What `get` and `list` show of the name: `None` for a name that never
    /// issued a token.
    pub fn lease_state(&self, name: &LeaseName) -> Option<LeaseState> {
        Some(LeaseState {
            name: name.clone(),
            last_token: self.last_token()?,
            grants: self
                .state
                .grants
                .iter()
                .filter(|g| self.live(g))
                .map(|g| self.grant(name, g))
                .collect(),
            waiters: self.queue(),
        })
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
                .any(|w| w.ticket == ticket.0 && w.expires_us - self.now_us > micros(*ttl) / 2),
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
#[derive(Debug)]
pub struct Draft {
    pub state: State,
    pub newest: u64,
    now_us: i64,
    /// The token this plan issued, the waiter ticket it issued.
    pub issued: Option<Token>,
    pub ticket: Option<WaiterTicket>,
}

impl Draft {
    pub fn new<R>(snap: &Snapshot<R>) -> Self {
        Self {
            state: snap.state.clone(),
            newest: snap.newest,
            now_us: snap.now_us,
            issued: None,
            ticket: None,
        }
    }

    /// Whether committing this draft over `snap` changes what waiters
    /// wait on: a grant made or ended, a waiter queued or gone. A renewal
    /// or a waiter's refresh does not — a waiter's next reading is timed by
    /// the expiries it read — so a store that announces commits (Redis)
    /// wakes nobody for those: 200 idle waiters' refreshes woke the ones
    /// listening several times a second.
    pub fn changes_the_queue<R>(&self, snap: &Snapshot<R>) -> bool {
        let tokens = |s: &State| s.grants.iter().map(|g| g.token).collect::<Vec<_>>();
        let tickets = |s: &State| s.waiters.iter().map(|w| w.ticket).collect::<Vec<_>>();
        tokens(&self.state) != tokens(&snap.state) || tickets(&self.state) != tickets(&snap.state)
    }

    fn grant_mut(&mut self, token: Token) -> Result<&mut GrantRec, DocumentError> {
        self.state
            .grants
            .iter_mut()
            .find(|g| g.token == token.0)
            .ok_or(DocumentError::NoSuchGrant(token))
    }
}

impl Apply for Draft {
    type Error = DocumentError;

    fn remove_grant(&mut self, token: Token, _live: bool) -> Result<(), DocumentError> {
        self.state.grants.retain(|g| g.token != token.0);
        Ok(())
    }

    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<(), DocumentError> {
        let now = self.now_us;
        let g = self.grant_mut(token)?;
        g.expires_us = now.saturating_add(micros(ttl));
        g.ttl_ms = duration_millis(ttl);
        if let Some(h) = holder {
            g.holder = h.clone();
        }
        Ok(())
    }

    /// The next token: above the newest one and above the name's floor.
    fn insert_grant(&mut self, g: &NewGrant) -> Result<(), DocumentError> {
        let token = self.newest.max(self.state.floor) + 1;
        self.newest = token;
        self.issued = Some(Token(token));
        self.state.grants.push(GrantRec {
            token,
            owner: g.owner.label.clone(),
            owner_explicit: g.owner.explicit,
            mode: g.mode,
            holder: g.holder.clone(),
            acquired_ms: self.now_us / 1000,
            ttl_ms: duration_millis(g.ttl),
            expires_us: self.now_us.saturating_add(micros(g.ttl)),
        });
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<(), DocumentError> {
        let now = self.now_us;
        if let Some(w) = self.state.waiters.iter_mut().find(|w| w.ticket == ticket.0) {
            w.expires_us = now.saturating_add(micros(ttl));
        }
        Ok(())
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<(), DocumentError> {
        self.state.tickets += 1;
        self.ticket = Some(WaiterTicket(self.state.tickets));
        self.state.waiters.push(WaiterRec {
            ticket: self.state.tickets,
            mode: w.mode,
            holder: w.holder.clone(),
            expires_us: self.now_us.saturating_add(micros(w.ttl)),
        });
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<(), DocumentError> {
        self.state.waiters.retain(|w| w.ticket != ticket.0);
        Ok(())
    }

    fn record(&mut self, e: &Entry) -> Result<(), DocumentError> {
        self.state.seq += 1;
        self.state.recent.push(HistoryRec {
            at_ms: self.now_us / 1000,
            event: e.event.as_str().to_owned(),
            token: Some(e.token.resolve(self.issued).0),
            owner: e.owner.clone(),
            detail: e.detail.clone(),
        });
        Ok(())
    }
}

/// The storage a document store provides; the lease operations below are
/// written once over it.
pub trait DocStore {
    /// What a snapshot carries for its commit (a document's update time, a
    /// version).
    type Read;
    type Error;

    /// Read one name's document and the server's time.
    ///
    /// # Errors
    /// The store's.
    fn snapshot(&self, name: &LeaseName) -> Result<Snapshot<Self::Read>, Self::Error>;

    /// The snapshot a release of `token` decides on: by default read as
    /// [`DocStore::snapshot`] does. A store may answer from the document
    /// as it last committed it, when its commit refuses a document changed
    /// since and a time at which the decision would differ (the Redis
    /// store: one round trip fewer per lease cycle). Only a release may:
    /// losing one loses nothing a holder relies on, so it needs neither a
    /// fresh read nor what a store checks with one (Redis's durability
    /// settings).
    ///
    /// # Errors
    /// The store's.
    fn snapshot_to_release(&self, name: &LeaseName, token: Token) -> Result<Snapshot<Self::Read>, Self::Error> {
        let _ = token;
        self.snapshot(name)
    }

    /// Commit `draft` over `snap`: `Ok(false)` when the document changed
    /// since (nothing was written; decide again).
    ///
    /// # Errors
    /// The store's.
    fn commit(&self, name: &LeaseName, snap: &Snapshot<Self::Read>, draft: Draft) -> Result<bool, Self::Error>;

    /// The newest `limit` history entries of `name` as of `snap`, newest first.
    ///
    /// # Errors
    /// The store's.
    fn entries(
        &self,
        name: &LeaseName,
        snap: &Snapshot<Self::Read>,
        limit: u32,
    ) -> Result<Vec<HistoryEntry>, Self::Error>;

    /// A document this code could not have written, or a plan it could not apply.
    fn corrupt(what: String) -> Self::Error;

    /// Lost the race [`MAX_ROUNDS`] times in a row, doing `what`.
    fn contended(what: String) -> Self::Error;
}

pub fn acquire<S: DocStore>(s: &S, p: &LeaseAcquireParams) -> Result<LeaseAcquire, S::Error> {
    let name = &p.name;
    rounds::<S, _>(
        || format!("acquiring {name}"),
        Turn::Patient,
        || {
            let snap = s.snapshot(name)?;
            let seen = snap.seen(name);
            let plan = plan::acquire(p, &seen, &snap.queue());
            let mut draft = Draft::new(&snap);
            plan.apply(&mut draft).map_err(|e| S::corrupt(e.to_string()))?;
            let writes = !plan.ops.is_empty() && !snap.fresh_enough(&plan.ops);
            let outcome = match plan.outcome {
                Acquire::Acquired(token) => {
                    // The grant as it is once committed (or as read, for a
                    // plan that writes nothing).
                    let token = token.resolve(draft.issued);
                    let g = draft
                        .state
                        .grants
                        .iter()
                        .find(|g| g.token == token.0)
                        .ok_or_else(|| S::corrupt(format!("grant {token} of {name} vanished")))?;
                    LeaseAcquire::Acquired(snap.grant(name, g))
                }
                Acquire::Held(waiting) => {
                    LeaseAcquire::Held(waiting.held(seen.into_iter().map(|(g, _)| g), draft.ticket))
                }
            };
            if writes && !s.commit(name, &snap, draft)? {
                return Ok(None);
            }
            Ok(Some(outcome))
        },
    )
}

/// One token-scoped operation, read–plan–commit in rounds: the grant of
/// `token` as written (else as found) and the outcome. Each round's
/// snapshot comes from `read` (a release's may be the document as last
/// committed: [`DocStore::snapshot_to_release`]). Without the token's
/// grant the planner also gets how the name's history says it ended
/// (`plan::ENDINGS`), when `ending` asks for it.
fn by_token<S: DocStore, T>(
    s: &S,
    (name, token, op): (&LeaseName, Token, &str),
    (read, ending): (Reader<S>, bool),
    planner: impl Fn(Option<Token>, Option<&Seen>, Option<HistoryEvent>) -> Plan<T>,
) -> Result<(Option<Grant>, T), S::Error> {
    rounds::<S, _>(
        || format!("{op} {name} token {token}"),
        Turn::Prompt,
        || {
            let snap = read(s, name, token)?;
            let found = snap.state.grants.iter().find(|g| g.token == token.0);
            let seen = found.map(|g| (snap.grant(name, g), snap.live(g)));
            let ended = match found {
                None if ending => {
                    let entries = s.entries(name, &snap, plan::HISTORY_PER_NAME)?;
                    plan::ending(entries.iter().map(|e| (e.event, e.token)), token)
                }
                _ => None,
            };
            let plan = planner(snap.last_token(), seen.as_ref(), ended);
            let mut draft = Draft::new(&snap);
            plan.apply(&mut draft).map_err(|e| S::corrupt(e.to_string()))?;
            let written = draft.state.grants.iter().find(|g| g.token == token.0).cloned();
            if !plan.ops.is_empty() && !s.commit(name, &snap, draft)? {
                return Ok(None);
            }
            Ok(Some((written.map(|g| snap.grant(name, &g)), plan.outcome)))
        },
    )
}

/// How a token-scoped operation reads its name: afresh ([`fresh`]), or
/// as a release may ([`DocStore::snapshot_to_release`]).
type Reader<S> = fn(&S, &LeaseName, Token) -> Result<Snapshot<<S as DocStore>::Read>, <S as DocStore>::Error>;

/// A snapshot read afresh ([`DocStore::snapshot`]), whatever the token.
fn fresh<S: DocStore>(s: &S, name: &LeaseName, _: Token) -> Result<Snapshot<S::Read>, S::Error> {
    s.snapshot(name)
}

pub fn renew<S: DocStore>(s: &S, p: &LeaseRenewParams) -> Result<LeaseRenew, S::Error> {
    let at = (&p.name, p.token, "renewing");
    match by_token(s, at, (fresh, true), |_, found, ended| plan::renew(p, found, ended))? {
        (Some(grant), Ok(())) => Ok(LeaseRenew::Renewed(grant)),
        (None, Ok(())) => Err(S::corrupt(format!(
            "grant {} of {} vanished from its renewal",
            p.token, p.name
        ))),
        (_, Err(reason)) => Ok(LeaseRenew::Lost(reason)),
    }
}

pub fn release<S: DocStore>(s: &S, p: &LeaseReleaseParams) -> Result<LeaseRelease, S::Error> {
    let at = (&p.name, p.token, "releasing");
    let (_, outcome) = by_token(s, at, (S::snapshot_to_release, true), |_, found, ended| {
        plan::release(p, found, ended)
    })?;
    Ok(outcome.map_or_else(LeaseRelease::Lost, |()| LeaseRelease::Released))
}

pub fn fence<S: DocStore>(s: &S, p: &LeaseFenceParams) -> Result<LeaseFence, S::Error> {
    let at = (&p.name, p.token, "fencing");
    let (_, outcome) = by_token(s, at, (fresh, false), |newest, found, _| plan::fence(p, newest, found))?;
    Ok(outcome)
}

pub fn waiter_enqueue<S: DocStore>(s: &S, p: &WaiterEnqueueParams) -> Result<WaiterTicket, S::Error> {
    let w = NewWaiter {
        mode: p.mode,
        holder: p.holder.clone(),
        ttl: p.ttl,
    };
    rounds::<S, _>(
        || format!("queueing for {}", p.name),
        Turn::Patient,
        || {
            let snap = s.snapshot(&p.name)?;
            let mut draft = Draft::new(&snap);
            draft.enqueue_waiter(&w).map_err(|e| S::corrupt(e.to_string()))?;
            let ticket = draft.ticket.expect("enqueued");
            Ok(s.commit(&p.name, &snap, draft)?.then_some(ticket))
        },
    )
}

pub fn waiter_remove<S: DocStore>(s: &S, name: &LeaseName, ticket: WaiterTicket) -> Result<(), S::Error> {
    rounds::<S, _>(
        || format!("leaving the queue of {name}"),
        Turn::Prompt,
        || {
            let snap = s.snapshot(name)?;
            if !snap.state.waiters.iter().any(|w| w.ticket == ticket.0) {
                return Ok(Some(()));
            }
            let mut draft = Draft::new(&snap);
            draft.remove_waiter(ticket).map_err(|e| S::corrupt(e.to_string()))?;
            Ok(s.commit(name, &snap, draft)?.then_some(()))
        },
    )
}

/// Raise one name's floor to `floor` (a `--bump-tokens` after the store's
/// own floor was raised), starting from `listed` if the caller read it.
///
/// # Errors
/// The store's.
pub fn raise_floor<S: DocStore>(
    s: &S,
    name: &LeaseName,
    listed: Option<Snapshot<S::Read>>,
    floor: u64,
) -> Result<(), S::Error> {
    let mut listed = listed;
    rounds::<S, _>(
        || format!("raising the token floor of {name}"),
        Turn::Prompt,
        || {
            let snap = match listed.take() {
                Some(snap) => snap,
                None => s.snapshot(name)?,
            };
            if snap.state.floor >= floor {
                return Ok(Some(()));
            }
            let mut draft = Draft::new(&snap);
            draft.state.floor = floor;
            Ok(s.commit(name, &snap, draft)?.then_some(()))
        },
    )
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

/// Run `round` until it commits (`Some`), at most [`MAX_ROUNDS`] times,
/// waiting a little more after each lost race.
///
/// # Errors
/// `round`'s, or [`DocStore::contended`] after the last round.
pub fn rounds<S: DocStore, T>(
    what: impl FnOnce() -> String,
    turn: Turn,
    mut round: impl FnMut() -> Result<Option<T>, S::Error>,
) -> Result<T, S::Error> {
    for n in 0..MAX_ROUNDS {
        if let Some(done) = round()? {
            return Ok(done);
        }
        std::thread::sleep(backoff(n, turn));
    }
    Err(S::contended(what()))
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

/// `v` as JSON: leasehold's own documents always serialize.
#[must_use]
pub fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("leasehold's own documents always serialize")
}
