//! The lease algorithm, written once: acquire, renew, release and the
//! fence gate as plans.
//!
//! A store opens one transaction, reads what a decision needs — the grant
//! rows of the name with whether each is live by the store's own clock,
//! the live waiters in FIFO order, the newest token — and asks a planner
//! here what to do. The planner is a pure function; its [`Plan`] is a list
//! of [`Op`]s (the writes, history entries included, in order) and the
//! outcome to report. The store applies the ops through its [`Apply`]
//! implementation — a handful of storage primitives, no decisions — and
//! commits. So every store sweeps, evicts, re-acquires, admits, queues and
//! records the same way, with the same history texts.
//!
//! What stays a store's own: how it reads (locks, a snapshot at one
//! revision; expired waiter registrations are left out as it reads them),
//! its clock, how it commits (etcd retries the whole read–plan–apply round
//! when a compare fails), and **the token**: a plan says "issue a new
//! token" ([`Op::InsertGrant`], [`Issued::New`]) and the store takes the
//! next one from its counter (etcd: the commit's revision). One shortcut
//! stands beside the planners: PostgreSQL first tries a renewal as one
//! `UPDATE` whose condition admits only what [`renew`] would (a live grant,
//! [`rules::owner_verdict`]; [`rules::scope_verdict`] on the row it
//! returns, rolled back when refused), and plans whatever that does not
//! renew.
//!
//! Acquisition, in order (see [`acquire`]):
//!
//! 1. every grant that is no longer live is removed, recorded `expired`;
//! 2. every live grant named in [`LeaseAcquireParams::evict`] is removed,
//!    recorded `fast_takeover` — only tokens still live, so a stale proof
//!    cannot evict a newer grant; every waiter named in
//!    [`LeaseAcquireParams::evict_waiters`] leaves the queue (only
//!    registrations still there, never the acquirer's own; not recorded,
//!    as an expired registration is not);
//! 3. a live grant the request re-acquires ([`rules::reacquires`]) is
//!    extended with its token kept, recorded `reacquired`;
//! 4. else, if [`rules::admits`] the request behind the waiters ahead of
//!    it, a new token is issued, recorded `granted`;
//! 5. else the name is held: the acquirer's waiter registration is
//!    refreshed, or re-made at the back of the queue if it expired.
//!
//! An acquirer granted in 3 or 4 leaves the queue.

use std::time::Duration;

use crate::rules::{self, detail};
use crate::{
    Grant, GrantId, HistoryEvent, Holder, LeaseAcquireParams, LeaseFence, LeaseFenceParams, LeaseReleaseParams,
    LeaseRenewParams, LostReason, Mode, Owner, QueuedWaiter, Token, WaiterTicket,
};

/// History entries kept per name: a store always keeps the newest
/// `HISTORY_PER_NAME` of a name, and may let older ones linger until it
/// prunes them — at the latest when it adds the
/// [`HISTORY_PRUNE_EVERY`]th entry after its last pruning, so a name never
/// holds more than `HISTORY_PER_NAME + HISTORY_PRUNE_EVERY - 1`.
pub const HISTORY_PER_NAME: u32 = 1000;

/// How often (in entries added to a name) a store may prune its history:
/// pruning touches the page holding a name's oldest entries, so doing it
/// at every entry wrote that page at every durable operation (SQLite: one
/// page in four). etcd prunes at every entry.
pub const HISTORY_PRUNE_EVERY: u32 = 64;

/// A grant row as a store read it, with whether it is live by the
/// store's own clock.
pub type Seen = (Grant, bool);

/// The history events that end a grant. When a store no longer has the
/// grant of a token, the newest of these recorded for that token says how
/// it ended — an expired grant is removed by the next writer that looks at
/// the name (a new holder's acquisition, say), and its holder's late
/// renewal must still hear that it expired. A store reads it for
/// [`renew`] and [`release`] (SQL: `event IN` these, newest first;
/// etcd: [`ending`] over the name's history).
pub const ENDINGS: [HistoryEvent; 3] = [
    HistoryEvent::Expired,
    HistoryEvent::Released,
    HistoryEvent::FastTakeover,
];

