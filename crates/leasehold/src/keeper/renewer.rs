//! What a keeper keeps: the [`Renewer`] seam, one renewal as the keeper
//! sends it ([`Attempt`]) and its outcome ([`Renewal`]); the two real
//! renewers — a lease grant's ([`LeaseRenewer`]) and a task claim's
//! ([`ClaimRenewer`], whose refusals say [`ClaimLost`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::{LeaseRenew, LostReason, TaskLost, TaskRef, TaskUpdate, Token, WriteLock};

use crate::clock::Clock;
use crate::{Result, Store};

/// The outcome of one renewal, as the keeper needs it: renewed, or
/// refused for a reason of the kept kind (`L`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal<L = LostReason> {
    Renewed,
    Lost(L),
}

/// One renewal as the keeper sends it, with what the keeper knows about
/// the hold's timing — for a [`Renewer`] to say why a refusal happened.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The TTL to renew for.
    pub ttl: Duration,
    /// When the last successful acquire or renewal was sent (keeper's clock).
    pub last_renewed: Duration,
    pub(super) clock: &'a dyn Clock,
}

impl Attempt<'_> {
    /// Whether the store may have expired the hold before this renewal
    /// reached it: the keeper's clock has passed `last_renewed + ttl`
    /// (read after the store answered). When it has not, a refusal cannot
    /// be an expiry — someone ended or took the hold.
    #[must_use]
    pub fn could_have_expired(&self) -> bool {
        self.clock.now() >= self.last_renewed.saturating_add(self.ttl)
    }
}

/// What a keeper keeps: a lease grant ([`LeaseRenewer`]), a task claim
/// ([`ClaimRenewer`]), or a fake in tests.
pub trait Renewer: Send + Sync + fmt::Debug {
    /// Why the store refuses a renewal.
    type Lost: Clone + fmt::Debug + fmt::Display + PartialEq + Send + Sync + 'static;

    /// What kind of hold this is, for logs: `lease`, `claim`.
    fn kind(&self) -> &'static str;

    /// The name of what is kept, for logs: `NAME`, `QUEUE/ID`.
    fn name(&self) -> String;

    /// The token of the hold.
    fn token(&self) -> Token;

    /// Extend the hold to the store's `now + attempt.ttl`.
    ///
    /// # Errors
    /// When the store fails (the keeper retries until its deadline).
    fn renew(&self, attempt: &Attempt<'_>) -> Result<Renewal<Self::Lost>>;

    /// Who holds the store's write lock, asked when a renewal is still
    /// unanswered at the deadline ([`leasehold_backend::Backend::write_lock`]);
    /// `None` (the default) when the store cannot tell.
    fn write_lock(&self) -> Option<WriteLock> {
        None
    }
}

/// Renews a lease grant.
#[derive(Debug)]
pub struct LeaseRenewer {
    store: Arc<Store>,
    grant: leasehold_backend::Grant,
    /// The store's identity as its first renewal found it (made then if it
    /// had none): a refusal that finds another one, or none, is the store
    /// having lost data (`store/id.rs`).
    identity: std::sync::OnceLock<Option<crate::StoreIdentity>>,
}

impl LeaseRenewer {
    /// Renew `grant` — that grant only ([`Store::renew`]).
    #[must_use]
    pub fn new(store: Arc<Store>, grant: leasehold_backend::Grant) -> Self {
        Self {
            store,
            grant,
            identity: std::sync::OnceLock::new(),
        }
    }

    /// Why a renewal was refused: `reason`, or — when the store no longer
    /// has the grant, or holds its token for another, and its identity is
    /// not the one known — [`LostReason::StoreLostData`]. An identity that
    /// cannot be read now proves nothing.
    fn refused(&self, reason: LostReason) -> LostReason {
        let known = self.identity.get().cloned().flatten();
        let lost_data = matches!(reason, LostReason::Gone | LostReason::OtherGrant)
            && known.is_some()
            && self.store.identity().is_ok_and(|now| now != known);
        if lost_data { LostReason::StoreLostData } else { reason }
    }
}

impl Renewer for LeaseRenewer {
    type Lost = LostReason;

    fn kind(&self) -> &'static str {
        "lease"
    }

    fn name(&self) -> String {
        self.grant.name.to_string()
    }

    fn token(&self) -> Token {
        self.grant.token
    }

    fn renew(&self, attempt: &Attempt<'_>) -> Result<Renewal> {
        if self.identity.get().is_none() {
            // Read before the renewal, so a store wiped after it is told
            // apart; an unreadable one is asked again next time.
            let _ = self.store.identity_made().map(|known| self.identity.set(known));
        }
        Ok(match self.store.renew(&self.grant, attempt.ttl)? {
            LeaseRenew::Renewed(_) => Renewal::Renewed,
            LeaseRenew::Lost(reason) => Renewal::Lost(self.refused(reason)),
        })
    }

    fn write_lock(&self) -> Option<WriteLock> {
        self.store.backend().write_lock()
    }
}

/// Why a task claim was lost, as far as its holder can tell: the store's
/// [`TaskLost`], and — for a stale claim — whether it could have expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimLost {
    /// The task is gone from the store (deleted or purged).
    Deleted,
    /// The claim may have run past its TTL in the store: it expired, and
    /// the task may have been claimed again.
    Expired,
    /// The claim was refused while it could not have expired: someone
    /// ended it with its token (done, fail, hand back) or the task moved on.
    Taken,
}

impl ClaimLost {
    /// Read the store's refusal, with whether the claim could have expired
    /// by then ([`Attempt::could_have_expired`]).
    #[must_use]
    pub fn new(lost: TaskLost, could_have_expired: bool) -> Self {
        match lost {
            TaskLost::NotFound => ClaimLost::Deleted,
            TaskLost::Stale if could_have_expired => ClaimLost::Expired,
            TaskLost::Stale => ClaimLost::Taken,
        }
    }
}

impl fmt::Display for ClaimLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClaimLost::Deleted => "the task was deleted",
            ClaimLost::Expired => "the claim ran past its TTL in the store",
            ClaimLost::Taken => "the claim was ended by someone else while it was live",
        })
    }
}

/// Renews a task claim (a heartbeat).
#[derive(Debug)]
pub struct ClaimRenewer {
    store: Arc<Store>,
    task: TaskRef,
}

impl ClaimRenewer {
    #[must_use]
    pub fn new(store: Arc<Store>, task: TaskRef) -> Self {
        Self { store, task }
    }
}

impl Renewer for ClaimRenewer {
    type Lost = ClaimLost;

    fn kind(&self) -> &'static str {
        "claim"
    }

    fn name(&self) -> String {
        format!("{}/{}", self.task.queue, self.task.id)
    }

    fn token(&self) -> Token {
        self.task.token
    }

    fn renew(&self, attempt: &Attempt<'_>) -> Result<Renewal<ClaimLost>> {
        Ok(match self.store.task_heartbeat(&self.task, attempt.ttl)? {
            TaskUpdate::Applied => Renewal::Renewed,
            TaskUpdate::Lost(lost) => Renewal::Lost(ClaimLost::new(lost, attempt.could_have_expired())),
        })
    }

    fn write_lock(&self) -> Option<WriteLock> {
        self.store.backend().write_lock()
    }
}
