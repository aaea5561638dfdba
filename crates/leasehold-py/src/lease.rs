//! `lh.Lease`: a grant kept by the library's [`leasehold::Keeper`] —
//! heartbeats on the keeper's own threads, without the GIL — and its loss
//! pushed to Python three ways: `lease.lost` (readable from any thread),
//! `check()`, and `on_lost` (a callable run on the keeper's thread, or
//! `"interrupt"`: `LeaseLost` raised in the main thread, see
//! `leasehold/_interrupt.py`). Acquired bound to this process, as the
//! CLI's `--for-pid` grants are: if it dies, the next acquirer takes over
//! at once.
//!
//! States: idle ─acquire→ busy ─→ held ─release→ busy ─→ idle. A lease can
//! be acquired again after release (a new grant, a new token).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold::{
    AcquireOptions, Binding, Cancel, Grant, Held, Keeper, KeeperOptions, Kept, LeaseName, LeaseRelease, Loss, Mode,
};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::background::Background;
use crate::convert::{self, Wait};
use crate::errors::{self, OrRaise as _};
use crate::fork::Local;
use crate::store::Store;

/// The TTL when none is given: the library's default, as the CLI's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// How a lease (or a task claim) is kept: the keeper's options and what
/// to do on loss.
#[derive(Debug)]
pub struct HoldOptions {
    pub keep: KeeperOptions,
    pub on_lost: Option<Py<PyAny>>,
}

impl HoldOptions {
    /// `ttl`, `heartbeat` and `margin` as the keeper takes them (defaults:
    /// [`KeeperOptions::new`]); `on_lost` a callable, `"interrupt"` or None.
    pub fn from_py(
        ttl: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let ttl = convert::opt_duration(ttl, "ttl")?.unwrap_or(DEFAULT_TTL);
        let mut keep = KeeperOptions::new(ttl);
        keep.heartbeat = convert::opt_duration(heartbeat, "heartbeat")?;
        if let Some(margin) = convert::opt_duration(margin, "margin")? {
            keep.margin = margin;
        }
        keep.owner = owner;
        if let Some(problem) = keep.problem() {
            return Err(errors::invalid(format!(
                "cannot keep a grant with ttl={}, heartbeat={}, margin={}: {problem}",
                leasehold::format_duration(keep.ttl),
                leasehold::format_duration(keep.heartbeat.unwrap_or(keep.ttl / 3)),
                leasehold::format_duration(keep.margin)
            )));
        }
        Ok(Self {
            keep,
            on_lost: on_lost.filter(|v| !v.is_none()).map(on_lost_handler).transpose()?,
        })
    }
}

/// `on_lost`: a callable, or `"interrupt"` (whose callable
/// `leasehold._interrupt.arm()` returns, in the main thread).
fn on_lost_handler(value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if let Ok(text) = value.cast::<PyString>() {
        if text.to_cow()? == "interrupt" {
            let py = value.py();
            return Ok(py.import("leasehold._interrupt")?.call_method0("arm")?.unbind());
        }
        return Err(errors::invalid(format!(
            "on_lost must be a callable, \"interrupt\" or None, not {:?}",
            text.to_cow()?
        )));
    }
    if !value.is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "on_lost must be a callable, \"interrupt\" or None",
        ));
    }
    Ok(value.clone().unbind())
}

/// The `LeaseLost` of a lost hold. `what` names it: "lease NAME (token T)".
pub fn lost_error<L: std::fmt::Display>(what: &str, loss: &Loss<L>) -> PyErr {
    errors::of_kind(
        leasehold::ErrorKind::Lost,
        format!(
            "{what} was lost: {loss}. Stop using it: what it protects may be someone else's now (a new holder has a newer token)"
        ),
    )
}

/// Push a keeper's loss to `on_lost`, on the keeper's thread (which takes
/// the GIL for it). What the callable raises is reported as unraisable:
/// there is nobody to raise it to.
pub fn notify<L: leasehold::Refusal>(keeper: &Keeper<L>, what: String, on_lost: Option<&Py<PyAny>>) {
    let Some(on_lost) = on_lost else { return };
    let on_lost = Python::attach(|py| on_lost.clone_ref(py));
    keeper.on_loss(move |loss| {
        Python::attach(|py| {
            let exc = lost_error(&what, &loss);
            if let Err(e) = on_lost.call1(py, (exc.value(py),)) {
                e.write_unraisable(py, Some(on_lost.bind(py)));
            }
        });
    });
}

