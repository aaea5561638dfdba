//! Python values to the library's types and back: durations, waits,
//! names, paths, commands, JSON, fencing tokens, times and the documents
//! of `leasehold::json`. Parsing and limits stay the library's
//! (`leasehold::parse_duration`, `leasehold::limits`); this only says
//! which Python values mean what.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

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

pub use leasehold::Wait;

/// `wait=`: `None` or `False` no wait; `True` forever; else a duration.
pub fn wait(value: Option<&Bound<'_, PyAny>>) -> PyResult<Wait> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Wait::No);
    };
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(if flag.is_true() { Wait::Forever } else { Wait::No });
    }
    Ok(Wait::Upto(duration(value, "wait")?))
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

const NOT_A_FENCE: &str = "fence must be a lease, a task or a fencing token (an int)";

/// A fencing token given as an int (not a bool: `fence=True` is a
/// mistake, not token 1).
fn int_token(value: &Bound<'_, PyAny>) -> PyResult<Token> {
    if value.is_instance_of::<PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{NOT_A_FENCE}, not {}",
            value.repr()?
        )));
    }
    match value.extract::<u64>() {
        Ok(token) => Ok(Token(token)),
        Err(_) => Err(errors::invalid(format!(
            "a fencing token is a positive integer, not {}",
            value.repr()?
        ))),
    }
}

/// A leasehold exception raised while reading a fence's fields (a lease in
/// a forked child, one never acquired) says what is wrong; anything else
/// means the value is not a fence.
fn fence_field<'py>(value: &Bound<'py, PyAny>, field: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    match value.getattr(field) {
        Ok(v) => Ok(Some(v)),
        Err(e) if errors::is_ours(value.py(), &e) => Err(e),
        Err(_) => Ok(None),
    }
}

/// The fence of a `fence=` argument: a lease's token and grant (in a
/// forked child, the fork's refusal); a task's token; an int with the
/// grant of the `leasehold run` this process runs under when the int is
/// its token (`LEASEHOLD_TOKEN`/`LEASEHOLD_GRANT`); or anything else with
/// a `token` (and a `grant`).
pub fn fence(value: &Bound<'_, PyAny>) -> PyResult<Fence> {
    if let Ok(lease) = value.cast::<crate::lease::Lease>() {
        return lease.get().fence(value.py());
    }
    if let Ok(task) = value.cast::<crate::task::Task>() {
        return task.get().fence(value.py());
    }
    if value.is_instance_of::<PyInt>() {
        return Fence::with_grant_from_env(int_token(value)?).map_err(|e| errors::invalid(e.to_string()));
    }
    let Some(token) = fence_field(value, "token")? else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{NOT_A_FENCE}, not {}",
            value.get_type().name()?
        )));
    };
    let token = int_token(&token)?;
    let grant = match fence_field(value, "grant")? {
        Some(grant) => Some(
            grant
                .extract::<String>()
                .map_err(|_| errors::invalid("a lease's grant is text"))?
                .parse::<GrantId>()
                .map_err(errors::invalid)?,
        ),
        None => None,
    };
    Ok(Fence { token, grant })
}

/// A command as `store.run` takes it: a list (or tuple, or any sequence)
/// of arguments, each a str or a path. A single str is refused rather
/// than split: `"echo hi"` is not a program name, and guessing how a
/// shell would split it is how injections happen.
pub fn argv(value: &Bound<'_, PyAny>) -> PyResult<Vec<OsString>> {
    if value.is_instance_of::<PyString>() || value.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "argv must be a list of arguments, not a single {}: write [\"echo\", \"hi\"] (or \
             [\"sh\", \"-c\", \"echo hi\"] for a shell line), not {}",
            value.get_type().name()?,
            value.repr()?
        )));
    }
    let items = value.try_iter().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "argv must be a list of arguments (str), not {}",
            value
                .get_type()
                .name()
                .map_or_else(|_| "that".into(), |n| n.to_string())
        ))
    })?;
    let os = value.py().import("os")?;
    items
        .enumerate()
        .map(|(i, item)| {
            let item = item?;
            if item.is_instance_of::<PyString>() || item.hasattr("__fspath__")? {
                os.call_method1("fsencode", (item,))?
                    .extract::<Vec<u8>>()
                    .map(std::os::unix::ffi::OsStringExt::from_vec)
            } else {
                Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "argv[{i}] must be a str (or a path), not {}: {}",
                    item.get_type().name()?,
                    item.repr()?
                )))
            }
        })
        .collect()
}

/// A time as an aware `datetime.datetime` in UTC.
pub fn datetime(py: Python<'_>, t: SystemTime) -> PyResult<Bound<'_, PyAny>> {
    let seconds = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    };
    py.import("pyleasehold._documents")?
        .call_method1("from_epoch", (seconds,))
}

/// A document of `leasehold::json` (docs/JSON.md) as Python values: times
/// as `datetime`, durations as `timedelta` (`leasehold/_documents.py`).
pub fn document<'py>(py: Python<'py>, document: &impl leasehold::json::Document) -> PyResult<Bound<'py, PyAny>> {
    py.import("pyleasehold._documents")?
        .call_method1("document", (from_json(py, &leasehold::json::value(document))?,))
}

/// A list of documents, as [`document`] converts each.
pub fn documents<'py>(
    py: Python<'py>,
    documents: &[impl leasehold::json::Document],
) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    let items = documents
        .iter()
        .map(|d| document(py, d))
        .collect::<PyResult<Vec<_>>>()?;
    pyo3::types::PyList::new(py, items)
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
        .map_err(|e| {
            // A value of a type JSON has no form for is a TypeError, as
            // json.dumps raises it; NaN and cycles are bad values.
            if e.is_instance_of::<pyo3::exceptions::PyTypeError>(value.py()) {
                pyo3::exceptions::PyTypeError::new_err(format!("not JSON: {e}"))
            } else {
                errors::invalid(format!("not JSON: {e}"))
            }
        })?
        .extract()
}

/// The first integer in `value` (through lists, tuples and dict values)
/// that does not fit in 64 bits, which the store's JSON (queue payloads
/// and results) would turn into a float.
fn wide_int(value: &Bound<'_, PyAny>, depth: usize) -> Option<String> {
    use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyTuple};
    if depth > 200 {
        return None;
    }
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        let fits = value.extract::<i64>().is_ok() || value.extract::<u64>().is_ok();
        return (!fits).then(|| value.str().map(|s| s.to_string()).unwrap_or_default());
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        return dict.values().iter().find_map(|v| wide_int(&v, depth + 1));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return list.iter().find_map(|v| wide_int(&v, depth + 1));
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return tuple.iter().find_map(|v| wide_int(&v, depth + 1));
    }
    None
}

/// A Python value as JSON.
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text = to_json_text(value)?;
    if let Some(int) = wide_int(value, 0) {
        return Err(errors::invalid(format!(
            "the integer {int} does not fit in 64 bits, and the store's JSON would keep it as a float \
             (losing digits): pass it as a string"
        )));
    }
    serde_json::from_str(&text).map_err(|e| errors::invalid(format!("not JSON: {e}")))
}

/// JSON as a Python value, as `json.loads` reads it.
pub fn from_json<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    from_json_text(py, &value.to_string())
}

pub fn from_json_text<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    json_module(py)?.call_method1("loads", (text,))
}
