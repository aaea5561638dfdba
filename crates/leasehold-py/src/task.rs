//! `lh.Task`: a claimed task. Its claim is kept by a [`ClaimKeeper`];
//! `with task:` reports `done` when the block succeeds, `fail` with the
//! traceback when it raises, and hands the claim back on
//! `KeyboardInterrupt`/`SystemExit`. A claim is reported once (see
//! [`crate::queue`] for the whole contract); its state lock is held for a
//! few instructions only, never across a store call.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold::files::Fence;
use leasehold::{Claim, ClaimKeeper, ClaimLost, ClaimReport, Retry};
use pyo3::prelude::*;
use pyo3::sync::MutexExt as _;
use pyo3::types::{PyString, PyType};

use crate::convert;
use crate::errors::{self};
use crate::fork::{Forked, Local};
use crate::hold::{forked_error, lost_error, told_lost};

#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) store: Arc<leasehold::Store>,
    pub(crate) keeper: ClaimKeeper,
}

#[derive(Debug)]
enum State {
    Claimed(Local<Hold>),
    /// Being reported by some thread (`done`, `fail`, `release`).
    Busy(&'static str),
    /// Reported: `done`, `retrying`, `dead`, `released`, or `lost`.
    Ended(&'static str),
}

/// Why a report cannot be made.
enum Refused {
    Forked(Forked),
    Invalid(String),
}

/// The call that makes `report`, as a refusal names it.
fn call_of(report: &ClaimReport) -> &'static str {
    match report {
        ClaimReport::Done(_) => "done()",
        ClaimReport::Fail(..) => "fail()",
        ClaimReport::HandBack => "release()",
    }
}

#[derive(Debug)]
#[pyclass(frozen, module = "pyleasehold")]
pub struct Task {
    claim: Claim,
    payload: Py<PyAny>,
    on_lost: Option<Py<PyAny>>,
    state: Mutex<State>,
}

impl Task {
    pub(crate) fn new(py: Python<'_>, claim: Claim, hold: Hold, on_lost: Option<Py<PyAny>>) -> PyResult<Self> {
        Ok(Self {
            payload: convert::from_json(py, &claim.payload)?.unbind(),
            claim,
            on_lost,
            state: Mutex::new(State::Claimed(Local::new(hold))),
        })
    }

