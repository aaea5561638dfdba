//! `store.campaign()` and `store.observe()`: the library's leader election
//! ([`leasehold::Leadership`]) and leader changes ([`leasehold::Observer`]),
//! with nothing of their own but conversion, as Python's `leadership.rs`.
//!
//! A campaign waits on a thread of its own; a leadership won is kept by
//! the library's keeper, its loss pushed to JavaScript as a lease's is
//! (`lease::OnLost`), and it is registered with its environment (envs.rs)
//! as it is handed over, so a Worker or process that ends leading
//! resigns; one collected while leading resigns on a thread. An
//! observer's next change is awaited on a thread; a change is the
//! document `leasehold --json leader NAME` prints. An observer stops
//! looking when closed, collected, or its environment ends.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold::{CampaignOptions, Cancel, LeaseName, Token};
use napi::bindgen_prelude::Object;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls::{on_thread, on_thread_then};
use crate::convert::{self, Wait};
use crate::envs::{self, CancelAtEnd, Handover, LetGo};
use crate::errors::OrThrow as _;
use crate::lease::{NativeCancel, OnLost};
use crate::store::{NativeStore, Opener};

/// `store.campaign(name, options)`'s options, as lib/leadership.js passes
/// them.
#[derive(Debug)]
#[napi(object)]
pub struct CampaignArgs {
    pub id: String,
    pub ttl: Option<Either<f64, String>>,
    pub wait: Option<Either<bool, Either<f64, String>>>,
}

/// A leadership won: `None` once resigned.
#[derive(Debug)]
struct Led(Mutex<Option<leasehold::Leadership>>);

impl Led {
    fn state(&self) -> MutexGuard<'_, Option<leasehold::Leadership>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resign now (blocking: a store round trip), if not resigned yet.
    fn resign(&self) -> leasehold::Result<()> {
        let taken = self.state().take();
        taken.map_or(Ok(()), leasehold::Leadership::resign)
    }
}

impl LetGo for Led {
    fn let_go(&self) {
        // A failed release: the grant expires by its TTL.
        let _ = self.resign();
    }
}

/// The native half of `Leadership` (lib/leadership.js).
#[derive(Debug)]
#[napi]
pub struct NativeLeadership {
    name: LeaseName,
    token: Token,
    led: Arc<Led>,
}

#[napi]
impl NativeLeadership {
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.to_string()
    }

    /// The fencing token to pass to what the leader writes.
    #[napi(getter)]
    pub fn token(&self) -> napi::Result<f64> {
        convert::exact(self.token.0, "token")
    }

    /// Whether this process may act as the leader now: false once lost
    /// (a refused renewal, a trust window that closed — checked now) or
    /// resigned.
    #[napi(getter)]
    pub fn is_leader(&self) -> bool {
        self.led.state().as_ref().is_some_and(leasehold::Leadership::is_leader)
    }

    /// Whether leadership was lost (not resigned).
    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.led.state().as_ref().is_some_and(|l| l.lost().is_some())
    }

    /// Whether it was resigned.
    #[napi(getter)]
    pub fn resigned(&self) -> bool {
        self.led.state().is_none()
    }

    /// Stop leading: stop renewing and release, so that the next
    /// candidate leads at once. Resigning twice is fine.
    #[napi]
    pub fn resign<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let led = self.led.clone();
        on_thread(env, move || led.resign().or_throw())
    }
}

impl Drop for NativeLeadership {
    /// A leadership collected while held is resigned: on a thread, never
    /// on the JavaScript thread.
    fn drop(&mut self) {
        if self.led.state().is_some() {
            let led = self.led.clone();
            let _ = std::thread::Builder::new()
                .name("leasehold-release".into())
                .spawn(move || led.let_go());
        }
    }
}

