//! `lh.Store`: an open store, by URL as the CLI takes it. Everything else
//! (`lease`, `run`, `queue`) goes through [`Store::handle`], which a forked
//! child reopens for itself (see `fork.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::{LeaseFence, StoreOptions, StoreUrl};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::convert;
use crate::errors::{self, OrRaise as _};
use crate::fork::Local;

/// The environment variable the CLI reads its store from, read here too.
const STORE_VAR: &str = "LEASEHOLD_STORE";

#[derive(Debug)]
#[pyclass(frozen, module = "leasehold")]
pub struct Store {
    url: StoreUrl,
    options: StoreOptions,
    /// `None` once closed.
    open: Mutex<Option<Local<Arc<leasehold::Store>>>>,
}

impl Store {
    /// The open store of this process: the one opened here, or — in a
    /// child made by `os.fork()` — one the child opens for itself on first
    /// use (the parent's connection stays the parent's; see `fork.rs`).
    pub fn handle(&self, py: Python<'_>) -> PyResult<Arc<leasehold::Store>> {
        {
            let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            match open.as_ref() {
                None => {
                    return Err(errors::invalid(format!(
                        "the store {} is closed; open it again with lh.Store(url)",
                        self.url.redacted()
                    )));
                }
                Some(local) => {
                    if let Ok(store) = local.get() {
                        return Ok(store.clone());
                    }
                }
            }
        }
        let (url, options) = (self.url.clone(), self.options.clone());
        let store = Arc::new(py.detach(move || leasehold::Store::open(&url, &options)).or_raise()?);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Ok(theirs)) = open.as_ref().map(Local::get) {
            // Another thread of this child opened it first.
            return Ok(theirs.clone());
        }
        *open = Some(Local::new(store.clone()));
        Ok(store)
    }

    /// The URL to open: the one given (a path means a SQLite file), else
    /// `$LEASEHOLD_STORE`, else the embedded default.
    fn url_of(url: Option<&Bound<'_, PyAny>>) -> PyResult<StoreUrl> {
        match url {
            Some(url) if url.is_instance_of::<PyString>() => StoreUrl::parse(&url.extract::<String>()?).or_raise(),
            Some(path) => Ok(StoreUrl::Sqlite(convert::path(path)?)),
            None => match std::env::var(STORE_VAR).ok().filter(|v| !v.is_empty()) {
                Some(url) => StoreUrl::parse(&url).or_raise(),
                None => StoreUrl::default_location().or_raise(),
            },
        }
    }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (url=None, *, allow_network_fs=false))]
    fn new(py: Python<'_>, url: Option<&Bound<'_, PyAny>>, allow_network_fs: bool) -> PyResult<Self> {
        let url = Self::url_of(url)?;
        let options = StoreOptions {
            allow_network_fs,
            ..StoreOptions::default()
        };
        let opened = {
            let (url, options) = (url.clone(), options.clone());
            py.detach(move || leasehold::Store::open(&url, &options)).or_raise()?
        };
        Ok(Self {
            url,
            options,
            open: Mutex::new(Some(Local::new(Arc::new(opened)))),
        })
    }

    /// The store's URL, any password in it replaced by `***`.
    #[getter]
    fn url(&self) -> String {
        self.url.redacted()
    }

    /// Close the store (leases and tasks still held keep their own handle
    /// until they end).
    fn close(&self, py: Python<'_>) {
        let taken = self.open.lock().unwrap_or_else(PoisonError::into_inner).take();
        // Closing may wait for a connection's goodbye.
        py.detach(move || drop(taken));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        format!("lh.Store({:?})", self.url.redacted())
    }

    /// A lease on `name`, not yet acquired: `with` (or `async with`) it,
    /// or call `acquire()`.
    #[pyo3(signature = (name, *, ttl=None, wait=None, shared=None, owner=None, heartbeat=None, margin=None, on_lost=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn lease(
        slf: &Bound<'_, Self>,
        name: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::lease::Lease> {
        let hold = crate::lease::HoldOptions::from_py(ttl, owner, heartbeat, margin, on_lost)?;
        Ok(crate::lease::Lease::new(
            slf.clone().unbind(),
            convert::lease_name(name)?,
            convert::mode(shared)?,
            convert::Wait::from_py(wait)?,
            hold,
        ))
    }

    /// The queue `name` of this store.
    fn queue(slf: &Bound<'_, Self>, name: &str) -> PyResult<crate::queue::Queue> {
        Ok(crate::queue::Queue::new(
            slf.clone().unbind(),
            convert::queue_name(name)?,
        ))
    }

    /// Run `argv` under the lease `name`, as `leasehold run` does.
    #[pyo3(signature = (name, argv, *, ttl=None, heartbeat=None, grace=None, wait=None, shared=None, owner=None, stall_timeout=None, progress_file=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn run(
        &self,
        py: Python<'_>,
        name: &str,
        argv: Vec<std::ffi::OsString>,
        ttl: Option<&Bound<'_, PyAny>>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        grace: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        stall_timeout: Option<&Bound<'_, PyAny>>,
        progress_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u8> {
        let run_args = crate::run::RunArgs {
            name: convert::lease_name(name)?,
            argv,
            ttl: convert::opt_duration(ttl, "ttl")?.unwrap_or(crate::lease::DEFAULT_TTL),
            heartbeat: convert::opt_duration(heartbeat, "heartbeat")?,
            grace: convert::opt_duration(grace, "grace")?,
            wait: convert::Wait::from_py(wait)?,
            mode: convert::mode(shared)?,
            owner,
            stall: convert::opt_duration(stall_timeout, "stall_timeout")?,
            progress_file: progress_file.map(convert::path).transpose()?,
        };
        crate::run::run(py, self.handle(py)?, run_args)
    }

    /// The state of `name` (its live grants), or None if never granted.
    fn status<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let name = convert::lease_name(name)?;
        let store = self.handle(py)?;
        let state = py.detach(move || store.status(&name)).or_raise()?;
        state
            .map(|s| {
                let mut value = serde_json::to_value(&s).expect("a lease state serializes");
                // How many wait, as the CLI's JSON says it: who waits is
                // the library's to judge.
                value["waiters"] = s.waiters.len().into();
                convert::from_json(py, &value)
            })
            .transpose()
    }

    /// Raise `StaleToken` unless `token` (an int, a lease or a task) may still
    /// write to what `name` protects: the newest live grant (or, shared, a
    /// live one). Records the pass in the history. A lease's grant must be
    /// the token's grant in the store (after a restore it may be another).
    fn fence(&self, py: Python<'_>, name: &str, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = convert::lease_name(name)?;
        let fence = convert::fence(token)?;
        let token = fence.token;
        let store = self.handle(py)?;
        let fenced = {
            let name = name.clone();
            py.detach(move || store.fence(&name, fence)).or_raise()?
        };
        match fenced {
            LeaseFence::Passed(_) => Ok(()),
            LeaseFence::Refused { newest, reason } => Err(errors::of_kind(
                leasehold::ErrorKind::Stale,
                format!(
                    "token {token} of {name} is stale: {reason}{}; stop writing — the holder of a newer token may be writing",
                    newest
                        .map(|n| format!(" (the newest token is {n})"))
                        .unwrap_or_default()
                ),
            )),
        }
    }
}
