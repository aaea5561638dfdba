//! What a keeper's threads and its holder share: the hold's [`State`]
//! behind one lock and a condvar, and the few steps every side takes on
//! it — recording the loss once (callbacks run outside the lock), wording
//! a deadline that passed ([`Overdue`]), moving the window and telling its
//! watchers.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_backend::Token;

use super::{KeeperOptions, Loss, Refusal, Renewer};
use crate::clock::Clock;
use crate::overdue::{NOT_RUN, Overdue, Unanswered};

pub(super) type Callback<L> = Box<dyn FnOnce(Loss<L>) + Send>;
pub(super) type WindowWatcher = Arc<dyn Fn(Duration) + Send + Sync>;

pub(super) struct State<L> {
    /// How the hold is kept: the TTL each renewal asks for, the heartbeat
    /// and the margin. Changed only by [`Keeper::renew_now`](super::Keeper::renew_now) with new
    /// options, after the store granted the new TTL.
    pub(super) options: KeeperOptions,
    /// Bumped when [`Keeper::renew_now`](super::Keeper::renew_now) renewed: the renewer's planned
    /// next heartbeat is then out of date.
    pub(super) renewed_now: u64,
    pub(super) trusted_until: Duration,
    pub(super) last_sent: Duration,
    pub(super) retry_at: Option<Duration>,
    pub(super) last_error: Option<String>,
    pub(super) renewals: u64,
    /// Send time of a renewal the store has not answered yet. One at a
    /// time: a renewal answered out of order could move the window past
    /// what the store promised after a later, shorter one.
    pub(super) in_flight: Option<Duration>,
    /// By when a keeper thread promised to look at the clock again: a look
    /// much later than this means the process did not run meanwhile.
    pub(super) look_by: Duration,
    /// How long after it was sent the store answered a request whose
    /// window had closed by then (the acquisition, or a renewal).
    pub(super) late_answer: Option<Duration>,
    pub(super) lost: Option<Loss<L>>,
    /// The callbacks of the loss have run (see [`LossHandle::loss`](super::LossHandle::loss)).
    pub(super) told: bool,
    pub(super) stopped: bool,
    pub(super) callbacks: Vec<Callback<L>>,
    /// Told each new `trusted_until` (see [`Keeper::on_window`](super::Keeper::on_window)).
    pub(super) watchers: Vec<WindowWatcher>,
}

pub(super) struct Shared<L: Refusal> {
    /// What is kept, for logs: its kind and name.
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) token: Token,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) renewer: Arc<dyn Renewer<Lost = L>>,
    pub(super) state: Mutex<State<L>>,
    pub(super) changed: Condvar,
}

impl<L: Refusal> Shared<L> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<L>> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record the loss (once) and run the callbacks outside the lock.
    pub(super) fn lose(&self, mut state: MutexGuard<'_, State<L>>, loss: &Loss<L>) {
        if state.lost.is_some() || state.stopped {
            return;
        }
        crate::telemetry::lost(self.kind, &self.name, self.token, loss);
        state.lost = Some(loss.clone());
        let callbacks = std::mem::take(&mut state.callbacks);
        drop(state);
        self.changed.notify_all();
        for callback in callbacks {
            callback(loss.clone());
        }
        self.lock().told = true;
        self.changed.notify_all();
    }

    /// The deadline has passed (`now` ≥ the window's end): record the loss
    /// with what the keeper saw ([`Overdue`]). A renewal still out is
    /// explained by asking the store who holds its write lock — outside
    /// the state's lock, since that reads the system's lock table.
    pub(super) fn lose_deadline(&self, state: MutexGuard<'_, State<L>>, now: Duration) {
        let loss = self.deadline_loss(state, now, true);
        self.lose(self.lock(), &loss);
    }

    /// The loss of a deadline that has passed, not recorded here. Who
    /// holds the store's write lock is asked only when `ask_store` (a
    /// keeper thread): a holder's own question must not wait on the store.
    pub(super) fn deadline_loss(&self, state: MutexGuard<'_, State<L>>, now: Duration, ask_store: bool) -> Loss<L> {
        let late = now.saturating_sub(state.look_by);
        let mut overdue = Overdue {
            not_run: (late >= NOT_RUN).then_some(late),
            unanswered: None,
            late_answer: state.late_answer,
            last_error: state.last_error.clone(),
        };
        let in_flight = state.in_flight;
        drop(state);
        if let Some(sent) = in_flight {
            overdue.unanswered = Some(Unanswered {
                sent_ago: now.saturating_sub(sent),
                lock: if ask_store { self.renewer.write_lock() } else { None },
            });
        }
        Loss::Deadline(overdue)
    }

    /// Set the window to `until` and tell the watchers, outside the lock.
    pub(super) fn move_window<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<L>>,
        until: Duration,
    ) -> MutexGuard<'a, State<L>> {
        state.trusted_until = until;
        let watchers = state.watchers.clone();
        drop(state);
        self.changed.notify_all();
        for watch in watchers {
            watch(until);
        }
        self.lock()
    }
}