    /// The state, locked without holding the GIL while waiting for it.
    fn state(&self, py: Python<'_>) -> MutexGuard<'_, State> {
        self.state.lock_py_attached(py).unwrap_or_else(PoisonError::into_inner)
    }

    /// `fence=task`: the claim's token — refused in a forked child, whose
    /// parent holds the claim.
    pub fn fence(&self, py: Python<'_>) -> PyResult<Fence> {
        if let State::Claimed(local) = &*self.state(py)
            && let Err(forked) = local.get()
        {
            return Err(forked_error(forked, &self.what()));
        }
        Ok(Fence::from(self.claim.token))
    }

    fn what(&self) -> String {
        leasehold::described_claim(&self.claim)
    }

    /// End the claim as `report` says; the outcome's word. A claim
    /// already reported (or being reported) is refused at once, saying how.
    fn report(&self, py: Python<'_>, report: ClaimReport) -> PyResult<&'static str> {
        let reporting = self.begin_report(py, report)?;
        let outcome = crate::exiting::detach(py, reporting);
        self.end_report(py, outcome)
    }

    /// `Claimed` → `Busy`, or why not: the blocking report to make (call
    /// it without the GIL), for `end_report`.
    fn begin_report(
        &self,
        py: Python<'_>,
        report: ClaimReport,
    ) -> PyResult<impl FnOnce() -> Reported + Send + 'static> {
        // Worded under the lock, raised after it (an exception runs Python).
        let taken = {
            let mut state = self.state(py);
            match &*state {
                State::Claimed(local) if local.is_mine() => {
                    match std::mem::replace(&mut *state, State::Busy(call_of(&report))) {
                        State::Claimed(local) => local.take().map_err(Refused::Forked),
                        _ => unreachable!("matched above"),
                    }
                }
                State::Claimed(local) => Err(Refused::Forked(Forked { owner: local.owner() })),
                State::Busy(call) => Err(Refused::Invalid(format!(
                    "{} is being reported ({call}) by another thread: this {} was not recorded — a claim is reported once",
                    self.what(),
                    call_of(&report)
                ))),
                State::Ended(how) => Err(Refused::Invalid(format!(
                    "{} was already reported ({how}): this {} was not recorded — a claim is reported once",
                    self.what(),
                    call_of(&report)
                ))),
            }
        };
        let Hold { store, keeper } = match taken {
            Ok(hold) => hold,
            Err(Refused::Forked(forked)) => return Err(forked_error(forked, &self.what())),
            Err(Refused::Invalid(message)) => return Err(errors::invalid(message)),
        };
        let task = self.claim.task_ref();
        Ok(move || leasehold::report_kept(&store, &task, keeper, report))
    }

    /// `Busy` → `Ended`, with what the store said.
    fn end_report(&self, py: Python<'_>, outcome: Reported) -> PyResult<&'static str> {
        let (ended, result) = match outcome {
            Ok(Ok(how)) => (how, Ok(how)),
            Ok(Err(loss)) => ("lost", Err(lost_error(&self.what(), &loss))),
            Err(e) => ("lost", Err(errors::library(&e))),
        };
        *self.state(py) = State::Ended(ended);
        result
    }

    /// How `__exit__` and `__aexit__` report: `None` when the block
    /// reported itself; else the report and whether the exception (if
    /// any) is to be suppressed once the report is recorded.
    fn exit_report(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(ClaimReport, bool)>> {
        if matches!(*self.state(py), State::Ended(_)) {
            // Reported inside the block: nothing more to say.
            return Ok(None);
        }
        let Some(exc_type) = exc_type.filter(|t| !t.is_none()) else {
            return Ok(Some((ClaimReport::Done(None), false)));
        };
        if !exc_type
            .cast::<PyType>()?
            .is_subclass_of::<pyo3::exceptions::PyException>()?
        {
            // Ours or not, the exception goes on up.
            return Ok(Some((ClaimReport::HandBack, false)));
        }
        let lines = py
            .import("traceback")?
            .call_method1("format_exception", (exc_type, exc, tb))?;
        let text: String = PyString::new(py, "").call_method1("join", (lines,))?.extract()?;
        Ok(Some((ClaimReport::Fail(text, Retry::Backoff), true)))
    }
}

/// What a report got: the outcome's word, or the loss; or the store's error.
type Reported = leasehold::Result<Result<&'static str, leasehold::Loss<ClaimLost>>>;

#[pymethods]
impl Task {
    #[getter]
    fn id(&self) -> String {
        self.claim.id.to_string()
    }

    #[getter]
    fn queue(&self) -> String {
        self.claim.queue.to_string()
    }

    #[getter]
    fn payload(&self, py: Python<'_>) -> Py<PyAny> {
        self.payload.clone_ref(py)
    }

    /// This claim's attempt (1 for the first).
    #[getter]
    fn attempt(&self) -> u32 {
        self.claim.attempt
    }

    #[getter]
    fn max_attempts(&self) -> u32 {
        self.claim.max_attempts
    }

    /// The claim's token: larger than every earlier claim's of this task.
    #[getter]
    fn token(&self) -> u64 {
        self.claim.token.0
    }

    /// Whether the claim is lost (a heartbeat refused, or its deadline
    /// passed), or was ended. True in a forked child.
    #[getter]
    fn lost(&self, py: Python<'_>) -> bool {
        match &*self.state(py) {
            State::Claimed(local) => local.get().map_or(true, |hold| hold.keeper.handle().is_lost()),
            State::Busy(_) => false,
            State::Ended(how) => *how == "lost",
        }
    }

    /// How the claim ended (``done``, ``retrying``, ``dead``, ``released``,
    /// ``lost``), or None while it is held.
    #[getter]
    fn outcome(&self, py: Python<'_>) -> Option<&'static str> {
        match &*self.state(py) {
            State::Ended(how) => Some(how),
            _ => None,
        }
    }

    /// Raise ``LeaseLost`` once the claim is lost, or has ended.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        let message = match &*self.state(py) {
            State::Claimed(local) => match local.get() {
                Ok(hold) => Ok(hold.keeper.handle()),
                Err(forked) => Err(forked.says(&self.what())),
            },
            State::Busy(_) => return Ok(()),
            State::Ended(how) => Err(format!("{} has ended ({how})", self.what())),
        };
        let handle = message.map_err(|message| errors::of_kind(leasehold::ErrorKind::Lost, message))?;
        // Without the GIL, as `Lease.check`.
        match crate::exiting::detach(py, || handle.loss()) {
            None => Ok(()),
            Some(loss) => Err(told_lost(py, self.on_lost.as_ref(), &self.what(), &loss)),
        }
    }

    /// Mark the task done, with ``result`` (any JSON value) recorded.
    #[pyo3(signature = (result=None))]
    fn done(&self, py: Python<'_>, result: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let result = result.filter(|r| !r.is_none()).map(convert::to_json).transpose()?;
        self.report(py, ClaimReport::Done(result)).map(drop)
    }

    /// Record a failed attempt, with ``error`` (its ``str()``) as the
    /// task's ``last_error``: retried with backoff (or after ``retry_in``, a
    /// duration), or never with ``retry=False``; dead once its attempts are
    /// used up. Returns ``"retrying"`` or ``"dead"``.
    #[pyo3(signature = (error=None, *, retry_in=None, retry=true))]
    fn fail(
        &self,
        py: Python<'_>,
        error: Option<&Bound<'_, PyAny>>,
        retry_in: Option<&Bound<'_, PyAny>>,
        retry: bool,
    ) -> PyResult<&'static str> {
        let error = match error.filter(|e| !e.is_none()) {
            Some(e) => e.str()?.to_cow()?.into_owned(),
            None => "failed".to_owned(),
        };
        let retry = match (retry, convert::opt_duration(retry_in, "retry_in")?) {
            (false, _) => Retry::Never,
            (true, Some(after)) => Retry::After(after),
            (true, None) => Retry::Backoff,
        };
        self.report(py, ClaimReport::Fail(error, retry))
    }

    /// Hand the claim back without charging the attempt.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.report(py, ClaimReport::HandBack).map(drop)
    }

