//! Keepers whose threads are not needed yet. A keeper's threads do
//! nothing before its first heartbeat (a third of the TTL by default) or
//! its deadline, and a worker's task — or a short `leasehold run` — often
//! ends long before either: its keeper is then started and stopped without
//! a thread ever running for it. One thread here starts each keeper's
//! threads [`POLL`] before the earlier of the two, reading the boot clock
//! every [`POLL`] as the keeper's own threads do (so a suspend is noticed as
//! soon: a keeper whose moment passed while the machine slept is started
//! at the first look after it wakes, and finds its window closed).
//!
//! The thread lingers [`LINGER`] after its last keeper is gone, looking
//! every [`POLL`], so that a worker's next keeper needs no wake-up; then it
//! exits, and the next keeper starts a new one.

use std::sync::atomic::AtomicU32;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use leasehold_host as host;

use crate::clock::POLL;

/// How long the thread stays with nothing to start.
const LINGER: Duration = Duration::from_secs(5);

type Start = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Waiting {
    /// (id, boot-clock time to start by, what starts the keeper's threads)
    entries: Vec<(u64, Duration, Start)>,
    next_id: u64,
    /// The thread is there (it sets this false as it exits).
    running: bool,
}

static WAITING: Mutex<Waiting> = Mutex::new(Waiting {
    entries: Vec::new(),
    next_id: 0,
    running: false,
});
static TICK: Condvar = Condvar::new();

/// The process that uses [`WAITING`] (see `pool::owned_here`). A child
/// made by `fork()` has a copy of the list but not its thread: it never
/// touches it, so its parent's starts (holding the parent's keepers'
/// state, a PostgreSQL connection among others) are never run nor
/// dropped there — leaked, as `fork`'s copies are.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// The waiting starts (of the owning process: only it calls this).
fn lock() -> MutexGuard<'static, Waiting> {
    WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A keeper's start that has not happened yet.
#[derive(Debug)]
pub(crate) struct Deferred(u64);

impl Deferred {
    /// Forget the start, if it has not happened: true when it never will.
    pub(crate) fn cancel(&self) -> bool {
        if !crate::pool::owned_here(&OWNER) {
            // A forked child's copy of its parent's start: it never runs
            // here, and the lock is not this process's to take.
            return true;
        }
        let mut waiting = lock();
        let before = waiting.entries.len();
        waiting.entries.retain(|(id, _, _)| *id != self.0);
        waiting.entries.len() < before
    }
}

/// Run `start` by `due` on the boot clock: now when `due` is less than
/// [`POLL`] away, else from this module's thread.
pub(crate) fn start_by(due: Duration, start: impl FnOnce() + Send + 'static) -> Option<Deferred> {
    // A forked child starts its keepers now: it never takes the parent's
    // lock (see `pool::owned_here`).
    if due <= host::boot_clock().saturating_add(POLL) || !crate::pool::owned_here(&OWNER) {
        start();
        return None;
    }
    let mut waiting = lock();
    let id = waiting.next_id;
    waiting.next_id += 1;
    waiting.entries.push((id, due, Box::new(start)));
    if !waiting.running {
        waiting.running = true;
        let spawned = thread::Builder::new().name("leasehold-keepers".into()).spawn(serve);
        if spawned.is_err() {
            // No thread: start it now rather than never.
            waiting.running = false;
            let entry = waiting.entries.pop().expect("pushed above");
            drop(waiting);
            (entry.2)();
            return None;
        }
    }
    Some(Deferred(id))
}

/// The thread: start what is due, look again every [`POLL`].
fn serve() {
    let mut idle_since: Option<Instant> = None;
    let mut waiting = lock();
    loop {
        let soon = host::boot_clock().saturating_add(POLL);
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut waiting.entries)
            .into_iter()
            .partition(|(_, at, _)| *at <= soon);
        waiting.entries = later;
        if !due.is_empty() {
            drop(waiting);
            for (_, _, start) in due {
                start();
            }
            waiting = lock();
            continue;
        }
        if waiting.entries.is_empty() {
            if idle_since.get_or_insert_with(Instant::now).elapsed() >= LINGER {
                waiting.running = false;
                return;
            }
        } else {
            idle_since = None;
        }
        waiting = TICK
            .wait_timeout(waiting, POLL)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_start_due_soon_runs_at_once_and_a_later_one_when_due_unless_cancelled() {
        let now = host::boot_clock();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        assert!(start_by(now, move || r.store(true, Ordering::SeqCst)).is_none());
        assert!(ran.load(Ordering::SeqCst), "due now: started at once");

        let (early, cancelled) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let e = early.clone();
        let waiting = start_by(now + 3 * POLL, move || e.store(true, Ordering::SeqCst)).expect("deferred");
        let c = cancelled.clone();
        let never = start_by(now + 3 * POLL, move || c.store(true, Ordering::SeqCst)).expect("deferred");
        assert!(never.cancel(), "cancelled before it was due");
        assert!(!early.load(Ordering::SeqCst), "not before it is due");
        let begun = Instant::now();
        while !early.load(Ordering::SeqCst) {
            assert!(begun.elapsed() < Duration::from_secs(10), "started when due");
            thread::sleep(POLL / 4);
        }
        assert!(!waiting.cancel(), "started: nothing left to cancel");
        assert!(!cancelled.load(Ordering::SeqCst));
    }
}
