//! Keeping a grant or a task claim: heartbeat renewals, and a
//! holder-side deadline that does not trust the store's clock.
//!
//! One keeper serves both kinds of hold: what it keeps is a [`Renewer`],
//! whose `Lost` type says why the store refused a renewal — a
//! [`LostReason`] for a lease ([`Keeper`], started by [`Keeper::start`] or
//! [`Store::acquire_and_keep`](crate::Store::acquire_and_keep)), a
//! [`ClaimLost`] for a task claim ([`ClaimKeeper`], started by
//! [`Store::claim_and_keep`](crate::Store::claim_and_keep)).
//!
//! # The trust window
//!
//! A store expires a grant at *its* `now + ttl`, measured when it processes
//! the acquire or renew request — never earlier than the moment the holder
//! sent that request. So the holder may trust its grant until
//!
//! ```text
//! trusted_until = sent + ttl - margin
//! ```
//!
//! where `sent` is read on the holder's boot clock ([`host::boot_clock`](crate::host::boot_clock)) just
//! before the request goes out, and `margin` is what the holder needs to
//! stop using the grant (for `leasehold run`: the grace period plus slack).
//! This is river's "trust window" (`internal/leadership`): a reply that
//! arrives late shortens the window, it never lengthens it. The boot clock
//! keeps counting through a laptop's suspend (Linux `CLOCK_BOOTTIME`, where
//! Linux's `CLOCK_MONOTONIC` stops; macOS `CLOCK_MONOTONIC`),
//! so a holder that wakes from suspend sees its window has passed *before*
//! it sends anything.
//!
//! # States and transitions
//!
//! ```text
//!            renewed (sent + ttl - margin > trusted_until: window moves on)
//!           ┌──────┐
//!           ▼      │
//!   start ─► Held ─┴─ renewal failed (store error) ─► Held, retry sooner
//!            │
//!            ├─ renewal refused (Lost)            ─► Lost(Refused)   final
//!            ├─ boot clock ≥ trusted_until        ─► Lost(Deadline)  final
//!            └─ stop()                            ─► Stopped
//! ```
//!
//! Two threads (from a pool, and started only shortly before the first
//! heartbeat or the deadline is due: a worker starts a keeper per task,
//! and most tasks end sooner): the *renewer* sleeps until the next heartbeat, checks the
//! deadline (a holder resumed from SIGSTOP or suspend must not renew a
//! window that has already closed), sends the renewal and moves the window.
//! The *watchdog* fires the deadline while a renewal is stuck in a store
//! that does not answer. Both sleep in slices of at most [`POLL`](crate::POLL): condvar
//! timeouts run on `CLOCK_MONOTONIC`, which does not count suspend.
//!
//! # Failure handling
//!
//! - A refused renewal is final: the grant is gone (released, expired,
//!   taken over); the keeper never re-acquires — a new acquisition would get
//!   a new token, which is the caller's decision.
//! - A failed renewal (store down, locked, slow) is retried every quarter
//!   heartbeat until the deadline; the last error is kept for the message.
//! - A deadline that passes says why, from what the keeper measured
//!   ([`Overdue`](crate::Overdue)): this process did not run (its threads looked at the
//!   clock a second or more later than they promised), a renewal went
//!   unanswered (with who holds the store's write lock, where the store
//!   can tell), an answer came too late, or renewals kept failing. A pause
//!   is never blamed unless it was measured.
//! - Loss is pushed: callbacks registered with [`Keeper::on_loss`] and
//!   receivers from [`Keeper::subscribe`] get it once; [`LossHandle`] lets
//!   any thread wait for it or poll it. A late successful renewal after the
//!   deadline does not revive the grant.

mod loss;
mod release;
mod renewer;
mod report;
mod state;
mod threads;
mod window;

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use leasehold_backend::{Claim, LostReason, Token};

