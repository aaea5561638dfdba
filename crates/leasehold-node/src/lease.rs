//! `Lease`: a grant kept by the library's [`leasehold::Keeper`] —
//! heartbeats on the keeper's own threads — bound to this process as the
//! CLI's `--for-pid` grants are (if it dies, the next acquirer takes over
//! at once). Its loss is pushed to JavaScript through a weak thread-safe
//! function (it never keeps the process alive): index.js turns it into
//! `lease.lost`, `lease.signal` (aborted) and `lease.whenLost`.
//!
//! States: `Held` ─release→ `Busy` ─→ `Ended`, and `Held` ─renew→ `Busy` ─→
//! `Held`. The state lock is held for a few instructions, never across a
//! store call. A call made in the wrong state answers at once: a second
//! `release()` says it was released already (how, with which token); a
//! `release()` while a `renew()` is under way says so.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold::spelling::Options;
use leasehold::{
    AcquireOptions, Binding, Cancel, Grant, Held, Keeper, KeeperOptions, Kept, LeaseName, LossHandle, Mode, Refusal,
    Released, host,
};
use napi::bindgen_prelude::{Object, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Either, Env, Status};
use napi_derive::napi;

use crate::calls::on_thread;
use crate::convert::{self, Wait};
use crate::envs::{self, LetGo};
use crate::errors;
use crate::store::NativeStore;

/// JavaScript's `onLost(message)`: weak, so a held lease never keeps the
/// process alive by itself.
pub type OnLost = ThreadsafeFunction<String, Unknown<'static>, String, Status, false, true>;

/// Push `keeper`'s loss to `on_lost`, worded for `what` ("lease NAME
/// (token T)", "claim of task Q/ID (token T)").
pub fn push_loss<L: Refusal>(keeper: &Keeper<L>, what: String, on_lost: OnLost) {
    keeper.on_loss(move |loss| {
        on_lost.call(loss.told(&what), ThreadsafeFunctionCallMode::NonBlocking);
    });
}

/// `store.acquire(name, options)`'s options, as index.js passes them.
#[derive(Debug)]
#[napi(object)]
pub struct AcquireArgs {
    pub ttl: Option<Either<f64, String>>,
    pub wait: Option<Either<bool, Either<f64, String>>>,
    pub shared: Option<Either<bool, f64>>,
    pub owner: Option<String>,
    pub heartbeat: Option<Either<f64, String>>,
    pub margin: Option<Either<f64, String>>,
}

/// One holder of what a `Held` refused.
#[derive(Debug)]
#[napi(object)]
pub struct HolderFacts {
    pub owner: String,
    /// `None` for a file lock's holder.
    pub token: Option<f64>,
    pub mode: String,
    /// Milliseconds since the epoch when the store expires the grant
    /// unless renewed; `None` for a file lock's holder.
    pub expires_at: Option<f64>,
    /// The holder's pid, when the grant lives by its process.
    pub pid: Option<u32>,
}

/// Why an acquire did not get the name: index.js throws `Held` (or
/// `WaitTimeout`, after a wait with a limit) with these as properties.
#[derive(Debug)]
#[napi(object)]
pub struct HeldFacts {
    pub message: String,
    pub name: String,
    pub holders: Vec<HolderFacts>,
    pub waiters: u32,
    pub timed_out: bool,
}

/// Ends a wait from JavaScript (an `AbortSignal`'s abort): the wait
/// leaves the store's queue at its next poll.
#[derive(Debug)]
#[napi]
pub struct NativeCancel {
    pub(crate) cancel: Cancel,
}

impl NativeCancel {
    /// What the wait it ends looks at.
    pub fn handle(&self) -> Cancel {
        self.cancel.clone()
    }
}

impl NativeCancel {
    /// The library's cancel this sets.
    pub fn get(&self) -> Cancel {
        self.cancel.clone()
    }
}

#[napi]
impl NativeCancel {
    #[napi(constructor)]
    #[allow(clippy::new_without_default, reason = "a JavaScript constructor")]
    pub fn new() -> Self {
        Self { cancel: Cancel::new() }
    }

