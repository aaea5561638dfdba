//! Ending a wait for a lease early: [`Cancel`], and (opt-in) the signals
//! that do it.
//!
//! A waiter is a place in the store's queue. A waiter that is told to stop
//! — a signal to the CLI, ^C in Python — must give up that place before it
//! goes, or it holds back everyone behind it until its registration
//! expires. So the wait itself is cancellable ([`Store::acquire_wait`]
//! looks at its [`Cancel`] before every poll, at most the poll interval
//! apart): it then leaves the queue and returns as a timed-out wait does.
//! A process killed outright (SIGKILL) cannot do that; the acquirers behind
//! it prove it dead instead (`identity::provably_gone`).
//!
//! [`Store::acquire_wait`]: crate::Store::acquire_wait

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};

use leasehold_backend::WaitTopic;
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Not cancelled.
const NOT: i32 = 0;
/// Cancelled by [`Cancel::cancel`] (a signal is recorded as its number).
const BY_CALL: i32 = -1;

/// Ends a wait for a lease ([`crate::Store::acquire_wait`],
/// [`crate::supervise::LeaseRun::cancel`]) from another thread, or on a
/// signal ([`Cancel::on_signals`]). Clones share one state; once
/// cancelled, it stays so.
///
/// # Examples
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use leasehold::{Acquire, AcquireOptions, Cancel, LeaseName, Store};
/// let store = Store::open_sqlite(&dir.path().join("l.db"))?;
/// let name = LeaseName::new("nightly").unwrap();
/// let Acquire::Acquired(grant) = store.try_acquire(&name, &AcquireOptions::default())? else { panic!() };
/// let cancel = Cancel::new();
/// let from_elsewhere = cancel.clone();
/// std::thread::spawn(move || from_elsewhere.cancel());
/// // Held (and out of the queue) once it sees the cancel, not after an hour.
/// let hour = Some(std::time::Duration::from_secs(3600));
/// let outcome = store.acquire_wait(&name, &AcquireOptions::default(), hour, &cancel, |_| {})?;
/// assert!(matches!(outcome, Acquire::Held(h) if h.grants[0].token == grant.token));
/// assert_eq!(store.status(&name)?.unwrap().waiters.len(), 0);
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<Shared>);

/// What the clones of a [`Cancel`] share: the state, and a condition a
/// waiter that sleeps between reads of the store ([`Cancel::sleep`]) is
/// woken by — so a waiter far back in the queue can sleep long without
/// answering a cancel late.
#[derive(Debug, Default)]
struct Shared {
    state: AtomicI32,
    lock: Mutex<()>,
    cancelled: Condvar,
    /// The topics of the waits in progress that a cancel interrupts
    /// ([`Cancel::interrupts`]): a waiter far back blocks in the store's
    /// wait, not in [`Cancel::sleep`].
    topics: Mutex<Vec<Weak<WaitTopic>>>,
}

impl Cancel {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel: a wait given this ends at its next look.
    pub fn cancel(&self) {
        self.set(BY_CALL);
    }

    fn set(&self, how: i32) {
        if self
            .0
            .state
            .compare_exchange(NOT, how, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // Under the lock: a sleeper between its look and its wait
            // cannot miss this.
            {
                let _locked = self.0.lock.lock().unwrap_or_else(PoisonError::into_inner);
                self.0.cancelled.notify_all();
            }
            let topics = self.0.topics.lock().unwrap_or_else(PoisonError::into_inner);
            for topic in topics.iter().filter_map(Weak::upgrade) {
                topic.interrupt();
            }
        }
    }

    /// Interrupt `topic`'s waits when cancelled (at once if already):
    /// for as long as the topic lives.
    pub(crate) fn interrupts(&self, topic: &Arc<WaitTopic>) {
        let mut topics = self.0.topics.lock().unwrap_or_else(PoisonError::into_inner);
        topics.retain(|t| t.strong_count() > 0);
        topics.push(Arc::downgrade(topic));
        drop(topics);
        if self.is_cancelled() {
            topic.interrupt();
        }
    }

    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) != NOT
    }

    /// Sleep `duration`, or until cancelled if that comes first.
    pub(crate) fn sleep(&self, duration: Duration) {
        let locked = self.0.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .0
            .cancelled
            .wait_timeout_while(locked, duration, |()| !self.is_cancelled())
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// The signal that cancelled, if one did ([`Cancel::on_signals`]).
    #[must_use]
    pub fn signal(&self) -> Option<i32> {
        Some(self.0.state.load(Ordering::SeqCst)).filter(|n| *n > 0)
    }

    /// Opt in: process-wide handlers (signal-hook) for SIGINT, SIGTERM and
    /// SIGHUP that cancel this — and, once [`SignalWatch::forward_to`] says
    /// where, pass each later signal on instead (to a command that now
    /// runs under the lease). The library installs none unless asked.
    /// Dropping the [`SignalWatch`] removes them; the process then ignores
    /// those signals (signal-hook cannot restore the default action), so
    /// keep it until the process is about to exit.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn on_signals(&self) -> io::Result<SignalWatch> {
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = signals.handle();
        let route = Arc::new(Mutex::new(Route::Cancel(self.clone())));
        let theirs = route.clone();
        thread::Builder::new().name("leasehold-signals".into()).spawn(move || {
            for sig in signals.forever() {
                match &*theirs.lock().unwrap_or_else(PoisonError::into_inner) {
                    Route::Cancel(cancel) => cancel.set(sig),
                    Route::Forward(forward) => forward(sig),
                }
            }
        })?;
        Ok(SignalWatch {
            cancel: self.clone(),
            route,
            handle,
        })
    }
}

/// Where a signal goes.
enum Route {
    Cancel(Cancel),
    Forward(Box<dyn Fn(i32) + Send>),
}

/// The handlers of [`Cancel::on_signals`]; dropping it removes them.
pub struct SignalWatch {
    cancel: Cancel,
    route: Arc<Mutex<Route>>,
    handle: signal_hook::iterator::Handle,
}

impl std::fmt::Debug for SignalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalWatch")
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

impl SignalWatch {
    /// From now on pass each signal to `forward` instead of cancelling.
    /// A signal that cancelled but came too late to end the wait (the
    /// wait was granted first) is passed on at once: it was meant for
    /// what now runs.
    pub fn forward_to(&self, forward: impl Fn(i32) + Send + 'static) {
        let mut route = self.route.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sig) = self.cancel.signal() {
            forward(sig);
        }
        *route = Route::Forward(Box::new(forward));
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cancel_is_the_one_kept() {
        let cancel = Cancel::new();
        assert!(!cancel.is_cancelled() && cancel.signal().is_none());
        cancel.clone().set(SIGTERM);
        cancel.cancel();
        cancel.set(SIGINT);
        assert!(cancel.is_cancelled());
        assert_eq!(cancel.signal(), Some(SIGTERM));
        let by_call = Cancel::new();
        by_call.cancel();
        by_call.set(SIGHUP);
        assert!(by_call.is_cancelled());
        assert_eq!(by_call.signal(), None);
    }
}
