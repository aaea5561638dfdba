//! The storage seam of leasehold.
//!
//! Everything that touches a store — SQL, etcd keys — lives behind the
//! [`Backend`] trait, one crate per store. What a grant *means* (who may take
//! over, when a holder must stop trusting it) is decided above this seam, in
//! the `leasehold` crate, and once.
//!
//! The rules every backend keeps (the conformance suite in
//! `leasehold-backend-tests` checks each of them):
//!
//! - **Tokens** are per name and strictly increasing over all time: a new
//!   grant gets `last_token + 1`, and the counter survives release, expiry,
//!   takeover and restart. A token is durable before it is returned.
//! - **Exclusive** grants exclude every other live grant; **shared** grants
//!   coexist up to the smallest limit among the holders and the acquirer:
//!   a holder that asked for at most `N` never has more than `N` beside it
//!   (itself included), whatever later acquirers ask.
//! - **Waiters** are served FIFO. To judge an acquirer, start from the live
//!   grants and admit the waiters ahead of it one by one, in order, as if
//!   granted; stop at the first waiter that would not fit (it blocks
//!   everyone behind it). The acquirer is granted only if it fits the set
//!   so built. So a waiting exclusive acquirer stops new shared grants (no
//!   writer starvation), and shared waiters ahead count toward a shared
//!   limit. A granted waiter leaves the queue; a registration expires
//!   unless refreshed, so a dead waiter leaves it too — at once when the
//!   caller proves it dead and names it (`evict_waiters`): each waiter is
//!   read with the process that waits, as each grant with its holder.
//! - Every mutation of a grant (renew, release) is scoped to its name and
//!   token (and owner: the one given, and always an explicit one — see
//!   [`rules::owner_verdict`]) and is one compare-and-set: a mismatch is
//!   `Lost`, never ignored. A lapsed grant is never revived.
//! - Expiry is measured on the store's clock (the boot clock for SQLite, the
//!   server's for PostgreSQL and etcd) — never on the caller's wall clock.
//!   Tests shift that clock with a `ClockSkew` (feature `test-clock`)
//!   instead of sleeping.
//!
//! The lease algorithm that keeps these rules — sweep expired grants, fast
//! takeover, re-acquisition, FIFO admission, waiter bookkeeping, history —
//! is written once, as pure planners in [`plan`]: a backend reads what a
//! decision needs, applies the plan's writes in one transaction through
//! [`plan::Apply`], and issues the tokens.

pub mod document;
mod error;
pub mod failpoint;
mod human;
pub mod limits;
pub mod migration;
pub mod mutant;
mod name;
pub mod plan;
pub mod record;
mod registration;
pub mod rules;
pub mod task;
mod types;
mod wait;

pub use error::{
    BackendError, DAMAGED_COUNTER_HINT, ErrorKind, Remedy, STORE_REPLACED_HINT, damaged_counter, is_timeout, timed_out,
};
pub use human::{
    ParseError, VALUE_SHOWN_MAX, escape_hidden, format_duration, format_time, hides_or_reorders, parse_duration,
    parse_duration_within, parse_time_within, quoted, shorten,
};
pub use name::{LeaseName, NameError};
pub use record::{
    Expect, Record, RecordBackend, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite,
    RecordWriteParams, StoreTime,
};
pub use registration::{
    PasswordFileError, StoreKind, StoreLocation, StoreOpenOptions, StoreRegistration, password_from_file,
    redact_password,
};
pub use task::{
    Available, Claim, QueueName, QueueStats, Retry, Task, TaskAdd, TaskAddParams, TaskClaimParams,
    TaskCompleteAndClaim, TaskCompleteAndClaimParams, TaskCompleteParams, TaskDifference, TaskFail, TaskFailParams,
    TaskHeartbeatParams, TaskId, TaskIdParams, TaskKey, TaskListParams, TaskLost, TaskPage, TaskPurgeParams, TaskRef,
    TaskRetry, TaskState, TaskStatsParams, TaskUpdate,
};
pub use types::*;
pub use wait::{WaitTopic, Watched, notify_all_under};