/// The native half of `Observer` (lib/leadership.js): the observer is made
/// on first use, on a call's thread (it needs the store open).
#[derive(Debug)]
#[napi]
pub struct NativeObserver {
    opener: Arc<Opener>,
    name: LeaseName,
    observer: Arc<Mutex<Option<leasehold::Observer>>>,
    cancel: Arc<CancelAtEnd>,
}

#[napi]
impl NativeObserver {
    /// The next change (JSON text: `{name, leader}`), the first the
    /// current state; `null` once closed.
    #[napi]
    pub fn next<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let (opener, name, observer, cancel) = (
            self.opener.clone(),
            self.name.clone(),
            self.observer.clone(),
            self.cancel.0.clone(),
        );
        on_thread(env, move || {
            let mut observer = observer.lock().unwrap_or_else(PoisonError::into_inner);
            if observer.is_none() {
                *observer = Some(opener.handle()?.observe(&name).with_cancel(cancel));
            }
            let next = observer.as_mut().and_then(Iterator::next).transpose().or_throw()?;
            Ok(next.map(|change| leasehold::json::value(&leasehold::json::leader_change(&change)).to_string()))
        })
    }

    /// End the iteration: a waiting `next()` resolves `null` at its next
    /// look (at most the store's poll interval later).
    #[napi]
    pub fn close(&self) {
        self.cancel.0.cancel();
    }
}

impl Drop for NativeObserver {
    fn drop(&mut self) {
        self.cancel.0.cancel();
    }
}

#[napi]
impl NativeStore {
    /// Campaign for `name`: a promise of a `NativeLeadership`, or `null`
    /// when `wait` passed (or `cancel` ended the wait) first. `on_lost` is
    /// called with the `LeaseLost` message when leadership is lost.
    #[napi]
    pub fn campaign<'env>(
        &self,
        env: &'env Env,
        name: String,
        args: CampaignArgs,
        cancel: &NativeCancel,
        on_lost: OnLost,
    ) -> napi::Result<Object<'env>> {
        let name = convert::lease_name(&name)?;
        let mut options = CampaignOptions::new(args.id);
        if let Some(ttl) = convert::opt_duration(args.ttl.as_ref(), "ttl")? {
            options.ttl = ttl;
        }
        // As long as it takes unless told otherwise, as Python's.
        let timeout = match args
            .wait
            .as_ref()
            .map_or(Ok(Wait::Forever), |w| convert::wait(Some(w)))?
        {
            Wait::No => Some(Duration::ZERO),
            Wait::Upto(limit) => Some(limit),
            Wait::Forever => None,
        };
        let opener = self.opener();
        // A Worker that ends while this waits leaves the queue.
        let cancel = envs::cancel_at_end(*env, &cancel.cancel)?;
        let work = {
            let name = name.clone();
            move || -> napi::Result<Option<(Handover<Led>, Token)>> {
                let store = opener.handle()?;
                let Some(led) = store.campaign_for(&name, &options, timeout, &cancel.0).or_throw()? else {
                    return Ok(None);
                };
                let token = led.token();
                let what = format!("leadership of {name} (token {token})");
                led.on_lost(move |loss| {
                    on_lost.call(loss.told(&what), ThreadsafeFunctionCallMode::NonBlocking);
                });
                Ok(Some((Handover::new(Arc::new(Led(Mutex::new(Some(led))))), token)))
            }
        };
        on_thread_then(env, work, move |env, won| {
            won.map(|(handover, token)| {
                Ok(NativeLeadership {
                    name,
                    token,
                    led: handover.take(env)?,
                })
            })
            .transpose()
        })
    }

    /// The leader changes of `name` (`NativeObserver`); nothing is read
    /// until its first `next()`.
    #[napi]
    pub fn observe(&self, env: Env, name: String) -> napi::Result<NativeObserver> {
        let name = convert::lease_name(&name)?;
        let cancel = envs::cancel_at_end(env, &Cancel::new())?;
        Ok(NativeObserver {
            opener: self.opener(),
            name,
            observer: Arc::new(Mutex::new(None)),
            cancel,
        })
    }
}
