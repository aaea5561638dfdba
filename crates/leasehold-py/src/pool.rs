//! The pool: at most [`WORKERS`] threads that run calls ending in a store
//! round trip or two for `aio` (an acquire that does not wait, a release,
//! a report) — never a wait, so a call put here never queues behind a
//! waiter for long (`aio.rs` says why). A thread is started when work
//! comes and none is idle, and ends after [`IDLE_EXIT`] without work. In a
//! child made by `os.fork()` the pool starts afresh (it remembers whose
//! threads it counts).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The most pool threads.
pub const WORKERS: usize = 8;

/// How long a pool thread without work lives.
const IDLE_EXIT: Duration = Duration::from_secs(10);

type Work = Box<dyn FnOnce() + Send>;

struct Pool {
    jobs: VecDeque<Work>,
    /// Threads started and not ended, and how many of them wait for work.
    workers: usize,
    idle: usize,
    /// The process these threads are in (see the module docs on fork).
    pid: u32,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    jobs: VecDeque::new(),
    workers: 0,
    idle: 0,
    pid: 0,
});
static WORK: Condvar = Condvar::new();

fn pool() -> MutexGuard<'static, Pool> {
    let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if pool.pid != pid {
        // Forked (or new): the threads counted are the parent's.
        *pool = Pool {
            jobs: std::mem::take(&mut pool.jobs),
            workers: 0,
            idle: 0,
            pid,
        };
    }
    pool
}

/// Run `job` on a pool thread. It must end in bounded time (no waits).
///
/// # Errors
/// When no pool thread runs and none can be started (then `job` is
/// dropped).
pub fn submit(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut state = pool();
    state.jobs.push_back(Box::new(job));
    if state.idle >= state.jobs.len() || state.workers >= WORKERS {
        WORK.notify_one();
        return Ok(());
    }
    state.workers += 1;
    drop(state);
    let started = std::thread::Builder::new().name("leasehold-pool".into()).spawn(worker);
    if let Err(e) = started {
        let mut again = pool();
        again.workers -= 1;
        if again.workers == 0 {
            again.jobs.pop_back();
            return Err(e);
        }
    }
    Ok(())
}

fn worker() {
    loop {
        let job = {
            let mut pool = pool();
            loop {
                if let Some(job) = pool.jobs.pop_front() {
                    break job;
                }
                pool.idle += 1;
                let (again, waited) = WORK
                    .wait_timeout(pool, IDLE_EXIT)
                    .unwrap_or_else(PoisonError::into_inner);
                pool = again;
                pool.idle -= 1;
                if waited.timed_out() && pool.jobs.is_empty() {
                    pool.workers -= 1;
                    return;
                }
            }
        };
        job();
    }
}
