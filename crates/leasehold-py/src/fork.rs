//! `os.fork()`: a child gets a copy of the parent's memory — its stores,
//! its grants, its locks — but not its threads, and it shares the parent's
//! sockets and open file descriptions.
//!
//! So what a process holds is wrapped in [`Local`]: in a forked child it
//! is never used (every use says whose it is) and never dropped — dropping
//! a keeper would join heartbeat threads that do not exist there, dropping
//! a store would close the parent's connection (a PostgreSQL socket is
//! shared with the parent: closing it from the child ends the parent's
//! session). It is leaked instead, which costs the child some memory and
//! nothing else. A child therefore neither holds, renews nor releases its
//! parent's grants and claims: they stay the parent's, renewed by the
//! parent's keepers.
//!
//! `flock` locks belong to the open file description, which the child
//! shares: the child would keep the parent's lock alive after the parent
//! died, and unlocking it would unlock the parent's. The package's
//! `os.register_at_fork` hook calls [`after_fork_in_child`], which closes
//! the child's copies of every lock descriptor (without unlocking) at once.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use pyo3::prelude::*;

/// A value that belongs to the process that made it (see the module docs).
#[derive(Debug)]
pub struct Local<T> {
    pid: u32,
    value: Option<T>,
}

/// A use of another process's value: the pid it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Forked {
    pub owner: u32,
}

impl Forked {
    /// "this process (pid C) is a child made by `os.fork()` of pid P, which
    /// holds WHAT" — for messages.
    pub fn says(self, what: &str) -> String {
        format!(
            "this process (pid {}) is a child made by os.fork() of pid {}, which holds {what}; a forked child \
             neither holds, renews nor releases its parent's grants — take your own in the child",
            std::process::id(),
            self.owner
        )
    }
}

impl<T> Local<T> {
    pub fn new(value: T) -> Self {
        Self {
            pid: std::process::id(),
            value: Some(value),
        }
    }

    /// The pid of the process that made it.
    pub fn owner(&self) -> u32 {
        self.pid
    }

    /// Whether this process made it.
    pub fn is_mine(&self) -> bool {
        self.pid == std::process::id()
    }

    pub fn get(&self) -> Result<&T, Forked> {
        match &self.value {
            Some(value) if self.is_mine() => Ok(value),
            _ => Err(Forked { owner: self.pid }),
        }
    }

    /// The value whichever process made it: for the fork hook only, which
    /// must reach the parent's locks in the child.
    fn in_any_process(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// The value, to use up (release a grant, report a claim).
    pub fn take(mut self) -> Result<T, Forked> {
        if self.is_mine() {
            Ok(self.value.take().expect("a Local holds its value until taken"))
        } else {
            Err(Forked { owner: self.pid })
        }
    }
}

impl<T: Send> Local<T> {
    /// Use the value up without the GIL — from a `Drop` that runs with it,
    /// where the keeper it stops may be waiting for the GIL — if it is this
    /// process's; in a forked child it is leaked.
    pub fn finish_detached(self, f: impl FnOnce(T) + Send) {
        if let Ok(value) = self.take() {
            // Drops run attached: this takes no GIL.
            #[allow(clippy::disallowed_methods, reason = "the thread is attached already")]
            Python::attach(|py| crate::exiting::detach(py, move || f(value)));
        }
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if !self.is_mine() {
            std::mem::forget(self.value.take());
        }
    }
}

/// A held `lh.lock`, as the fork hook sees it.
#[derive(Debug)]
pub struct LockSlot {
    pub lock: Mutex<Option<Local<leasehold::lock::FileLock>>>,
}

/// Every lock this process holds, for the fork hook. Touched only with the
/// GIL held and never across a blocking call, so no other thread can hold
/// it when `os.fork()` (which holds the GIL) copies it.
static LOCKS: Mutex<Vec<Weak<LockSlot>>> = Mutex::new(Vec::new());

pub fn register_lock(slot: &Arc<LockSlot>) {
    let mut locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
    locks.retain(|w| w.strong_count() > 0);
    locks.push(Arc::downgrade(slot));
}

/// Called in the child by the package's `os.register_at_fork` hook: close
/// the child's copy of every lock descriptor, without unlocking — the
/// lock, shared with the parent, stays the parent's.
#[pyfunction]
pub fn after_fork_in_child(py: Python<'_>) -> PyResult<()> {
    use std::os::fd::AsRawFd as _;
    crate::exiting::after_fork_in_child();
    let locks = std::mem::take(&mut *LOCKS.lock().unwrap_or_else(PoisonError::into_inner));
    let os = py.import("os")?;
    for slot in locks.iter().filter_map(Weak::upgrade) {
        // A slot locked at the fork was being released by another thread:
        // leave it; its descriptor closes with the child.
        let Ok(mut held) = slot.lock.try_lock() else { continue };
        if let Some(local) = held.take() {
            let Some(fd) = local.in_any_process().map(|lock| lock.file().as_raw_fd()) else {
                continue;
            };
            // The FileLock is leaked (its drop would unlock the parent's
            // lock); its descriptor, closed here, is never touched again.
            std::mem::forget(local);
            os.call_method1("close", (fd,))?;
        }
    }
    Ok(())
}