/// One store of leases.
///
/// Methods are `noun_verb`, take one params struct, and are synchronous:
/// the application is built on threads and blocking calls; a backend that
/// needs an async client (etcd) keeps its runtime inside itself.
///
/// Contention is a value (`Held`, `Lost`, `Refused`), failure is an error.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// What this backend can and cannot do; the conformance suite skips —
    /// loudly — what a backend declares it cannot do.
    fn capabilities(&self) -> Capabilities;

    /// Facts about the store for `leasehold doctor` and error messages.
    fn describe(&self) -> Result<StoreInfo, BackendError>;

    /// Who holds the store's write lock now — for a store where every
    /// write of every name takes one lock (SQLite's write lock), so that a
    /// message about a store that stays locked can name the process that
    /// keeps it ("held by pid 4242 (`leasehold run …`), which is
    /// stopped"). Asked on error paths only (a write that waited out its
    /// busy timeout, a renewal that went unanswered, `doctor`); it must not
    /// wait for the lock, nor need the connection a stuck call holds.
    ///
    /// `None` (the default) when the store has no such lock — PostgreSQL
    /// locks per name and row, etcd not at all, so one stuck client cannot
    /// hold up other names there — or this platform cannot tell who holds
    /// it (macOS lists no lock holders).
    fn write_lock(&self) -> Option<WriteLock> {
        None
    }

    /// Try once to take a grant of `params.name`.
    ///
    /// In one transaction, as [`plan::acquire`] plans it: drop expired
    /// grants (recorded as `expired`), drop the grants listed in
    /// `params.evict` if still live (recorded as `fast_takeover`) and the
    /// waiters listed in `params.evict_waiters` if still queued,
    /// re-extend a live grant the request re-acquires (same token; see
    /// [`rules::reacquires`]), else grant if admitted (see the crate docs on
    /// FIFO). When held and `params.ticket` is set, the waiter registration
    /// is refreshed (or re-made at the back of the queue if it had expired)
    /// and returned in [`Held::ticket`]; [`Held::ahead`] lists the waiters
    /// ahead of the acquirer with the processes that wait.
    fn lease_acquire(&self, params: &LeaseAcquireParams) -> Result<LeaseAcquire, BackendError>;

    /// Extend a live grant to `now + ttl`; `Lost` if it is not live.
    fn lease_renew(&self, params: &LeaseRenewParams) -> Result<LeaseRenew, BackendError>;

    /// End a live grant at once, keeping the token counter.
    fn lease_release(&self, params: &LeaseReleaseParams) -> Result<LeaseRelease, BackendError>;

    /// Check that `params.token` may still write (newest live grant for an
    /// exclusive lease; a live grant for a shared one) and record the
    /// verdict in the history.
    fn lease_fence(&self, params: &LeaseFenceParams) -> Result<LeaseFence, BackendError>;

    /// Register a waiter at the back of the FIFO for a name.
    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> Result<WaiterTicket, BackendError>;

    /// Leave the FIFO (a waiter that gives up). Removing an unknown or
    /// expired ticket is not an error.
    fn waiter_remove(&self, params: &WaiterRemoveParams) -> Result<(), BackendError>;

    /// Keep a waiter's registration alive for another `params.ttl`, in its
    /// place, without an attempt — where the store can do that cheaply:
    /// an attempt reads and judges the whole name, and a waiter far back
    /// refreshes its place every few seconds while nothing else happens. Not durable beyond what the store's
    /// registrations are (a lost refresh only makes the place expire).
    ///
    /// The default offers none ([`WaiterRefresh::NotOffered`]): the waiter
    /// makes an attempt instead, which refreshes its place.
    fn waiter_refresh(&self, params: &WaiterRefreshParams) -> Result<WaiterRefresh, BackendError> {
        let _ = params;
        Ok(WaiterRefresh::NotOffered)
    }

    /// For a waiter far back in the queue of `topic`'s name: block until
    /// `ahead`, the waiter just ahead of it as its last reading saw the
    /// queue, leaves the queue (or is gone already), until `timeout` passes
    /// (never longer), or until the topic is interrupted
    /// ([`WaitTopic::interrupt`]). Only what is just ahead is watched: the
    /// queue standing still costs the waiter nothing, and a waiter leaving
    /// wakes one waiter, not all of them. Like
    /// [`Backend::wait_for_change`], a hint: it may end early, and a store
    /// whose notifications are down says [`Behind::NotOffered`] (the
    /// waiter then sleeps).
    ///
    /// The default offers none ([`Behind::NotOffered`], at once): the
    /// waiter sleeps instead and reads the name now and then.
    fn wait_behind(
        &self,
        topic: &WaitTopic,
        ahead: WaiterTicket,
        timeout: std::time::Duration,
    ) -> Result<Behind, BackendError> {
        let _ = (topic, ahead, timeout);
        Ok(Behind::NotOffered)
    }

    /// The state of one name: its token counter, live grants, live
    /// waiters (with the processes that wait). `None` if the name was
    /// never granted.
    fn lease_get(&self, name: &LeaseName) -> Result<Option<LeaseState>, BackendError>;

    /// What a waiter reads between its attempts: [`Backend::lease_get`]
    /// with only the waiters ahead of `ticket` (all of them when it is not
    /// queued), of which only the first `proved` must say who waits — the
    /// others may read with no [`QueuedWaiter::holder`], and are then
    /// never proved gone by this reading. A waiter reads this at every
    /// change of the name; decoding every waiter's record each time made
    /// idle waiting cost the square of the queue's length.
    ///
    /// The default reads everything and cuts the queue at `ticket`.
    fn lease_waiting(
        &self,
        name: &LeaseName,
        ticket: WaiterTicket,
        proved: usize,
    ) -> Result<Option<LeaseState>, BackendError> {
        let _ = proved;
        let mut state = self.lease_get(name)?;
        if let Some(state) = &mut state
            && let Some(mine) = state.waiters.iter().position(|w| w.ticket == ticket)
        {
            state.waiters.truncate(mine);
        }
        Ok(state)
    }

    /// The state of every name (with `live_only`, only names with a live
    /// grant), ordered by name.
    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError>;

    /// The newest history entries of a name, newest first.
    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError>;

    /// After a restore from an older copy: make every token issued from now
    /// on, for every name — those in the store and those it has never seen
    /// — exceed every token it may have issued before by more than
    /// `params.by` (see [`TokensBumpParams`]). Grants and counters already
    /// stored keep their tokens; only the next ones move. Durable before it
    /// returns; concurrent grants are either before it or above the floor.
    fn tokens_bump(&self, params: &TokensBumpParams) -> Result<TokensBumped, BackendError>;

    /// Copy the whole store to `params.dest`, a consistent snapshot taken
    /// while other processes go on writing, and marked in the copy as a
    /// backup (so that `doctor` tells it from a plain copy). Nothing is
    /// ever overwritten: a destination that exists, or is a symbolic link,
    /// is refused; on any failure nothing is left at the destination or
    /// beside it. Durable before it returns.
    ///
    /// The default refuses ([`ErrorKind::Unsupported`]): a store with a
    /// server has its own backup tools, which also copy what leasehold
    /// does not own (roles, settings, the cluster's other keys); such a
    /// store refuses with a hint that names them.
    fn store_backup(&self, params: &StoreBackupParams) -> Result<StoreBackup, BackendError> {
        let _ = params;
        Err(BackendError::unsupported(
            // Asked on this refusal only; the stores in this repository
            // each say their own tools instead.
            self.describe().map_or_else(|_| "this".to_owned(), |i| i.location),
            "a backup by leasehold",
            "use the store's own backup tools",
        ))
    }

    /// Block until something that may unblock a waiter on `topic` happens
    /// in the store, or `timeout` passes — never longer than `timeout`.
    ///
    /// A hint, not a guarantee: it may return early without a relevant
    /// change (callers re-read the store), and a backend may miss a change
    /// (callers bound `timeout`, so polling is the fallback). Errors are
    /// for a store that cannot be asked at all; a backend whose
    /// notification channel is down simply sleeps. A `timeout` beyond
    /// [`limits::WAIT`] is cut to it (a wait may always end early).
    ///
    /// It ends early, at once, when the topic is
    /// [ending](WaitTopic::ending) — interrupted by a cancel, or woken by
    /// the waiter's watch of the processes that keep it out — before or
    /// during the wait: a waiter near the front waits in one piece only
    /// because of that (slices of the poll interval, with their wake-ups,
    /// were most of what idle waiters cost).
    ///
    /// The default sleeps `timeout` ([`WaitTopic::sleep`]): pure polling.
    /// SQLite, which has no notification across processes, watches its
    /// write-ahead log (`host::FileWatch`: every commit writes it),
    /// PostgreSQL listens (LISTEN/NOTIFY), etcd watches the name's keys.
    fn wait_for_change(&self, topic: &WaitTopic, timeout: std::time::Duration) -> Result<(), BackendError> {
        topic.sleep(timeout.min(limits::WAIT.max));
        Ok(())
    }

    /// The task queue of this store, if it has one (a backend without a
    /// queue keeps this default: `None`).
    fn tasks(&self) -> Option<&dyn TaskBackend> {
        None
    }

    /// The records of this store (what schedules are kept in), if it keeps
    /// them (a backend without records keeps this default: `None`, and
    /// the library refuses schedules on it with that reason).
    fn records(&self) -> Option<&dyn RecordBackend> {
        None
    }
}

