//! `lh.lock`: `leasehold::lock`, the same `flock` as `leasehold lock` —
//! the same lock file for the same path (`.leasehold.lock` inside a
//! directory; a path ending in `/`, or `dir=True`, is a directory, made if
//! missing), the same refusals. A lock taken before `os.fork()` stays the
//! parent's (see `fork.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold::lock::{self, LockOptions, TryLock};
use pyo3::prelude::*;

use crate::background::Background;
use crate::convert::{self, Wait};
use crate::errors::{self, OrRaise as _};
use crate::fork::{self, Local, LockSlot};

#[derive(Debug)]
#[pyclass(frozen, module = "leasehold")]
pub struct FileLock {
    slot: Arc<LockSlot>,
    path: PathBuf,
    shared: bool,
    pid: u32,
}

/// Lock `path` (see the module docs); raises `Held` when another process
/// holds it, after waiting as `wait=` says.
#[pyfunction]
#[pyo3(name = "lock", signature = (path, *, wait=None, shared=false, dir=false, allow_network_fs=false))]
pub fn lock_path(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    wait: Option<&Bound<'_, PyAny>>,
    shared: bool,
    dir: bool,
    allow_network_fs: bool,
) -> PyResult<FileLock> {
    let path = convert::path(path)?;
    let options = LockOptions {
        shared,
        allow_network_fs,
        dir,
    };
    let wait = Wait::from_py(wait)?;
    let outcome = match wait.timeout() {
        None => py.detach(|| lock::try_lock(&path, options)),
        Some(timeout) => {
            let call = {
                let path = path.clone();
                Background::spawn(move || lock::lock(&path, options, timeout))
            };
            match call.wait(py) {
                Ok(outcome) => outcome,
                Err(interrupted) => {
                    // A lock the wait gets after all is let go at once.
                    call.give_up(py, drop);
                    return Err(interrupted);
                }
            }
        }
    }
    .or_raise()?;
    match outcome {
        TryLock::Locked(held) => {
            let path = held.path().to_owned();
            let slot = Arc::new(LockSlot {
                lock: Mutex::new(Some(Local::new(held))),
            });
            fork::register_lock(&slot);
            Ok(FileLock {
                slot,
                path,
                shared,
                pid: std::process::id(),
            })
        }
        TryLock::Held { path, holders } => {
            let message = match wait {
                Wait::No => format!(
                    "{} is locked by {holders}. Try again later, or wait with wait=DURATION",
                    path.display()
                ),
                _ => format!("{} is still locked by {holders}", path.display()),
            };
            Err(errors::of_kind(leasehold::ErrorKind::Held, message))
        }
    }
}

#[pymethods]
impl FileLock {
    /// The lock file (inside the directory, for a directory).
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn shared(&self) -> bool {
        self.shared
    }

    /// Whether this process holds it.
    #[getter]
    fn locked(&self) -> bool {
        self.slot
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| l.get().is_ok())
    }

    /// Unlock (the lock file stays: deleting it would let a second process
    /// lock a new file of the same name).
    fn release(&self) -> PyResult<()> {
        let held = self.slot.lock.lock().unwrap_or_else(PoisonError::into_inner).take();
        match held.map(Local::take) {
            Some(Ok(lock)) => {
                drop(lock);
                Ok(())
            }
            Some(Err(forked)) => Err(errors::of_kind(
                leasehold::ErrorKind::Lost,
                forked.says(&format!("the lock {}", self.path.display())),
            )),
            None if self.pid != std::process::id() => Err(errors::of_kind(
                leasehold::ErrorKind::Lost,
                fork::Forked { owner: self.pid }.says(&format!("the lock {}", self.path.display())),
            )),
            None => Err(errors::invalid(format!(
                "{} is not locked (released already)",
                self.path.display()
            ))),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let released = self.release();
        if exc_type.is_none_or(PyAnyMethods::is_none) {
            released?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "<lh.FileLock {:?} {}{}>",
            self.path.display().to_string(),
            if self.shared { "shared " } else { "" },
            if self.locked() { "locked" } else { "released" }
        )
    }
}
