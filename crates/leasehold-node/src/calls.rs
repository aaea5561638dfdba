//! Every library call that can block — a store round trip, a wait, a
//! supervised command — runs on a thread of this package's own and
//! settles a promise on the JavaScript thread when it ends (napi's
//! deferred, a thread-safe function underneath). Never on the event loop,
//! and never on libuv's four-thread pool, which `fs` and `dns` share: 500
//! waiters parked there would stall every `fs.promises` call behind them.
//!
//! One thread per call, ended with it: a store call is a round trip or
//! two, against which a thread's start (tens of microseconds) is small,
//! and a wait costs one parked thread and nothing else.
//!
//! A call may outlive the JavaScript environment that made it (a Worker
//! terminated while a `store.run` or a wait goes on). Node frees the
//! promise's thread-safe function when the environment ends, and calling
//! it afterwards aborts the process. So each call has a [`Gate`], closed
//! by an environment cleanup hook registered just after the promise is
//! made — hooks run most recent first, so before Node frees it — and a
//! call settles through its gate, or not at all: what it returned is then
//! dropped on its thread (what it holds lets go: `envs::Handover`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{CleanupEnvHook, Env, JsDeferred};

type Resolver<T> = Box<dyn FnOnce(Env) -> napi::Result<T> + Send>;

/// A promise's settling end, sent to the thread whose work settles it,
/// with the gate of its environment. It must be settled ([`settle`],
/// [`settle_then`]): an unsettled one keeps the process alive.
pub struct Deferred<T: ToNapiValue + 'static> {
    deferred: JsDeferred<T, Resolver<T>>,
    gate: Arc<Gate>,
}

/// A promise, and its deferred to settle from any thread.
pub fn promise<T: ToNapiValue + 'static>(env: &Env) -> napi::Result<(Deferred<T>, Object<'_>)> {
    let (deferred, promise) = env.create_deferred::<T, Resolver<T>>()?;
    let gate = Gate::after(*env)?;
    Ok((Deferred { deferred, gate }, promise))
}

/// Settle `deferred` with `out`.
pub fn settle<T: ToNapiValue + Send + 'static>(deferred: Deferred<T>, out: napi::Result<T>) {
    settle_then(deferred, out, |_, value| Ok(value));
}

/// Settle `deferred` with what `hand` makes of `out` on the JavaScript
/// thread — with its `Env`, to register what is held
/// ([`crate::envs::Handover`]). When the promise's environment has ended
/// first, `hand` never runs and `out` is dropped here: what it holds must
/// let go on drop.
pub fn settle_then<R, T>(
    deferred: Deferred<T>,
    out: napi::Result<R>,
    hand: impl FnOnce(Env, R) -> napi::Result<T> + Send + 'static,
) where
    R: Send + 'static,
    T: ToNapiValue + 'static,
{
    let Deferred { deferred, gate } = deferred;
    let open = gate.open.lock().unwrap_or_else(PoisonError::into_inner);
    if !*open {
        drop(open);
        // Dropped here, on this thread: nobody will ever see it.
        drop(out);
        return;
    }
    let id = gate.id;
    deferred.resolve(Box::new(move |env| {
        Gate::passed(env, id);
        hand(env, out?)
    }));
}

/// Run `work` on a thread of its own.
pub fn spawn(work: impl FnOnce() + Send + 'static) -> napi::Result<()> {
    std::thread::Builder::new()
        .name("leasehold-call".into())
        .spawn(work)
        .map(drop)
        .map_err(|e| crate::errors::of_kind(leasehold::ErrorKind::Failed, format!("cannot start a thread: {e}")))
}

/// A promise settled with what `work` returns, `work` running on a thread
/// of its own.
pub fn on_thread<T>(env: &Env, work: impl FnOnce() -> napi::Result<T> + Send + 'static) -> napi::Result<Object<'_>>
where
    T: ToNapiValue + Send + 'static,
{
    on_thread_then(env, work, |_, value| Ok(value))
}

/// As [`on_thread`], `hand` making the promise's value of what `work`
/// returned on the JavaScript thread ([`settle_then`]).
pub fn on_thread_then<R, T>(
    env: &Env,
    work: impl FnOnce() -> napi::Result<R> + Send + 'static,
    hand: impl FnOnce(Env, R) -> napi::Result<T> + Send + 'static,
) -> napi::Result<Object<'_>>
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
{
    let (deferred, promise) = promise::<T>(env)?;
    spawn(move || settle_then(deferred, work(), hand))?;
    Ok(promise)
}
/// Whether a call's environment still exists (see the module docs).
struct Gate {
    id: u64,
    /// False once the environment's cleanup began.
    open: Mutex<bool>,
}

type Closer = CleanupEnvHook<Arc<Gate>>;

thread_local! {
    /// The hooks of the calls made on this JavaScript thread and not yet
    /// settled, by gate: removed as each settles (an environment lives on
    /// one thread).
    static HOOKS: RefCell<HashMap<u64, Closer>> = RefCell::new(HashMap::new());
}

impl Gate {
    /// A gate closed when `env` ends, its hook registered now (after the
    /// promise's thread-safe function).
    fn after(env: Env) -> napi::Result<Arc<Self>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let gate = Arc::new(Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            open: Mutex::new(true),
        });
        let hook = env.add_env_cleanup_hook(gate.clone(), |gate| {
            *gate.open.lock().unwrap_or_else(PoisonError::into_inner) = false;
            HOOKS.with(|hooks| hooks.borrow_mut().remove(&gate.id));
        })?;
        HOOKS.with(|hooks| hooks.borrow_mut().insert(gate.id, hook));
        Ok(gate)
    }

    /// The call `id` settled (on the JavaScript thread): its hook goes.
    fn passed(env: Env, id: u64) {
        if let Some(hook) = HOOKS.with(|hooks| hooks.borrow_mut().remove(&id)) {
            let _ = env.remove_env_cleanup_hook(hook);
        }
    }
}
