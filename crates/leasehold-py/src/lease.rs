//! `lh.Lease`: a grant kept by the library's [`leasehold::Keeper`] —
//! heartbeats on the keeper's own threads, without the GIL — and its loss
//! pushed to Python three ways: `lease.lost` (readable from any thread),
//! `check()`, and `on_lost` (a callable run on the keeper's thread, or
//! `"interrupt"`: `LeaseLost` raised in the main thread, see
//! `leasehold/_interrupt.py`). Acquired bound to this process, as the
//! CLI's `--for-pid` grants are: if it dies, the next acquirer takes over
//! at once.
//!
//! States: `Idle` ─acquire→ `Acquiring` ─→ `Held` ─release→ `Busy` ─→
//! `Idle` (and `Held` ─renew/extend→ `Busy` ─→ `Held`). The state lock is
//! only ever held for a few instructions — never across a store call, a
//! wait, or anything that takes the GIL — and is taken from Python threads
//! with the GIL released while waiting for it (`lock_py_attached`): a
//! Python call never waits on it with the GIL held. Every call made in the
//! wrong state answers at once: a second `release()` raises `InvalidInput`
//! saying it was already released (how, and with which token); leaving a
//! `with` block after a `release()` inside it does nothing. A lease can be
//! acquired again after release (a new grant, a new token).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold::files::Fence;
use leasehold::{AcquireOptions, Binding, Cancel, Grant, Held, Keeper, KeeperOptions, Kept, LeaseName, Mode, host};
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;

use crate::background::Background;
use crate::convert::{self, Wait};
use crate::errors::{self, HolderFacts, OrRaise as _};
use crate::fork::{Forked, Local};
use crate::hold::{HoldOptions, forked_error, keeper_options, notify, told_lost};
use crate::store::Store;

/// `Held`, naming the holders (and how long it waited), and the shared
/// limit when that is what keeps an acquirer of `mode` out; the same facts
/// as attributes (`holders`, `waiters`).
pub fn held_error(name: &LeaseName, held: &Held, mode: Mode, wait: Wait) -> PyErr {
    let message = wait.refusal(held, name.as_str(), mode, &leasehold::spelling::Keywords);
    let now = std::time::SystemTime::now();
    let holders: Vec<HolderFacts> = held
        .grants
        .iter()
        .map(|g| HolderFacts {
            owner: g.owner.clone(),
            token: Some(g.token.0),
            mode: g.mode.label(),
            expires: Some(leasehold::later(now, g.expires_in)),
            pid: g.holder.bound.then_some(g.holder.pid),
        })
        .collect();
    let timed_out = matches!(wait, Wait::Upto(_));
    errors::held(message, name.as_str(), &holders, held.waiters_ahead, timed_out)
}

/// A held grant and its keeper (this process's: see `fork.rs`).
#[derive(Debug)]
struct Hold {
    store: Arc<leasehold::Store>,
    grant: Grant,
    keeper: Keeper,
}

/// What the lease is doing now.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "one per lease")]
enum Now {
    /// Not held: never acquired, or ended (see [`Inner::ended`]).
    Idle,
    /// Some thread (or an `async with`) is acquiring it.
    Acquiring,
    Held(Local<Hold>),
    /// Some thread is releasing it (`"released"`) or renewing it
    /// (`"renewed"`); the grant, to read while it does.
    Busy(&'static str, Grant),
}

/// How the last grant's hold ended.
#[derive(Debug, Clone)]
enum Ending {
    Released,
    /// Lost (the message of the `LeaseLost` its release raised).
    Lost(String),
    /// The release failed (the store's error); the grant expires by its TTL.
    ReleaseFailed(String),
}

#[derive(Debug)]
struct Inner {
    now: Now,
    /// The last grant this lease held, and how its hold ended.
    ended: Option<(Grant, Ending)>,
    /// While `Busy("renewed")`: the keeper's loss, for `check()` on other
    /// threads — a renewal under way is no answer to "may I go on?" (a
    /// process resumed from a pause would renew in one thread and do work
    /// in another).
    renewing: Option<leasehold::LossHandle>,
}

#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct Lease {
    store: Py<Store>,
    name: LeaseName,
    options: AcquireOptions,
    keep: KeeperOptions,
    /// The margin given, if one was (see [`HoldOptions::margin`]).
    margin: Option<Duration>,
    wait: Wait,
    on_lost: Option<Py<PyAny>>,
    inner: Mutex<Inner>,
}