/// `Held`, naming the holders (and how long it waited), and the shared
/// limit when that is what keeps an acquirer of `mode` out.
pub fn held_error(name: &LeaseName, held: &Held, mode: Mode, wait: Wait) -> PyErr {
    let by: Vec<String> = held
        .grants
        .iter()
        .map(|g| {
            format!(
                "{} by {}, token {}, expires in {}",
                g.mode.label(),
                g.owner,
                g.token,
                leasehold::format_duration(g.expires_in)
            )
        })
        .collect();
    let mut by = if by.is_empty() {
        format!("{} waiter(s) queued ahead", held.waiters_ahead)
    } else {
        by.join("; ")
    };
    if let Some(limit) = held.shared_limit(mode) {
        by = format!("{by} — {limit}");
    }
    let message = match wait {
        Wait::No => format!("{name} is held: {by}. Try again later, or wait with wait=DURATION"),
        Wait::Upto(d) => format!(
            "{} is still held after waiting {}: {by}",
            name,
            leasehold::format_duration(d)
        ),
        Wait::Forever => format!("{name} is held: {by}"),
    };
    errors::of_kind(leasehold::ErrorKind::Held, message)
}

/// A held grant and its keeper (this process's: see `fork.rs`).
#[derive(Debug)]
struct Hold {
    store: Arc<leasehold::Store>,
    grant: Grant,
    keeper: Keeper,
}

#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "one per lease")]
enum State {
    Idle,
    /// Acquiring or releasing, on some thread.
    Busy,
    Held(Local<Hold>),
}

#[derive(Debug)]
#[pyclass(frozen, module = "leasehold")]
pub struct Lease {
    store: Py<Store>,
    name: LeaseName,
    options: AcquireOptions,
    keep: KeeperOptions,
    wait: Wait,
    on_lost: Option<Py<PyAny>>,
    state: Mutex<State>,
    /// The last grant taken, and how its hold ended (`Some` message: lost).
    last: Mutex<Option<(Grant, Option<String>)>>,
}

