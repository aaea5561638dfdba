//! Python values to the library's types and back: durations, waits,
//! names, paths, JSON, fencing tokens. Parsing and limits stay the
//! library's (`leasehold::parse_duration`, `leasehold::limits`); this only
//! says which Python values mean what.

use std::path::PathBuf;
use std::time::Duration;

use leasehold::files::Fence;
use leasehold::{GrantId, LeaseName, Mode, TaskId, Token};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};

use crate::errors;

/// A duration: a string the library parses (`"90s"`, `"5m"`, `"1h30m"`,
/// a bare number of seconds), a number of seconds, or a
/// `datetime.timedelta`. `what` names the argument in messages.
pub fn duration(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    if let Ok(text) = value.cast::<PyString>() {
        return leasehold::parse_duration(&text.to_cow()?).map_err(|e| errors::invalid(format!("{what}: {e}")));
    }
    let seconds: f64 = if value.is_instance_of::<PyBool>() {
        return Err(errors::invalid(format!(
            "{what}: {} is not a duration; write e.g. \"90s\", 90 or timedelta(seconds=90)",
            value.repr()?
        )));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        value.extract()?
    } else if value.hasattr("total_seconds")? {
        value.call_method0("total_seconds")?.extract()?
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be a str (\"90s\"), a number of seconds or a datetime.timedelta, not {}",
            value.get_type().name()?
        )));
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        errors::invalid(format!(
            "{what}: {seconds} seconds is not a duration (negative or not finite)"
        ))
    })
}

/// An optional duration (`None` stays `None`).
pub fn opt_duration(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    value.filter(|v| !v.is_none()).map(|v| duration(v, what)).transpose()
}

/// How long to wait for something held: not at all, up to a limit, or
/// for as long as it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    No,
    Upto(Duration),
    Forever,
}

impl Wait {
    /// `None` or `False`: no wait; `True`: forever; else a duration.
    pub fn from_py(value: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let Some(value) = value.filter(|v| !v.is_none()) else {
            return Ok(Wait::No);
        };
        if let Ok(flag) = value.cast::<PyBool>() {
            return Ok(if flag.is_true() { Wait::Forever } else { Wait::No });
        }
        Ok(Wait::Upto(duration(value, "wait")?))
    }

    /// As the library takes it: `None` no wait, `Some(None)` forever.
    #[allow(
        clippy::option_option,
        reason = "the library's waits (LeaseRun::wait, acquire_wait) are spelled so"
    )]
    pub fn timeout(self) -> Option<Option<Duration>> {
        match self {
            Wait::No => None,
            Wait::Upto(d) => Some(Some(d)),
            Wait::Forever => Some(None),
        }
    }
}

/// `shared=False` (exclusive), `True` (shared, no limit) or `N` (one of
/// at most N holders).
pub fn mode(value: Option<&Bound<'_, PyAny>>) -> PyResult<Mode> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Mode::Exclusive);
    };
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(if flag.is_true() {
            Mode::Shared { limit: None }
        } else {
            Mode::Exclusive
        });
    }
    let limit: u32 = value
        .extract()
        .map_err(|_| errors::invalid("shared must be True, False or the most holders at once (an int ≥ 1)"))?;
    if limit == 0 {
        return Err(errors::invalid("shared=0 admits nobody: give at least 1"));
    }
    Ok(Mode::Shared { limit: Some(limit) })
}

pub fn lease_name(name: &str) -> PyResult<LeaseName> {
    LeaseName::new(name).map_err(|e| errors::name("lease name", name, &e))
}

pub fn queue_name(name: &str) -> PyResult<LeaseName> {
    LeaseName::new(name).map_err(|e| errors::name("queue name", name, &e))
}

pub fn task_id(id: &str) -> PyResult<TaskId> {
    TaskId::new(id).map_err(|e| errors::name("task id", id, &e))
}

/// A path as Python spells one (`str` or `os.PathLike`), with a leading
/// `~` expanded as a shell would have expanded it for the CLI
/// (`os.path.expanduser`). A trailing slash is kept: it means "a
/// directory" to `lock`.
pub fn path(value: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let py = value.py();
    let os_path = py.import("os.path")?;
    let expanded = os_path.call_method1("expanduser", (py.import("os")?.call_method1("fspath", (value,))?,))?;
    expanded.extract()
}

/// A fencing token: an int, or anything with a `token` (a lease, a task).
pub fn token(value: &Bound<'_, PyAny>) -> PyResult<Token> {
    let value = if value.is_instance_of::<PyInt>() {
        value.clone()
    } else {
        value
            .getattr("token")
            .map_err(|_| pyo3::exceptions::PyTypeError::new_err("fence must be a lease, a task or a token (int)"))?
    };
    let token: u64 = value
        .extract()
        .map_err(|_| errors::invalid("a fencing token is a positive integer"))?;
    Ok(Token(token))
}

/// The fence of a `fence=` argument: a lease's token and grant; a task's
/// token; an int with the grant of the `leasehold run` this process runs
/// under when the int is its token (`LEASEHOLD_TOKEN`/`LEASEHOLD_GRANT`).
pub fn fence(value: &Bound<'_, PyAny>) -> PyResult<Fence> {
    let token = token(value)?;
    if value.is_instance_of::<PyInt>() {
        return Fence::with_grant_from_env(token).map_err(errors::invalid);
    }
    let grant = match value.getattr("grant") {
        Ok(grant) => Some(
            grant
                .extract::<String>()
                .map_err(|_| errors::invalid("a lease's grant is text"))?
                .parse::<GrantId>()
                .map_err(errors::invalid)?,
        ),
        Err(_) => None,
    };
    Ok(Fence { token, grant })
}

fn json_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static JSON: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(JSON
        .get_or_try_init(py, || py.import("json").map(Bound::unbind))?
        .bind(py))
}

/// A Python value as JSON text, as `json.dumps` writes it (NaN refused:
/// it is not JSON).
pub fn to_json_text(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let kwargs = pyo3::types::PyDict::new(value.py());
    kwargs.set_item("allow_nan", false)?;
    json_module(value.py())?
        .call_method("dumps", (value,), Some(&kwargs))
        .map_err(|e| errors::invalid(format!("not JSON: {e}")))?
        .extract()
}

/// A Python value as JSON.
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    serde_json::from_str(&to_json_text(value)?).map_err(|e| errors::invalid(format!("not JSON: {e}")))
}

/// JSON as a Python value, as `json.loads` reads it.
pub fn from_json<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    from_json_text(py, &value.to_string())
}

pub fn from_json_text<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    json_module(py)?.call_method1("loads", (text,))
}
