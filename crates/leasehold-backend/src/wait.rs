//! What a waiter waits for: a change of one lease name or one task queue.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::LeaseName;
use crate::task::QueueName;

/// What a waiter waits on, for [`Backend::wait_for_change`](crate::Backend::wait_for_change).
///
/// A waiter keeps one `WaitTopic` for its whole wait loop and passes it to
/// every call: a backend that notifies may remember in it which changes
/// this waiter has already been woken for (its cursor), so a change that
/// lands while the waiter is busy re-reading the store is not missed by
/// its next wait. Backends that do not notify ignore the cursor.
#[derive(Debug)]
pub struct WaitTopic {
    what: Watched,
    cursor: AtomicU64,
    /// A second cursor for a backend that also counts events of its own
    /// (SQLite: writes seen on its log).
    events: AtomicU64,
    /// What a backend keeps open for this waiter from one wait to the
    /// next (etcd: its watch), dropped with the topic.
    kept: Kept,
    /// Set by [`WaitTopic::interrupt`]: a wait on this topic ends.
    interrupted: AtomicBool,
    /// Set by [`WaitTopic::wake`]: the wait in progress ends.
    woken: AtomicBool,
    /// What ends a wait in progress on an interrupt, set by the backend
    /// that waits ([`WaitTopic::on_interrupt`]).
    waker: Waker,
    /// What [`WaitTopic::sleep`] waits on.
    rouse: (Mutex<()>, Condvar),
}

/// Wake every thread waiting on `cvar` for what `lock` guards, taking the
/// lock first: a waiter between its look and its wait is not missed — the
/// way a backend's [`WaitTopic::on_interrupt`] hook ends a wait on a
/// condition variable of its own.
pub fn notify_all_under<T>(lock: &Mutex<T>, cvar: &Condvar) {
    drop(lock.lock().unwrap_or_else(PoisonError::into_inner));
    cvar.notify_all();
}

/// See [`WaitTopic::on_interrupt`].
#[derive(Default)]
struct Waker(Mutex<Option<Box<dyn Fn() + Send>>>);

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker(..)")
    }
}

/// A backend's open state for one waiter; see [`WaitTopic::kept`].
#[derive(Default)]
struct Kept(Mutex<Option<Box<dyn Any + Send>>>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept(..)")
    }
}

/// The thing a [`WaitTopic`] watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watched {
    /// A lease name: woken by release, expiry cleanup, fast takeover and
    /// waiters leaving the queue.
    Lease(LeaseName),
    /// A task queue: woken by tasks added, handed back, retried or reaped.
    Queue(QueueName),
}

impl WaitTopic {
    #[must_use]
    pub fn lease(name: &LeaseName) -> Self {
        Self::new(Watched::Lease(name.clone()))
    }

    #[must_use]
    pub fn queue(queue: &QueueName) -> Self {
        Self::new(Watched::Queue(queue.clone()))
    }

    #[must_use]
    pub fn new(what: Watched) -> Self {
        Self {
            what,
            cursor: AtomicU64::new(0),
            events: AtomicU64::new(0),
            kept: Kept::default(),
            interrupted: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            waker: Waker::default(),
            rouse: (Mutex::new(()), Condvar::new()),
        }
    }

    #[must_use]
    pub fn watched(&self) -> &Watched {
        &self.what
    }

    /// The backend's cursor for this waiter (0: not set yet).
    #[must_use]
    pub fn cursor(&self) -> u64 {
        self.cursor.load(Ordering::SeqCst)
    }

    /// Set the backend's cursor for this waiter.
    pub fn set_cursor(&self, value: u64) {
        self.cursor.store(value, Ordering::SeqCst);
    }

    /// Set the cursor to `now` (the store's version of what is watched);
    /// true when this waiter had looked before and it changed since — the
    /// wait is then over at once. A first look (cursor 0) waits.
    pub fn moved_to(&self, now: u64) -> bool {
        let before = self.cursor.swap(now, Ordering::SeqCst);
        before != 0 && before != now
    }

    /// Set the backend's event count for this waiter to `now`; whether it
    /// moved since the last call (a first call counts as moved when `now`
    /// is not 0).
    pub fn events_moved_to(&self, now: u64) -> bool {
        self.events.swap(now, Ordering::SeqCst) != now
    }

    /// What the backend keeps open for this waiter between its waits (an
    /// etcd watch: made once per wait loop, not once per wait — a waiter
    /// waits in slices of the poll interval). Dropped with the topic; what
    /// is kept must end itself cleanly when dropped.
    pub fn kept(&self) -> MutexGuard<'_, Option<Box<dyn Any + Send>>> {
        self.kept.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// End the wait in progress on this topic, and every later one, at
    /// once (the waiter was cancelled): a waiter far back may wait long
    /// ([`Backend::wait_behind`](crate::Backend::wait_behind)), and a
    /// cancel must not wait for it.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        self.rouse();
    }

    /// Whether [`WaitTopic::interrupt`] was called.
    #[must_use]
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// End the wait in progress on this topic (or the next one, if none
    /// is), once: something the waiter watches apart from the store
    /// happened (a process that kept it out exited). The waiter clears it
    /// with [`WaitTopic::take_woken`].
    pub fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        self.rouse();
    }

    /// Whether a wait on this topic is to end now: it was interrupted, or
    /// woken and not cleared since. A backend that blocks looks at this
    /// after setting its [`WaitTopic::on_interrupt`] hook.
    #[must_use]
    pub fn ending(&self) -> bool {
        self.interrupted() || self.woken.load(Ordering::SeqCst)
    }

    /// Clear a [`WaitTopic::wake`]; whether there was one.
    pub fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::SeqCst)
    }

    /// Sleep `timeout`, or until the topic is [ending](WaitTopic::ending):
    /// the wait of a backend that has nothing to be told by.
    pub fn sleep(&self, timeout: Duration) {
        let until = Instant::now() + timeout;
        let (lock, cvar) = &self.rouse;
        let mut locked = lock.lock().unwrap_or_else(PoisonError::into_inner);
        while !self.ending() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            locked = cvar
                .wait_timeout(locked, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Tell whoever waits on this topic to look at [`WaitTopic::ending`].
    fn rouse(&self) {
        notify_all_under(&self.rouse.0, &self.rouse.1);
        if let Some(wake) = self.waker.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            wake();
        }
    }

    /// For a backend about to block on this topic: `wake` ends its wait
    /// when the topic is interrupted or woken. Look at
    /// [`WaitTopic::ending`] after setting it (an interrupt before it is
    /// not lost that way); clear it with `None` when the wait is over.
    pub fn on_interrupt(&self, wake: Option<Box<dyn Fn() + Send>>) {
        *self.waker.0.lock().unwrap_or_else(PoisonError::into_inner) = wake;
    }
}