/// How the grant of `token` ended according to `entries` (a name's
/// history as `(event, token)`, newest first): the first of [`ENDINGS`]
/// recorded for it, if the history (pruned to [`HISTORY_PER_NAME`]) still
/// holds one.
#[must_use]
pub fn ending(entries: impl IntoIterator<Item = (HistoryEvent, Option<Token>)>, token: Token) -> Option<HistoryEvent> {
    entries
        .into_iter()
        .find(|(event, t)| *t == Some(token) && ENDINGS.contains(event))
        .map(|(event, _)| event)
}

/// A token or a waiter ticket: one the store already has, or the one it
/// issues in this transaction (known to the store only once it took it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issued<T> {
    Existing(T),
    New,
}

impl<T> Issued<T> {
    /// The value, given the one the store issued (if it did yet).
    ///
    /// # Panics
    /// For [`Issued::New`] before the store issued one: a plan always
    /// issues before it names the new value.
    pub fn resolve(self, issued: Option<T>) -> T {
        match self {
            Issued::Existing(t) => t,
            Issued::New => issued.expect("a plan issues a token or ticket before it names it"),
        }
    }
}

/// A history entry to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub event: HistoryEvent,
    pub token: Issued<Token>,
    pub owner: Option<String>,
    pub detail: String,
}

/// A grant to create under a newly issued token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewGrant {
    pub owner: Owner,
    pub mode: Mode,
    pub holder: Holder,
    pub ttl: Duration,
}

/// A waiter registration to add at the back of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWaiter {
    pub mode: Mode,
    pub holder: Holder,
    pub ttl: Duration,
}

/// One write of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Delete grant `token`. `live`: the store saw it live (a fast
    /// takeover or a release: an optimistic store makes its commit depend
    /// on it still being so); otherwise it had expired.
    RemoveGrant { token: Token, live: bool },
    /// Extend the live grant `token` to the store's now + `ttl`, and
    /// replace its holder record with `holder` when given (re-acquisition).
    ExtendGrant {
        token: Token,
        ttl: Duration,
        holder: Option<Holder>,
    },
    /// Issue the name's next token to a new grant.
    InsertGrant(NewGrant),
    /// Keep waiter `ticket` registered for another `ttl`.
    RefreshWaiter { ticket: WaiterTicket, ttl: Duration },
    /// Register a waiter at the back of the queue (a new ticket).
    EnqueueWaiter(NewWaiter),
    /// Remove waiter `ticket` from the queue.
    RemoveWaiter(WaiterTicket),
    /// Append a history entry.
    Record(Entry),
}

/// What to write, in order, and what to report once it is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<T> {
    pub ops: Vec<Op>,
    pub outcome: T,
}

/// How an acquisition ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// Granted: a re-acquired grant's token, or the new one.
    Acquired(Issued<Token>),
    /// Not granted.
    Held(Waiting),
}

/// An acquirer that was not granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The tokens of the live grants left, oldest first.
    pub live: Vec<Token>,
    pub waiters_ahead: u32,
    /// Those waiters, in FIFO order.
    pub ahead: Vec<QueuedWaiter>,
    /// The acquirer's refreshed or re-made registration.
    pub ticket: Option<Issued<WaiterTicket>>,
}

impl Waiting {
    /// The seam's [`Held`](crate::Held), from the grants the store read
    /// (those not live any more are left out) and the ticket it issued.
    #[must_use]
    pub fn held(self, grants: impl IntoIterator<Item = Grant>, issued: Option<WaiterTicket>) -> crate::Held {
        crate::Held {
            grants: grants.into_iter().filter(|g| self.live.contains(&g.token)).collect(),
            waiters_ahead: self.waiters_ahead,
            ahead: self.ahead,
            ticket: self.ticket.map(|t| t.resolve(issued)),
        }
    }
}

