//! `Task`: a claimed task, its claim kept by the library's
//! [`ClaimKeeper`] (heartbeats on the keeper's threads) until reported.
//! Its loss is pushed to JavaScript as a lease's is (`lease::OnLost`).
//!
//! States: `Claimed` ─done/fail/release→ `Busy` ─→ `Ended(how)`. A claim
//! is reported once: a second report (`done()` twice, `fail()` after
//! `done()`) is refused at once, saying how it was reported, and records
//! nothing. A report the store refuses — the claim ran past its TTL, or
//! was taken — is `LeaseLost` and records nothing either
//! ([`leasehold::report_kept`]): a task is done at most once. What is
//! still claimed when its Worker or process ends, or when the object is
//! collected, is handed back (no attempt charged). The state lock is held
//! for a few instructions, never across a store call.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use leasehold::{Claim, ClaimKeeper, ClaimReport, ErrorKind, Retry};
use napi::bindgen_prelude::Object;
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls::on_thread;
use crate::convert;
use crate::envs::{self, LetGo};
use crate::errors;

/// A claim held and its keeper.
#[derive(Debug)]
pub struct Hold {
    pub store: Arc<leasehold::Store>,
    pub keeper: ClaimKeeper,
}

#[derive(Debug)]
enum State {
    Claimed(Hold),
    /// Being reported by this call (`done()`, `fail()`, `release()`).
    Busy(&'static str),
    /// Reported: `done`, `retrying`, `dead`, `released`, or `lost`.
    Ended(&'static str),
}

/// What a task's calls share with the threads that run them.
#[derive(Debug)]
pub struct Shared {
    claim: Claim,
    state: Mutex<State>,
}

/// The call that makes `report`, as a refusal names it.
fn call_of(report: &ClaimReport) -> &'static str {
    match report {
        ClaimReport::Done(_) => "done()",
        ClaimReport::Fail(..) => "fail()",
        ClaimReport::HandBack => "release()",
    }
}

impl Shared {
    pub fn new(claim: Claim, hold: Hold) -> Self {
        Self {
            claim,
            state: Mutex::new(State::Claimed(hold)),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn what(&self) -> String {
        leasehold::described_claim(&self.claim)
    }

    /// `Claimed` → `Busy`: the hold to report with, or why not.
    fn take(&self, report: &ClaimReport) -> napi::Result<Hold> {
        let mut state = self.state();
        let why = match &*state {
            State::Claimed(_) => match std::mem::replace(&mut *state, State::Busy(call_of(report))) {
                State::Claimed(hold) => return Ok(hold),
                _ => unreachable!("matched above"),
            },
            State::Busy(busy) => format!("{} is being reported ({busy})", self.what()),
            State::Ended(how) => format!("{} was already reported ({how})", self.what()),
        };
        Err(errors::invalid(format!(
            "{why}: this {} was not recorded — a claim is reported once",
            call_of(report)
        )))
    }

    /// Report (blocking), recording how the claim ended.
    fn report_blocking(&self, hold: Hold, report: ClaimReport) -> napi::Result<&'static str> {
        let Hold { store, keeper } = hold;
        let (ended, result) = match leasehold::report_kept(&store, &self.claim.task_ref(), keeper, report) {
            Ok(Ok(how)) => (how, Ok(how)),
            Ok(Err(loss)) => ("lost", Err(errors::of_kind(ErrorKind::Lost, loss.told(&self.what())))),
            Err(e) => ("lost", Err(errors::library(&e))),
        };
        *self.state() = State::Ended(ended);
        result
    }
}

impl LetGo for Shared {
    /// Hand the claim back, if it is still claimed.
    fn let_go(&self) {
        if let Ok(hold) = self.take(&ClaimReport::HandBack) {
            drop(self.report_blocking(hold, ClaimReport::HandBack));
        }
    }
}

/// The native half of `Task` (lib/queue.js).
#[derive(Debug)]
#[napi]
pub struct NativeTask {
    shared: Arc<Shared>,
}

impl NativeTask {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn report<'env>(&self, env: &'env Env, report: ClaimReport) -> napi::Result<Object<'env>> {
        let hold = self.shared.take(&report)?;
        let shared = self.shared.clone();
        on_thread(env, move || shared.report_blocking(hold, report))
    }
}

