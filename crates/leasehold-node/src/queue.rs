//! The task queue (`store.queue(name)` in lib/queue.js): add a task,
//! claim one — a lease on the task, kept by the library's
//! [`leasehold::ClaimKeeper`] (a [`NativeTask`]) — and show one. The
//! queue's rules (claim order, tokens, retries) are the library's; a
//! claim's wait is the library's too ([`leasehold::Store::claim_wait_and_keep`]),
//! ended by a `NativeCancel`.

use std::sync::Arc;

use leasehold::{Available, NewTask, QueueName};
use napi::bindgen_prelude::Object;
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls::on_thread;
use crate::convert::{self, Wait};
use crate::envs;
use crate::errors::{self, OrThrow as _};
use crate::lease::{NativeCancel, OnLost, push_loss};
use crate::store::NativeStore;
use crate::task::{Hold, NativeTask, Shared};

/// `queue.add(payload, options)`'s options, as lib/queue.js passes them.
#[derive(Debug)]
#[napi(object)]
pub struct AddArgs {
    pub id: Option<String>,
    pub priority: Option<f64>,
    pub delay: Option<Either<f64, String>>,
    /// Milliseconds since the epoch (a `Date`'s `getTime()`).
    pub at: Option<f64>,
    pub max_attempts: Option<f64>,
}

/// `queue.claim(options)`'s options, as lib/queue.js passes them.
#[derive(Debug)]
#[napi(object)]
pub struct ClaimArgs {
    pub ttl: Option<Either<f64, String>>,
    pub wait: Option<Either<bool, Either<f64, String>>>,
    pub owner: Option<String>,
    pub heartbeat: Option<Either<f64, String>>,
    pub margin: Option<Either<f64, String>>,
}

/// When a task becomes claimable: after `delay` or at `at`, not both; at
/// once by default.
fn available(args: &AddArgs) -> napi::Result<Available> {
    Ok(match (convert::opt_duration(args.delay.as_ref(), "delay")?, args.at) {
        (Some(_), Some(_)) => return Err(errors::invalid("give delay or at, not both")),
        (Some(delay), None) => Available::After(delay),
        (None, Some(ms)) => Available::At(convert::epoch_time(ms, "at")?),
        (None, None) => Available::Now,
    })
}

/// `NothingToClaim`, worded as Python's.
fn nothing_to_claim(queue: &QueueName, wait: Wait) -> napi::Error {
    let after = match wait {
        Wait::Upto(d) => format!(" after waiting {}", leasehold::format_duration(d)),
        _ => String::new(),
    };
    errors::new("NothingToClaim", format!("nothing to claim in queue {queue}{after}"))
}

#[napi]
impl NativeStore {
    /// A queue name as given, or `InvalidName` with the library's reason
    /// (`store.queue(name)` refuses a bad one at once).
    #[napi]
    pub fn queue_name(name: String) -> napi::Result<String> {
        convert::queue_name(&name).map(|_| name)
    }

    /// Add a task to `queue` with `payload` (JSON text): a promise of its id.
    /// The same id again is a no-op with the same task, and refused
    /// (`InvalidInput`) with another.
    #[napi]
    pub fn task_add<'env>(
        &self,
        env: &'env Env,
        queue: String,
        payload: String,
        args: AddArgs,
    ) -> napi::Result<Object<'env>> {
        let queue = convert::queue_name(&queue)?;
        let task = NewTask {
            id: args.id.as_deref().map(convert::task_id).transpose()?,
            payload: convert::json(&payload, "the payload")?,
            priority: args
                .priority
                .map_or(Ok(0), |p| convert::whole(p, "priority", -MAX_SAFE, MAX_SAFE))?,
            available: available(&args)?,
            max_attempts: match args.max_attempts {
                None => leasehold::DEFAULT_MAX_ATTEMPTS,
                Some(n) => {
                    u32::try_from(convert::whole(n, "maxAttempts", 1, i64::from(u32::MAX))?).expect("checked above")
                }
            },
        };
        let opener = self.opener();
        on_thread(env, move || {
            let added = opener.handle()?.task_add(&queue, vec![task]).or_throw()?;
            if let Some(refusal) = leasehold::add_refusal(&queue, &added) {
                return Err(errors::invalid(refusal));
            }
            Ok(added
                .into_iter()
                .map(|(id, _)| id.to_string())
                .next()
                .expect("one task in, one id out"))
        })
    }

    /// Claim the next task of `queue`, highest priority first: a promise
    /// of a `NativeTask`, rejected with `NothingToClaim` when there is none
    /// (within `wait`, or when `cancel` ended the wait). `on_lost` is
    /// called with the `LeaseLost` message when the claim is lost.
    #[napi]
    pub fn claim<'env>(
        &self,
        env: &'env Env,
        queue: String,
        args: ClaimArgs,
        cancel: &NativeCancel,
        on_lost: OnLost,
    ) -> napi::Result<Object<'env>> {
        let queue = convert::queue_name(&queue)?;
        let keep = convert::keep(args.ttl.as_ref(), args.heartbeat.as_ref(), args.margin.as_ref())?;
        let wait = convert::wait(args.wait.as_ref())?;
        let (opener, cancel, owner) = (self.opener(), cancel.get(), args.owner);
        let work = move || -> napi::Result<Either<(Arc<Shared>, ()), ()>> {
            let store = opener.handle()?;
            let claimed = match wait.timeout() {
                None => store.claim_and_keep(&queue, owner.as_deref(), keep),
                Some(left) => store.claim_wait_and_keep(&queue, owner.as_deref(), &keep, left, &cancel),
            }
            .or_throw()?;
            let Some((claim, keeper)) = claimed else {
                return Err(nothing_to_claim(&queue, wait));
            };
            push_loss(&keeper, leasehold::described_claim(&claim), on_lost);
            Ok(Either::A((Arc::new(Shared::new(claim, Hold { store, keeper })), ())))
        };
        envs::on_thread_holding(env, work, |shared, ()| NativeTask::new(shared))
    }

    /// The task `id` of `queue` as `leasehold task show --json` prints it
    /// (JSON text), or `null`.
    #[napi]
    pub fn task_get<'env>(&self, env: &'env Env, queue: String, id: String) -> napi::Result<Object<'env>> {
        let (queue, id) = (convert::queue_name(&queue)?, convert::task_id(&id)?);
        let opener = self.opener();
        on_thread(env, move || {
            let task = opener.handle()?.task_get(&queue, &id).or_throw()?;
            Ok(task.map(|t| leasehold::json::value(&leasehold::json::task(&t)).to_string()))
        })
    }
}

/// Priorities are the integers a JavaScript number holds exactly.
#[allow(clippy::cast_possible_wrap, reason = "2^53 − 1 fits")]
const MAX_SAFE: i64 = convert::MAX_SAFE as i64;
