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

/// Something held on its way to JavaScript through a promise
/// ([`crate::calls::on_thread_then`]): registered with the environment as
/// the promise settles ([`Handover::take`]), or let go when dropped untaken
/// — its environment ended first, and nobody will ever see it.
pub struct Handover<T: LetGo + 'static>(Option<Arc<T>>);

impl<T: LetGo + 'static> Handover<T> {
    pub fn new(held: Arc<T>) -> Self {
        Self(Some(held))
    }

    /// Register it with `env` (on the JavaScript thread) and hand it over.
    pub fn take(mut self, env: Env) -> napi::Result<Arc<T>> {
        let held = self.0.take().expect("taken once");
        let weak: Weak<dyn LetGo> = Arc::downgrade(&held) as Weak<dyn LetGo>;
        if let Err(e) = register(env, weak) {
            held.let_go();
            return Err(e);
        }
        Ok(held)
    }
}

impl<T: LetGo + 'static> Drop for Handover<T> {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            held.let_go();
        }
    }
}

/// A wait (or an observer) that ends with its environment: a Worker that
/// ends while waiting leaves the store's queue at once, rather than be
/// granted what nobody will see. The call's thread keeps it (strong).
#[derive(Debug)]
pub struct CancelAtEnd(pub leasehold::Cancel);

impl LetGo for CancelAtEnd {
    fn let_go(&self) {
        self.0.cancel();
    }
}

/// `cancel`, cancelled when `env` ends (on the JavaScript thread).
pub fn cancel_at_end(env: Env, cancel: &leasehold::Cancel) -> napi::Result<Arc<CancelAtEnd>> {
    let held = Arc::new(CancelAtEnd(cancel.clone()));
    register(env, Arc::downgrade(&held) as Weak<dyn LetGo>)?;
    Ok(held)
}

/// A promise settled with what `work` got, `work` running on a thread of
/// its own (`calls::on_thread_then`). What it got held (`Either::A`) is
/// made into its JavaScript object by `made` and registered with the
/// environment on the JavaScript thread as it is handed over — or let go
/// when the environment ended first ([`Handover`]). Anything else
/// (`Either::B`) is handed over as it is.
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
    crate::calls::on_thread_then(
        env,
        move || {
            Ok(match work()? {
                Either::A((held, got)) => Either::A((Handover::new(held), got)),
                Either::B(other) => Either::B(other),
            })
        },
        move |env, out| match out {
            Either::A((handover, got)) => Ok(Either::A(made(handover.take(env)?, got))),
            Either::B(other) => Ok(Either::B(other)),
        },
    )
}

/// Let `holding` go on a thread of its own: for a JavaScript object
/// collected while it held something (as a dropped guard releases), never
/// blocking the JavaScript thread.
pub fn let_go_later(holding: Arc<dyn LetGo>) {
    let _ = crate::calls::spawn(move || holding.let_go());
}