/// A store's writes inside its open transaction: storage only, no
/// decisions. [`Plan::apply`] calls them in the plan's order.
pub trait Apply {
    type Error;
    fn remove_grant(&mut self, token: Token, live: bool) -> Result<(), Self::Error>;
    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<(), Self::Error>;
    /// Take the next token from the name's counter (the store keeps it for
    /// [`Issued::New`]) and create the grant.
    fn insert_grant(&mut self, grant: &NewGrant) -> Result<(), Self::Error>;
    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<(), Self::Error>;
    fn enqueue_waiter(&mut self, waiter: &NewWaiter) -> Result<(), Self::Error>;
    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<(), Self::Error>;
    /// Append `entry`, keeping the name's history within the bounds of
    /// [`HISTORY_PER_NAME`].
    fn record(&mut self, entry: &Entry) -> Result<(), Self::Error>;
}

impl<T> Plan<T> {
    /// Apply the ops to `store`, in order. The `acquire/token` failpoint
    /// lies between a new token's grant and the commit.
    pub fn apply<S: Apply>(&self, store: &mut S) -> Result<(), S::Error> {
        for op in &self.ops {
            match op {
                Op::RemoveGrant { token, live } => store.remove_grant(*token, *live)?,
                Op::ExtendGrant { token, ttl, holder } => store.extend_grant(*token, *ttl, holder.as_ref())?,
                Op::InsertGrant(grant) => {
                    store.insert_grant(grant)?;
                    crate::failpoint!("acquire", "token");
                }
                Op::RefreshWaiter { ticket, ttl } => store.refresh_waiter(*ticket, *ttl)?,
                Op::EnqueueWaiter(waiter) => store.enqueue_waiter(waiter)?,
                Op::RemoveWaiter(ticket) => store.remove_waiter(*ticket)?,
                Op::Record(entry) => store.record(entry)?,
            }
        }
        Ok(())
    }
}

fn record(ops: &mut Vec<Op>, event: HistoryEvent, token: Issued<Token>, owner: Option<&str>, detail: String) {
    ops.push(Op::Record(Entry {
        event,
        token,
        owner: owner.map(str::to_owned),
        detail,
    }));
}

/// Remove a grant that is no longer live, recording it.
fn expire(ops: &mut Vec<Op>, g: &Grant) {
    ops.push(Op::RemoveGrant {
        token: g.token,
        live: false,
    });
    record(
        ops,
        HistoryEvent::Expired,
        Issued::Existing(g.token),
        Some(&g.owner),
        detail::expired(g.ttl, &g.holder),
    );
}

/// Plan an acquisition (see the module docs for the order).
///
/// `grants`: every grant row of the name, oldest first, with whether it is
/// live by the store's clock; `waiters`: the live waiters, in FIFO order.
#[must_use]
pub fn acquire(p: &LeaseAcquireParams, grants: &[Seen], waiters: &[QueuedWaiter]) -> Plan<Acquire> {
    let mut ops = Vec::new();
    let live = live_grants(&mut ops, p, grants);
    // Waiters proved dead leave before anyone is judged: a killed waiter
    // must not hold back a name that is free.
    let mut queue = Vec::with_capacity(waiters.len());
    for w in waiters {
        if p.evict_waiters.contains(&w.ticket) && p.ticket != Some(w.ticket) {
            ops.push(Op::RemoveWaiter(w.ticket));
        } else {
            queue.push(w);
        }
    }
    let mine = p.ticket.and_then(|t| queue.iter().position(|w| w.ticket == t));
    let leave = mine.map(|i| Op::RemoveWaiter(queue[i].ticket));

    if let Some((g, why)) = live
        .iter()
        .find_map(|g| rules::reacquires(p, &g.owner, g.owner_explicit, g.mode, &g.holder).map(|why| (g, why)))
    {
        ops.push(Op::ExtendGrant {
            token: g.token,
            ttl: p.ttl,
            holder: Some(p.holder.clone()),
        });
        ops.extend(leave);
        let token = Issued::Existing(g.token);
        record(
            &mut ops,
            HistoryEvent::Reacquired,
            token,
            Some(&p.owner.label),
            why.to_owned(),
        );
        return Plan {
            ops,
            outcome: Acquire::Acquired(token),
        };
    }

    // FIFO: the waiters ahead are admitted first, as if granted; the first
    // one that does not fit blocks everyone behind it.
    let ahead = &queue[..mine.unwrap_or(queue.len())];
    if rules::admits(live.iter().map(|g| g.mode), ahead.iter().map(|w| w.mode), p.mode) {
        ops.push(Op::InsertGrant(NewGrant {
            owner: p.owner.clone(),
            mode: p.mode,
            holder: p.holder.clone(),
            ttl: p.ttl,
        }));
        ops.extend(leave);
        let detail = detail::granted(p.mode, p.ttl, &p.holder);
        record(
            &mut ops,
            HistoryEvent::Granted,
            Issued::New,
            Some(&p.owner.label),
            detail,
        );
        return Plan {
            ops,
            outcome: Acquire::Acquired(Issued::New),
        };
    }

    let ticket = p.ticket.map(|ticket| keep_waiting(&mut ops, p, ticket, mine.is_some()));
    Plan {
        ops,
        outcome: Acquire::Held(Waiting {
            live: live.iter().map(|g| g.token).collect(),
            waiters_ahead: u32::try_from(ahead.len()).unwrap_or(u32::MAX),
            ahead: ahead.iter().map(|w| (*w).clone()).collect(),
            ticket,
        }),
    }
}

