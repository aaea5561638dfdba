//! `lh.lock`: `leasehold::lock`, the same `flock` as `leasehold lock` —
//! the same lock file for the same path (`.leasehold.lock` inside a
//! directory; a path ending in `/`, or `dir=True`, is a directory, made if
//! missing), the same refusals. A lock taken before `os.fork()` stays the
//! parent's (see `fork.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::lock::{self, Holders, LockOptions, TryLock};
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;

use crate::background::Background;
use crate::convert::{self, Wait};
use crate::errors::{self, HolderFacts, OrRaise as _};
use crate::fork::{self, Local, LockSlot};

#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct FileLock {
    slot: Arc<LockSlot>,
    path: PathBuf,
    /// The path and options it was locked with, to lock it again when a
    /// released lock is entered with `with` (as `filelock` and `lh.Lease`
    /// do): its block never runs unlocked.
    asked: PathBuf,
    options: LockOptions,
    pid: u32,
}

/// Take ``flock(2)`` on ``path`` — the same lock as ``leasehold lock PATH``;
/// returns a held ``FileLock`` (``with`` it, or ``release()``).
///
/// ``path``: a path ending in ``/`` (or ``dir=True``) is a directory, made
/// if missing (0700) and locked through ``.leasehold.lock`` inside; an
/// existing directory likewise; any other path is the lock file itself, in
/// a directory that must exist (a file ``lock`` did not create is never
/// changed). ``wait``: None/False do not wait, a duration waits up to that
/// long, True as long as it takes. ``shared``: a shared lock (many holders;
/// excludes an exclusive one). ``allow_network_fs``: lock on a network
/// filesystem, where ``flock`` may not exclude other machines. Raises
/// ``Held`` (its ``holders`` name the pids the kernel lists).
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
    let path_asked = path.clone();
    let options = LockOptions {
        shared,
        allow_network_fs,
        dir,
    };
    let wait = convert::wait(wait)?;
    let outcome = match wait.timeout() {
        None => crate::exiting::detach(py, || lock::try_lock(&path, options)),
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
        TryLock::Locked(held) => Ok(file_lock(held, path_asked, options)),
        TryLock::Held { path, holders } => Err(held_error(&path, &holders, &wait)),
    }
}

/// A held `FileLock` of `held`, locked as `asked` with `options` said.
fn file_lock(held: lock::FileLock, asked: PathBuf, options: LockOptions) -> FileLock {
    let path = held.path().to_owned();
    let file = held.file().try_clone().ok();
    let slot = Arc::new(LockSlot {
        lock: Mutex::new(Some(Local::new(held))),
    });
    if let Some(file) = file {
        crate::files::note_lock(&slot, &file);
    }
    fork::register_lock(&slot);
    FileLock {
        slot,
        path,
        asked,
        options,
        pid: std::process::id(),
    }
}

/// The async ``lock``: awaited (``lock = await lh.alock(path)``), or
/// entered (``async with lh.alock(path) as lock:``), it takes the lock
/// without blocking the event loop — a wait stands in this process's
/// line for the path and polls ``flock`` there (backing off from 5 ms to
/// 100 ms, as ``lock`` does) — and returns the held ``FileLock``.
/// ``path``, ``wait``, ``shared``, ``dir`` and ``allow_network_fs``: as for
/// ``lock``. Cancelling the awaiting task ends the wait; a lock it got
/// meanwhile is let go at once.
#[pyfunction]
#[pyo3(signature = (path, *, wait=None, shared=false, dir=false, allow_network_fs=false))]
pub fn alock<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    wait: Option<&Bound<'py, PyAny>>,
    shared: bool,
    dir: bool,
    allow_network_fs: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let path = convert::path(path)?;
    let options = LockOptions {
        shared,
        allow_network_fs,
        dir,
    };
    let wait = convert::wait(wait)?;
    if let Some(Some(timeout)) = wait.timeout() {
        // Refused as `lock` refuses it, free or not.
        leasehold::limits::WAIT
            .check(timeout)
            .map_err(lock::LockError::from)
            .or_raise()?;
    }
    crate::aio::pending(py, move |py| {
        let asked = path.clone();
        let finish = move |py: Python<'_>, outcome: Option<Result<TryLock, lock::LockError>>, awaited: bool| {
            let Some(outcome) = outcome.filter(|_| awaited) else {
                // Nobody awaits: a lock it got is let go (dropped) here.
                return Ok(py.None());
            };
            match outcome.or_raise()? {
                TryLock::Locked(held) => Ok(Py::new(py, file_lock(held, asked, options))?.into_any()),
                TryLock::Held { path, holders } => Err(held_error(&path, &holders, &wait)),
            }
        };
        let Some(timeout) = wait.timeout() else {
            let path = path.clone();
            return crate::aio::call(py, move || Some(lock::try_lock(&path, options)), finish, drop);
        };
        let cancel = leasehold::Cancel::new();
        let theirs = cancel.clone();
        crate::aio::wait(
            py,
            crate::aio::Line::lock(&path),
            timeout,
            move |left| poll_lock(&path, options, left, &theirs),
            |outcome| !matches!(outcome, Ok(TryLock::Held { .. })),
            move || cancel.cancel(),
            finish,
            drop,
        )
    })
}

