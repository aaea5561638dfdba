//! The library's events (`leasehold::telemetry`, through `tracing`) in
//! Python's `logging`, logger `pyleasehold`.
//!
//! Events happen on any thread — a keeper's, a worker's, a Python thread
//! inside a blocking call — and none of them may take the GIL for it: a
//! thread holding one of our locks while it waits for the GIL deadlocks
//! against a Python thread holding the GIL while it waits for that lock,
//! and a thread of ours that takes the GIL while the interpreter exits
//! crashes the process (`exiting.rs`). So an event is queued here (the
//! queue's lock is held for a push or a take, never across anything
//! else) and one byte on a pipe wakes
//! a Python daemon thread (`_logs.py`) blocked in `os.read` — Python's own
//! call, which ends safely at exit — that takes the queue and logs each
//! event the logger is enabled for, with its fields as the record's
//! `leasehold` attribute.
//!
//! Levels queued: info and above, or what `LEASEHOLD_LOG` names (debug,
//! trace). The queue keeps the latest [`QUEUED`]; beyond, the oldest go.
//! A child made by `os.fork()` starts a queue and a reader of its own
//! (`log_pipe`), unless the parent's queue was locked at the fork: that
//! copy stays locked for good, so the child logs nothing.

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::SubscriberExt as _;

/// Events waiting for the Python thread, at most.
const QUEUED: usize = 10_000;

/// A field's value, as `tracing` gives it.
enum Value {
    Str(String),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
}

/// One event: its `logging` level, message and fields.
struct Event {
    level: u8,
    message: String,
    fields: Vec<(&'static str, Value)>,
}

struct Queue {
    events: VecDeque<Event>,
    /// Written to when the queue goes from empty to not: wakes the reader.
    wake: Option<std::io::PipeWriter>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    events: VecDeque::new(),
    wake: None,
});

/// The lowest level that wakes the reader: the logger's effective level
/// as the reader last saw it. An event below it waits in the queue for
/// the reader's next look (at most a second later, when the logger's
/// level may have come down), so a program that does not log at info
/// pays no wake-up for each grant.
static WAKE_AT: AtomicU8 = AtomicU8::new(0);

/// A forked child whose copy of the queue was locked: it logs nothing.
static DISABLED: AtomicBool = AtomicBool::new(false);

fn queue() -> Option<MutexGuard<'static, Queue>> {
    (!DISABLED.load(Ordering::Relaxed)).then(|| QUEUE.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Python's `logging` level of a `tracing` level.
fn python_level(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::TRACE => 5,
        tracing::Level::DEBUG => 10,
        tracing::Level::INFO => 20,
        tracing::Level::WARN => 30,
        tracing::Level::ERROR => 40,
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(&'static str, Value)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.push((field.name(), Value::Str(text)));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.message);
        } else {
            self.fields.push((field.name(), Value::Str(value.to_owned())));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.push((field.name(), Value::I64(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.push((field.name(), Value::U64(value)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.push((field.name(), Value::F64(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.push((field.name(), Value::Bool(value)));
    }
}

struct ToPython;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ToPython {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(mut queue) = queue() else { return };
        if queue.events.len() >= QUEUED {
            queue.events.pop_front();
        }
        let was_empty = queue.events.is_empty();
        queue.events.push_back(Event {
            level: python_level(*event.metadata().level()),
            message: fields.message,
            fields: fields.fields,
        });
        let level = python_level(*event.metadata().level());
        if was_empty
            && level >= WAKE_AT.load(Ordering::Relaxed)
            && let Some(wake) = &mut queue.wake
        {
            // At most a byte or two are ever unread (one per time the
            // reader emptied the queue), so this never blocks.
            let _ = wake.write_all(b"x");
        }
    }
}

/// Install the subscriber (once; not where a program embedding Python
/// installed its own).
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let level = std::env::var("LEASEHOLD_LOG")
            .ok()
            .and_then(|l| l.parse::<tracing::Level>().ok())
            .map_or(tracing::Level::INFO, |l| l.max(tracing::Level::INFO));
        let subscriber = tracing_subscriber::registry()
            .with(ToPython)
            .with(tracing_subscriber::filter::LevelFilter::from_level(level));
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// A new pipe for the reader: its read end's descriptor, now the
/// caller's to close. Events queued before (a forked child's copy of its
/// parent's) are dropped.
#[pyfunction]
pub fn log_pipe() -> PyResult<i32> {
    use std::os::fd::IntoRawFd as _;
    let (read, write) = std::io::pipe()?;
    // At import nothing else holds it; in a forked child a copy locked at
    // the fork is never unlocked.
    match QUEUE.try_lock() {
        Ok(mut queue) => {
            queue.events.clear();
            queue.wake = Some(write);
        }
        Err(std::sync::TryLockError::Poisoned(poisoned)) => {
            let mut queue = poisoned.into_inner();
            queue.events.clear();
            queue.wake = Some(write);
        }
        Err(std::sync::TryLockError::WouldBlock) => DISABLED.store(true, Ordering::Relaxed),
    }
    Ok(std::os::fd::OwnedFd::from(read).into_raw_fd())
}

/// The interpreter is exiting (`atexit`): close the pipe, so the reader
/// reads its end and returns before finalization begins — a thread that
/// takes the GIL during finalization is ended by `pthread_exit`
/// (`exiting.rs`). Events after this are not logged.
#[pyfunction]
pub fn log_close() {
    if let Some(mut queue) = queue() {
        queue.wake = None;
    }
}

/// The events queued at `level` or above, oldest first, as `(level,
/// message, fields)`; those below are dropped. `level` (the logger's
/// effective level) wakes the reader from now on.
#[pyfunction]
pub fn log_take(py: Python<'_>, level: u8) -> PyResult<Bound<'_, PyList>> {
    WAKE_AT.store(level, Ordering::Relaxed);
    let events = queue().map(|mut q| std::mem::take(&mut q.events)).unwrap_or_default();
    let out = PyList::empty(py);
    for event in events.into_iter().filter(|e| e.level >= level) {
        let fields = PyDict::new(py);
        for (key, value) in event.fields {
            match value {
                Value::Str(s) => fields.set_item(key, s)?,
                Value::I64(n) => fields.set_item(key, n)?,
                Value::U64(n) => fields.set_item(key, n)?,
                Value::F64(n) => fields.set_item(key, n)?,
                Value::Bool(b) => fields.set_item(key, b)?,
            }
        }
        out.append((event.level, event.message, fields))?;
    }
    Ok(out)
}
