//! `lock(path)`: `leasehold::lock`, the same `flock` as `leasehold lock` and
//! Python's `lh.lock` — the same lock file for the same path
//! (`.leasehold.lock` inside a directory; a path ending in `/`, or
//! `{ dir: true }`, is a directory, made if missing), the same refusals,
//! and a file it did not create is never changed. A wait polls on a thread
//! of its own ([`lock::lock_or_cancel`]) and ends when its `AbortSignal`
//! aborts or its environment ends. A held lock is this environment's
//! (envs.rs): a Worker that ends holding it lets it go, and so does a
//! `FileLock` collected while held.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use leasehold::Cancel;
use leasehold::lock::{self, Holders, LockOptions, TryLock};
use napi::bindgen_prelude::Object;
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls;
use crate::convert::{self, Wait};
use crate::envs::{self, LetGo};
use crate::errors::{self, OrThrow as _};
use crate::lease::{HeldFacts, HolderFacts, NativeCancel};

/// `lock(path, options)`'s options, as lib/lock.js passes them.
#[derive(Debug)]
#[napi(object)]
pub struct LockArgs {
    pub wait: Option<Either<bool, Either<f64, String>>>,
    pub shared: Option<bool>,
    pub dir: Option<bool>,
    pub allow_network_fs: Option<bool>,
}

/// The lock a `NativeFileLock` holds until released.
#[derive(Debug)]
struct Slot {
    held: Mutex<Option<lock::FileLock>>,
}

impl LetGo for Slot {
    fn let_go(&self) {
        drop(self.held.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}

/// A wait's cancel, cancelled when its environment ends.
struct CancelOnEnd(Cancel);

impl LetGo for CancelOnEnd {
    fn let_go(&self) {
        self.0.cancel();
    }
}

/// The native half of `FileLock` (lib/lock.js).
#[derive(Debug)]
#[napi]
pub struct NativeFileLock {
    slot: Arc<Slot>,
    path: String,
    shared: bool,
    key: String,
}

#[napi]
impl NativeFileLock {
    /// The lock file (inside the directory, for a directory).
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.path.clone()
    }

    #[napi(getter)]
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The lock file's identity (`DEV:INO`), for files.rs's re-entry check.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.key.clone()
    }

    /// Whether it is held (not released).
    #[napi(getter)]
    pub fn locked(&self) -> bool {
        self.slot.held.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// Unlock (the lock file stays: deleting it would let a second process
    /// lock a new file of the same name). `flock(LOCK_UN)` never waits, so
    /// this is not a promise. `quiet`: released already is fine.
    #[napi]
    pub fn release(&self, quiet: Option<bool>) -> napi::Result<()> {
        let held = self.slot.held.lock().unwrap_or_else(PoisonError::into_inner).take();
        match held {
            Some(held) => {
                drop(held);
                Ok(())
            }
            None if quiet == Some(true) => Ok(()),
            None => Err(errors::invalid(format!(
                "{} is not locked (released already)",
                self.path
            ))),
        }
    }
}

/// `Held` (or `WaitTimeout`) for a lock on `path` held by `holders`,
/// after a wait like `wait`.
fn held_facts(path: &std::path::Path, holders: &Holders, wait: Wait) -> HeldFacts {
    HeldFacts {
        message: wait.lock_refusal(path, holders, &leasehold::spelling::Options),
        name: path.display().to_string(),
        holders: holders
            .pids()
            .into_iter()
            .map(|pid| HolderFacts {
                owner: format!("pid {pid}"),
                token: None,
                mode: holders.mode().label().to_owned(),
                expires_at: None,
                pid: Some(pid),
            })
            .collect(),
        waiters: 0,
        timed_out: matches!(wait, Wait::Upto(_)),
    }
}

#[napi]
impl NativeFileLock {
    /// Take `flock(2)` on `path`: a promise of a held `NativeFileLock`, or
    /// of the facts of who holds it. `cancel` ends a wait.
    #[napi]
    pub fn lock<'env>(
        env: &'env Env,
        path: String,
        args: LockArgs,
        cancel: &NativeCancel,
    ) -> napi::Result<Object<'env>> {
        let options = LockOptions {
            shared: args.shared.unwrap_or(false),
            allow_network_fs: args.allow_network_fs.unwrap_or(false),
            dir: args.dir.unwrap_or(false),
        };
        let wait = convert::wait(args.wait.as_ref())?;
        if let Some(Some(limit)) = wait.timeout() {
            // Refused as the library's `lock` refuses it, free or not.
            leasehold::limits::WAIT
                .check(limit)
                .map_err(lock::LockError::from)
                .or_throw()?;
        }
        let cancel = Arc::new(CancelOnEnd(cancel.handle()));
        envs::register(*env, Arc::downgrade(&cancel) as Weak<dyn LetGo>)?;
        let (deferred, promise) = calls::promise::<Either<NativeFileLock, HeldFacts>>(env)?;
        calls::spawn(move || {
            let path = std::path::PathBuf::from(path);
            let outcome = match wait.timeout() {
                None => lock::try_lock(&path, options),
                Some(timeout) => lock::lock_or_cancel(&path, options, timeout, &cancel.0),
            };
            let out = match outcome {
                Err(e) => Err(errors::lock(&e)),
                Ok(TryLock::Held { path, holders }) => Ok(Either::B(held_facts(&path, &holders, wait))),
                Ok(TryLock::Locked(held)) => Ok(Either::A(held)),
            };
            // Registered on the JavaScript thread as it is handed over; if
            // that never runs (the environment ended), dropped: unlocked.
            calls::settle_then(deferred, out, move |env, got| match got {
                Either::B(facts) => Ok(Either::B(facts)),
                Either::A(held) => {
                    let file_lock = NativeFileLock {
                        path: held.path().display().to_string(),
                        shared: held.is_shared(),
                        key: held
                            .file()
                            .metadata()
                            .map(|m| crate::files::key(&m))
                            .unwrap_or_default(),
                        slot: Arc::new(Slot {
                            held: Mutex::new(Some(held)),
                        }),
                    };
                    envs::register(env, Arc::downgrade(&file_lock.slot) as Weak<dyn LetGo>)?;
                    Ok(Either::A(file_lock))
                }
            });
        })?;
        Ok(promise)
    }
}
