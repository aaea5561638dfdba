//! How a keeper's loss reaches its holder: [`Loss`] (refused, or the
//! deadline passed), the bounds of a refusal ([`Refusal`]), and
//! [`LossHandle`], which any thread may wait on or poll — judging the
//! deadline against the clock itself, so that a holder never hears its
//! grant is trusted after the window closed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::LostReason;

use super::state::Shared;
use crate::overdue::Overdue;

/// How long [`LossHandle::loss`] waits for the keeper's threads to record
/// a deadline it found passed before they did.
pub const VERDICT: Duration = Duration::from_secs(1);

/// Why a keeper stopped trusting its hold. Final. `L` is the kind's
/// refusal: [`LostReason`] for a lease, [`ClaimLost`](super::ClaimLost) for a task claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loss<L = LostReason> {
    /// The store refused a renewal: the hold is gone.
    Refused(L),
    /// The holder-side deadline passed before a renewal succeeded; why, as
    /// far as the keeper saw ([`Overdue`]).
    Deadline(Overdue),
}

impl<L: fmt::Display> fmt::Display for Loss<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Refused(reason) => write!(f, "the store refused a renewal: {reason}"),
            Loss::Deadline(overdue) => write!(f, "the holder-side deadline passed: {overdue}"),
        }
    }
}

/// What a refusal may be: the bounds every `Renewer::Lost` has.
pub trait Refusal: Clone + fmt::Debug + fmt::Display + PartialEq + Send + Sync + 'static {}
impl<L: Clone + fmt::Debug + fmt::Display + PartialEq + Send + Sync + 'static> Refusal for L {}

/// Wait for, or poll, a keeper's loss from any thread.
pub struct LossHandle<L: Refusal = LostReason>(pub(super) Arc<Shared<L>>);

impl<L: Refusal> Clone for LossHandle<L> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<L: Refusal> fmt::Debug for LossHandle<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LossHandle").field(&self.0.token).finish()
    }
}

impl<L: Refusal> LossHandle<L> {
    /// Whether a keeper thread has recorded the loss (it has not looked at
    /// the clock for this; [`Self::loss`] does).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.0.lock().lost.is_some()
    }

    /// The loss, if the grant is lost — the answer to "may I go on?". The
    /// deadline is judged here against the clock too: a process resumed
    /// from a pause (SIGSTOP, a suspended machine) may run the holder's
    /// thread before the keeper's, and a holder that asks first must not be
    /// told its grant is still trusted — one more step of work could
    /// overlap the next holder's (seed 001's paused-holder race showed it).
    /// Then the keeper's threads are woken and their verdict awaited (up to
    /// `VERDICT`, a second): the loss recorded once, with what they measured, and
    /// its callbacks run before this returns — so a holder told here is
    /// told after an `on_loss` callback, never before it.
    #[must_use]
    pub fn loss(&self) -> Option<Loss<L>> {
        let state = self.0.lock();
        if state.lost.is_some() || state.stopped || self.0.clock.now() < state.trusted_until {
            return state.lost.clone();
        }
        self.0.changed.notify_all();
        let (state, _) = self
            .0
            .changed
            .wait_timeout_while(state, VERDICT, |s| !(s.stopped || (s.lost.is_some() && s.told)))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lost) = &state.lost {
            return Some(lost.clone());
        }
        // No verdict in time (the keeper's threads did not get to run):
        // the window has closed all the same.
        let now = self.0.clock.now();
        Some(self.0.deadline_loss(state, now, false))
    }

    /// Wait up to `timeout` (real time) for the loss; `None` if the grant
    /// is still trusted, or the keeper was stopped.
    #[must_use]
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Loss<L>> {
        let state = self.0.lock();
        let (state, _) = self
            .0
            .changed
            .wait_timeout_while(state, timeout, |s| s.lost.is_none() && !s.stopped)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.lost.clone()
    }
}
