//! What a lease and a task claim share in Python: the options a grant or
//! claim is kept with ([`HoldOptions`]), and how its loss reaches Python —
//! the `LeaseLost` it raises, the `on_lost` callable run on the keeper's
//! thread, or the interrupt raised in the main thread
//! (`pyleasehold/_interrupt.py`), withdrawn when the same loss is raised
//! there first ([`told_lost`]).

use std::time::Duration;

use leasehold::{Keeper, KeeperOptions, Loss};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::convert;
use crate::errors;
use crate::fork::Forked;

/// The TTL when none is given: the library's default, as the CLI's.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// How a lease (or a task claim) is kept: the keeper's options and what
/// to do on loss.
#[derive(Debug)]
pub struct HoldOptions {
    pub keep: KeeperOptions,
    /// The grant's or claim's owner label, if one was given.
    pub owner: Option<String>,
    /// The margin, when one was given (else a tenth of the TTL, whatever
    /// the TTL becomes through `extend`).
    pub margin: Option<Duration>,
    pub on_lost: Option<Py<PyAny>>,
}

impl HoldOptions {
    /// `ttl`, `heartbeat` and `margin` as the keeper takes them (defaults:
    /// [`KeeperOptions::new`]); `on_lost` a callable, `"interrupt"` or None.
    pub fn from_py(
        ttl: Option<&Bound<'_, PyAny>>,
        owner: Option<String>,
        heartbeat: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        on_lost: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let ttl = convert::opt_duration(ttl, "ttl")?.unwrap_or(DEFAULT_TTL);
        let heartbeat = convert::opt_duration(heartbeat, "heartbeat")?;
        let margin = convert::opt_duration(margin, "margin")?;
        let keep = keeper_options(ttl, heartbeat, margin)?;
        Ok(Self {
            keep,
            owner,
            margin,
            on_lost: on_lost.filter(|v| !v.is_none()).map(on_lost_handler).transpose()?,
        })
    }
}

/// The keeper's options for `ttl`, refused (`InvalidInput`, naming the
/// values) when they cannot keep a grant.
pub(crate) fn keeper_options(
    ttl: Duration,
    heartbeat: Option<Duration>,
    margin: Option<Duration>,
) -> PyResult<KeeperOptions> {
    KeeperOptions::checked(ttl, heartbeat, margin, &leasehold::spelling::Keywords).map_err(errors::invalid)
}

/// `on_lost`: a callable, or `"interrupt"` (whose callable
/// `pyleasehold._interrupt.arm()` returns, in the main thread).
pub fn on_lost_handler(value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if let Ok(text) = value.cast::<PyString>() {
        if text.to_cow()? == "interrupt" {
            let py = value.py();
            return Ok(py.import("pyleasehold._interrupt")?.call_method0("arm")?.unbind());
        }
        return Err(errors::invalid(format!(
            "on_lost must be a callable, \"interrupt\" or None, not {:?}",
            text.to_cow()?
        )));
    }
    if !value.is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "on_lost must be a callable, \"interrupt\" or None",
        ));
    }
    Ok(value.clone().unbind())
}

/// The `LeaseLost` of a lost hold. `what` names it: "lease NAME (token T)".
pub fn lost_error<L: std::fmt::Display>(what: &str, loss: &Loss<L>) -> PyErr {
    errors::of_kind(leasehold::ErrorKind::Lost, loss.told(what))
}

/// The `LeaseLost` of a use, in a forked child, of its parent's `what`.
pub fn forked_error(forked: Forked, what: &str) -> PyErr {
    errors::of_kind(leasehold::ErrorKind::Lost, forked.says(what))
}

/// Push a keeper's loss to `on_lost`, on the keeper's thread (which takes
/// the GIL for it). What the callable raises is reported as unraisable:
/// there is nobody to raise it to.
pub fn notify<L: leasehold::Refusal>(py: Python<'_>, keeper: &Keeper<L>, what: String, on_lost: Option<&Py<PyAny>>) {
    let Some(on_lost) = on_lost else { return };
    let on_lost = on_lost.clone_ref(py);
    keeper.on_loss(loss_callback(what, on_lost));
}

/// What a keeper calls on loss to call `on_lost` with the `LeaseLost` of
/// `what` (taking the GIL) — not once the interpreter exits (`exiting`).
pub fn loss_callback<L: std::fmt::Display>(what: String, on_lost: Py<PyAny>) -> impl FnOnce(Loss<L>) + Send + 'static {
    move |loss| {
        crate::exiting::attach(|py| {
            let exc = lost_error(&what, &loss);
            // Its key, by which a raise of the same loss in the main thread
            // withdraws it from the interrupt (`told_lost`).
            let keyed = exc.value(py).setattr(INTERRUPT_KEY, &what);
            if let Err(e) = keyed.and_then(|()| on_lost.call1(py, (exc.value(py),))) {
                e.write_unraisable(py, Some(on_lost.bind(py)));
            }
        });
    }
}

/// The attribute of a queued `LeaseLost` naming its loss
/// (`pyleasehold._interrupt.KEY`).
const INTERRUPT_KEY: &str = "_leasehold_lost";

/// The `LeaseLost` of `what`, about to be raised in this thread. With
/// `on_lost="interrupt"` the keeper has queued the same loss for the main
/// thread: when this is the main thread, that one is withdrawn, so the
/// loss is not raised again in the handler of this one.
pub fn told_lost<L: std::fmt::Display>(
    py: Python<'_>,
    on_lost: Option<&Py<PyAny>>,
    what: &str,
    loss: &Loss<L>,
) -> PyErr {
    let withdrawn = || -> PyResult<()> {
        let Some(on_lost) = on_lost else { return Ok(()) };
        let interrupt = py.import("pyleasehold._interrupt")?;
        if on_lost.bind(py).is(&interrupt.getattr("_deliver")?) {
            interrupt.call_method1("withdraw", (what,))?;
        }
        Ok(())
    };
    let err = lost_error(what, loss);
    if let Err(e) = withdrawn() {
        e.write_unraisable(py, None);
    }
    err
}