/// A release's grant, and how it ended.
struct Released {
    grant: Grant,
    ended: leasehold::Released,
}

/// Stop the keeper and release, unless the store already refused a
/// renewal (`leasehold::release_kept`). Blocking: call it without the GIL.
fn release_hold(Hold { store, grant, keeper }: Hold) -> Released {
    let ended = leasehold::release_kept(&store, &grant, keeper);
    Released { grant, ended }
}

/// Why a call cannot be made in the lease's state: worded while the state
/// is locked, raised after it is let go (making an exception runs Python).
enum Refusal {
    Invalid(String),
    Forked(Forked),
    /// The grant was lost (the `LeaseLost` message).
    Lost(String),
}

impl Lease {
    pub fn new(store: Py<Store>, name: LeaseName, mode: Mode, wait: Wait, hold: HoldOptions) -> Self {
        Self {
            store,
            options: AcquireOptions {
                ttl: hold.keep.ttl,
                owner: hold.owner,
                mode,
                binding: Binding::ThisProcess,
            },
            keep: hold.keep,
            margin: hold.margin,
            name,
            wait,
            on_lost: hold.on_lost,
            inner: Mutex::new(Inner {
                now: Now::Idle,
                ended: None,
                renewing: None,
            }),
        }
    }

    /// The state, locked without holding the GIL while waiting for it.
    fn inner(&self, py: Python<'_>) -> MutexGuard<'_, Inner> {
        self.inner.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner)
    }

    fn raise(&self, refusal: Refusal) -> PyErr {
        match refusal {
            Refusal::Invalid(message) => errors::invalid(message),
            Refusal::Forked(forked) => forked_error(forked, &format!("lease {}", self.name)),
            Refusal::Lost(message) => errors::of_kind(leasehold::ErrorKind::Lost, message),
        }
    }

    /// What is wrong with using the lease as held, when it is not:
    /// never acquired, acquiring, released (how), or in another's hands.
    fn not_held(&self, inner: &Inner, doing: &str) -> Refusal {
        match &inner.now {
            Now::Held(local) => match local.get() {
                Err(forked) => Refusal::Forked(forked),
                Ok(_) => Refusal::Invalid(format!("lease {} is held", self.name)),
            },
            Now::Acquiring => Refusal::Invalid(format!(
                "lease {} is being acquired (by another thread or task) and is not held yet: {doing} it once acquire() has returned",
                self.name
            )),
            Now::Busy(what, grant) => Refusal::Invalid(format!(
                "{} is being {what} by another thread: {doing} it once that has returned",
                leasehold::described(grant)
            )),
            Now::Idle => match &inner.ended {
                None => Refusal::Invalid(format!(
                    "lease {} was never acquired through this object: acquire it first (with store.lease(...) as lease, \
                     or lease.acquire()), then {doing} it",
                    self.name
                )),
                Some((grant, ending)) => Refusal::Invalid(format!(
                    "{} was already released{}: there is nothing to {doing} (acquire it again for a new grant)",
                    leasehold::described(grant),
                    match ending {
                        Ending::Released => String::new(),
                        Ending::Lost(message) => format!(" (it had been lost: {message})"),
                        Ending::ReleaseFailed(message) => {
                            format!(" (the store failed to release it: {message}; it expires by its TTL)")
                        }
                    }
                )),
            },
        }
    }

    /// `Idle` → `Acquiring`, or why not; the store to acquire from.
    fn begin_acquire(&self, py: Python<'_>) -> PyResult<Arc<leasehold::Store>> {
        let refused = {
            let mut inner = self.inner(py);
            match &inner.now {
                Now::Idle => {
                    inner.now = Now::Acquiring;
                    None
                }
                Now::Held(local) => Some(match local.get() {
                    Err(forked) => Refusal::Forked(forked),
                    Ok(hold) => Refusal::Invalid(format!(
                        "{} is already held through this object: release it before acquiring it again",
                        leasehold::described(&hold.grant)
                    )),
                }),
                Now::Acquiring => Some(Refusal::Invalid(format!(
                    "lease {} is already being acquired through this object (by another thread or task)",
                    self.name
                ))),
                Now::Busy(what, grant) => Some(Refusal::Invalid(format!(
                    "{} is held through this object and being {what} by another thread: release it before acquiring it again",
                    leasehold::described(grant)
                ))),
            }
        };
        if let Some(refused) = refused {
            return Err(self.raise(refused));
        }
        self.store
            .get()
            .handle(py)
            .inspect_err(|_| self.inner(py).now = Now::Idle)
    }