impl Lease {
    pub fn new(store: Py<Store>, name: LeaseName, mode: Mode, wait: Wait, hold: HoldOptions) -> Self {
        Self {
            store,
            options: AcquireOptions {
                ttl: hold.keep.ttl,
                owner: hold.keep.owner.clone(),
                mode,
                binding: Binding::ThisProcess,
            },
            keep: hold.keep,
            name,
            wait,
            on_lost: hold.on_lost,
            state: Mutex::new(State::Idle),
            last: Mutex::new(None),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn what(&self, grant: &Grant) -> String {
        format!("lease {} (token {})", self.name, grant.token)
    }

    fn acquire_held(&self, py: Python<'_>) -> PyResult<()> {
        let store = self.store.get().handle(py)?;
        let held_by = store.clone();
        let (name, options, keep) = (self.name.clone(), self.options.clone(), self.keep.clone());
        let kept = match self.wait.timeout() {
            None => py.detach(move || store.acquire_and_keep(&name, &options, keep)),
            Some(timeout) => {
                let cancel = Cancel::new();
                let call = {
                    let (store, cancel) = (store.clone(), cancel.clone());
                    Background::spawn(move || {
                        store.acquire_wait_and_keep(&name, &options, timeout, &cancel, |_| {}, keep)
                    })
                };
                match call.wait(py) {
                    Ok(kept) => kept,
                    Err(interrupted) => {
                        // ^C while waiting: the wait ends at its next poll,
                        // out of the queue, and whatever it got is let go.
                        cancel.cancel();
                        let (name, owner) = (self.name.clone(), self.options.owner.clone());
                        call.give_up(py, move |kept| {
                            if let Ok(Kept::Acquired(grant, keeper)) = kept {
                                keeper.stop();
                                let _ = store.release(&name, grant.token, owner.as_deref());
                            }
                        });
                        return Err(interrupted);
                    }
                }
            }
        }
        .or_raise()?;
        let (grant, keeper) = match kept {
            Kept::Acquired(grant, keeper) => (grant, keeper),
            Kept::Held(held) => return Err(held_error(&self.name, &held, self.options.mode, self.wait)),
        };
        notify(&keeper, self.what(&grant), self.on_lost.as_ref());
        *self.state() = State::Held(Local::new(Hold {
            store: held_by,
            grant,
            keeper,
        }));
        Ok(())
    }

    /// End the hold: stop the keeper, release unless the store already
    /// refused a renewal. `Err` when the grant was lost (or is another
    /// process's), or the release failed.
    fn release_held(&self, py: Python<'_>) -> PyResult<()> {
        let local = match std::mem::replace(&mut *self.state(), State::Busy) {
            State::Held(local) => local,
            other => {
                *self.state() = other;
                return Err(errors::invalid(format!(
                    "lease {} is not held: acquire it first (with store.lease(...) as lease, or lease.acquire())",
                    self.name
                )));
            }
        };
        if let Err(forked) = local.get() {
            // Not ours to release: a forked child. It stays the parent's.
            *self.state() = State::Held(local);
            return Err(errors::of_kind(
                leasehold::ErrorKind::Lost,
                forked.says(&format!("lease {}", self.name)),
            ));
        }
        let Ok(Hold { store, grant, keeper }) = local.take() else {
            unreachable!("checked just above")
        };
        let (name, owner, token) = (self.name.clone(), self.options.owner.clone(), grant.token);
        let (loss, released) = py.detach(move || {
            let loss = keeper.stop();
            let released = match loss {
                Some(Loss::Refused(_)) => None,
                _ => Some(store.release(&name, token, owner.as_deref())),
            };
            (loss, released)
        });
        *self.state() = State::Idle;
        let what = self.what(&grant);
        let refused = match (&loss, released) {
            (Some(loss), _) => Some(lost_error(&what, loss)),
            (None, Some(Ok(LeaseRelease::Lost(reason)))) => Some(errors::of_kind(
                leasehold::ErrorKind::Lost,
                format!(
                    "{what} was already gone when released: {reason}; what was done under it may have overlapped a newer holder"
                ),
            )),
            (None, Some(Err(e))) => {
                *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((grant, None));
                return Err(errors::library(&e));
            }
            (None, _) => None,
        };
        let message = refused.as_ref().map(ToString::to_string);
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((grant, message));
        refused.map_or(Ok(()), Err)
    }

    /// The grant now held (`Ok(None)` when idle); `Err` in a forked child.
    fn with_hold<T>(&self, f: impl FnOnce(&Hold) -> T) -> Result<Option<T>, crate::fork::Forked> {
        match &*self.state() {
            State::Held(local) => local.get().map(|hold| Some(f(hold))),
            _ => Ok(None),
        }
    }
}

#[pymethods]
impl Lease {
    /// Acquire (waiting as `wait=` says); returns the lease. Raises `Held`.
    fn acquire(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        let this = slf.get();
        {
            let mut state = this.state();
            if !matches!(*state, State::Idle) {
                return Err(errors::invalid(format!(
                    "lease {} is already held (or being acquired) through this object; release it first",
                    this.name
                )));
            }
            *state = State::Busy;
        }
        if let Err(e) = this.acquire_held(slf.py()) {
            *this.state() = State::Idle;
            return Err(e);
        }
        Ok(slf.clone().unbind())
    }

    /// Stop renewing and release. Raises `LeaseLost` if the grant was lost
    /// meanwhile (what was done under it may have overlapped a newer holder).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.release_held(py)
    }

    /// Raise `LeaseLost` once the grant is lost (or in a forked child).
    fn check(&self) -> PyResult<()> {
        let lost = self.with_hold(|hold| {
            hold.keeper
                .handle()
                .loss()
                .map(|loss| lost_error(&self.what(&hold.grant), &loss))
        });
        match lost {
            Ok(Some(Some(e))) => Err(e),
            Ok(Some(None)) => Ok(()),
            Err(forked) => Err(errors::of_kind(
                leasehold::ErrorKind::Lost,
                forked.says(&format!("lease {}", self.name)),
            )),
            Ok(None) => match &*self.last.lock().unwrap_or_else(PoisonError::into_inner) {
                Some((_, Some(message))) => Err(errors::of_kind(leasehold::ErrorKind::Lost, message.clone())),
                _ => Err(errors::invalid(format!("lease {} is not held", self.name))),
            },
        }
    }

    /// Whether the grant is lost: a renewal was refused, or the holder-side
    /// deadline passed. True in a forked child (it holds nothing).
    #[getter]
    fn lost(&self) -> bool {
        match self.with_hold(|hold| hold.keeper.handle().is_lost()) {
            Ok(Some(lost)) => lost,
            Err(_) => true,
            Ok(None) => self
                .last
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|(_, lost)| lost.is_some()),
        }
    }