    #[napi]
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// The facts of `held`, worded as the library words them for `wait`.
pub fn held_facts(name: &LeaseName, held: &Held, mode: Mode, wait: Wait) -> napi::Result<HeldFacts> {
    let message = wait.refusal(held, name.as_str(), mode, &Options);
    let now = std::time::SystemTime::now();
    let holders = held
        .grants
        .iter()
        .map(|g| {
            Ok(HolderFacts {
                owner: g.owner.clone(),
                token: Some(convert::exact(g.token.0, "token")?),
                mode: g.mode.label().to_owned(),
                expires_at: Some(convert::epoch_ms(leasehold::later(now, g.expires_in))),
                pid: g.holder.bound.then_some(g.holder.pid),
            })
        })
        .collect::<napi::Result<Vec<_>>>()?;
    Ok(HeldFacts {
        message,
        name: name.to_string(),
        holders,
        waiters: held.waiters_ahead,
        timed_out: matches!(wait, Wait::Upto(_)),
    })
}

/// A held grant and its keeper.
#[derive(Debug)]
struct Hold {
    grant: Grant,
    keeper: Keeper,
}

#[derive(Debug)]
enum State {
    Held(Hold),
    /// Being released (`"released"`) or renewed (`"renewed"`); the grant,
    /// and its keeper's loss for `check()` meanwhile.
    Busy(&'static str, Grant, LossHandle),
    /// How the grant's hold ended: `None` released, else the message of
    /// the `LeaseLost` (or of the store's failure to release).
    Ended(Grant, Option<String>),
}

/// What a lease's calls share with the threads that run them.
#[derive(Debug)]
struct Shared {
    store: Arc<leasehold::Store>,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Release now (blocking), recording how it ended.
    fn release_blocking(&self, hold: Hold) -> Released {
        let Hold { grant, keeper } = hold;
        let released = leasehold::release_kept(&self.store, &grant, keeper);
        let ending = match &released {
            Released::Released => None,
            Released::Lost(message) => Some(message.clone()),
            Released::Failed(e) => Some(format!(
                "the store failed to release it: {}; it expires by its TTL",
                errors::library(e).reason
            )),
        };
        *self.state() = State::Ended(grant, ending);
        released
    }
}

impl LetGo for Shared {
    fn let_go(&self) {
        let taken = {
            let mut state = self.state();
            match &*state {
                State::Held(hold) => {
                    let grant = hold.grant.clone();
                    let handle = hold.keeper.handle();
                    match std::mem::replace(&mut *state, State::Busy("released", grant, handle)) {
                        State::Held(hold) => Some(hold),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        if let Some(hold) = taken {
            drop(self.release_blocking(hold));
        }
    }
}

/// The native half of `Lease` (index.js).
#[derive(Debug)]
#[napi]
pub struct NativeLease {
    name: LeaseName,
    ttl: std::time::Duration,
    shared: Arc<Shared>,
}

impl NativeLease {
    fn grant(&self) -> Grant {
        match &*self.shared.state() {
            State::Held(hold) => hold.grant.clone(),
            State::Busy(_, grant, _) | State::Ended(grant, _) => grant.clone(),
        }
    }

    /// Why a call that needs the grant held cannot be made now.
    fn not_held(state: &State, doing: &str) -> napi::Error {
        match state {
            State::Held(hold) => errors::invalid(format!("{} is held", leasehold::described(&hold.grant))),
            State::Busy(what, grant, _) => errors::invalid(format!(
                "{} is being {what}: {doing} it once that call has settled",
                leasehold::described(grant)
            )),
            State::Ended(grant, ending) => errors::invalid(format!(
                "{} was already released{}: there is nothing to {doing} (acquire it again for a new grant)",
                leasehold::described(grant),
                ending.as_ref().map(|m| format!(" ({m})")).unwrap_or_default()
            )),
        }
    }
}

#[napi]
impl NativeLease {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.to_string()
    }

    /// The fencing token: a number that only grows per name.
    #[napi(getter)]
    pub fn token(&self) -> napi::Result<f64> {
        convert::exact(self.grant().token.0, "token")
    }

    /// The grant's identity: 16 hex digits a fenced write records next to
    /// the token.
    #[napi(getter, js_name = "grant")]
    pub fn grant_id(&self) -> String {
        self.grant().id().to_string()
    }

    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.grant().owner
    }

    /// The TTL in ms.
    #[napi(getter)]
    pub fn ttl_ms(&self) -> f64 {
        self.ttl.as_secs_f64() * 1000.0
    }

    /// Whether the grant is lost (a renewal refused, or the holder-side
    /// deadline passed).
    #[napi(getter)]
    pub fn lost(&self) -> bool {
        match &*self.shared.state() {
            State::Held(hold) => hold.keeper.handle().is_lost(),
            State::Busy(_, _, handle) => handle.is_lost(),
            State::Ended(_, ending) => ending.is_some(),
        }
    }

    /// Whether this object holds the grant now (and it is not lost).
    #[napi(getter)]
    pub fn held(&self) -> bool {
        match &*self.shared.state() {
            State::Held(hold) => !hold.keeper.handle().is_lost(),
            State::Busy("renewed", _, handle) => !handle.is_lost(),
            _ => false,
        }
    }

    /// When the store could expire the grant were it not renewed again
    /// (ms since the epoch: the last renewal's send time + TTL, measured
    /// on this host's boot clock); `null` when not held.
    #[napi(getter)]
    pub fn expires_at(&self) -> Option<f64> {
        let state = self.shared.state();
        let State::Held(hold) = &*state else { return None };
        let until = hold.keeper.last_renewed().saturating_add(hold.keeper.options().ttl);
        let left = until.saturating_sub(host::boot_clock());
        Some(convert::epoch_ms(leasehold::later(std::time::SystemTime::now(), left)))
    }

    /// Throws `LeaseLost` once the grant is lost; `InvalidInput` when it
    /// is not held. The holder-side deadline is judged by the clock here
    /// too, so a process resumed from a pause is refused before its
    /// keeper's thread has run (then the keeper's verdict is awaited, at
    /// most a second — only in that case).
    #[napi]
    pub fn check(&self) -> napi::Result<()> {
        let (handle, grant) = {
            let state = self.shared.state();
            match &*state {
                State::Held(hold) => (hold.keeper.handle(), hold.grant.clone()),
                State::Busy("renewed", grant, handle) => (handle.clone(), grant.clone()),
                State::Ended(_, Some(message)) => return Err(errors::of_kind(leasehold::ErrorKind::Lost, message)),
                other => return Err(Self::not_held(other, "check")),
            }
        };
        match handle.loss() {
            None => Ok(()),
            Some(loss) => Err(errors::of_kind(
                leasehold::ErrorKind::Lost,
                loss.told(&leasehold::described(&grant)),
            )),
        }
    }

    /// Renew now, for `ttl` (ms or a duration string) when given — then
    /// kept renewing with it — else for the TTL it has. Rejects with
    /// `LeaseLost` when the store refused (the grant is gone), the store's
    /// error when it failed (the keeper goes on renewing on schedule).
    #[napi]
    pub fn renew<'env>(&self, env: &'env Env, ttl: Option<Either<f64, String>>) -> napi::Result<Object<'env>> {
        let new = match ttl {
            Some(ttl) => Some(
                KeeperOptions::checked(convert::duration(&ttl, "ttl")?, None, None, &Options)
                    .map_err(errors::invalid)?,
            ),
            None => None,
        };
        let mut hold = {
            let mut state = self.shared.state();
            let State::Held(hold) = &*state else {
                return Err(Self::not_held(&state, "renew"));
            };
            let busy = State::Busy("renewed", hold.grant.clone(), hold.keeper.handle());
            match std::mem::replace(&mut *state, busy) {
                State::Held(hold) => hold,
                _ => unreachable!("matched above"),
            }
        };
        let shared = self.shared.clone();
        on_thread(env, move || {
            let renewed = hold.keeper.renew_now(new);
            let what = leasehold::described(&hold.grant);
            *shared.state() = State::Held(hold);
            match renewed {
                Ok(None) => Ok(()),
                Ok(Some(loss)) => Err(errors::of_kind(leasehold::ErrorKind::Lost, loss.told(&what))),
                Err(e) => Err(errors::library(&e)),
            }
        })
    }

