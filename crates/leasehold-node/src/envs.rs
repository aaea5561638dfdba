//! What a JavaScript environment holds — the main thread's, or a
//! `worker_threads` Worker's — let go when the environment ends. A Worker
//! that is terminated (or returns) while holding a lease would otherwise
//! leave its keeper renewing, in a process that lives on, a grant whose
//! holder is gone: every other acquirer would wait for it forever. So each
//! environment keeps a list of what it holds, and its cleanup hook (run by
//! Node when a Worker ends, and at the main thread's exit) releases what
//! is still held.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Either, Env};

/// Something held that is let go when its environment ends.
pub trait LetGo: Send + Sync {
    /// Stop keeping it and release it (blocking: a store round trip).
    fn let_go(&self);
}

#[derive(Default)]
struct Holdings {
    held: Mutex<Vec<Weak<dyn LetGo>>>,
}

impl Holdings {
    fn let_go_all(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        for holding in held.iter().filter_map(Weak::upgrade) {
            holding.let_go();
        }
    }
}

/// Record `holding` as this environment's (on the JavaScript thread).
pub fn register(env: Env, holding: Weak<dyn LetGo>) -> napi::Result<()> {
    let holdings = if let Some(holdings) = env.get_instance_data::<Arc<Holdings>>()? {
        holdings.clone()
    } else {
        let holdings = Arc::new(Holdings::default());
        env.set_instance_data(holdings.clone(), (), |_| {})?;
        env.add_env_cleanup_hook(holdings.clone(), |holdings| holdings.let_go_all())?;
        holdings
    };
    let mut held = holdings.held.lock().unwrap_or_else(PoisonError::into_inner);
    // What ended since is dropped here, so the list is as long as what is held.
    held.retain(|h| h.strong_count() > 0);
    held.push(holding);
    Ok(())
}

type Resolver<T> = Box<dyn FnOnce(Env) -> napi::Result<T> + Send>;

/// A promise settled with what `work` got, `work` running on a thread of
/// its own (as `calls::on_thread`). What it got held (`Either::A`) is made
/// into its JavaScript object by `made` and registered with the
/// environment on the JavaScript thread as it is handed over — or let go,
/// on that thread, when the environment ended first (its promise never
/// settles). Anything else (`Either::B`) is handed over as it is.
pub fn on_thread_holding<S, G, N, T>(
    env: &Env,
    work: impl FnOnce() -> napi::Result<Either<(Arc<S>, G), N>> + Send + 'static,
    made: impl FnOnce(Arc<S>, G) -> T + Send + 'static,
) -> napi::Result<Object<'_>>
where
    S: LetGo + 'static,
    G: Send + 'static,
    N: ToNapiValue + Send + 'static,
    T: ToNapiValue + 'static,
{
    let (deferred, promise) = env.create_deferred::<Either<T, N>, Resolver<Either<T, N>>>()?;
    crate::calls::spawn("leasehold-call", move || match work() {
        Err(e) => deferred.reject(e),
        Ok(Either::B(other)) => deferred.resolve(Box::new(move |_| Ok(Either::B(other)))),
        Ok(Either::A((held, got))) => {
            // Let go on this thread if the resolver never runs: a guard
            // the resolver disarms.
            let guard = LetGoUnlessTaken(Some(held));
            deferred.resolve(Box::new(move |env| {
                let mut guard = guard;
                let held = guard.0.take().expect("taken once");
                let weak: Weak<dyn LetGo> = Arc::downgrade(&held) as Weak<dyn LetGo>;
                register(env, weak)?;
                Ok(Either::A(made(held, got)))
            }));
        }
    })?;
    Ok(promise)
}

/// What nobody took (its promise's environment ended): let go when dropped.
struct LetGoUnlessTaken<S: LetGo>(Option<Arc<S>>);

impl<S: LetGo> Drop for LetGoUnlessTaken<S> {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            held.let_go();
        }
    }
}

/// Let `holding` go on a thread of its own: for a JavaScript object
/// collected while it held something (as a dropped guard releases), never
/// blocking the JavaScript thread.
pub fn let_go_later(holding: Arc<dyn LetGo>) {
    let _ = crate::calls::spawn("leasehold-release", move || holding.let_go());
}
