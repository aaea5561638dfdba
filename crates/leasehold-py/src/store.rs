//! `lh.Store`: an open store, by URL as the CLI takes it. Everything else
//! (`lease`, `run`, `queue`) goes through [`Store::handle`], which a forked
//! child reopens for itself (see `fork.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::{ChosenUrlError, StoreOptions, StoreUrl};
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;
use pyo3::types::{PyList, PyString};

use crate::convert;
use crate::errors::{self, OrRaise as _};
use crate::fork::Local;

/// An open leasehold store — where leases, their fencing tokens and task
/// queues are kept.
///
/// ``Store(url=None, *, allow_network_fs=False)``
///
/// ``url``: ``"sqlite:///path/to/leasehold.db"``, ``"postgres://user@host/db"``,
/// ``"etcd://host:2379"`` (TLS and users as the CLI's ``--store``; README), or a
/// path (a ``str`` without ``://``, or a ``pathlib.Path``) to a SQLite file.
/// ``None``: ``$LEASEHOLD_STORE``, else the CLI's embedded store
/// (``$XDG_STATE_HOME/leasehold/leasehold.db``), so a Python program and
/// ``leasehold`` on the command line share their leases.
/// ``allow_network_fs``: open a SQLite file on a network filesystem
/// (NFS, SMB…), whose locks may not hold — refused unless ``True``.
///
/// Raises ``InvalidInput`` for a malformed URL (a password in it is never
/// shown), ``StoreUnavailable`` when the server is down, ``BadData`` for a
/// file that is not a leasehold store (left as found), ``Unsupported`` for
/// ``etcd://`` in a build without etcd. ``with lh.Store(...) as store:``
/// closes it at the end.
#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
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
            let open = self.open.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner);
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
        let store = Arc::new(crate::exiting::detach(py, move || leasehold::Store::open(&url, &options)).or_raise()?);
        let mut open = self.open.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner);
        if let Some(Ok(theirs)) = open.as_ref().map(Local::get) {
            // Another thread of this child opened it first.
            return Ok(theirs.clone());
        }
        *open = Some(Local::new(store.clone()));
        Ok(store)
    }

    /// The URL to open: the one given (a `pathlib.Path` means a SQLite
    /// file), else the library's choice ([`StoreUrl::chosen`]).
    fn url_of(url: Option<&Bound<'_, PyAny>>) -> PyResult<StoreUrl> {
        let text = match url.filter(|u| !u.is_none()) {
            Some(url) if url.is_instance_of::<PyString>() => Some(url.extract::<String>()?),
            Some(path) => return Ok(StoreUrl::sqlite(convert::path(path)?)),
            None => None,
        };
        StoreUrl::chosen(text.as_deref(), "pass pathlib.Path(PATH)").map_err(|e| match e {
            ChosenUrlError::Refused(message) => errors::invalid(message),
            ChosenUrlError::Store(e) => errors::backend(&e),
        })
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
            crate::exiting::detach(py, move || leasehold::Store::open(&url, &options)).or_raise()?
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
        let taken = self
            .open
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Closing may wait for a connection's goodbye.
        crate::exiting::detach(py, move || drop(taken));
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

    /// A lease on ``name``, not yet acquired: ``with`` (or ``async with``) it,
    /// or call ``acquire()``.
    ///
    /// ``ttl``: how long the store keeps the grant without a renewal
    /// (default 60 s; between 1 ms and a year). ``wait``: None or False do
    /// not wait (``Held`` at once), a duration waits up to that long, True
    /// as long as it takes — first come, first served. ``shared``: False
    /// (exclusive), True (shared), or N (shared by at most N holders).
    /// ``owner``: a label for the grant (default ``host:pid``); taking it
    /// again with the same owner is idempotent. ``heartbeat``: how often the
    /// keeper renews (default ttl/3). ``margin``: how long before the store
    /// could expire it the holder stops trusting it (default ttl/10).
    /// ``on_lost``: a callable called with the ``LeaseLost`` on loss (on the
    /// keeper's thread), or ``"interrupt"`` to raise it in the main thread.
    /// Durations are ``"90s"``-style strings, seconds, or ``timedelta``.
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
        let hold = crate::hold::HoldOptions::from_py(ttl, owner, heartbeat, margin, on_lost)?;
        Ok(crate::lease::Lease::new(
            slf.clone().unbind(),
            convert::lease_name(name)?,
            convert::mode(shared)?,
            convert::wait(wait)?,
            hold,
        ))
    }

    /// Campaign for leadership of the lease ``name`` as candidate ``id``:
    /// wait, first come first served, until this candidate leads; returns
    /// the ``Leadership`` (``with`` resigns at the end), or None when
    /// ``wait`` passed first.
    ///
    /// ``id``: stable across this candidate's restarts — a restarted
    /// candidate whose predecessor is provably gone leads again at once,
    /// with a new token — and unique among live candidates (a second live
    /// process under one id is refused, ``Held``). ``ttl``: how long a leader that stops
    /// renewing keeps the others waiting, when it cannot be proved dead
    /// (default 15 s). ``wait``: True (default) as long as it takes, a
    /// duration up to that long, False not at all. ``on_lost``: as for
    /// ``lease()``. A candidate that never led is never told it lost.
    #[pyo3(signature = (name, *, id, ttl=None, wait=None, on_lost=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        name: &str,
        id: String,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<crate::leadership::Leadership>> {
        let mut options = leasehold::CampaignOptions::new(id);
        if let Some(ttl) = convert::opt_duration(ttl, "ttl")? {
            options.ttl = ttl;
        }
        let wait = match wait {
            None => convert::Wait::Forever,
            Some(wait) => convert::wait(Some(wait))?,
        };
        let on_lost = on_lost
            .filter(|v| !v.is_none())
            .map(crate::hold::on_lost_handler)
            .transpose()?;
        crate::leadership::campaign(py, self.handle(py)?, convert::lease_name(name)?, options, wait, on_lost)
    }

    /// The leader changes of the lease ``name``, from who leads now on: an
    /// ``Observer`` (``for change in store.observe(name)``, or ``async
    /// for``).
    fn observe(&self, py: Python<'_>, name: &str) -> PyResult<crate::leadership::Observer> {
        Ok(crate::leadership::Observer::new(
            &self.handle(py)?,
            &convert::lease_name(name)?,
        ))
    }

    /// The task queue ``name`` of this store (SQLite and PostgreSQL; etcd
    /// has none).
    fn queue(slf: &Bound<'_, Self>, name: &str) -> PyResult<crate::queue::Queue> {
        Ok(crate::queue::Queue::new(
            slf.clone().unbind(),
            convert::queue_name(name)?,
        ))
    }

    /// Run the command ``argv`` under the lease ``name``, as ``leasehold run``
    /// does; returns its exit code (128+N for signal N), or with
    /// ``capture_output=True`` a ``subprocess.CompletedProcess``.
    ///
    /// ``argv``: the program and its arguments, a list of str (not one str:
    /// ``["sh", "-c", "echo hi"]`` for a shell line). ``ttl``, ``wait``,
    /// ``shared``, ``owner``, ``heartbeat``: as for ``lease()``.
    /// ``grace``: how long the command gets between SIGTERM and SIGKILL when
    /// it must stop (default ttl/5, at most 10 s). ``stall_timeout``: stop
    /// it (``Failed``) when it writes nothing to stdout or stderr — nor
    /// touches ``progress_file`` — for that long. ``env``: variables added
    /// to this process's environment for the command (not replacing it, as
    /// ``subprocess.run``'s does; ``LEASEHOLD_*`` of the grant cannot be
    /// set). ``cwd``: the command's working directory. ``input``: bytes (or
    /// str, as UTF-8) fed to its stdin, which is then closed; ``None``: it
    /// inherits this process's stdin. ``capture_output``: collect stdout and
    /// stderr (bytes; str with ``text=True``). ``timeout``: from the
    /// command's start, stop it as a lost lease stops it (SIGTERM to its
    /// tree, SIGKILL after ``grace``) and raise ``RunTimeout`` once every
    /// process of it is gone and the lease released. Raises ``Held``, and
    /// ``LeaseLost`` when the lease was lost while it ran (it was stopped).
    #[pyo3(signature = (name, argv, *, ttl=None, heartbeat=None, grace=None, wait=None, shared=None, owner=None, stall_timeout=None, progress_file=None, env=None, cwd=None, input=None, timeout=None, capture_output=false, text=false))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn run(
        &self,
        py: Python<'_>,
        name: &str,
        argv: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        grace: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        stall_timeout: Option<&Bound<'_, PyAny>>,
        progress_file: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        cwd: Option<&Bound<'_, PyAny>>,
        input: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        capture_output: bool,
        text: bool,
    ) -> PyResult<Py<PyAny>> {
        let run_args = crate::run::RunArgs {
            name: convert::lease_name(name)?,
            argv: convert::argv(argv)?,
            ttl: convert::opt_duration(ttl, "ttl")?.unwrap_or(crate::hold::DEFAULT_TTL),
            heartbeat: convert::opt_duration(heartbeat, "heartbeat")?,
            grace: convert::opt_duration(grace, "grace")?,
            wait: convert::wait(wait)?,
            mode: convert::mode(shared)?,
            owner,
            stall: convert::opt_duration(stall_timeout, "stall_timeout")?,
            progress_file: progress_file.map(convert::path).transpose()?,
            env: crate::run::env(env)?,
            cwd: cwd.filter(|c| !c.is_none()).map(convert::path).transpose()?,
            input: crate::run::input(input)?,
            timeout: convert::opt_duration(timeout, "timeout")?,
            capture: capture_output,
            text,
        };
        crate::run::run(py, self.handle(py)?, &run_args)
    }

    /// The state of the lease ``name`` as a dict — ``name``, ``last_token``,
    /// ``waiters``, ``grants`` (each: ``token``, ``owner``, ``mode``,
    /// ``expires``, ``acquired``, ``alive``, ``holder``, …): the document of
    /// ``leasehold status NAME --json`` (docs/JSON.md) with times as
    /// ``datetime`` (UTC) and durations as ``timedelta`` — or None if it was
    /// never granted.
    fn status<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let name = convert::lease_name(name)?;
        let store = self.handle(py)?;
        let state = crate::exiting::detach(py, move || store.status(&name)).or_raise()?;
        state
            .map(|s| convert::document(py, &leasehold::json::lease_state(&s)))
            .transpose()
    }

    /// Every lease name of the store, as ``status()`` gives each; with
    /// ``live=True`` only those held by a holder not proven dead (``leasehold
    /// list --live``).
    #[pyo3(signature = (*, live=false))]
    fn list<'py>(&self, py: Python<'py>, live: bool) -> PyResult<Bound<'py, PyList>> {
        let store = self.handle(py)?;
        let states = crate::exiting::detach(py, move || store.list(live)).or_raise()?;
        convert::documents(py, &states.iter().map(leasehold::json::lease_state).collect::<Vec<_>>())
    }

    /// The newest ``limit`` history entries of the lease ``name``, newest
    /// first — each ``at`` (a ``datetime``), ``event``, ``token``, ``owner``,
    /// ``detail`` (``leasehold history NAME --json``).
    #[pyo3(signature = (name, *, limit=100))]
    fn history<'py>(&self, py: Python<'py>, name: &str, limit: u32) -> PyResult<Bound<'py, PyList>> {
        let name = convert::lease_name(name)?;
        let store = self.handle(py)?;
        let entries = crate::exiting::detach(py, move || store.history(&name, limit)).or_raise()?;
        convert::documents(
            py,
            &entries.iter().map(leasehold::json::history_entry).collect::<Vec<_>>(),
        )
    }

    /// Copy the store to ``dest`` (a path: a new file in an existing
    /// directory) while it is in use: a consistent snapshot, durable on
    /// return, marked as a backup (``leasehold backup DEST``). Returns a dict
    /// — ``location``, ``path``, ``bytes``, ``taken_at`` (a ``datetime``) —
    /// the document of ``leasehold backup --json``. Nothing is ever
    /// overwritten: a ``dest`` that exists (a symbolic link included) raises
    /// ``InvalidInput``; a full disk ``DiskFull``, and so on, with nothing
    /// left behind. PostgreSQL and etcd raise ``Unsupported`` naming their
    /// own tools. A plain copy of a live store file is not a backup (README,
    /// "Restoring a store").
    fn backup<'py>(&self, py: Python<'py>, dest: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let dest = convert::path(dest)?;
        let store = self.handle(py)?;
        let location = store.url().redacted();
        let copy = crate::exiting::detach(py, move || store.backup(&dest)).or_raise()?;
        convert::document(
            py,
            &leasehold::json::BackedUp {
                location: &location,
                path: &copy.path,
                bytes: copy.bytes,
                taken_at: leasehold::format_time(copy.taken_at),
            },
        )
    }

    /// Raise ``StaleToken`` unless ``token`` (an int, a lease or a task) may
    /// still write to what the lease ``name`` protects: the newest live grant
    /// (or, shared, a live one). Records the pass in the history. A lease's
    /// grant must be the token's grant in the store (after a restore it may
    /// be another).
    fn fence(&self, py: Python<'_>, name: &str, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = convert::lease_name(name)?;
        let fence = convert::fence(token)?;
        let token = fence.token;
        let store = self.handle(py)?;
        let fenced = {
            let name = name.clone();
            crate::exiting::detach(py, move || store.fence(&name, fence)).or_raise()?
        };
        match fenced.refusal(&name, token) {
            None => Ok(()),
            Some(refusal) => Err(errors::of_kind(leasehold::ErrorKind::Stale, refusal)),
        }
    }
}