/// The grants of the name that stay live: expired ones are removed, and
/// so are those the caller proved dead (`p.evict`, a fast takeover).
fn live_grants<'g>(ops: &mut Vec<Op>, p: &LeaseAcquireParams, grants: &'g [Seen]) -> Vec<&'g Grant> {
    let mut live = Vec::with_capacity(grants.len());
    for (g, is_live) in grants {
        if *is_live {
            live.push(g);
        } else {
            expire(ops, g);
        }
    }
    for token in &p.evict {
        if let Some(i) = live.iter().position(|g| g.token == *token) {
            let g = live.remove(i);
            ops.push(Op::RemoveGrant {
                token: g.token,
                live: true,
            });
            record(
                ops,
                HistoryEvent::FastTakeover,
                Issued::Existing(g.token),
                Some(&g.owner),
                detail::fast_takeover(&g.holder, &p.holder),
            );
        }
    }
    live
}

/// Keep a refused caller's waiter `ticket` in the queue: refreshed if it is
/// still `queued`, otherwise registered again.
fn keep_waiting(ops: &mut Vec<Op>, p: &LeaseAcquireParams, ticket: WaiterTicket, queued: bool) -> Issued<WaiterTicket> {
    if queued {
        ops.push(Op::RefreshWaiter {
            ticket,
            ttl: p.waiter_ttl,
        });
        Issued::Existing(ticket)
    } else {
        // The registration expired: re-make it, at the back.
        ops.push(Op::EnqueueWaiter(NewWaiter {
            mode: p.mode,
            holder: p.waiter_holder.as_ref().unwrap_or(&p.holder).clone(),
            ttl: p.waiter_ttl,
        }));
        Issued::New
    }
}

/// The grant a token-scoped operation (`op`) may act on, or the writes
/// that record why not: the grant `found` for the token, if the store has
/// it, must be the one the caller names ([`rules::scope_verdict`]: its
/// grant id, or a token alone for an unbound grant), pass
/// [`rules::owner_verdict`] and be live; one that is not
/// live any more is removed as expired. Without a grant, `ended` (how the
/// history says it ended, [`ENDINGS`]) decides the reason
/// ([`rules::lost_without_grant`]).
fn scoped<'g>(
    op: &str,
    token: Token,
    owner: Option<&str>,
    grant: Option<GrantId>,
    found: Option<&'g Seen>,
    ended: Option<HistoryEvent>,
) -> Result<&'g Grant, (Vec<Op>, LostReason)> {
    let mut ops = Vec::new();
    let reason = match found {
        None => rules::lost_without_grant(ended),
        Some((g, live)) => {
            // In this order: another grant under the caller's token is not
            // the caller's to judge, expire or touch; then the owner; a
            // grant no longer live is expired (a bound one too); only a
            // live one is refused to a token alone.
            let scope = rules::scope_verdict(grant, g);
            let verdict = if scope == Err(LostReason::OtherGrant) {
                scope
            } else {
                rules::owner_verdict(owner, &g.owner, g.owner_explicit).and(if *live {
                    scope
                } else {
                    Err(LostReason::Expired)
                })
            };
            match verdict {
                Ok(()) => return Ok(g),
                Err(LostReason::Expired) => {
                    expire(&mut ops, g);
                    LostReason::Expired
                }
                Err(reason) => reason,
            }
        }
    };
    let detail = detail::stale(op, reason);
    record(
        &mut ops,
        HistoryEvent::StaleRefused,
        Issued::Existing(token),
        owner,
        detail,
    );
    Err((ops, reason))
}