/// A store's task queue (see the `task` module for the states and rules),
/// reached through [`Backend::tasks`]. Same conventions as [`Backend`].
pub trait TaskBackend: Send + Sync {
    /// Add tasks in one transaction. If any id exists with another task
    /// (another payload, priority or max attempts:
    /// [`TaskAddParams::differences`], judged by [`TaskAdd::again`]),
    /// nothing is added and that outcome is `Conflict`. Each task's
    /// [`Available`] is resolved on the store's clock, in that transaction.
    fn task_add(&self, params: &[TaskAddParams]) -> Result<Vec<TaskAdd>, BackendError>;

    /// Claim the first claimable task in claim order: `running`, one more
    /// attempt, a new token, a lease of `ttl`. `None` when nothing is
    /// claimable.
    fn task_claim(&self, params: &TaskClaimParams) -> Result<Option<Claim>, BackendError>;

    /// Extend a live claim to `now + ttl`.
    fn task_heartbeat(&self, params: &TaskHeartbeatParams) -> Result<TaskUpdate, BackendError>;

    /// Mark a live claim's task `done` with its result.
    fn task_complete(&self, params: &TaskCompleteParams) -> Result<TaskUpdate, BackendError>;

    /// For each of `params`, in order: mark a live claim's task `done` and
    /// claim the next task ([`TaskCompleteAndClaimParams`]) — all in one
    /// transaction where the store allows it, so that a worker's report
    /// and its next claim (or several workers' reports, committed
    /// together) cost one durable write. A crash in between then loses
    /// nothing: all of it happened, or none. One outcome per params.
    ///
    /// The default runs [`TaskBackend::task_complete`], then
    /// [`TaskBackend::task_claim`], for each: two transactions each, so an
    /// error can come after some completions were applied. The SQLite and
    /// PostgreSQL stores override it with one transaction.
    fn task_complete_and_claim(
        &self,
        params: &[TaskCompleteAndClaimParams],
    ) -> Result<Vec<TaskCompleteAndClaim>, BackendError> {
        params.iter().try_for_each(|p| p.claim.check())?;
        params
            .iter()
            .map(|p| {
                let completed = self.task_complete(&p.complete)?;
                let claim = self.task_claim(&p.claim)?;
                Ok(TaskCompleteAndClaim { completed, claim })
            })
            .collect()
    }