    /// Refused (``InvalidInput``) for a task already reported: its block
    /// would run for a task no longer held.
    fn __enter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        let this = slf.get();
        if let State::Ended(how) = &*this.state(py) {
            return Err(errors::invalid(format!(
                "{} has already ended ({how}): a with block would run for a task this worker no longer holds; \
                 claim the next task instead",
                this.what()
            )));
        }
        Ok(slf)
    }

    /// `done` on success. An `Exception` is recorded with `fail` (its
    /// traceback as the error; retried with backoff) and then suppressed,
    /// so that a `for task in claim_iter(): with task:` loop goes on to the
    /// next task, as `leasehold work` does — unless the store refused the
    /// report (the claim was lost): then it goes on up. `KeyboardInterrupt`,
    /// `SystemExit` and the like hand the claim back (no attempt charged)
    /// and go on up.
    #[pyo3(signature = (exc_type, exc=None, tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        match self.exit_report(py, exc_type, exc, tb)? {
            None => Ok(false),
            Some((report @ ClaimReport::Done(_), _)) => self.report(py, report).map(|_| false),
            Some((report, suppress)) => {
                let recorded = self.report(py, report).is_ok();
                Ok(suppress && recorded)
            }
        }
    }

    /// ``async with task:`` — as ``with task:``, the report made on the
    /// pool (`aio`), off the event loop.
    fn __aenter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let slf = Self::__enter__(slf, py)?;
        crate::aio::ready(py, slf.into_any())
    }

    #[pyo3(signature = (exc_type, exc=None, tb=None))]
    fn __aexit__<'py>(
        slf: Py<Self>,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyAny>>,
        exc: Option<&Bound<'py, PyAny>>,
        tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let Some((report, suppress)) = this.exit_report(py, exc_type, exc, tb)? else {
            return crate::aio::ready(py, false.into_pyobject(py)?.to_owned().into_any().unbind());
        };
        let done = matches!(report, ClaimReport::Done(_));
        let reporting = this.begin_report(py, report)?;
        crate::aio::call(
            py,
            reporting,
            move |py, outcome, _| {
                let reported = slf.get().end_report(py, outcome);
                let suppressed = if done {
                    reported.map(|_| false)?
                } else {
                    suppress && reported.is_ok()
                };
                Ok(suppressed.into_pyobject(py)?.to_owned().into_any().unbind())
            },
            drop,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<lh.Task {}/{} attempt {} token {}>",
            self.claim.queue, self.claim.id, self.claim.attempt, self.claim.token
        )
    }
}

impl Drop for Task {
    /// A claim dropped unreported is handed back, as a shut-down worker's is.
    fn drop(&mut self) {
        let state = std::mem::replace(
            self.state.get_mut().unwrap_or_else(PoisonError::into_inner),
            State::Ended("released"),
        );
        let State::Claimed(local) = state else { return };
        let task = self.claim.task_ref();
        local.finish_detached(move |Hold { store, keeper }| {
            let _ = leasehold::report_kept(&store, &task, keeper, ClaimReport::HandBack);
        });
    }
}
