//! Crash-safe state files: `lh.write_atomic`, `lh.write_json` and
//! `lh.update_json` over `leasehold::files` — the temp file, fsyncs,
//! rename and the sidecar `FILE.lock` are all the library's. Unfenced
//! writes take `FILE.lock` as `leasehold write` does, so a write never
//! lands between the read and the write of an `update_json`.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::{self, ThreadId};

use leasehold::files::{self, Fence, FencedFile, UpdateError, WriteOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::background::Background;
use crate::convert;
use crate::errors;
use crate::fork::LockSlot;

// Re-entry. A write or update takes `FILE.lock`; `flock` locks belong to
// the open file, so a second one from the thread that holds it — inside
// `update_json`'s function, or inside `with lh.lock("FILE.lock")` — waits
// for itself for ever. Such a call is refused at once: the locks this
// thread holds are noted here by the lock file's device and inode (another
// thread's lock is waited for: that thread lets go of it).

/// Who holds a noted lock, and whether it still does.
enum Holder {
    /// An `update_json` running its function (noted while it does).
    Update,
    /// An `lh.lock`, held while its slot holds it.
    Lock(Weak<LockSlot>),
}

/// A noted lock: its note's id, the lock file's (device, inode), the
/// thread holding it, and who.
type Entry = (u64, (u64, u64), ThreadId, Holder);

static HELD: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static NEXT: Mutex<u64> = Mutex::new(0);

fn held() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key_of(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// Note a lock this thread holds; forgotten when the guard drops.
struct Noted(u64);

fn note(key: (u64, u64), holder: Holder) -> Noted {
    let id = {
        let mut next = NEXT.lock().unwrap_or_else(PoisonError::into_inner);
        *next += 1;
        *next
    };
    let mut held = held();
    held.retain(|(_, _, _, h)| match h {
        Holder::Lock(slot) => slot.strong_count() > 0,
        Holder::Update => true,
    });
    held.push((id, key, thread::current().id(), holder));
    Noted(id)
}

impl Drop for Noted {
    fn drop(&mut self) {
        held().retain(|(id, ..)| *id != self.0);
    }
}

/// `lh.lock` (lock.rs): the lock `slot` holds was just taken by this thread.
pub fn note_lock(slot: &Arc<LockSlot>, file: &std::fs::File) {
    if let Ok(meta) = file.metadata() {
        // Forgotten when the slot is gone; not held once it is emptied.
        std::mem::forget(note(key_of(&meta), Holder::Lock(Arc::downgrade(slot))));
    }
}

/// `lh.lock` (lock.rs): the lock of `slot` was let go.
pub fn forget_lock(slot: &Arc<LockSlot>) {
    held()
        .retain(|(_, _, _, holder)| !matches!(holder, Holder::Lock(s) if std::ptr::eq(s.as_ptr(), Arc::as_ptr(slot))));
}

/// Refuse `what` on `path` when this thread holds `PATH.lock`.
fn refuse_reentry(what: &str, path: &Path) -> PyResult<()> {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    let Ok(meta) = std::fs::metadata(&lock) else {
        return Ok(());
    };
    let (key, me) = (key_of(&meta), thread::current().id());
    let how = held().iter().find_map(|(_, k, thread, holder)| {
        if *k != key || *thread != me {
            return None;
        }
        match holder {
            Holder::Update => Some("inside update_json's function on the same file"),
            Holder::Lock(slot) => slot
                .upgrade()
                .filter(|slot| slot.lock.try_lock().map_or(true, |held| held.is_some()))
                .map(|_| "inside lh.lock() of that lock file"),
        }
    });
    match how {
        None => Ok(()),
        Some(how) => Err(errors::invalid(format!(
            "{what}({}) {how} would wait for ever for {}, which this thread holds: return the new value from \
             update_json's function instead, or write after the lock is released",
            path.display(),
            std::path::Path::new(&lock).display()
        ))),
    }
}

fn options(mode: Option<u32>, json: bool) -> WriteOptions {
    WriteOptions {
        mode,
        json,
        ..WriteOptions::default()
    }
}

/// A `fence=` with the lease its token is of, recorded with it as the
/// CLI's `--fence-lease` records it: `TOKEN[ GRANT][ lease NAME]` in
/// `PATH.fence` (the record's format is the library's, `files::fence`).
struct Fenced {
    fence: Fence,
    /// A lease's own name; `fence_lease=`; or, for an int that is the
    /// token of the `leasehold run` this process runs under, its
    /// `LEASEHOLD_NAME` — as `leasehold write` finds it.
    lease: Option<String>,
    /// `fence_new_lease=True`: the file now belongs to `lease`, a record of
    /// another lease is replaced.
    new_lease: bool,
}

impl Fenced {
    fn file(&self, path: impl Into<PathBuf>) -> FencedFile {
        FencedFile::new(path).with_lease(self.lease.as_deref(), self.new_lease)
    }
}

fn fence(
    fence: Option<&Bound<'_, PyAny>>,
    fence_lease: Option<&str>,
    fence_new_lease: bool,
) -> PyResult<Option<Fenced>> {
    let Some(value) = fence.filter(|f| !f.is_none()) else {
        if fence_lease.is_some() || fence_new_lease {
            return Err(errors::invalid(
                "fence_lease= and fence_new_lease= name the lease of fence=; give fence= (a lease, a task or a token) too",
            ));
        }
        return Ok(None);
    };
    let named = fence_lease
        .map(|name| convert::lease_name(name).map(|n| n.to_string()))
        .transpose()?;
    let fence = convert::fence(value)?;
    let own = if let Ok(lease) = value.cast::<crate::lease::Lease>() {
        Some(lease.getattr("name")?.extract::<String>()?)
    } else if value.is_instance_of::<pyo3::types::PyInt>() && named.is_none() {
        files::lease_from_env(fence.token)
    } else {
        None
    };
    let lease = files::writer_lease(own, named).map_err(|e| {
        errors::invalid(format!(
            "fence= is a grant of lease {}, but fence_lease= names {}; leave fence_lease= out (a lease names itself)",
            leasehold::escape_hidden(&e.own),
            leasehold::escape_hidden(&e.named)
        ))
    })?;
    if fence_new_lease && lease.is_none() {
        return Err(errors::invalid(
            "fence_new_lease=True needs the lease's name: give fence= a lease, or fence_lease=NAME",
        ));
    }
    Ok(Some(Fenced {
        fence,
        lease,
        new_lease: fence_new_lease,
    }))
}

/// Where an unfenced write or a fenced one is, for a ^C while it waits.
const WAITING: u8 = 0;
const WRITING: u8 = 1;
const CANCELLED: u8 = 2;

/// The write did not happen: cancelled by ^C while waiting for the lock.
struct Cancelled;

/// Write `data` under `PATH.lock`, on a thread of its own while this one
/// waits for it with signals looked at: a ^C while the lock is held by
/// someone else cancels the write (nothing is written, the
/// `KeyboardInterrupt` goes on); a ^C once the write has begun lets it
/// finish and says so on the `KeyboardInterrupt` (a note).
fn write(
    py: Python<'_>,
    what: &str,
    path: PathBuf,
    data: Vec<u8>,
    fence: Option<Fenced>,
    options: &WriteOptions,
) -> PyResult<()> {
    refuse_reentry(what, &path)?;
    // The data is checked here (write_json makes JSON), not as an old
    // file's content: an update with `json` would refuse a damaged file.
    let options = WriteOptions {
        json: false,
        ..options.clone()
    };
    let state = Arc::new(AtomicU8::new(WAITING));
    let theirs = state.clone();
    let shown = path.display().to_string();
    let call = Background::spawn(move || {
        // Runs under the lock: the write goes ahead unless cancelled first.
        let filter =
            move |_: Option<&[u8]>| match theirs.compare_exchange(WAITING, WRITING, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => Ok(data),
                Err(_) => Err(Cancelled),
            };
        match fence {
            Some(fenced) => fenced.file(path).update(fenced.fence, &options, filter),
            None => files::update(&path, &options, filter),
        }
    });
    let outcome = match call.wait(py) {
        Ok(outcome) => outcome,
        Err(interrupted) => {
            if state
                .compare_exchange(WAITING, CANCELLED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                // Nothing is written: the filter refuses when the lock comes.
                call.give_up(py, drop);
                return Err(interrupted);
            }
            // Writing already, under the lock: a moment. Its outcome goes
            // on the interrupt, so the caller knows the file changed.
            let outcome = loop {
                if let Some(outcome) = call.wait_for(py, std::time::Duration::from_secs(1)) {
                    break outcome;
                }
            };
            let note = match outcome {
                Ok(()) => format!("{what}({shown}) had begun writing when interrupted, and wrote the file"),
                Err(UpdateError::File(e)) => {
                    let e = errors::file(&e);
                    format!("{what}({shown}) had begun writing when interrupted, and failed: {e}")
                }
                Err(UpdateError::Filter(Cancelled)) => format!("{what}({shown}) was interrupted; nothing was written"),
            };
            add_note(py, &interrupted, note);
            return Err(interrupted);
        }
    };
    match outcome {
        Ok(()) => Ok(()),
        Err(UpdateError::File(e)) => Err(errors::file(&e)),
        Err(UpdateError::Filter(Cancelled)) => Err(errors::invalid(format!("{what}({shown}) was cancelled"))),
    }
}

/// `e.add_note(note)` (Python 3.11+); before, the note goes on
/// `__notes__` all the same, where 3.11's tracebacks would show it.
fn add_note(py: Python<'_>, e: &PyErr, note: String) {
    let value = e.value(py);
    let added = if value.hasattr("add_note").unwrap_or(false) {
        value.call_method1("add_note", (note,)).map(drop)
    } else {
        value.setattr("__notes__", vec![note])
    };
    if let Err(failed) = added {
        failed.write_unraisable(py, Some(value));
    }
}

/// Replace the file at ``path`` with ``data`` (bytes, or str as UTF-8),
/// atomically and durably: a crash leaves the old or the new content.
///
/// ``fence``: a lease, a task or a token — refused with ``StaleToken`` if a
/// newer token has written (or, for a lease, another grant wrote the same
/// token); the token is kept in ``PATH.fence`` with the lease it is of (a
/// lease's own name; ``fence_lease=NAME`` for a token; the name of the
/// ``leasehold run`` whose ``LEASEHOLD_TOKEN`` it is), and a token of another
/// lease than the record's is refused (``StaleToken``) unless
/// ``fence_new_lease=True`` says the file now belongs to this lease.
/// ``mode``: the file's permission bits (e.g. ``0o600``; default: the old
/// file's, else 0o644 less the umask).
#[pyfunction]
#[pyo3(signature = (path, data, *, fence=None, mode=None, fence_lease=None, fence_new_lease=false))]
pub fn write_atomic(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    fence: Option<&Bound<'_, PyAny>>,
    mode: Option<u32>,
    fence_lease: Option<&str>,
    fence_new_lease: bool,
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
        "write_atomic",
        convert::path(path)?,
        data,
        self::fence(fence, fence_lease, fence_new_lease)?,
        &options(mode, false),
    )
}

/// ``write_atomic`` of ``value`` as JSON at ``path``; ``fence``,
/// ``fence_lease``, ``fence_new_lease`` and ``mode`` as for ``write_atomic``.
#[pyfunction]
#[pyo3(signature = (path, value, *, fence=None, mode=None, fence_lease=None, fence_new_lease=false))]
pub fn write_json(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    fence: Option<&Bound<'_, PyAny>>,
    mode: Option<u32>,
    fence_lease: Option<&str>,
    fence_new_lease: bool,
) -> PyResult<()> {
    let mut text = convert::to_json_text(value)?;
    text.push('\n');
    write(
        py,
        "write_json",
        convert::path(path)?,
        text.into_bytes(),
        self::fence(fence, fence_lease, fence_new_lease)?,
        &options(mode, true),
    )
}

/// Read-modify-write of a JSON file under its lock: `f` gets the current
/// value (`default` when there is no file) and returns the new one, which
/// replaces the file. Concurrent updates never lose one another's change;
/// if `f` raises, the file is unchanged and the exception goes on. With
/// ``fence=``, a stale token is refused before `f` reads. Returns the new
/// value. ``path``: the JSON file; ``mode``, ``fence_lease`` and
/// ``fence_new_lease``: as for ``write_atomic``.
#[pyfunction]
#[pyo3(signature = (path, f, *, default=None, fence=None, mode=None, fence_lease=None, fence_new_lease=false))]
#[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
pub fn update_json<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    f: Py<PyAny>,
    default: Option<&Bound<'py, PyAny>>,
    fence: Option<&Bound<'py, PyAny>>,
    mode: Option<u32>,
    fence_lease: Option<&str>,
    fence_new_lease: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let path = convert::path(path)?;
    refuse_reentry("update_json", &path)?;
    let token = self::fence(fence, fence_lease, fence_new_lease)?;
    let options = options(mode, true);
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    // The default is copied through JSON, so `f` may change what it gets.
    let default = default.map(convert::to_json_text).transpose()?;
    let written = crate::exiting::detach(py, move || {
        let mut written = String::new();
        // Runs under the lock, without the GIL until it calls `f`.
        let filter = |old: Option<&[u8]>| -> Result<Vec<u8>, PyErr> {
            let exiting = || pyo3::exceptions::PyRuntimeError::new_err("the interpreter is exiting");
            // Held by this thread while `f` runs: a write of the same file
            // inside it is refused, not waited for.
            let _noted = std::fs::metadata(&lock)
                .ok()
                .map(|meta| note(key_of(&meta), Holder::Update));
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
            Some(fenced) => fenced.file(&path).update(fenced.fence, &options, filter),
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
