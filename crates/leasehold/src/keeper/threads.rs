//! The keeper's two threads — the *renewer* (sleep to the next
//! heartbeat, check the deadline, renew, move the window) and the
//! *watchdog* (fire the deadline while a renewal is stuck) — and
//! [`Keeper::renew_now`](super::Keeper::renew_now)'s renewal on the caller's thread, which follows
//! the same rule: one renewal out at a time.

use std::time::Duration;

use std::sync::MutexGuard;

use super::state::{Shared, State};
use super::window::trusted_until;
use super::{Attempt, KeeperOptions, Loss, Refusal, Renewal};
use crate::Result;
use crate::clock::POLL;

impl<L: Refusal> Shared<L> {
    /// Sleep until `until` on the keeper's clock, in slices of at most
    /// [`POLL`]; returns the state early when the keeper is stopped or lost,
    /// or when [`Keeper::renew_now`](super::Keeper::renew_now) renewed (the plan is then stale).
    pub(super) fn sleep_until<'a>(
        &'a self,
        mut state: MutexGuard<'a, State<L>>,
        until: Duration,
    ) -> MutexGuard<'a, State<L>> {
        let renewed_now = state.renewed_now;
        loop {
            let now = self.clock.now();
            if state.stopped
                || state.lost.is_some()
                || now >= until
                || now >= state.trusted_until
                || state.renewed_now != renewed_now
            {
                return state;
            }
            let slice = until
                .saturating_sub(now)
                .min(state.trusted_until.saturating_sub(now))
                .min(POLL);
            state.look_by = now.saturating_add(slice);
            state = self
                .changed
                .wait_timeout(state, slice)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Wait while a renewal of [`Keeper::renew_now`](super::Keeper::renew_now) is out (renewals
    /// never overlap); returns early when the keeper is stopped or lost.
    pub(super) fn wait_for_in_flight<'a>(&'a self, mut state: MutexGuard<'a, State<L>>) -> MutexGuard<'a, State<L>> {
        while state.in_flight.is_some() && !state.stopped && state.lost.is_none() {
            state = self
                .changed
                .wait_timeout(state, POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        state
    }

    pub(super) fn renew_loop(&self) {
        let mut state = self.lock();
        loop {
            let heartbeat = state.options.heartbeat();
            let retry = (heartbeat / 4).max(Duration::from_millis(20));
            let next = state.retry_at.unwrap_or(state.last_sent.saturating_add(heartbeat));
            let renewed_now = state.renewed_now;
            state = self.sleep_until(state, next);
            state = self.wait_for_in_flight(state);
            if state.stopped || state.lost.is_some() {
                return;
            }
            if state.renewed_now != renewed_now {
                // Renewed meanwhile by `renew_now`: plan again from it.
                continue;
            }
            let sent = self.clock.now();
            if sent >= state.trusted_until {
                // Resumed from a pause or suspend, or a retry came too
                // late: the window has closed; sending a renewal now could
                // only pretend otherwise.
                return self.lose_deadline(state, sent);
            }
            if sent < next {
                continue;
            }
            state.in_flight = Some(sent);
            let attempt = Attempt {
                ttl: state.options.ttl,
                last_renewed: state.last_sent,
                clock: self.clock.as_ref(),
            };
            drop(state);
            let outcome = self.renewer.renew(&attempt);
            let answered = self.clock.now();
            state = self.lock();
            state.in_flight = None;
            self.changed.notify_all();
            if state.stopped || state.lost.is_some() {
                return;
            }
            if answered >= state.trusted_until && !matches!(outcome, Ok(Renewal::Lost(_))) {
                // The window closed while the renewal was out: a late
                // answer does not revive the grant (the guard has stopped
                // the command at the window's end already).
                if outcome.is_ok() {
                    state.late_answer = Some(answered.saturating_sub(sent));
                } else if let Err(e) = &outcome {
                    state.last_error = Some(e.to_string());
                }
                return self.lose_deadline(state, answered);
            }
            match outcome {
                Ok(Renewal::Renewed) => {
                    crate::telemetry::renewed(self.kind, &self.name, self.token, answered.saturating_sub(sent));
                    state.renewals += 1;
                    state.last_sent = sent;
                    state.retry_at = None;
                    state.last_error = None;
                    let until = trusted_until(sent, &state.options);
                    if until > state.trusted_until {
                        state = self.move_window(state, until);
                    }
                }
                Ok(Renewal::Lost(reason)) => return self.lose(state, &Loss::Refused(reason)),
                Err(e) => {
                    crate::telemetry::renewal_failed(self.kind, &self.name, self.token, &e);
                    state.last_error = Some(e.to_string());
                    state.retry_at = Some(self.clock.now().saturating_add(retry));
                }
            }
        }
    }

    /// See [`Keeper::renew_now`](super::Keeper::renew_now).
    pub(super) fn renew_now(&self, new: Option<KeeperOptions>) -> Result<Option<Loss<L>>> {
        let mut state = self.wait_for_in_flight(self.lock());
        if state.stopped || state.lost.is_some() {
            return Ok(state.lost.clone());
        }
        let sent = self.clock.now();
        if sent >= state.trusted_until {
            self.lose_deadline(state, sent);
            return Ok(self.lock().lost.clone());
        }
        let options = new.unwrap_or_else(|| state.options.clone());
        state.in_flight = Some(sent);
        let attempt = Attempt {
            ttl: options.ttl,
            last_renewed: state.last_sent,
            clock: self.clock.as_ref(),
        };
        drop(state);
        let outcome = self.renewer.renew(&attempt);
        let mut state = self.lock();
        state.in_flight = None;
        self.changed.notify_all();
        if state.stopped || state.lost.is_some() {
            return Ok(state.lost.clone());
        }
        match outcome {
            Ok(Renewal::Renewed) => {
                state.renewals += 1;
                state.last_sent = sent;
                state.retry_at = None;
                state.last_error = None;
                state.renewed_now += 1;
                // The store's expiry is now this renewal's: the window
                // follows it, earlier too when the TTL got shorter.
                let until = trusted_until(sent, &options);
                state.options = options;
                drop(self.move_window(state, until));
                Ok(None)
            }
            Ok(Renewal::Lost(reason)) => {
                let loss = Loss::Refused(reason);
                self.lose(state, &loss);
                Ok(Some(loss))
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn watchdog(&self) {
        let mut state = self.lock();
        loop {
            if state.stopped || state.lost.is_some() {
                return;
            }
            let now = self.clock.now();
            if now >= state.trusted_until {
                return self.lose_deadline(state, now);
            }
            state = self.sleep_until(state, Duration::MAX);
        }
    }
}
