//! The Node.js package's core (`npm install leasehold`), over the
//! `leasehold` library, as `crates/leasehold-py` is Python's. It converts
//! values and errors and calls the library — leases, the queue,
//! supervision, state files and locks are the library's, with no logic of
//! their own here. The package's JavaScript (`index.js`) wraps these
//! classes in the API users call (`Store`, `Lease`, …), defines the error
//! classes and turns `AbortSignal`s into cancels.
//!
//! | module | what |
//! |---|---|
//! | `store` | `NativeStore`: a store by URL, opened on first use |
//! | `lease` | `NativeLease`: acquire (wait, cancel), keep, push loss, renew, release |
//! | `files` | `writeFile`, `writeJson`, `NativeUpdate`: crash-safe, fenced state files |
//! | `lock` | `lock`, `NativeFileLock`: `flock` as `leasehold lock` takes it |
//! | `leadership` | `store.campaign` (`NativeLeadership`) and `store.observe` (`NativeObserver`) |
//! | `run` | `store.run`: a command under a lease (the library's supervision), stopped by `NativeRunControl` |
//! | `queue` | the task queue: add, claim (wait, cancel), show a task |
//! | `task` | `NativeTask`: a claim kept, its loss pushed, reported once (done, fail, hand back) |
//! | `calls` | every blocking call on a thread of its own, settling a promise |
//! | `envs` | what a JavaScript environment (a Worker) holds, let go when it ends |
//! | `convert`, `errors` | durations, names, tokens; error kinds to error classes |
//!
//! Nothing here blocks the event loop for a store call or a wait, and
//! nothing runs on libuv's thread pool.

#![allow(
    clippy::needless_pass_by_value,
    reason = "a JavaScript function's arguments arrive owned: napi converts each into a Rust value"
)]
#![allow(clippy::must_use_candidate, reason = "JavaScript calls these functions, not Rust")]

mod calls;
mod convert;
mod envs;
mod errors;
mod files;
mod leadership;
mod lease;
mod lock;
mod queue;
mod run;
mod store;
mod task;

use napi_derive::napi;

/// The workspace's version: the same as `leasehold --version` of the
/// command a platform package carries.
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