    /// Whether this process holds the grant now (and it is not lost).
    #[getter]
    fn held(&self) -> bool {
        matches!(self.with_hold(|hold| !hold.keeper.handle().is_lost()), Ok(Some(true)))
    }

    /// The fencing token of the grant held (or last held): an int that
    /// only grows per name.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        self.grant_field(|g| g.token.0)
    }

    /// The identity of the grant held (or last held): 16 hex digits that
    /// fenced writes (`write_atomic(..., fence=lease)`) record next to the
    /// token, so that a token issued again by a store restored from a
    /// backup is refused.
    #[getter]
    fn grant(&self) -> PyResult<String> {
        self.grant_field(|g| g.id().to_string())
    }

    /// The owner label of the grant (given, or host:pid).
    #[getter]
    fn owner(&self) -> PyResult<String> {
        self.grant_field(|g| g.owner.clone())
    }

    #[getter]
    fn name(&self) -> String {
        self.name.to_string()
    }

    /// The TTL, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.options.ttl.as_secs_f64()
    }

    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        Self::acquire(slf)
    }

    /// Release; a loss is raised unless the block is already raising.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let released = self.release_held(py);
        if exc_type.is_none_or(PyAnyMethods::is_none) {
            released?;
        }
        Ok(())
    }

    /// `async with`: acquiring (and waiting) runs on the event loop's
    /// executor, so the loop goes on meanwhile.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        in_executor(slf.getattr("acquire")?, &PyTuple::empty(slf.py()))
    }

    #[pyo3(signature = (*exc))]
    fn __aexit__<'py>(slf: &Bound<'py, Self>, exc: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        in_executor(slf.getattr("__exit__")?, exc)
    }

    fn __repr__(&self) -> String {
        let now = match self.with_hold(|hold| (hold.grant.token, hold.keeper.handle().is_lost())) {
            Ok(Some((token, false))) => format!("held, token {token}"),
            Ok(Some((token, true))) => format!("lost, token {token}"),
            Ok(None) => "not held".to_owned(),
            Err(forked) => format!("held by pid {}", forked.owner),
        };
        format!("<lh.Lease {:?} {now}>", self.name.as_str())
    }
}

impl Lease {
    fn grant_field<T>(&self, f: impl Fn(&Grant) -> T) -> PyResult<T> {
        if let Ok(Some(value)) = self.with_hold(|hold| f(&hold.grant)) {
            return Ok(value);
        }
        if let Some((grant, _)) = &*self.last.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(f(grant));
        }
        if let State::Held(local) = &*self.state() {
            // A forked child reads its parent's token as data.
            if let Err(forked) = local.get() {
                return Err(errors::of_kind(
                    leasehold::ErrorKind::Lost,
                    forked.says(&format!("lease {}", self.name)),
                ));
            }
        }
        Err(errors::invalid(format!(
            "lease {} has not been acquired yet: use it in a with block or call acquire()",
            self.name
        )))
    }
}

impl Drop for Lease {
    /// A lease dropped while held is released, as a Rust guard would be.
    fn drop(&mut self) {
        let state = std::mem::replace(
            self.state.get_mut().unwrap_or_else(PoisonError::into_inner),
            State::Idle,
        );
        let State::Held(local) = state else { return };
        let (name, owner) = (self.name.clone(), self.options.owner.clone());
        local.finish_detached(move |Hold { store, grant, keeper }| {
            keeper.stop();
            let _ = store.release(&name, grant.token, owner.as_deref());
        });
    }
}

/// `loop.run_in_executor(None, f, *args)` on the running loop: what
/// `async with` awaits.
pub fn in_executor<'py>(f: Bound<'py, PyAny>, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
    let py = f.py();
    let running = py.import("asyncio")?.call_method0("get_running_loop")?;
    let mut call = vec![py.None().into_bound(py), f];
    call.extend(args.iter());
    running.call_method1("run_in_executor", PyTuple::new(py, call)?)
}
