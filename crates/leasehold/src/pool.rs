//! Threads that are used again. A worker starts a keeper (two threads)
//! and an output pump for every task it runs, and creating and joining a
//! thread costs about 100 µs on a small virtual machine — as much as a
//! durable transaction, and a tenth of running `true`. So a thread whose
//! job is done waits [`IDLE`] for the next one before it exits.
//!
//! A job runs to its end on its thread (a keeper's loop, a pump until
//! EOF); [`Handle`] waits for that end as `JoinHandle::join` would. A
//! panicking job ends its job only, as it would end a thread of its own.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// How long a thread without a job waits for one before it exits.
pub(crate) const IDLE: Duration = Duration::from_secs(5);

/// A job, and where its end is told.
type Job = (Box<dyn FnOnce() + Send>, Arc<(Mutex<bool>, Condvar)>);

/// The threads waiting for a job, each on its own channel. Only the
/// process that owns it ([`OWNER`]) uses it: a child made by `fork()` has a
/// copy of this list but none of its threads, so a job handed to one of
/// them would never run (seen: a forked Python child's keeper).
static WAITING: Mutex<Vec<(u64, mpsc::Sender<Job>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The process that uses [`WAITING`] (0: none yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Whether this process may use a process-wide list guarded by a lock
/// that `owner` stands for: the first process to ask, and only it. A child
/// made by `fork()` copies such a lock as it was — held for ever, when one
/// of the parent's threads held it at that moment (seen: a forked Python
/// child stuck for good right after its acquisition, its lease neither
/// renewed nor released) — so a forked child never takes it: it does
/// without the list.
pub(crate) fn owned_here(owner: &AtomicU32) -> bool {
    let pid = std::process::id();
    match owner.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        Err(first) => first == pid,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits for one job's end.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    done: Arc<(Mutex<bool>, Condvar)>,
}

impl Handle {
    /// Wait until the job has ended, or until `deadline`; whether it ended.
    pub(crate) fn join_until(&self, deadline: Instant) -> bool {
        let (done, ended) = &*self.done;
        let mut done = lock(done);
        while !*done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            done = ended
                .wait_timeout(done, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// Run `f` on a waiting thread, or on a new one when none waits.
pub(crate) fn spawn(f: impl FnOnce() + Send + 'static) -> Handle {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let mut job: Job = (Box::new(f), done.clone());
    let pooled = owned_here(&OWNER);
    loop {
        let waiting = if pooled { lock(&WAITING).pop() } else { None };
        let Some((_, tx)) = waiting else { break };
        match tx.send(job) {
            Ok(()) => return Handle { done },
            // That thread has just exited: try the next.
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    tx.send(job).expect("the receiver is right here");
    thread::Builder::new()
        .name("leasehold".into())
        .spawn(move || serve(id, &rx, &tx, pooled))
        .expect("spawn a thread");
    Handle { done }
}

/// A pooled thread: run jobs until none came for [`IDLE`] (one job only
/// when not `pooled`).
fn serve(id: u64, rx: &mpsc::Receiver<Job>, me: &mpsc::Sender<Job>, pooled: bool) {
    let mut next = rx.recv();
    while let Ok((job, done)) = next {
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
        if !pooled {
            *lock(&done.0) = true;
            done.1.notify_all();
            return;
        }
        // Waiting again before the end is told: whoever waited for it and
        // starts the next job finds this thread ready.
        lock(&WAITING).push((id, me.clone()));
        *lock(&done.0) = true;
        done.1.notify_all();
        next = if let Ok(job) = rx.recv_timeout(IDLE) {
            Ok(job)
        } else {
            let mut waiting = lock(&WAITING);
            if let Some(i) = waiting.iter().position(|(w, _)| *w == id) {
                waiting.remove(i);
                return;
            }
            // A spawner took this thread off the list and is sending.
            drop(waiting);
            rx.recv()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn jobs_run_to_their_end_and_threads_are_used_again() {
        let ran = Arc::new(AtomicUsize::new(0));
        let names = Arc::new(Mutex::new(std::collections::HashSet::new()));
        for _ in 0..20 {
            let (ran, names) = (ran.clone(), names.clone());
            spawn(move || {
                ran.fetch_add(1, Ordering::SeqCst);
                lock(&names).insert(thread::current().id());
            })
            .join_until(far());
        }
        assert_eq!(ran.load(Ordering::SeqCst), 20);
        // One after another: far fewer threads than jobs (other tests may
        // take a waiting thread meanwhile).
        assert!(lock(&names).len() < 20, "{} threads for 20 jobs", lock(&names).len());
    }

    #[test]
    fn a_panicking_job_ends_and_the_thread_serves_on() {
        assert!(spawn(|| panic!("a job's panic")).join_until(far()));
        let (tx, rx) = mpsc::channel();
        assert!(spawn(move || tx.send(7).unwrap()).join_until(far()));
        assert_eq!(rx.recv().unwrap(), 7);
    }

    #[test]
    fn join_until_returns_at_the_deadline_for_a_job_still_running() {
        let (tx, rx) = mpsc::channel::<()>();
        let handle = spawn(move || {
            let _ = rx.recv();
        });
        assert!(!handle.join_until(Instant::now() + Duration::from_millis(50)));
        drop(tx);
        assert!(handle.join_until(Instant::now() + Duration::from_secs(10)));
    }
}