/// `lock::lock_or_cancel`, cancelled too when the interpreter exits:
/// `left` as `aio::wait` gives it.
fn poll_lock(
    path: &std::path::Path,
    options: LockOptions,
    left: Option<Duration>,
    cancel: &leasehold::Cancel,
) -> Result<TryLock, lock::LockError> {
    let _watched = crate::exiting::watch(cancel);
    lock::lock_or_cancel(path, options, left, cancel)
}

/// `Held` for a lock on `path` held by `holders`, after a wait like `wait`.
fn held_error(path: &std::path::Path, holders: &Holders, wait: &Wait) -> PyErr {
    let message = wait.lock_refusal(path, holders, &leasehold::spelling::Keywords);
    let mode = holders.mode().label();
    let facts: Vec<HolderFacts> = holders
        .pids()
        .into_iter()
        .map(|pid| HolderFacts {
            owner: format!("pid {pid}"),
            token: None,
            mode,
            expires: None,
            pid: Some(pid),
        })
        .collect();
    errors::held(
        message,
        &path.display().to_string(),
        &facts,
        0,
        !matches!(wait, Wait::No),
    )
}

impl FileLock {
    /// Lock again if released; nothing to do while held. A lock of the
    /// parent's, in a forked child, is refused as `unlock` refuses it.
    fn relock(&self, py: Python<'_>) -> PyResult<()> {
        let forked = |owner| {
            errors::of_kind(
                leasehold::ErrorKind::Lost,
                fork::Forked { owner }.says(&format!("the lock {}", self.path.display())),
            )
        };
        match self
            .slot
            .lock
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(Local::get)
        {
            Some(Ok(_)) => return Ok(()),
            Some(Err(gone)) => return Err(forked(gone.owner)),
            None if self.pid != std::process::id() => return Err(forked(self.pid)),
            None => {}
        }
        let (asked, options) = (self.asked.clone(), self.options);
        match crate::exiting::detach(py, move || lock::try_lock(&asked, options)).or_raise()? {
            TryLock::Locked(held) => {
                let mut slot = self
                    .slot
                    .lock
                    .lock_py_attached(py)
                    .unwrap_or_else(PoisonError::into_inner);
                // Another thread entered it meanwhile: ours is let go.
                if slot.is_none() {
                    if let Ok(file) = held.file().try_clone() {
                        crate::files::note_lock(&self.slot, &file);
                    }
                    *slot = Some(Local::new(held));
                }
                Ok(())
            }
            TryLock::Held { path, holders } => Err(held_error(&path, &holders, &Wait::No)),
        }
    }

    /// Unlock; `exiting` a `with` block, a lock already released is fine.
    fn unlock(&self, py: Python<'_>, exiting: bool) -> PyResult<()> {
        let held = self
            .slot
            .lock
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match held.map(Local::take) {
            Some(Ok(lock)) => {
                drop(lock);
                crate::files::forget_lock(&self.slot);
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
            None if exiting => Ok(()),
            None => Err(errors::invalid(format!(
                "{} is not locked (released already)",
                self.path.display()
            ))),
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
        self.options.shared
    }

    /// Whether this process holds it.
    #[getter]
    fn locked(&self, py: Python<'_>) -> bool {
        self.slot
            .lock
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| l.get().is_ok())
    }

    /// Unlock (the lock file stays: deleting it would let a second process
    /// lock a new file of the same name).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.unlock(py, false)
    }

    /// The lock, held: a lock released before (by `release()` or an
    /// earlier `with`) is locked again first, without waiting (`Held` if
    /// another process holds it), so a `with` block never runs unlocked.
    fn __enter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        slf.get().relock(py)?;
        Ok(slf)
    }

    /// Unlock; leaving a `with` block after a `release()` inside it is fine.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let released = self.unlock(py, true);
        if exc_type.is_none_or(PyAnyMethods::is_none) {
            released?;
        }
        Ok(())
    }

    /// ``async with``: as ``with`` (locking again without waiting, or
    /// unlocking, takes no time worth leaving the loop for).
    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        slf.get().relock(py)?;
        crate::aio::ready(py, slf.into_any())
    }

    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyAny>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.__exit__(py, exc_type, None, None)?;
        crate::aio::ready(py, py.None())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<lh.FileLock {:?} {}{}>",
            self.path.display().to_string(),
            if self.options.shared { "shared " } else { "" },
            if self.locked(py) { "locked" } else { "released" }
        )
    }
}
