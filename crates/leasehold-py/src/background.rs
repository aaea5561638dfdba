//! Blocking library calls that may wait long (a lease or lock wait, a
//! supervised command) run on a thread of their own, while the calling
//! thread waits for them without the GIL in short slices and lets Python
//! run its signal handlers in between. So ^C (`KeyboardInterrupt`), or an
//! `on_lost="interrupt"`, reaches a caller that is waiting — the library
//! call itself cannot be interrupted. The caller then decides: give up
//! (the call finishes on its thread, and what it got is let go), or stop
//! what runs and wait for it to end.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// How often a waiting caller lets Python run its signal handlers.
const SLICE: Duration = Duration::from_millis(50);

type Abandon<T> = Box<dyn FnOnce(T) + Send>;

enum State<T> {
    Running,
    Done(T),
    /// The caller gave up: this gets the result when it comes.
    GaveUp(Abandon<T>),
    Taken,
}

/// A blocking call running on its own thread.
pub struct Background<T> {
    shared: Arc<(Mutex<State<T>>, Condvar)>,
}

impl<T: Send + 'static> Background<T> {
    pub fn spawn(work: impl FnOnce() -> T + Send + 'static) -> Self {
        let shared = Arc::new((Mutex::new(State::Running), Condvar::new()));
        let theirs = shared.clone();
        thread::Builder::new()
            .name("leasehold-call".into())
            .spawn(move || {
                let out = work();
                let (state, done) = &*theirs;
                let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                if let State::GaveUp(abandon) = std::mem::replace(&mut *state, State::Taken) {
                    drop(state);
                    abandon(out);
                } else {
                    *state = State::Done(out);
                    done.notify_all();
                }
            })
            .expect("spawn a thread for a blocking call");
        Self { shared }
    }

    /// Wait up to `slice` without the GIL; the result if it came.
    fn poll(&self, py: Python<'_>, slice: Duration) -> Option<T> {
        let shared = self.shared.clone();
        crate::exiting::detach(py, move || {
            let (state, done) = &*shared;
            let state = state.lock().unwrap_or_else(PoisonError::into_inner);
            let mut state = done
                .wait_timeout_while(state, slice, |s| matches!(s, State::Running))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            match std::mem::replace(&mut *state, State::Taken) {
                State::Done(out) => Some(out),
                other => {
                    *state = other;
                    None
                }
            }
        })
    }

    /// Wait for the result. A signal handler that raises (^C) ends the
    /// wait with its exception; the call goes on.
    pub fn wait(&self, py: Python<'_>) -> PyResult<T> {
        loop {
            if let Some(out) = self.poll(py, SLICE) {
                return Ok(out);
            }
            py.check_signals()?;
        }
    }

    /// Wait up to `limit`, running no signal handlers.
    pub fn wait_for(&self, py: Python<'_>, limit: Duration) -> Option<T> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(out) = self.poll(py, left.min(SLICE)) {
                return Some(out);
            }
            if left.is_zero() {
                return None;
            }
        }
    }

    /// Stop waiting: `abandon` gets the result, now (without the GIL: it
    /// may stop a keeper whose thread waits for the GIL) if it has come, or
    /// on the call's thread when it does.
    pub fn give_up(self, py: Python<'_>, abandon: impl FnOnce(T) + Send + 'static) {
        let (state, _) = &*self.shared;
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        match std::mem::replace(&mut *state, State::Taken) {
            State::Done(out) => {
                drop(state);
                crate::exiting::detach(py, move || abandon(out));
            }
            State::Running => *state = State::GaveUp(Box::new(abandon)),
            other => *state = other,
        }
    }
}
