//! The guard of `store.run` ships inside the package: the guard code is
//! the library's (`leasehold::supervise::guard`), compiled into this
//! extension module, and the guard program is this Python interpreter
//! running it — `python -I -S -c "<load pyleasehold._guard>" __guard ...`
//! (the guard forks the command's process itself, before the interpreter
//! could start a thread: nothing else is started). So a wheel needs
//! no second binary, works in any virtualenv or `--user` install, and the
//! guard always speaks the supervisor's protocol version. `$LEASEHOLD_GUARD`
//! still wins when set, as for every program using the library.
//!
//! `-I` keeps the guard from being steered by `PYTHON*` variables or the
//! current directory; `-S` skips `site` (the package's directory is put on
//! `sys.path` explicitly, so it is found wherever it was installed), which
//! also makes the guard start faster.

use std::ffi::OsString;

use leasehold::supervise::{GUARD_ENV, GuardProgram};
use pyo3::prelude::*;

use crate::errors::OrRaise as _;

/// The guard program for `store.run`.
pub fn program(py: Python<'_>) -> PyResult<GuardProgram> {
    if std::env::var_os(GUARD_ENV).is_some_and(|v| !v.is_empty()) {
        return GuardProgram::find().map_err(leasehold::Error::from).or_raise();
    }
    let sys = py.import("sys")?;
    let python: std::path::PathBuf = sys.getattr("executable")?.extract()?;
    // The directory that holds the `leasehold` package.
    let package: std::path::PathBuf = py.import("pyleasehold")?.getattr("__path__")?.get_item(0)?.extract()?;
    let root = package.parent().unwrap_or(&package).to_owned();
    let root = pyo3::types::PyString::new(py, &root.to_string_lossy()).repr()?;
    // `_pyleasehold_guard`: the package's import starts no thread (the
    // log reader) in the guard, which must start before any other thread.
    let code = format!(
        "import sys; sys._pyleasehold_guard = True; sys.path.insert(0, {root}); from pyleasehold._guard import main; main()"
    );
    let args: Vec<OsString> = vec!["-I".into(), "-S".into(), "-c".into(), code.into()];
    Ok(GuardProgram::new(python).with_args(args))
}

/// The guard's entry point, for `leasehold/_guard.py`: `args` are the
/// process's arguments after the leading ones (`__guard ...`). Returns
/// the exit code.
#[pyfunction]
pub fn guard_main(py: Python<'_>, args: Vec<OsString>) -> u8 {
    // The guard is the whole process: nothing in Python waits for it.
    crate::exiting::detach(py, move || leasehold::supervise::guard::main(&args).unwrap_or(2))
}
