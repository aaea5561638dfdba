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

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, JsDeferred};

type Resolver<T> = Box<dyn FnOnce(Env) -> napi::Result<T> + Send>;

/// A promise settled with what `work` returns, `work` running on a thread
/// of its own.
pub fn on_thread<T>(env: &Env, work: impl FnOnce() -> napi::Result<T> + Send + 'static) -> napi::Result<Object<'_>>
where
    T: ToNapiValue + Send + 'static,
{
    let (deferred, promise) = env.create_deferred::<T, Resolver<T>>()?;
    let settle = move |deferred: JsDeferred<T, Resolver<T>>, out: napi::Result<T>| match out {
        Ok(value) => deferred.resolve(Box::new(move |_| Ok(value))),
        Err(e) => deferred.reject(e),
    };
    spawn("leasehold-call", move || settle(deferred, work()))?;
    Ok(promise)
}

/// Run `f` on a new thread named `name`.
pub fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> napi::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| crate::errors::of_kind(leasehold::ErrorKind::Failed, format!("cannot start a thread: {e}")))
}
