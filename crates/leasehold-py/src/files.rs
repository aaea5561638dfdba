//! Crash-safe state files: `lh.write_atomic`, `lh.write_json` and
//! `lh.update_json` over `leasehold::files` — the temp file, fsyncs,
//! rename and the sidecar `FILE.lock` are all the library's. Unfenced
//! writes take `FILE.lock` as `leasehold write` does, so a write never
//! lands between the read and the write of an `update_json`.

use std::path::PathBuf;

use leasehold::files::{self, Fence, FencedFile, UpdateError, WriteOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::convert;
use crate::errors::{self, OrRaise as _};

fn options(mode: Option<u32>, json: bool) -> WriteOptions {
    WriteOptions { mode, json }
}

fn fence(fence: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Fence>> {
    fence.filter(|f| !f.is_none()).map(convert::fence).transpose()
}

fn write(py: Python<'_>, path: PathBuf, data: Vec<u8>, fence: Option<Fence>, options: &WriteOptions) -> PyResult<()> {
    let options = options.clone();
    crate::exiting::detach(py, move || match fence {
        Some(fence) => FencedFile::new(path).write(fence, &data, &options),
        None => files::write_locked(&path, &data, &options),
    })
    .or_raise()
}

/// Replace the file at ``path`` with ``data`` (bytes, or str as UTF-8),
/// atomically and durably: a crash leaves the old or the new content.
///
/// ``fence``: a lease, a task or a token — refused with ``StaleToken`` if a
/// newer token has written (or, for a lease, another grant wrote the same
/// token); the token is kept in ``PATH.fence``. ``mode``: the file's
/// permission bits (e.g. ``0o600``; default: the old file's, else 0o644
/// less the umask).
#[pyfunction]
#[pyo3(signature = (path, data, *, fence=None, mode=None))]
pub fn write_atomic(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    fence: Option<&Bound<'_, PyAny>>,
    mode: Option<u32>,
) -> PyResult<()> {
    let data = if let Ok(text) = data.cast::<PyString>() {
        text.to_cow()?.as_bytes().to_vec()
    } else if let Ok(bytes) = data.cast::<PyBytes>() {
        bytes.as_bytes().to_vec()
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "data must be bytes or str (for a JSON value use write_json)",
        ));
    };
    write(
        py,
        convert::path(path)?,
        data,
        self::fence(fence)?,
        &options(mode, false),
    )
}

/// ``write_atomic`` of ``value`` as JSON at ``path``; ``fence`` and ``mode``
/// as for ``write_atomic``.
#[pyfunction]
#[pyo3(signature = (path, value, *, fence=None, mode=None))]
pub fn write_json(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    fence: Option<&Bound<'_, PyAny>>,
    mode: Option<u32>,
) -> PyResult<()> {
    let mut text = convert::to_json_text(value)?;
    text.push('\n');
    write(
        py,
        convert::path(path)?,
        text.into_bytes(),
        self::fence(fence)?,
        &options(mode, true),
    )
}

/// Read-modify-write of a JSON file under its lock: `f` gets the current
/// value (`default` when there is no file) and returns the new one, which
/// replaces the file. Concurrent updates never lose one another's change;
/// if `f` raises, the file is unchanged and the exception goes on. With
/// ``fence=``, a stale token is refused before `f` reads. Returns the new
/// value. ``path``: the JSON file; ``mode``: as for ``write_atomic``.
#[pyfunction]
#[pyo3(signature = (path, f, *, default=None, fence=None, mode=None))]
pub fn update_json<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    f: Py<PyAny>,
    default: Option<&Bound<'py, PyAny>>,
    fence: Option<&Bound<'py, PyAny>>,
    mode: Option<u32>,
) -> PyResult<Bound<'py, PyAny>> {
    let path = convert::path(path)?;
    let token = self::fence(fence)?;
    let options = options(mode, true);
    // The default is copied through JSON, so `f` may change what it gets.
    let default = default.map(convert::to_json_text).transpose()?;
    let written = crate::exiting::detach(py, move || {
        let mut written = String::new();
        // Runs under the lock, without the GIL until it calls `f`.
        let filter = |old: Option<&[u8]>| -> Result<Vec<u8>, PyErr> {
            let exiting = || pyo3::exceptions::PyRuntimeError::new_err("the interpreter is exiting");
            crate::exiting::attach(|py| {
                let old = match (old, &default) {
                    (Some(old), _) => convert::from_json_text(py, &String::from_utf8_lossy(old))?,
                    (None, Some(default)) => convert::from_json_text(py, default)?,
                    (None, None) => py.None().into_bound(py),
                };
                let new = f.call1(py, (old,))?;
                written = convert::to_json_text(new.bind(py))?;
                Ok(format!("{written}\n").into_bytes())
            })
            // The interpreter exits: `f` is not called, the file is left
            // as it is, and this thread never returns to Python.
            .unwrap_or_else(|| Err(exiting()))
        };
        let outcome = match token {
            Some(token) => FencedFile::new(&path).update(token, &options, filter),
            None => files::update(&path, &options, filter),
        };
        outcome.map(|()| written)
    });
    match written {
        Ok(text) => convert::from_json_text(py, &text),
        Err(UpdateError::Filter(e)) => Err(e),
        Err(UpdateError::File(e)) => Err(errors::file(&e)),
    }
}