    /// The blocking acquisition (call it without the GIL): once, or
    /// waiting as `wait=` says until `cancel` says stop (then it leaves the
    /// store's queue at its next poll and returns `Held`).
    fn acquire_blocking(
        &self,
        store: &Arc<leasehold::Store>,
        cancel: &Cancel,
    ) -> impl FnOnce() -> leasehold::Result<Kept> + Send + 'static {
        let (store, name, options, keep) = (
            store.clone(),
            self.name.clone(),
            self.options.clone(),
            self.keep.clone(),
        );
        let (wait, cancel) = (self.wait.timeout(), cancel.clone());
        move || match wait {
            None => store.acquire_and_keep(&name, &options, keep),
            Some(timeout) => {
                // Cancelled, out of the store's queue, if the interpreter exits.
                let _watched = crate::exiting::watch(&cancel);
                store.acquire_wait_and_keep(&name, &options, timeout, &cancel, |_| {}, keep)
            }
        }
    }

    /// `Acquiring` → `Held` (or back to `Idle`), with what the store said.
    fn end_acquire(&self, py: Python<'_>, store: Arc<leasehold::Store>, kept: leasehold::Result<Kept>) -> PyResult<()> {
        let (grant, keeper) = match kept {
            Ok(Kept::Acquired(grant, keeper)) => (grant, keeper),
            Ok(Kept::Held(held)) => {
                self.inner(py).now = Now::Idle;
                return Err(held_error(&self.name, &held, self.options.mode, self.wait));
            }
            Err(e) => {
                self.inner(py).now = Now::Idle;
                return Err(errors::library(&e));
            }
        };
        notify(py, &keeper, leasehold::described(&grant), self.on_lost.as_ref());
        self.inner(py).now = Now::Held(Local::new(Hold { store, grant, keeper }));
        Ok(())
    }

    /// A grant got for nobody (its acquirer gave up or was cancelled): let
    /// it go, on the pool (the caller may be the event loop).
    fn let_go(&self, py: Python<'_>, store: Arc<leasehold::Store>, kept: leasehold::Result<Kept>) {
        self.inner(py).now = Now::Idle;
        if let Ok(Kept::Acquired(grant, keeper)) = kept {
            let hold = Hold { store, grant, keeper };
            let hold = Arc::new(Mutex::new(Some(hold)));
            let theirs = hold.clone();
            let release = move || {
                let taken = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(hold) = taken {
                    drop(release_hold(hold));
                }
            };
            if crate::pool::submit(release).is_err() {
                // No pool thread to be had: here, then (it ends promptly).
                let taken = hold.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(hold) = taken {
                    crate::exiting::detach(py, move || drop(release_hold(hold)));
                }
            }
        }
    }

    /// `Held` → `Busy("released")`: the hold to release. `Ok(None)` when
    /// leaving a `with` block (`exiting`) of a lease already released
    /// inside it; any other call in the wrong state says why.
    fn begin_release(&self, py: Python<'_>, exiting: bool) -> PyResult<Option<Hold>> {
        let taken = {
            let mut inner = self.inner(py);
            match &inner.now {
                Now::Held(local) => match local.get() {
                    Ok(hold) => {
                        let busy = Now::Busy("released", hold.grant.clone());
                        let Now::Held(local) = std::mem::replace(&mut inner.now, busy) else {
                            unreachable!("matched above")
                        };
                        local.take().map(Some).map_err(Refusal::Forked)
                    }
                    Err(forked) => Err(Refusal::Forked(forked)),
                },
                Now::Idle if exiting => Ok(None),
                _ => Err(self.not_held(&inner, "release")),
            }
        };
        taken.map_err(|refused| self.raise(refused))
    }

    /// `Busy("released")` → `Idle`: what the release did, as the caller
    /// is told: `LeaseLost` when the grant had been lost (what was done
    /// under it may have overlapped a newer holder), the store's error
    /// when the release failed.
    fn end_release(&self, py: Python<'_>, released: Released) -> PyResult<()> {
        let Released { grant, ended } = released;
        let (ending, result) = match ended {
            leasehold::Released::Released => (Ending::Released, Ok(())),
            leasehold::Released::Lost(message) => (
                Ending::Lost(message.clone()),
                Err(errors::of_kind(leasehold::ErrorKind::Lost, message)),
            ),
            leasehold::Released::Failed(e) => {
                let e = errors::library(&e);
                (Ending::ReleaseFailed(message_of(py, &e)), Err(e))
            }
        };
        let mut inner = self.inner(py);
        inner.now = Now::Idle;
        inner.ended = Some((grant, ending));
        result
    }

    /// Release now (blocking, without the GIL while the store answers).
    fn release_now(&self, py: Python<'_>, exiting: bool) -> PyResult<()> {
        let Some(hold) = self.begin_release(py, exiting)? else {
            return Ok(());
        };
        let released = crate::exiting::detach(py, move || release_hold(hold));
        self.end_release(py, released)
    }

    /// `renew()` and `extend(ttl)`: the keeper renews now (with `new`
    /// options), on this thread without the GIL.
    fn renew_with(&self, py: Python<'_>, new: Option<KeeperOptions>) -> PyResult<()> {
        let taken = {
            let mut inner = self.inner(py);
            match &inner.now {
                Now::Held(local) => match local.get() {
                    Ok(hold) => {
                        let busy = Now::Busy("renewed", hold.grant.clone());
                        let handle = hold.keeper.handle();
                        let Now::Held(local) = std::mem::replace(&mut inner.now, busy) else {
                            unreachable!("matched above")
                        };
                        inner.renewing = Some(handle);
                        local.take().map_err(Refusal::Forked)
                    }
                    Err(forked) => Err(Refusal::Forked(forked)),
                },
                _ => Err(self.not_held(&inner, "renew")),
            }
        };
        let mut hold = taken.map_err(|refused| self.raise(refused))?;
        let (hold, renewed) = crate::exiting::detach(py, move || {
            let renewed = hold.keeper.renew_now(new);
            (hold, renewed)
        });
        let what = leasehold::described(&hold.grant);
        {
            let mut inner = self.inner(py);
            inner.now = Now::Held(Local::new(hold));
            inner.renewing = None;
        }
        match renewed {
            Ok(None) => Ok(()),
            Ok(Some(loss)) => Err(told_lost(py, self.on_lost.as_ref(), &what, &loss)),
            Err(e) => Err(errors::library(&e)),
        }
    }

    /// The grant held now (or last), for its token, identity and owner;
    /// refused in a forked child and before the first acquisition.
    fn grant_now(&self, py: Python<'_>) -> PyResult<Grant> {
        let refused = {
            let inner = self.inner(py);
            match &inner.now {
                Now::Held(local) => match local.get() {
                    Ok(hold) => return Ok(hold.grant.clone()),
                    Err(forked) => Refusal::Forked(forked),
                },
                Now::Busy(_, grant) => return Ok(grant.clone()),
                Now::Idle | Now::Acquiring => match &inner.ended {
                    Some((grant, _)) => return Ok(grant.clone()),
                    None => Refusal::Invalid(format!(
                        "lease {} has not been acquired yet: use it in a with block or call acquire()",
                        self.name
                    )),
                },
            }
        };
        Err(self.raise(refused))
    }

    /// `fence=lease`: the token and identity of the grant held (or last
    /// held) — in a forked child, the fork's refusal.
    pub fn fence(&self, py: Python<'_>) -> PyResult<Fence> {
        self.grant_now(py).map(|grant| Fence::of(&grant))
    }

    /// `f` of this process's hold, if held (and not being released or
    /// renewed); `Err` in a forked child.
    fn with_hold<T>(&self, py: Python<'_>, f: impl FnOnce(&Hold) -> T) -> Result<Option<T>, Forked> {
        match &self.inner(py).now {
            Now::Held(local) => local.get().map(|hold| Some(f(hold))),
            _ => Ok(None),
        }
    }
}