    /// Stop renewing and release. Rejects with `LeaseLost` if the grant
    /// was lost meanwhile (what was done under it may have overlapped a
    /// newer holder); a release of a lease not held is refused at once.
    /// `quiet`: a lease released already is fine (`await using`'s end).
    #[napi]
    pub fn release<'env>(&self, env: &'env Env, quiet: Option<bool>) -> napi::Result<Object<'env>> {
        let hold = {
            let mut state = self.shared.state();
            match &*state {
                State::Held(hold) => {
                    let busy = State::Busy("released", hold.grant.clone(), hold.keeper.handle());
                    match std::mem::replace(&mut *state, busy) {
                        State::Held(hold) => Some(hold),
                        _ => unreachable!("matched above"),
                    }
                }
                State::Ended(..) if quiet == Some(true) => None,
                other => return Err(Self::not_held(other, "release")),
            }
        };
        let shared = self.shared.clone();
        on_thread(env, move || {
            let Some(hold) = hold else { return Ok(()) };
            match shared.release_blocking(hold) {
                Released::Released => Ok(()),
                Released::Lost(message) => Err(errors::of_kind(leasehold::ErrorKind::Lost, message)),
                Released::Failed(e) => Err(errors::library(&e)),
            }
        })
    }
}

#[napi]
impl NativeStore {
    /// Acquire `name`: a promise of a `NativeLease`, or of the facts of
    /// who holds it. `cancel` ends a wait; `on_lost` is called with the
    /// `LeaseLost` message when the grant is lost.
    #[napi]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        name: String,
        args: AcquireArgs,
        cancel: &NativeCancel,
        on_lost: OnLost,
    ) -> napi::Result<Object<'env>> {
        let name = convert::lease_name(&name)?;
        let keep = convert::keep(args.ttl.as_ref(), args.heartbeat.as_ref(), args.margin.as_ref())?;
        let ttl = keep.ttl;
        let wait = convert::wait(args.wait.as_ref())?;
        let mode = convert::mode(args.shared.as_ref())?;
        let options = AcquireOptions {
            ttl,
            owner: args.owner,
            mode,
            binding: Binding::ThisProcess,
        };
        let opener = self.opener();
        // A Worker that ends while this waits leaves the queue.
        let cancel = envs::cancel_at_end(*env, &cancel.cancel)?;
        let work = move || -> napi::Result<Either<(Arc<Shared>, Grant), HeldFacts>> {
            let store = opener.handle()?;
            let kept = match wait.timeout() {
                None => store.acquire_and_keep(&name, &options, keep),
                Some(timeout) => store.acquire_wait_and_keep(&name, &options, timeout, &cancel.0, |_| {}, keep),
            }
            .map_err(|e| errors::library(&e))?;
            match kept {
                Kept::Held(held) => Ok(Either::B(held_facts(&name, &held, mode, wait)?)),
                Kept::Acquired(grant, keeper) => {
                    push_loss(&keeper, leasehold::described(&grant), on_lost);
                    let shared = Arc::new(Shared {
                        store,
                        state: Mutex::new(State::Held(Hold {
                            grant: grant.clone(),
                            keeper,
                        })),
                    });
                    Ok(Either::A((shared, grant)))
                }
            }
        };
        envs::on_thread_holding(env, work, move |shared, grant: Grant| NativeLease {
            name: grant.name,
            ttl,
            shared,
        })
    }
}

impl Drop for NativeLease {
    /// A lease collected while held is released (as a dropped guard is):
    /// on a thread, never on the JavaScript thread.
    fn drop(&mut self) {
        if matches!(&*self.shared.state(), State::Held(_)) {
            envs::let_go_later(self.shared.clone());
        }
    }
}