pub use self::loss::{Loss, LossHandle, Refusal};
pub use self::release::{Released, described, release_kept};
pub use self::renewer::{Attempt, ClaimLost, ClaimRenewer, LeaseRenewer, Renewal, Renewer};
pub use self::report::{ClaimReport, described_claim, report_kept};
use self::state::{Shared, State, WindowWatcher};
pub use self::window::KeeperOptions;
use self::window::trusted_until;
pub use crate::clock::{BootClock, Clock};
use crate::{Result, Store};

/// Keeps one grant (or, as [`ClaimKeeper`], one task claim): renews it
/// every heartbeat on its own thread and pushes its loss to the holder.
/// Stops (without releasing) on [`Keeper::stop`] or drop; releasing is the
/// holder's call, after it has stopped using the grant.
///
/// # Examples
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold::{Acquire, AcquireOptions, Keeper, KeeperOptions, LeaseName, Store, host};
///
/// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
/// let name = LeaseName::new("nightly-report").unwrap();
/// let options = AcquireOptions { ttl: Duration::from_secs(30), ..AcquireOptions::default() };
/// let sent = host::boot_clock();
/// let Acquire::Acquired(grant) = store.try_acquire(&name, &options)? else { panic!("held") };
/// // Or both steps in one call: `store.acquire_and_keep(&name, &options, keep)`.
/// let keeper = Keeper::start(store.clone(), &grant, sent, KeeperOptions::new(options.ttl));
/// let lost = keeper.subscribe();
/// // ... work, checking `lost.try_recv()` or `keeper.handle().is_lost()` ...
/// assert!(lost.try_recv().is_err());
/// keeper.stop();
/// store.release(&grant)?;
/// # Ok::<(), leasehold::Error>(())
/// ```
pub struct Keeper<L: Refusal = LostReason> {
    shared: Arc<Shared<L>>,
    /// Its threads' start, while it has not happened (`crate::deferred`).
    deferred: Option<crate::deferred::Deferred>,
}

/// A keeper of a task claim: its loss says whether the claim was deleted,
/// expired or taken ([`ClaimLost`]).
pub type ClaimKeeper = Keeper<ClaimLost>;

impl<L: Refusal> fmt::Debug for Keeper<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keeper")
            .field("kind", &self.shared.kind)
            .field("name", &self.shared.name)
            .field("token", &self.shared.token)
            .finish_non_exhaustive()
    }
}

impl Keeper {
    /// Keep `grant`, acquired by a request sent at `sent` on the boot clock
    /// (renewing that grant only: [`Store::renew`]). [`Store::acquire_and_keep`] reads
    /// the clock and starts the keeper for you.
    #[must_use]
    pub fn start(store: Arc<Store>, grant: &leasehold_backend::Grant, sent: Duration, options: KeeperOptions) -> Self {
        let renewer = LeaseRenewer::new(store, grant.clone());
        Self::start_on_boot_clock(Arc::new(renewer), sent, options)
    }
}

impl ClaimKeeper {
    /// Keep `claim`, claimed by a request sent at `sent` on the boot clock.
    /// [`Store::claim_and_keep`] reads the clock and starts the keeper for
    /// you.
    #[must_use]
    pub fn start_claim(store: Arc<Store>, claim: &Claim, sent: Duration, options: KeeperOptions) -> Self {
        let renewer = ClaimRenewer::new(store, claim.task_ref());
        Self::start_on_boot_clock(Arc::new(renewer), sent, options)
    }
}

impl<L: Refusal> Keeper<L> {
    /// Keep what `renewer` renews, acquired by a request sent at `sent` on
    /// `clock` (the boot clock, [`BootClock`], outside tests).
    #[must_use]
    pub fn start_with_clock(
        renewer: Arc<dyn Renewer<Lost = L>>,
        sent: Duration,
        options: KeeperOptions,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let this = Self::new(renewer, sent, options, clock, None);
        this.launch();
        this
    }