/// An exception's message (its `str()`).
fn message_of(py: Python<'_>, e: &PyErr) -> String {
    e.value(py).str().map(|s| s.to_string()).unwrap_or_default()
}

#[pymethods]
impl Lease {
    /// Acquire the lease, waiting as the lease's ``wait=`` says; returns the
    /// lease. Raises ``Held`` (with the holders as attributes) when it is
    /// held; ``InvalidInput`` when this object already holds it; in a
    /// process made by ``os.fork()`` from the holder, ``LeaseLost``.
    fn acquire(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        let (this, py) = (slf.get(), slf.py());
        let store = this.begin_acquire(py)?;
        let cancel = Cancel::new();
        let blocking = this.acquire_blocking(&store, &cancel);
        let kept = if this.wait == Wait::No {
            crate::exiting::detach(py, blocking)
        } else {
            let call = Background::spawn(blocking);
            match call.wait(py) {
                Ok(kept) => kept,
                Err(interrupted) => {
                    // ^C while waiting: the wait ends at its next poll, out
                    // of the queue, and whatever it got is let go.
                    cancel.cancel();
                    this.inner(py).now = Now::Idle;
                    call.give_up(py, move |kept| {
                        if let Ok(Kept::Acquired(grant, keeper)) = kept {
                            drop(release_hold(Hold { store, grant, keeper }));
                        }
                    });
                    return Err(interrupted);
                }
            }
        };
        this.end_acquire(py, store, kept)?;
        Ok(slf.clone().unbind())
    }