    /// Record a failed attempt of a live claim: back to `pending` after a
    /// delay, or `dead` (no retry, or attempts used up).
    fn task_fail(&self, params: &TaskFailParams) -> Result<TaskFail, BackendError>;

    /// Hand a live claim back without charging its attempt.
    fn task_release(&self, params: &TaskRef) -> Result<TaskUpdate, BackendError>;

    /// Revive a dead task: `pending`, attempts reset (tokens keep growing).
    fn task_retry(&self, params: &TaskIdParams) -> Result<TaskRetry, BackendError>;

    /// One task, `None` if there is no such task.
    fn task_get(&self, params: &TaskIdParams) -> Result<Option<Task>, BackendError>;

    /// Tasks grouped by queue, each queue's pending tasks first in claim
    /// order, then running, dead and done ones; optionally of one state.
    /// An expired claim is still listed `running` (with no lease left)
    /// until the next claim of its queue returns it to the queue.
    fn task_list(&self, params: &TaskListParams) -> Result<Vec<Task>, BackendError>;

    /// Counts per state, per queue (ordered by queue name).
    fn task_stats(&self, params: &TaskStatsParams) -> Result<Vec<QueueStats>, BackendError>;

    /// Delete tasks of `state` last updated more than `older_than` ago;
    /// returns how many. Only done and dead tasks are ever deleted (any
    /// other state deletes nothing).
    fn task_purge(&self, params: &TaskPurgeParams) -> Result<u64, BackendError>;
}