    /// As [`Keeper::start_with_clock`] on the boot clock, with the threads
    /// started only shortly before the first heartbeat or the deadline is
    /// due (`crate::deferred`): a hold given up before then costs none.
    fn start_on_boot_clock(renewer: Arc<dyn Renewer<Lost = L>>, sent: Duration, options: KeeperOptions) -> Self {
        let due = sent
            .saturating_add(options.heartbeat())
            .min(trusted_until(sent, &options));
        // Nobody looks at the clock before the deferred start, due then.
        let mut this = Self::new(renewer, sent, options, Arc::new(BootClock), Some(due));
        let shared = this.shared.clone();
        this.deferred = crate::deferred::start_by(due, move || Self::launch_threads(&shared));
        this
    }

    fn new(
        renewer: Arc<dyn Renewer<Lost = L>>,
        sent: Duration,
        options: KeeperOptions,
        clock: Arc<dyn Clock>,
        first_look: Option<Duration>,
    ) -> Self {
        let trusted_until = trusted_until(sent, &options);
        let now = clock.now();
        // The acquisition was answered after the window it opened closed.
        let late_answer = (now >= trusted_until).then(|| now.saturating_sub(sent));
        let shared = Arc::new(Shared {
            kind: renewer.kind(),
            name: renewer.name(),
            token: renewer.token(),
            clock,
            renewer,
            state: Mutex::new(State {
                options,
                renewed_now: 0,
                trusted_until,
                last_sent: sent,
                retry_at: None,
                last_error: None,
                renewals: 0,
                in_flight: None,
                // Never before now: whatever the request took before the
                // keeper existed is the store's answer time, not a gap.
                look_by: first_look.map_or(now, |due| due.max(now)),
                late_answer,
                lost: None,
                told: false,
                stopped: false,
                callbacks: Vec::new(),
                watchers: Vec::new(),
            }),
            changed: Condvar::new(),
        });
        Self { shared, deferred: None }
    }

    fn launch(&self) {
        Self::launch_threads(&self.shared);
    }

    /// The renewer and the watchdog, on pooled threads (a worker starts a
    /// keeper per task: `crate::pool`).
    fn launch_threads(shared: &Arc<Shared<L>>) {
        let spawn = |f: fn(&Shared<L>)| {
            let shared = shared.clone();
            crate::pool::spawn(move || f(&shared))
        };
        spawn(Shared::renew_loop);
        spawn(Shared::watchdog);
    }

    /// What it keeps, for the events of a command that follows it.
    pub(crate) fn under(&self) -> crate::telemetry::Under {
        crate::telemetry::Under {
            kind: self.shared.kind,
            name: self.shared.name.clone(),
            token: Some(self.shared.token.0),
        }
    }

    #[must_use]
    pub fn token(&self) -> Token {
        self.shared.token
    }

    /// Until when (on the keeper's clock) the grant may be trusted.
    #[must_use]
    pub fn trusted_until(&self) -> Duration {
        self.shared.lock().trusted_until
    }

    /// When the last successful renewal (or the acquisition) was sent, on
    /// the keeper's clock: the store cannot expire the hold before this +
    /// TTL.
    #[must_use]
    pub fn last_renewed(&self) -> Duration {
        self.shared.lock().last_sent
    }

    /// How many renewals succeeded.
    #[must_use]
    pub fn renewals(&self) -> u64 {
        self.shared.lock().renewals
    }

    /// Call `f` once when the grant is lost (at once if it already is).
    /// Runs on a keeper thread: keep it short (send on a channel, set a
    /// flag, signal a process).
    pub fn on_loss(&self, f: impl FnOnce(Loss<L>) + Send + 'static) {
        let mut state = self.shared.lock();
        match &state.lost {
            Some(loss) => {
                let loss = loss.clone();
                drop(state);
                f(loss);
            }
            None => state.callbacks.push(Box::new(f)),
        }
    }

    /// Call `f` with the trusted-until time now, and again each time a
    /// renewal moves it on (times on the keeper's clock). For whatever must
    /// act on the deadline even when this process cannot — `run`'s guard,
    /// beside the command, stops it at the window's end if no later window
    /// reached it (this process stopped, swapped out or starved). Runs on a
    /// keeper thread: keep it short and never block.
    pub fn on_window(&self, f: impl Fn(Duration) + Send + Sync + 'static) {
        let f: WindowWatcher = Arc::new(f);
        let mut state = self.shared.lock();
        let now = state.trusted_until;
        state.watchers.push(f.clone());
        drop(state);
        f(now);
    }