    /// Stop renewing and release the grant. Raises ``LeaseLost`` if the
    /// grant was lost meanwhile (what was done under it may have overlapped
    /// a newer holder). Releasing a lease that is not held — released
    /// already, or never acquired — raises ``InvalidInput`` saying which, at
    /// once; leaving a ``with`` block after ``release()`` inside it is fine.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.release_now(py, false)
    }

    /// Renew the grant now, for its TTL from now, rather than at the next
    /// heartbeat. Raises ``LeaseLost`` if the store refused (the grant is
    /// gone), the store's error if it failed (the keeper goes on trying);
    /// ``InvalidInput`` when it is not held.
    fn renew(&self, py: Python<'_>) -> PyResult<()> {
        self.renew_with(py, None)
    }

    /// Renew the grant now for ``ttl`` (a duration) from now, and keep
    /// renewing it with that TTL; a heartbeat and margin that were not
    /// given follow the new TTL (a third and a tenth of it). A shorter TTL
    /// shortens the grant at once. Raises as ``renew()``, and
    /// ``InvalidInput`` for a TTL the keeper cannot keep (naming it).
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let ttl = convert::duration(ttl, "ttl")?;
        let new = keeper_options(ttl, self.keep.heartbeat, self.margin)?;
        self.renew_with(py, Some(new))
    }

    /// Raise ``LeaseLost`` once the grant is lost (or in a forked child);
    /// ``InvalidInput`` when it is not held. The holder-side deadline is
    /// judged by the clock here too, so a process resumed from a pause is
    /// refused before its keeper's thread has run.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        let kept = {
            let inner = self.inner(py);
            match &inner.now {
                Now::Held(local) => match local.get() {
                    Ok(hold) => Ok((hold.keeper.handle(), leasehold::described(&hold.grant))),
                    Err(forked) => Err(Refusal::Forked(forked)),
                },
                Now::Busy("renewed", grant) => match &inner.renewing {
                    Some(handle) => Ok((handle.clone(), leasehold::described(grant))),
                    None => return Ok(()),
                },
                Now::Idle => match &inner.ended {
                    Some((_, Ending::Lost(message))) => Err(Refusal::Lost(message.clone())),
                    _ => Err(self.not_held(&inner, "check")),
                },
                _ => Err(self.not_held(&inner, "check")),
            }
        };
        let (handle, what) = kept.map_err(|refused| self.raise(refused))?;
        // Without the GIL: the keeper's verdict may be awaited, and its
        // callbacks take the GIL.
        match crate::exiting::detach(py, || handle.loss()) {
            None => Ok(()),
            Some(loss) => Err(told_lost(py, self.on_lost.as_ref(), &what, &loss)),
        }
    }

    /// Whether the grant is lost: a renewal was refused, or the holder-side
    /// deadline passed. True in a forked child (it holds nothing).
    #[getter]
    fn lost(&self, py: Python<'_>) -> bool {
        let inner = self.inner(py);
        match &inner.now {
            Now::Held(local) => local.get().map_or(true, |hold| hold.keeper.handle().is_lost()),
            Now::Idle => matches!(inner.ended, Some((_, Ending::Lost(_)))),
            Now::Acquiring | Now::Busy(..) => false,
        }
    }

    /// Whether this object holds the grant now (and it is not lost).
    #[getter]
    fn held(&self, py: Python<'_>) -> bool {
        let inner = self.inner(py);
        match &inner.now {
            Now::Held(local) => local.get().is_ok_and(|hold| !hold.keeper.handle().is_lost()),
            Now::Busy("renewed", _) => true,
            _ => false,
        }
    }

    /// Whether this object holds the grant (``lease.held``, as redis-py's
    /// ``Lock.owned()``).
    fn owned(&self, py: Python<'_>) -> bool {
        self.held(py)
    }

    /// Whether anyone holds the name now — this object or any other holder
    /// whose process is not provably gone (asks the store).
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let store = self.store.get().handle(py)?;
        let name = self.name.clone();
        let state = crate::exiting::detach(py, move || store.status(&name)).or_raise()?;
        Ok(state.is_some_and(|s| s.grants.iter().any(|g| leasehold::json::alive(g) != "no")))
    }

    /// Seconds until the store could expire the grant if it were not
    /// renewed again (the last renewal's send time + TTL − now, measured on
    /// this host's boot clock); 0.0 once lost; ``None`` when not held.
    #[getter]
    fn expires_in(&self, py: Python<'_>) -> Option<f64> {
        let held = self.with_hold(py, |hold| {
            if hold.keeper.handle().is_lost() {
                return 0.0;
            }
            let until = hold.keeper.last_renewed().saturating_add(hold.keeper.options().ttl);
            until.saturating_sub(host::boot_clock()).as_secs_f64()
        });
        held.ok().flatten()
    }

    /// The fencing token of the grant held (or last held): an int that
    /// only grows per name.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<u64> {
        self.grant_now(py).map(|g| g.token.0)
    }

    /// The identity of the grant held (or last held): 16 hex digits that
    /// fenced writes (``write_atomic(..., fence=lease)``) record next to the
    /// token, so that a token issued again by a store restored from a
    /// backup is refused.
    #[getter]
    fn grant(&self, py: Python<'_>) -> PyResult<String> {
        self.grant_now(py).map(|g| g.id().to_string())
    }

    /// The owner label of the grant (given, or host:pid).
    #[getter]
    fn owner(&self, py: Python<'_>) -> PyResult<String> {
        self.grant_now(py).map(|g| g.owner)
    }

    /// The lease's name.
    #[getter]
    fn name(&self) -> String {
        self.name.to_string()
    }

    /// The TTL in seconds: the held grant's (``extend`` changes it), else
    /// the one the lease was made with.
    #[getter]
    fn ttl(&self, py: Python<'_>) -> f64 {
        self.with_hold(py, |hold| hold.keeper.options().ttl)
            .ok()
            .flatten()
            .unwrap_or(self.options.ttl)
            .as_secs_f64()
    }

    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        Self::acquire(slf)
    }

    /// Release; a loss is raised unless the block is already raising. A
    /// lease released inside the block is left as it is.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let released = self.release_now(py, true);
        if exc_type.is_none_or(PyAnyMethods::is_none) {
            released?;
        }
        Ok(())
    }

    /// ``async with``: acquiring runs off the loop (`aio`): a wait stands
    /// in this process's line for the name, one thread for the line, and
    /// waits in the store when its turn comes; an acquire that does not
    /// wait runs on the pool. The loop goes on, and its executor is left
    /// alone. Cancelling the task ends the wait (it leaves the line, or the
    /// store's queue) and lets go of anything it got.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let (this, py) = (slf.get(), slf.py());
        let store = this.begin_acquire(py)?;
        let lease = slf.clone().unbind();
        let abandoned = store.clone();
        let abandon = move |kept: leasehold::Result<Kept>| {
            if let Ok(Kept::Acquired(grant, keeper)) = kept {
                drop(release_hold(Hold {
                    store: abandoned,
                    grant,
                    keeper,
                }));
            }
        };
        // What the acquire got, to the awaiter — or let go when nobody
        // awaits it; `None`: cancelled while in line, it took nothing.
        let finish = {
            let store = store.clone();
            move |py: Python<'_>, kept: Option<leasehold::Result<Kept>>, awaited: bool| {
                let this = lease.get();
                let Some(kept) = kept else {
                    this.inner(py).now = Now::Idle;
                    return Ok(py.None());
                };
                if !awaited {
                    this.let_go(py, store, kept);
                    return Ok(py.None());
                }
                this.end_acquire(py, store, kept)?;
                Ok(lease.clone_ref(py).into_any())
            }
        };
        let Some(timeout) = this.wait.timeout() else {
            let attempt = this.acquire_blocking(&store, &Cancel::new());
            return crate::aio::call(
                py,
                attempt,
                move |py, kept, awaited| finish(py, Some(kept), awaited),
                abandon,
            )
            .inspect_err(|_| this.inner(py).now = Now::Idle);
        };
        if let Some(Err(e)) = timeout.map(|t| leasehold::limits::WAIT.check(t)) {
            // Refused as the blocking wait refuses it, free name or not.
            this.inner(py).now = Now::Idle;
            return Err(errors::library(&e.into()));
        }
        let cancel = Cancel::new();
        let line = crate::aio::Line::of(&store, "lease", this.name.as_str());
        let waiting = {
            let (store, name, options, keep, cancel) = (
                store.clone(),
                this.name.clone(),
                this.options.clone(),
                this.keep.clone(),
                cancel.clone(),
            );
            move |left: Option<Duration>| {
                // Cancelled, out of the store's queue, if the interpreter exits.
                let _watched = crate::exiting::watch(&cancel);
                store.acquire_wait_and_keep(&name, &options, left, &cancel, |_| {}, keep.clone())
            }
        };
        crate::aio::wait(
            py,
            line,
            timeout,
            waiting,
            |kept| !matches!(kept, Ok(Kept::Held(_))),
            move || cancel.cancel(),
            finish,
            abandon,
        )
        .inspect_err(|_| this.inner(py).now = Now::Idle)
    }

    /// ``async with``: the release runs on the pool (`aio`), which never
    /// waits — never queued behind waiters.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<&Bound<'py, PyAny>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (this, py) = (slf.get(), slf.py());
        let raising = !exc_type.is_none_or(PyAnyMethods::is_none);
        let Some(hold) = this.begin_release(py, true)? else {
            return crate::aio::ready(py, py.None());
        };
        let lease = slf.clone().unbind();
        // A release is not cut short: the grant must end.
        crate::aio::call(
            py,
            move || release_hold(hold),
            move |py, released, _| {
                let released = lease.get().end_release(py, released);
                if !raising {
                    released?;
                }
                Ok(py.None())
            },
            drop,
        )
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let inner = self.inner(py);
        let now = match &inner.now {
            Now::Held(local) => match local.get() {
                Ok(hold) if hold.keeper.handle().is_lost() => format!("lost, token {}", hold.grant.token),
                Ok(hold) => format!("held, token {}", hold.grant.token),
                Err(forked) => format!("held by pid {}", forked.owner),
            },
            Now::Acquiring => "being acquired".to_owned(),
            Now::Busy(what, grant) => format!("being {what}, token {}", grant.token),
            Now::Idle => "not held".to_owned(),
        };
        format!("<lh.Lease {:?} {now}>", self.name.as_str())
    }
}

impl Drop for Lease {
    /// A lease dropped while held is released, as a Rust guard would be.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let Now::Held(local) = std::mem::replace(&mut inner.now, Now::Idle) else {
            return;
        };
        if let Ok(hold) = local.get() {
            // As an unclosed file does: the release came from the garbage
            // collector, not from the code that held it.
            let message = format!(
                "lease {} (token {}) was dropped while held and is released now: release it (release(), or a \
                 with block) when done with it",
                self.name, hold.grant.token
            );
            // Drops run attached: this takes no GIL.
            #[allow(clippy::disallowed_methods, reason = "the thread is attached already")]
            Python::attach(|py| {
                let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
                let message = std::ffi::CString::new(message).unwrap_or_default();
                if let Err(e) = PyErr::warn(py, &category, &message, 1) {
                    e.write_unraisable(py, None);
                }
            });
        }
        local.finish_detached(move |hold| drop(release_hold(hold)));
    }
}