#[napi]
impl NativeTask {
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.shared.claim.id.to_string()
    }

    #[napi(getter)]
    pub fn queue(&self) -> String {
        self.shared.claim.queue.to_string()
    }

    /// The payload, as JSON text.
    #[napi(getter)]
    pub fn payload(&self) -> String {
        self.shared.claim.payload.to_string()
    }

    /// This claim's attempt (1 for the first).
    #[napi(getter)]
    pub fn attempt(&self) -> u32 {
        self.shared.claim.attempt
    }

    #[napi(getter)]
    pub fn max_attempts(&self) -> u32 {
        self.shared.claim.max_attempts
    }

    /// The claim's token: larger than every earlier claim's of this task.
    #[napi(getter)]
    pub fn token(&self) -> napi::Result<f64> {
        convert::exact(self.shared.claim.token.0, "token")
    }

    /// Whether the claim is lost (a heartbeat refused, or its deadline
    /// passed, or a report refused).
    #[napi(getter)]
    pub fn lost(&self) -> bool {
        match &*self.shared.state() {
            State::Claimed(hold) => hold.keeper.handle().is_lost(),
            State::Busy(_) => false,
            State::Ended(how) => *how == "lost",
        }
    }

    /// Whether a report was made or is under way.
    #[napi(getter)]
    pub fn reported(&self) -> bool {
        !matches!(&*self.shared.state(), State::Claimed(_))
    }

    /// How the claim ended (`done`, `retrying`, `dead`, `released`,
    /// `lost`), or `null` while it is held.
    #[napi(getter)]
    pub fn outcome(&self) -> Option<&'static str> {
        match &*self.shared.state() {
            State::Ended(how) => Some(how),
            _ => None,
        }
    }

    /// Throws `LeaseLost` once the claim is lost, or has ended. The
    /// deadline is judged by the clock here too (as `Lease.check`).
    #[napi]
    pub fn check(&self) -> napi::Result<()> {
        let handle = match &*self.shared.state() {
            State::Claimed(hold) => hold.keeper.handle(),
            State::Busy(_) => return Ok(()),
            State::Ended(how) => {
                return Err(errors::of_kind(
                    ErrorKind::Lost,
                    format!("{} has ended ({how})", self.shared.what()),
                ));
            }
        };
        match handle.loss() {
            None => Ok(()),
            Some(loss) => Err(errors::of_kind(ErrorKind::Lost, loss.told(&self.shared.what()))),
        }
    }

    /// Mark the task done, with `result` (JSON text) recorded.
    #[napi]
    pub fn done<'env>(&self, env: &'env Env, result: Option<String>) -> napi::Result<Object<'env>> {
        let result = result.map(|text| convert::json(&text, "the result")).transpose()?;
        self.report(env, ClaimReport::Done(result))
    }

    /// Record a failed attempt with `error`: retried with backoff (or
    /// after `retry_in`), never when `retry` is false; dead once its
    /// attempts are used up. Resolves with `"retrying"` or `"dead"`.
    #[napi]
    pub fn fail<'env>(
        &self,
        env: &'env Env,
        error: String,
        retry: bool,
        retry_in: Option<Either<f64, String>>,
    ) -> napi::Result<Object<'env>> {
        let retry = match (retry, convert::opt_duration(retry_in.as_ref(), "retryIn")?) {
            (false, _) => Retry::Never,
            (true, Some(after)) => Retry::After(after),
            (true, None) => Retry::Backoff,
        };
        self.report(env, ClaimReport::Fail(error, retry))
    }

    /// Hand the claim back without charging the attempt.
    #[napi]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        self.report(env, ClaimReport::HandBack)
    }
}

impl Drop for NativeTask {
    /// A task collected while claimed is handed back, on a thread.
    fn drop(&mut self) {
        if matches!(&*self.shared.state(), State::Claimed(_)) {
            envs::let_go_later(self.shared.clone());
        }
    }
}
