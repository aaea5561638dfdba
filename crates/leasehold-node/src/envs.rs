//! What a JavaScript environment holds — the main thread's, or a
//! `worker_threads` Worker's — let go when the environment ends. A Worker
//! that is terminated (or returns) while holding a lease would otherwise
//! leave its keeper renewing, in a process that lives on, a grant whose
//! holder is gone: every other acquirer would wait for it forever. So each
//! environment keeps a list of what it holds, and its cleanup hook (run by
//! Node when a Worker ends, and at the main thread's exit) releases what
//! is still held.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use napi::Env;

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