    /// The loss, if the hold may not be trusted now: one already reported,
    /// or a window that has closed — declared here at once, without waiting
    /// for the keeper's threads to notice. For a caller about to start
    /// work under the hold (a command): after `None` it may start, and the
    /// keeper (and `run`'s guard) stop it at the window's end as usual.
    #[must_use]
    pub fn check(&self) -> Option<Loss<L>> {
        let state = self.shared.lock();
        let now = self.shared.clock.now();
        if state.lost.is_none() && !state.stopped && now >= state.trusted_until {
            self.shared.lose_deadline(state, now);
            return self.shared.lock().lost.clone();
        }
        state.lost.clone()
    }

    /// Renew now, on the calling thread, rather than at the next heartbeat;
    /// with `new` options, renew for their TTL and keep the hold with them
    /// from then on (heartbeat and margin included). Options with a
    /// [`KeeperOptions::problem`] should be refused by the caller first; as
    /// at start, the keeper saturates rather than panics.
    ///
    /// Renewals never overlap: this waits for one the keeper has out. On
    /// success the window moves to this renewal's `sent + ttl - margin` —
    /// earlier than before when the TTL got shorter, because the store's
    /// expiry is now this renewal's. Returns the loss, when the hold is
    /// lost (now, or already before); the options are changed only by a
    /// renewal the store granted.
    ///
    /// # Errors
    /// When the store failed: nothing changed, and the keeper goes on
    /// renewing on its schedule until its deadline.
    pub fn renew_now(&mut self, new: Option<KeeperOptions>) -> Result<Option<Loss<L>>> {
        let outcome = self.shared.renew_now(new)?;
        if outcome.is_none()
            && let Some(deferred) = self.deferred.take()
        {
            // The keeper's threads have not started: start them by the new
            // plan's first heartbeat or deadline, which may be sooner.
            if deferred.cancel() {
                let due = {
                    let state = self.shared.lock();
                    state
                        .last_sent
                        .saturating_add(state.options.heartbeat())
                        .min(state.trusted_until)
                };
                let shared = self.shared.clone();
                self.deferred = crate::deferred::start_by(due, move || Self::launch_threads(&shared));
            }
        }
        Ok(outcome)
    }

    /// The options the hold is kept with now (changed by
    /// [`Keeper::renew_now`]).
    #[must_use]
    pub fn options(&self) -> KeeperOptions {
        self.shared.lock().options.clone()
    }

    /// A channel that receives the loss once.
    #[must_use]
    pub fn subscribe(&self) -> mpsc::Receiver<Loss<L>> {
        let (tx, rx) = mpsc::channel();
        self.on_loss(move |loss| {
            let _ = tx.send(loss);
        });
        rx
    }

    /// A handle any thread can wait on or poll.
    #[must_use]
    pub fn handle(&self) -> LossHandle<L> {
        LossHandle(self.shared.clone())
    }

    /// Stop renewing (does not release). Returns the loss, if it happened.
    ///
    /// No renewal is sent after it returns, and no loss or window is
    /// reported for the first time; one renewal already sent may still be
    /// answered, and is ignored; a loss or window report already under way
    /// may still arrive. It does not wait for the keeper's threads to wind
    /// down (a worker stops a keeper per task).
    #[allow(clippy::must_use_candidate, reason = "stopping is the point; the loss is extra")]
    pub fn stop(mut self) -> Option<Loss<L>> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Option<Loss<L>> {
        let lost = {
            let mut state = self.shared.lock();
            state.stopped = true;
            state.callbacks.clear();
            state.watchers.clear();
            state.lost.clone()
        };
        self.shared.changed.notify_all();
        if let Some(deferred) = self.deferred.take() {
            deferred.cancel();
        }
        lost
    }
}

impl<L: Refusal> Drop for Keeper<L> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests;
