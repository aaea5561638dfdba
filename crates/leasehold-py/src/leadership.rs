//! `store.campaign()` and `store.observe()`: the library's leader election
//! (`leasehold::Leadership`) and leader changes (`leasehold::Observer`),
//! with nothing of their own but conversion: a campaign waits on a thread
//! of its own (^C reaches the caller, `background.rs`), a change is the
//! document `leasehold --json leader NAME` prints.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{CampaignOptions, Cancel, LeaderChange, LeaseName};
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;

use crate::background::Background;
use crate::convert::{self, Wait};
use crate::errors::{self, OrRaise as _};

/// Campaign for `name` as candidate `options.id`; `None` when `wait`
/// passed first.
pub fn campaign(
    py: Python<'_>,
    store: Arc<leasehold::Store>,
    name: LeaseName,
    options: CampaignOptions,
    wait: Wait,
    on_lost: Option<Py<PyAny>>,
) -> PyResult<Option<Leadership>> {
    let deadline = match wait {
        Wait::No => Some(Instant::now()),
        Wait::Upto(d) => Some(Instant::now() + d),
        Wait::Forever => None,
    };
    let cancel = Cancel::new();
    let call = {
        let (cancel, name) = (cancel.clone(), name.clone());
        Background::spawn(move || {
            let _watched = crate::exiting::watch(&cancel);
            store.campaign(&name, &options, &cancel)
        })
    };
    let led = loop {
        if let Some(led) = call.wait_for(py, Duration::from_millis(50)) {
            break led.or_raise()?;
        }
        if let Err(interrupted) = py.check_signals() {
            // ^C: the campaign leaves the queue at its next look; a
            // leadership won meanwhile is resigned (dropped) at once.
            cancel.cancel();
            call.give_up(py, drop);
            return Err(interrupted);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            cancel.cancel();
        }
    };
    let Some(led) = led else { return Ok(None) };
    if let Some(on_lost) = on_lost {
        let what = format!("leadership of {name} (token {})", led.token());
        led.on_lost(crate::hold::loss_callback(what, on_lost));
    }
    Ok(Some(Leadership {
        name,
        led: Mutex::new(Some(led)),
    }))
}

/// Leadership of a lease name, won by ``store.campaign()``.
///
/// ``is_leader``: whether this process may act as the leader now (false
/// once lost, or resigned). ``token``: the fencing token to pass to what
/// the leader writes. ``lost``: why it was lost (a str), or None.
/// ``resign()`` stops renewing and releases at once (the next candidate
/// leads); ``with store.campaign(...) as leadership:`` resigns at the end.
#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct Leadership {
    name: LeaseName,
    /// `None` once resigned.
    led: Mutex<Option<leasehold::Leadership>>,
}

impl Leadership {
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(Option<&leasehold::Leadership>) -> T) -> T {
        f(self
            .led
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref())
    }
}

#[pymethods]
impl Leadership {
    #[getter]
    fn name(&self) -> &str {
        self.name.as_str()
    }

    #[getter]
    fn is_leader(&self, py: Python<'_>) -> bool {
        self.with(py, |led| led.is_some_and(leasehold::Leadership::is_leader))
    }

    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |led| led.map(|l| l.token().0))
            .ok_or_else(|| errors::invalid(format!("the leadership of {} was resigned", self.name)))
    }

    #[getter]
    fn lost(&self, py: Python<'_>) -> Option<String> {
        self.with(py, |led| {
            led.and_then(leasehold::Leadership::lost).map(|l| l.to_string())
        })
    }

    /// Stop leading: stop renewing and release, so the next candidate
    /// leads at once. Resigning twice is fine.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        let led = self
            .led
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match led {
            Some(led) => crate::exiting::detach(py, move || led.resign()).or_raise(),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.resign(py)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.with(py, |led| led.map(leasehold::Leadership::token)) {
            Some(token) => format!("<Leadership {} token={token}>", self.name),
            None => format!("<Leadership {} resigned>", self.name),
        }
    }
}

/// The leader changes of a lease name (``store.observe(name)``): ``for
/// change in observer`` blocks until each change, ``async for`` awaits it;
/// the first is the current state. Each is a dict: ``name``, and
/// ``leader`` — None, or ``owner`` (the candidate's id), ``token``,
/// ``host``, ``pid``, ``since`` (a ``datetime``). ``close()`` ends the
/// iteration (at most the store's poll interval later).
#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct Observer {
    observer: Arc<Mutex<leasehold::Observer>>,
    cancel: Cancel,
}

impl Observer {
    pub fn new(store: &Arc<leasehold::Store>, name: &LeaseName) -> Self {
        let observer = store.observe(name);
        Self {
            cancel: observer.cancel(),
            observer: Arc::new(Mutex::new(observer)),
        }
    }

    /// The blocking call: the next change, `None` once closed.
    fn next_call(&self) -> impl FnOnce() -> Option<leasehold::Result<LeaderChange>> + Send + 'static {
        let observer = self.observer.clone();
        move || observer.lock().unwrap_or_else(PoisonError::into_inner).next()
    }
}

fn change_document(py: Python<'_>, change: &LeaderChange) -> PyResult<Py<PyAny>> {
    Ok(convert::document(py, &leasehold::json::leader_change(change))?.unbind())
}

#[pymethods]
impl Observer {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let call = Background::spawn(self.next_call());
        match call.wait(py) {
            Ok(Some(change)) => Ok(Some(change_document(py, &change.or_raise()?)?)),
            Ok(None) => Ok(None),
            Err(interrupted) => {
                self.cancel.cancel();
                call.give_up(py, drop);
                Err(interrupted)
            }
        }
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Cancelling the awaiting task closes the observer.
    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cancel = self.cancel.clone();
        crate::aio::run(
            py,
            self.next_call(),
            move || cancel.cancel(),
            |py, next, _| match next {
                Some(change) => change_document(py, &change.or_raise()?),
                None => Err(PyStopAsyncIteration::new_err(())),
            },
            drop,
        )
    }

    /// End the iteration: a waiting ``next`` ends (``StopIteration``) at
    /// its next look.
    fn close(&self) {
        self.cancel.cancel();
    }
}