/// Plan a renewal of `p.token`, `found` as it is read (with whether it is
/// live; without it, `ended`: how the name's history says the grant ended,
/// see [`ENDINGS`]): extend it, or report why not.
#[must_use]
pub fn renew(p: &LeaseRenewParams, found: Option<&Seen>, ended: Option<HistoryEvent>) -> Plan<Result<(), LostReason>> {
    // Planted bug (scripts/mutants): an expired grant is taken as live.
    let revived;
    let found = match found {
        Some((g, false))
            if crate::mutant::strikes(crate::mutant::Mutant::RenewalRevivesExpired, || {
                rules::owner_verdict(p.owner.as_deref(), &g.owner, g.owner_explicit).is_ok()
            }) =>
        {
            revived = (g.clone(), true);
            Some(&revived)
        }
        found => found,
    };
    match scoped("renew", p.token, p.owner.as_deref(), p.grant, found, ended) {
        Ok(g) => Plan {
            ops: vec![Op::ExtendGrant {
                token: g.token,
                ttl: p.ttl,
                holder: None,
            }],
            outcome: Ok(()),
        },
        Err((ops, reason)) => Plan {
            ops,
            outcome: Err(reason),
        },
    }
}

/// Plan a release of `p.token`, `found` (and `ended`) as for [`renew`]:
/// remove it (the token counter stays), or report why not.
#[must_use]
pub fn release(
    p: &LeaseReleaseParams,
    found: Option<&Seen>,
    ended: Option<HistoryEvent>,
) -> Plan<Result<(), LostReason>> {
    match scoped("release", p.token, p.owner.as_deref(), p.grant, found, ended) {
        Ok(g) => {
            let mut ops = vec![Op::RemoveGrant {
                token: g.token,
                live: true,
            }];
            let token = Issued::Existing(g.token);
            record(
                &mut ops,
                HistoryEvent::Released,
                token,
                Some(&g.owner),
                detail::released(),
            );
            Plan { ops, outcome: Ok(()) }
        }
        Err((ops, reason)) => Plan {
            ops,
            outcome: Err(reason),
        },
    }
}

/// Plan the fence gate for `p`, given the newest token of the name and
/// the token's own grant as read: the verdict ([`rules::fence_verdict`])
/// recorded, and a grant found no longer live removed as expired.
#[must_use]
pub fn fence(p: &LeaseFenceParams, newest: Option<Token>, found: Option<&Seen>) -> Plan<LeaseFence> {
    let mut ops = Vec::new();
    let token = Issued::Existing(p.token);
    // A caller naming its grant whose token the store holds for another
    // grant (issued again after a restore) has no grant here: judged as
    // if its token's grant were gone.
    let theirs = found.filter(|(g, _)| p.grant.is_none_or(|asked| asked == g.id()));
    match rules::fence_verdict(p.token, newest, theirs.map(|(g, live)| (*live, g.mode))) {
        Ok(()) => {
            let (g, _) = theirs.expect("a fence passes only with a live grant");
            let detail = detail::fence_passed(&p.caller);
            record(&mut ops, HistoryEvent::FencePassed, token, Some(&g.owner), detail);
            Plan {
                ops,
                outcome: LeaseFence::Passed(g.clone()),
            }
        }
        Err(reason) => {
            if let Some((g, false)) = theirs {
                expire(&mut ops, g);
            }
            let detail = detail::fence_refused(&p.caller, reason, newest);
            record(&mut ops, HistoryEvent::FenceRefused, token, None, detail);
            Plan {
                ops,
                outcome: LeaseFence::Refused { newest, reason },
            }
        }
    }
}
