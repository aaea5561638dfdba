//! Failures as Python exceptions: one class per [`ErrorKind`], in one
//! place ([`ErrorKind::class_name`], the library's, which the Node.js
//! package's errors share). The classes themselves are defined in Python
//! (`leasehold/_errors.py`), where a class can also be a `ValueError` and
//! carry its docstring; this module only picks the class and words the
//! message. Messages are the library's; where the next step is an option
//! of the caller's (a [`Remedy`]), it is worded in Python's terms.

use leasehold::lock::LockError;
use leasehold::{BackendError, ErrorKind, NameError, Remedy};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// Exceptions that are not an [`ErrorKind`]: refusals the CLI reports
/// with exit codes of their own.
#[derive(Debug, Clone, Copy)]
pub enum Other {
    /// A lease, queue or task name the library refuses.
    InvalidName,
    /// `claim()` found nothing claimable (the CLI's exit 10).
    NothingToClaim,
    /// No task with that id (the CLI's exit 14).
    NoSuchTask,
}

impl Other {
    fn class(self) -> &'static str {
        match self {
            Other::InvalidName => "InvalidName",
            Other::NothingToClaim => "NothingToClaim",
            Other::NoSuchTask => "NoSuchTask",
        }
    }
}

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("pyleasehold._errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// An exception of `class` with `message`.
fn new(class_name: &str, message: String) -> PyErr {
    // Errors are made on attached threads: this takes no GIL.
    #[allow(clippy::disallowed_methods, reason = "the thread is attached already")]
    Python::attach(|py| match class(py, class_name).and_then(|c| c.call1((message,))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    })
}

/// Whether `e` is one of this package's exceptions (an `lh.Error`).
pub fn is_ours(py: Python<'_>, e: &PyErr) -> bool {
    class(py, "Error").is_ok_and(|error| e.is_instance(py, &error))
}

/// One holder of what a `Held` refused, as `lh.Holder` gives it.
#[derive(Debug, Clone)]
pub struct HolderFacts {
    pub owner: String,
    pub token: Option<u64>,
    pub mode: &'static str,
    /// When the store expires the grant unless renewed.
    pub expires: Option<std::time::SystemTime>,
    pub pid: Option<u32>,
}

/// `lh.Held` with its facts as attributes (`name`, `holders`, `waiters`;
/// see `leasehold/_errors.py`), besides the message.
/// `timed_out`: after a wait with a limit — `lh.WaitTimeout`, a `Held`
/// that is also a `TimeoutError`.
pub fn held(message: String, name: &str, holders: &[HolderFacts], waiters: u32, timed_out: bool) -> PyErr {
    // Errors are made on attached threads: this takes no GIL.
    #[allow(clippy::disallowed_methods, reason = "the thread is attached already")]
    Python::attach(|py| {
        let made = (|| -> PyResult<Bound<'_, PyAny>> {
            let holder = class(py, "Holder")?;
            let holders = holders
                .iter()
                .map(|h| {
                    let expires = h.expires.map(|t| crate::convert::datetime(py, t)).transpose()?;
                    holder.call1((&h.owner, h.token, h.mode, expires, h.pid))
                })
                .collect::<PyResult<Vec<_>>>()?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("name", name)?;
            kwargs.set_item("holders", holders)?;
            kwargs.set_item("waiters", waiters)?;
            let class_name = if timed_out { "WaitTimeout" } else { "Held" };
            class(py, class_name)?.call((message,), Some(&kwargs))
        })();
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        }
    })
}

/// The exception for a run that did not end by itself: the library's
/// class for it ([`RunError::class_name`](leasehold::supervise::RunError::class_name):
/// `LeaseLost` for a lost grant, `Stalled` for a command stopped for making
/// no progress — the decision the CLI makes with exit 75 —, `RunTimeout`,
/// `Failed` otherwise), but `KeyboardInterrupt` for one the caller stopped.
/// (`RunTimeout` with its `subprocess.TimeoutExpired` fields: `run.rs`.)
pub fn run(error: &leasehold::supervise::RunError) -> PyErr {
    match error {
        leasehold::supervise::RunError::Interrupted { .. } => {
            pyo3::exceptions::PyKeyboardInterrupt::new_err(error.to_string())
        }
        _ => new(error.class_name(), error.to_string()),
    }
}

/// An exception of the class of `kind`.
pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> PyErr {
    new(kind.class_name(), message.into())
}

/// One of the exceptions that are not a kind.
pub fn other(which: Other, message: impl Into<String>) -> PyErr {
    new(which.class(), message.into())
}

/// `lh.InvalidInput`: an argument refused before anything was done.
pub fn invalid(message: impl Into<String>) -> PyErr {
    of_kind(ErrorKind::InvalidInput, message)
}

/// A remedy in the words of this package's API.
fn python_words(remedy: Remedy) -> String {
    match remedy {
        Remedy::AnotherStore => "open another store (lh.Store(url))".into(),
        Remedy::AllowNetworkFs => "pass allow_network_fs=True if you accept the risk".into(),
        _ => remedy.library_words().into(),
    }
}

/// A store's failure, with its remedy in Python's words.
pub fn backend(e: &BackendError) -> PyErr {
    of_kind(e.kind(), e.message_with(python_words))
}

/// Any failure of the library.
pub fn library(e: &leasehold::Error) -> PyErr {
    match e {
        leasehold::Error::Store(inner) => backend(inner),
        _ => of_kind(e.kind(), e.to_string()),
    }
}

pub fn lock(e: &LockError) -> PyErr {
    let mut message = e.to_string();
    if let Some(remedy) = e.remedy() {
        message = format!("{message}, or {}", python_words(remedy));
    }
    of_kind(e.kind(), message)
}

/// A state file's failure, an option it names spelled as this API's
/// (`fence_new_lease=True`).
pub fn file(e: &leasehold::files::FileError) -> PyErr {
    of_kind(e.kind(), e.message_with(&leasehold::spelling::Keywords))
}

/// A refused name: `what` says which (lease, queue, task id).
pub fn name(what: &str, given: &str, e: &NameError) -> PyErr {
    other(Other::InvalidName, format!("invalid {what} {given:?}: {e}"))
}

/// Library results as Python results.
pub trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, leasehold::Error> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(|e| library(&e))
    }
}

impl<T> OrRaise<T> for Result<T, BackendError> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(|e| backend(&e))
    }
}

impl<T> OrRaise<T> for Result<T, LockError> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(|e| lock(&e))
    }
}

impl<T> OrRaise<T> for Result<T, leasehold::files::FileError> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(|e| file(&e))
    }
}
