//! leasehold: keep background jobs and agents from running twice, and keep
//! their state intact when they crash.
//!
//! - [`Store`]: leases with TTLs and fencing tokens on a store (embedded
//!   SQLite by default), exclusive or shared, with FIFO waiting and fast
//!   takeover from holders that are provably dead.
//! - A task queue whose claims are leases (`Store::task_*`): attempts,
//!   backoff, dead tasks, and late workers' results refused.
//! - [`files`]: crash-safe state files — atomic durable replacement,
//!   read-modify-write under a lock, and writes fenced by a lease's token.
//! - [`Keeper`]: keeps a grant (or, as [`ClaimKeeper`], a task claim) —
//!   heartbeat renewals, a holder-side deadline on the boot clock, and loss
//!   pushed to the holder; [`Store::acquire_and_keep`] and
//!   [`Store::claim_and_keep`] take and keep in one call.
//! - Leader election ([`Store::campaign`], [`Leadership`]) and who leads
//!   ([`Store::observe`], [`Observer`]), on a lease.
//! - [`lock`]: single-instance `flock` locks on one machine.
//! - [`supervise`]: run a command under a kept grant — its own process
//!   group, a guard process that stops it before the trust window closes
//!   even when this process cannot, stall detection, opt-in signal
//!   forwarding.
//! - [`schedule`]: when a schedule fires — cron (with or without seconds)
//!   or `@every` in a time zone, with daylight-saving rules stated and
//!   tested; the store's schedules and the cron daemon build on it.
//! - [`worker`]: claim tasks and run a command or a Rust closure for each,
//!   heartbeating the claim; progress as an event stream.
//!
//! # Examples
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use leasehold::{Acquire, AcquireOptions, LeaseName, Store};
//!
//! let store = Store::open_sqlite(&dir.path().join("leasehold.db"))?;
//! let name = LeaseName::new("nightly-report").unwrap();
//! let Acquire::Acquired(grant) = store.try_acquire(&name, &AcquireOptions::default())? else {
//!     panic!("someone else holds it");
//! };
//! // ... do the work, passing grant.token to sinks that check it ...
//! store.release(&grant)?;
//! # Ok::<(), leasehold::Error>(())
//! ```

mod cancel;
mod clock;
mod deferred;
mod error;
pub mod files;
pub mod identity;
pub mod json;
mod keeper;
mod leadership;
pub mod lock;
mod outsider;
mod overdue;
mod pool;
mod queue;
pub mod schedule;
pub mod spelling;
mod store;
pub mod supervise;
pub mod telemetry;
pub mod timeline;
mod wait;
pub mod worker;

pub use cancel::{Cancel, SignalWatch};
pub use clock::{BootClock, Clock, POLL};
pub use error::{Error, Result};
pub use identity::Binding;
pub use keeper::{
    Attempt, ClaimKeeper, ClaimLost, ClaimRenewer, ClaimReport, Keeper, KeeperOptions, LeaseRenewer, Loss, LossHandle,
    Refusal, Released, Renewal, Renewer, described, described_claim, release_kept, report_kept,
};
pub use leadership::{CampaignOptions, CandidateInUse, Leader, LeaderChange, Leadership, Observer};
pub use leasehold_backend::plan::HISTORY_PER_NAME;
pub use leasehold_backend::task::{backoff, differences_text};
pub use leasehold_backend::{
    Available, Claim, QueueName, QueueStats, Retry, Task, TaskAdd, TaskCompleteAndClaim, TaskDifference, TaskFail,
    TaskId, TaskKey, TaskLost, TaskPage, TaskRef, TaskRetry, TaskState, TaskUpdate, unix_ms,
};
pub use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, FenceRefusal, Grant, GrantId, Held, HistoryEntry, HistoryEvent,
    Holder, LeaseFence, LeaseName, LeaseRelease, LeaseRenew, LeaseState, LostReason, Mode, NameError, QueuedWaiter,
    Remedy, StoreBackup, StoreBackupParams, StoreInfo, StoreKind, Token, TokensBumpParams, TokensBumped, WaitTopic,
    Watched, WriteLock,
};
pub use leasehold_backend::{
    ParseError, VALUE_SHOWN_MAX, duration_millis, duration_nanos, escape_hidden, format_duration, format_time,
    hides_or_reorders, later, limits, parse_duration, parse_duration_within, parse_time_within, quoted, shorten,
};
pub use leasehold_host as host;
pub use leasehold_host::symlinks;
/// The store list: every store, what each can do, and the words of the
/// messages that list them.
pub use leasehold_stores as stores;
pub use outsider::{HolderRunning, OutsiderRelease, OutsiderReleased};
pub use overdue::{NOT_RUN, Overdue, Unanswered};
pub use queue::{BatchLineError, DEFAULT_MAX_ATTEMPTS, NewTask, add_refusal};
pub use store::id::StoreIdentity;
pub use store::{
    Acquire, AcquireOptions, ChosenUrlError, DEFAULT_POLL, Kept, STORE_VAR, Store, StoreOptions, StoreUrl,
    built_in_schemes, built_in_stores, stores_with,
};
pub use wait::Wait;
