//! The one conformance suite every leasehold backend runs.
//!
//! The contract under test is the documentation of the `leasehold-backend`
//! crate (its crate docs and the docs of [`Backend`] and its types); each case
//! says which sentence of it it checks. The suite is backend-agnostic, in the
//! manner of river's `riverdrivertest` and apalis' `generic_storage_test!`.
//!
//! # Running it for a backend
//!
//! A backend crate implements [`Harness`] in an integration test built with
//! `harness = false` and hands it to [`main`]; every case becomes one trial
//! of a libtest-like runner (libtest-mimic: the same filters, `--list`,
//! `--test-threads`):
//!
//! ```text
//! struct SqliteHarness { /* a temp dir and the backend */ }
//! impl leasehold_backend_tests::Harness for SqliteHarness { /* ... */ }
//! fn main() { leasehold_backend_tests::main::<SqliteHarness>() }
//! ```
//!
//! # What is skipped, and how it shows
//!
//! A case that needs a capability the backend lacks ([`cases()`] says which)
//! is reported as **ignored**, with the reason in its name's `[kind]`
//! (`[skip: no clock_skew]`), and counted as ignored in the summary — never
//! as passed. A case that runs anyway without its capability
//! (`--include-ignored`) fails. When no store can be made here (the
//! harness's server is not installed: its [`Harness::new`] ends with
//! `leasehold_testkit::unavailable`), every case is reported as ignored
//! with that reason — a failure under `CI=true` (leasehold-testkit's rule).
//!
//! # Adding a case
//!
//! 1. Write `pub fn <area>_<what><H: Harness>(t: &mut Case<H>)` in
//!    `cases/<area>.rs` (a new area module is added to `cases/mod.rs` and
//!    re-exported there with `pub use`), with a doc comment saying what it
//!    proves. Build parameters with [`params`] (struct-update syntax for what
//!    differs from the defaults) and call the store through the [`Case`]
//!    helpers, which turn an unexpected outcome into a panic naming the call.
//! 2. Add it to [`cases()`] with the capabilities it needs. A case missing
//!    there would never run; this crate's own test `every_case_is_listed`
//!    fails until it is there.
//!
//! Cases must be able to fail: assert the exact outcome (`Lost(Gone)`, the
//! token, the history events), never only that a call returned `Ok`. Time
//! moves only through [`Case::advance`] (the store's [`ClockSkew`]), never by
//! sleeping — except in the expiry cases, which every store runs: where the
//! clock cannot be moved (etcd's is the server's) they use grants of
//! [`REAL_TTL`] and let real time pass ([`Case::expire`]). A real-time
//! [`SLACK`] is allowed only where a read reports time left.

use std::time::Duration;

use leasehold_backend::{
    Backend, ClockSkew, Grant, Held, HistoryEntry, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, RecordBackend, TaskBackend, Token, WaiterEnqueueParams, WaiterRemoveParams,
    WaiterTicket,
};

pub mod cases;
pub mod contention;
pub mod opening;
pub mod params;

/// How the suite makes, inspects and restarts one backend's stores.
pub trait Harness: Sized {
    /// A fresh, empty store.
    fn new() -> Self;

    /// The store under test.
    fn backend(&self) -> &dyn Backend;

    /// The shift of the store's clock; only used when
    /// `capabilities().clock_skew`.
    fn skew(&self) -> &ClockSkew;

    /// Close and reopen the same store, keeping the same [`ClockSkew`]; only
    /// used when `capabilities().reopenable`.
    fn reopen(&mut self);
}

/// A server store as the suite opens it: under a prefix of each case's
/// own, on a server the test binary shares, reopened by opening the same
/// prefix again; its clock is the server's and never moved (`clock_skew:
/// false`). [`ServerHarness`] is its [`Harness`].
pub trait PrefixedStore: 'static {
    type Backend: Backend;
    /// A prefix no other case (or test binary) uses.
    fn unique_prefix() -> String;
    /// A new client of the shared server, under `prefix`.
    fn open(prefix: &str) -> Self::Backend;
}

/// The [`Harness`] of a [`PrefixedStore`] (etcd, Firestore, Redis).
pub struct ServerHarness<S: PrefixedStore> {
    backend: S::Backend,
    prefix: String,
    skew: ClockSkew,
}

impl<S: PrefixedStore> std::fmt::Debug for ServerHarness<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHarness")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<S: PrefixedStore> Harness for ServerHarness<S> {
    fn new() -> Self {
        let prefix = S::unique_prefix();
        Self {
            backend: S::open(&prefix),
            prefix,
            skew: ClockSkew::default(),
        }
    }

    fn backend(&self) -> &dyn Backend {
        &self.backend
    }

    fn skew(&self) -> &ClockSkew {
        &self.skew
    }

    fn reopen(&mut self) {
        self.backend = S::open(&self.prefix);
    }
}

/// A backend capability a case may need (see
/// [`leasehold_backend::Capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// The store's clock can be moved forward by the harness' [`ClockSkew`].
    ClockSkew,
    /// [`Harness::reopen`] keeps all state.
    Reopenable,
    /// The task queue methods are implemented.
    Tasks,
    /// The record methods are implemented (schedules).
    Records,
}

/// Real time a case may take between a write and the read that reports the
/// time left on a grant (`expires_in`): generous, since a durable write may
/// wait for a disk.
pub const SLACK: Duration = Duration::from_secs(5);

impl Capability {
    /// Whether `backend` has it: a flag of its [`Capabilities`], or (the
    /// task queue) [`Backend::tasks`].
    ///
    /// [`Capabilities`]: leasehold_backend::Capabilities
    fn of(self, backend: &dyn Backend) -> bool {
        let caps = backend.capabilities();
        match self {
            Capability::ClockSkew => caps.clock_skew,
            Capability::Reopenable => caps.reopenable,
            Capability::Tasks => backend.tasks().is_some(),
            Capability::Records => backend.records().is_some(),
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Capability::ClockSkew => "clock_skew",
            Capability::Reopenable => "reopenable",
            Capability::Tasks => "tasks",
            Capability::Records => "records",
        }
    }
}

/// The TTL of the grants an expiry case lets run out where the store's clock
/// cannot be moved: real time passes. Two seconds is the shortest etcd
/// grants (its minimum lease TTL with the default election timeout).
pub const REAL_TTL: Duration = Duration::from_secs(2);

/// How long after [`REAL_TTL`] a store may take to expire a grant in real
/// time (etcd's leader checks its leases every 500 ms).
pub const REAL_EXPIRY_LAG: Duration = Duration::from_secs(2);

/// One running case: a fresh store, and helpers that panic with the name of
/// the call when the store answers something other than what the case expects.
#[derive(Debug)]
pub struct Case<H> {
    name: &'static str,
    harness: H,
}

impl<H: Harness> Case<H> {
    /// Run `case` against a fresh store.
    ///
    /// # Panics
    /// When the store lacks one of `needs` (the runner reports such a case
    /// as ignored; it runs only when asked to with `--include-ignored`).
    pub fn run(name: &'static str, needs: &[Capability], case: fn(&mut Case<H>)) {
        let mut t = Case {
            name,
            harness: H::new(),
        };
        for need in needs {
            assert!(
                need.of(t.backend()),
                "case {name} needs Capabilities::{}, which {} lacks: it cannot run here",
                need.flag(),
                std::any::type_name::<H>()
            );
        }
        case(&mut t);
    }

    /// The backend under test.
    pub fn backend(&self) -> &dyn Backend {
        self.harness.backend()
    }

    /// The backend's task queue (a case that calls this is listed as
    /// needing [`Capability::Tasks`]).
    pub fn tasks(&self) -> &dyn TaskBackend {
        self.backend()
            .tasks()
            .unwrap_or_else(|| panic!("case {} uses the task queue, which this store lacks", self.name))
    }

    /// The backend's records (a case that calls this is listed as needing
    /// [`Capability::Records`]).
    pub fn records(&self) -> &dyn RecordBackend {
        self.backend()
            .records()
            .unwrap_or_else(|| panic!("case {} uses records, which this store lacks", self.name))
    }

    /// Move the store's clock forward (no sleeping).
    pub fn advance(&self, by: Duration) {
        assert!(
            self.backend().capabilities().clock_skew,
            "case {} moves the clock but is not listed as needing Capability::ClockSkew",
            self.name
        );
        self.harness.skew().advance(by);
    }

    /// Whether time must really pass for a grant to expire here.
    fn real_time(&self) -> bool {
        !self.backend().capabilities().clock_skew
    }

    /// The TTL of a grant an expiry case lets run out: [`params::TTL`] where
    /// the store's clock can be moved, [`REAL_TTL`] where it cannot.
    pub fn expiry_ttl(&self) -> Duration {
        if self.real_time() { REAL_TTL } else { params::TTL }
    }

    /// `p` with the TTL of [`Case::expiry_ttl`].
    pub fn expiring(&self, p: LeaseAcquireParams) -> LeaseAcquireParams {
        LeaseAcquireParams {
            ttl: self.expiry_ttl(),
            ..p
        }
    }

    /// Bring a grant of [`Case::expiry_ttl`], made just now, close to its
    /// end while it is still live: the store's clock to a second before it,
    /// or half of it in real time.
    pub fn almost_expire(&self) {
        if self.real_time() {
            std::thread::sleep(REAL_TTL / 2);
        } else {
            self.advance(params::TTL.saturating_sub(Duration::from_secs(1)));
        }
    }

    /// Let every grant of [`Case::expiry_ttl`] made so far run out: the
    /// store's clock a second past it, or, in real time, its TTL and the
    /// store's expiry lag.
    pub fn expire(&self) {
        if self.real_time() {
            std::thread::sleep(REAL_TTL + REAL_EXPIRY_LAG);
        } else {
            self.advance(params::TTL + Duration::from_secs(1));
        }
    }

    /// Close and reopen the store.
    pub fn reopen(&mut self) {
        assert!(
            self.backend().capabilities().reopenable,
            "case {} reopens but is not listed as needing Capability::Reopenable",
            self.name
        );
        self.harness.reopen();
    }

    /// `lease_acquire`, whatever the outcome.
    pub fn acquire(&self, params: &LeaseAcquireParams) -> LeaseAcquire {
        self.backend()
            .lease_acquire(params)
            .unwrap_or_else(|e| panic!("lease_acquire({:?}) failed: {e}", params.name))
    }

    /// `lease_acquire`, which must grant.
    pub fn granted(&self, params: &LeaseAcquireParams) -> Grant {
        match self.acquire(params) {
            LeaseAcquire::Acquired(grant) => {
                assert_eq!(grant.name, params.name, "grant of another name");
                grant
            }
            LeaseAcquire::Held(held) => panic!(
                "lease_acquire({:?}) by {:?} ({}) must be granted, but is held: {held:#?}",
                params.name,
                params.owner.label,
                params.mode.label()
            ),
        }
    }

    /// `lease_acquire`, which must be refused.
    pub fn held(&self, params: &LeaseAcquireParams) -> Held {
        match self.acquire(params) {
            LeaseAcquire::Held(held) => held,
            LeaseAcquire::Acquired(grant) => panic!(
                "lease_acquire({:?}) by {:?} ({}) must be held, but was granted: {grant:#?}",
                params.name,
                params.owner.label,
                params.mode.label()
            ),
        }
    }

    /// `lease_renew`, whatever the outcome.
    pub fn renew(&self, params: &LeaseRenewParams) -> LeaseRenew {
        self.backend()
            .lease_renew(params)
            .unwrap_or_else(|e| panic!("lease_renew({:?}, {}) failed: {e}", params.name, params.token))
    }

    /// `lease_release`, whatever the outcome.
    pub fn release(&self, params: &LeaseReleaseParams) -> LeaseRelease {
        self.backend()
            .lease_release(params)
            .unwrap_or_else(|e| panic!("lease_release({:?}, {}) failed: {e}", params.name, params.token))
    }

    /// `lease_release`, which must succeed.
    pub fn released(&self, params: &LeaseReleaseParams) {
        assert_eq!(
            self.release(params),
            LeaseRelease::Released,
            "lease_release({:?}, {}) of a live grant",
            params.name,
            params.token
        );
    }

    /// `lease_fence`, whatever the outcome.
    pub fn fence(&self, params: &LeaseFenceParams) -> LeaseFence {
        self.backend()
            .lease_fence(params)
            .unwrap_or_else(|e| panic!("lease_fence({:?}, {}) failed: {e}", params.name, params.token))
    }

    /// `waiter_enqueue`.
    pub fn enqueue(&self, params: &WaiterEnqueueParams) -> WaiterTicket {
        self.backend()
            .waiter_enqueue(params)
            .unwrap_or_else(|e| panic!("waiter_enqueue({:?}) failed: {e}", params.name))
    }

    /// `waiter_remove`.
    pub fn remove(&self, name: &str, ticket: WaiterTicket) {
        self.backend()
            .waiter_remove(&WaiterRemoveParams {
                name: params::name(name),
                ticket,
            })
            .unwrap_or_else(|e| panic!("waiter_remove({name:?}, {ticket:?}) failed: {e}"));
    }

    /// `lease_list`.
    pub fn list(&self, live_only: bool) -> Vec<LeaseState> {
        self.backend()
            .lease_list(&LeaseListParams { live_only })
            .unwrap_or_else(|e| panic!("lease_list(live_only: {live_only}) failed: {e}"))
    }

    /// `lease_get`, whatever the outcome.
    pub fn get(&self, name: &str) -> Option<LeaseState> {
        self.backend()
            .lease_get(&params::name(name))
            .unwrap_or_else(|e| panic!("lease_get({name:?}) failed: {e}"))
    }

    /// `lease_get` of a name that was granted.
    pub fn state(&self, name: &str) -> LeaseState {
        self.get(name)
            .unwrap_or_else(|| panic!("lease_get({name:?}) is None, but the name was granted"))
    }

    /// The tokens of the live grants of `name`, oldest first.
    pub fn live(&self, name: &str) -> Vec<Token> {
        tokens(&self.state(name).grants)
    }

    /// The whole history of `name`, newest first.
    pub fn history(&self, name: &str) -> Vec<HistoryEntry> {
        self.history_limited(name, 1000)
    }

    /// The newest `limit` history entries of `name`.
    pub fn history_limited(&self, name: &str, limit: u32) -> Vec<HistoryEntry> {
        self.backend()
            .lease_history(&LeaseHistoryParams {
                name: params::name(name),
                limit,
            })
            .unwrap_or_else(|e| panic!("lease_history({name:?}, {limit}) failed: {e}"))
    }

    /// The history of `name` as (event, token) pairs, newest first.
    pub fn events(&self, name: &str) -> Vec<(HistoryEvent, Option<Token>)> {
        self.history(name).iter().map(|e| (e.event, e.token)).collect()
    }
}

/// The tokens of `grants`, in order.
#[must_use]
pub fn tokens(grants: &[Grant]) -> Vec<Token> {
    grants.iter().map(|g| g.token).collect()
}

/// Assert that a grant's reported time left is its full TTL, less at most
/// [`SLACK`] of real time.
pub fn assert_fresh(expires_in: Duration, ttl: Duration, what: &str) {
    assert!(
        expires_in <= ttl && expires_in + SLACK >= ttl,
        "{what}: expires_in is {expires_in:?}, expected about {ttl:?} (the full TTL, measured on the store clock)"
    );
}

/// Names in the order `lease_list` must return them.
#[must_use]
pub fn names(states: &[LeaseState]) -> Vec<&str> {
    states.iter().map(|s| s.name.as_str()).collect()
}

/// One row of the suite's table: a case's name, the capabilities it
/// needs, and the case.
pub type CaseEntry<H> = (&'static str, &'static [Capability], fn(&mut Case<H>));

/// A [`CaseEntry`] for `cases::NAME`, needing the capabilities named after
/// it. `H` is the harness type parameter of the function it is used in.
macro_rules! case {
    ($name:ident $(, $need:ident)*) => {
        (
            stringify!($name),
            &[$(Capability::$need),*] as &'static [Capability],
            cases::$name::<H> as fn(&mut Case<H>),
        )
    };
}

/// Every case, with the capabilities it needs; in the order they were
/// written (by area).
#[must_use]
pub fn cases<H: Harness>() -> Vec<CaseEntry<H>> {
    let mut all = lease_cases::<H>();
    all.extend(task_cases::<H>());
    all.extend(record_cases::<H>());
    all
}

/// The cases of records (stores with [`Capability::Records`]).
fn record_cases<H: Harness>() -> Vec<CaseEntry<H>> {
    vec![
        case!(records_put_creates_then_compares_versions, Records),
        case!(records_batch_is_all_or_nothing, Records),
        case!(records_versions_never_repeat_for_a_key, Records),
        case!(records_list_by_prefix_in_key_order, Records),
        case!(records_limits_are_refused, Records),
        case!(records_racing_writers_lose_no_update, Records),
        case!(records_a_write_past_its_not_after_changes_nothing, Records),
        case!(records_clock_agrees_with_this_host, Records),
        case!(records_clock_is_the_stores_not_the_clients, Records, ClockSkew),
    ]
}

/// The cases of leases: tokens, modes, renew, release, waiters, fences,
/// history and names.
fn lease_cases<H: Harness>() -> Vec<CaseEntry<H>> {
    vec![
        case!(tokens_first_grant_is_positive),
        case!(tokens_increase_across_release),
        case!(tokens_increase_across_expiry),
        case!(tokens_increase_across_fast_takeover),
        case!(tokens_survive_reopen, Reopenable),
        case!(tokens_are_per_name),
        case!(tokens_bump_raises_every_next_token),
        case!(tokens_bump_survives_reopen, Reopenable),
        case!(modes_exclusive_excludes_everything),
        case!(modes_shared_coexist),
        case!(modes_shared_limit),
        case!(modes_shared_limits_mixed_keep_the_smallest),
        case!(modes_exclusive_refused_while_shared_live),
        case!(renew_extends_on_the_store_clock, ClockSkew),
        case!(renew_after_expiry_is_lost_and_never_revived),
        case!(renew_after_expiry_and_a_new_holder_says_expired),
        case!(renew_after_release_is_gone),
        case!(renew_with_wrong_owner_is_not_owner),
        case!(renew_without_explicit_owner_is_refused),
        case!(renew_of_unissued_token_is_gone),
        case!(release_ends_grant_at_once_and_keeps_counter),
        case!(release_twice_is_lost),
        case!(release_with_wrong_owner_is_not_owner),
        case!(release_without_explicit_owner_is_refused),
        case!(release_and_renew_act_only_on_the_named_grant),
        case!(release_by_token_alone_never_ends_a_bound_grant),
        case!(reacquire_explicit_owner_is_idempotent),
        case!(reacquire_explicit_owner_extends_expiry, ClockSkew),
        case!(reacquire_implicit_owner_is_held),
        case!(reacquire_other_mode_is_not_idempotent),
        case!(reacquire_after_expiry_gets_new_token),
        case!(reacquire_by_the_same_process_renews_its_grant),
        case!(reacquire_same_owner_from_another_process_is_held),
        case!(evict_takes_over_live_grant),
        case!(evict_of_stale_token_is_ignored),
        case!(waiters_fifo_blocks_newcomers),
        case!(waiters_exclusive_waiter_blocks_new_shared),
        case!(waiters_shared_waiters_admit_shared_newcomer),
        case!(waiters_registration_expires, ClockSkew),
        case!(waiters_refresh_keeps_place, ClockSkew),
        case!(waiters_refresh_alone_keeps_place),
        case!(waiters_far_back_wait_for_the_waiter_just_ahead),
        case!(waits_end_when_woken_or_interrupted),
        case!(waiters_expired_ticket_is_remade_at_back, ClockSkew),
        case!(waiters_remove_unblocks),
        case!(waiters_are_read_with_the_waiting_process),
        case!(waiters_read_by_a_waiter_are_those_ahead_of_it),
        case!(waiters_evicted_waiter_leaves_in_the_acquiring_transaction),
        case!(waiters_evict_only_removes_registrations_still_queued),
        case!(fence_exclusive_newest_live_only),
        case!(fence_expired_token_is_not_live),
        case!(fence_shared_any_live_grant),
        case!(fence_verdicts_are_recorded),
        case!(fence_with_another_grant_of_the_token_is_refused),
        case!(history_newest_first_and_limited),
        case!(history_records_expiry),
        case!(inspect_get_unknown_is_none),
        case!(inspect_get_reports_grant),
        case!(inspect_list_ordered_and_live_only),
        case!(inspect_waiters_counted),
        case!(inspect_write_lock_names_no_holder_when_nothing_writes),
        case!(names_stored_exactly),
        case!(names_are_independent),
        case!(expiry_on_the_store_clock),
        case!(limits_lease_ttls_out_of_range_are_refused),
    ]
}

/// The cases of the task queue (stores with [`Capability::Tasks`]).
fn task_cases<H: Harness>() -> Vec<CaseEntry<H>> {
    vec![
        case!(limits_task_durations_out_of_range_are_refused, Tasks),
        case!(task_add_stores_a_pending_task, Tasks),
        case!(task_add_is_idempotent_by_id, Tasks),
        case!(task_add_another_priority_or_attempts_is_a_conflict, Tasks),
        case!(task_add_conflict_adds_nothing_of_the_call, Tasks),
        case!(task_add_ids_are_per_queue, Tasks),
        case!(task_add_now_is_on_the_store_clock, Tasks, ClockSkew),
        case!(task_add_delay_is_on_the_store_clock, Tasks, ClockSkew),
        case!(task_claim_order_priority_then_available_then_insertion, Tasks),
        case!(task_claim_delayed_task_waits_for_its_time, Tasks, ClockSkew),
        case!(task_claim_nothing_claimable_is_none, Tasks),
        case!(task_claim_makes_running_with_attempt_and_token, Tasks),
        case!(task_claim_expired_claim_is_claimable_again, Tasks, ClockSkew),
        case!(
            task_claim_expired_claim_keeps_its_place_in_claim_order,
            Tasks,
            ClockSkew
        ),
        case!(task_claim_expirations_use_up_attempts, Tasks, ClockSkew),
        case!(task_complete_late_worker_is_refused, Tasks, ClockSkew),
        case!(task_complete_and_claim_completes_then_claims, Tasks),
        case!(task_complete_and_claim_late_completion_is_refused, Tasks, ClockSkew),
        case!(task_complete_and_claim_several_in_one_call, Tasks),
        case!(task_stale_token_changes_nothing, Tasks, ClockSkew),
        case!(task_expired_claim_is_stale_without_a_newer_claim, Tasks, ClockSkew),
        case!(task_unknown_task_is_not_found, Tasks),
        case!(task_heartbeat_extends_the_claim, Tasks, ClockSkew),
        case!(task_heartbeat_keeps_the_claim_time, Tasks, ClockSkew),
        case!(task_fail_retry_after_delay, Tasks, ClockSkew),
        case!(task_fail_never_is_dead, Tasks),
        case!(task_fail_attempts_used_up_is_dead_even_with_retry, Tasks),
        case!(task_fail_backoff_is_exponential, Tasks, ClockSkew),
        case!(task_get_unknown_is_none, Tasks),
        case!(task_stats_counts_per_state_per_queue, Tasks),
        case!(task_list_filters_by_state_in_claim_order, Tasks),
        case!(task_list_pages_by_key_in_list_order, Tasks),
        case!(task_purge_deletes_old_finished_tasks_of_the_queue, Tasks, ClockSkew),
        case!(task_lifecycle_one_completion_with_interleaved_claims, Tasks, ClockSkew),
        case!(task_lifecycle_racing_workers_complete_each_task_once, Tasks, ClockSkew),
        case!(task_release_does_not_charge_the_attempt, Tasks),
        case!(task_release_never_uses_up_attempts, Tasks),
        case!(task_retry_revives_dead_task, Tasks),
        case!(task_retry_of_live_or_unknown_is_refused, Tasks),
    ]
}

/// Run the whole suite for `H` as a libtest-like test binary (built with
/// `harness = false`): one trial per case; a case the store cannot run is
/// reported as ignored, with the reason (see the crate docs).
pub fn main<H: Harness + 'static>() -> ! {
    // The capabilities are the backend's, the same for every store it
    // makes: one store made up front tells them — or why no store can be
    // made here, which then ends every case.
    let present = leasehold_testkit::probe(|| {
        let probe = H::new();
        [
            Capability::ClockSkew,
            Capability::Reopenable,
            Capability::Tasks,
            Capability::Records,
        ]
        .into_iter()
        .filter(|c| c.of(probe.backend()))
        .collect::<Vec<_>>()
    });
    let trials = cases::<H>()
        .into_iter()
        .map(|(name, needs, case)| match &present {
            Err(missing) => {
                let missing = missing.clone();
                leasehold_testkit::trial(name, move || missing.raise())
            }
            Ok(present) => {
                let trial = leasehold_testkit::trial(name, move || Case::<H>::run(name, needs, case));
                match needs.iter().find(|need| !present.contains(need)) {
                    Some(need) => trial
                        .with_kind(format!("skip: no {}", need.flag()))
                        .with_ignored_flag(true),
                    None => trial,
                }
            }
        })
        .collect();
    leasehold_testkit::run(trials)
}

#[cfg(test)]
mod tests {
    /// A case missing from [`super::cases`] would never run anywhere.
    #[test]
    fn every_case_is_listed() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut defined = Vec::new();
        for entry in std::fs::read_dir(src.join("cases")).expect("read cases/") {
            let text = std::fs::read_to_string(entry.expect("dir entry").path()).expect("read a case file");
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("pub fn ") {
                    defined.push(rest.split('<').next().expect("a name").to_owned());
                }
            }
        }
        let listed: Vec<&str> = super::cases::<Dummy>().iter().map(|(name, _, _)| *name).collect();
        assert!(defined.len() > 40, "found only {} cases", defined.len());
        for case in &defined {
            assert!(listed.contains(&case.as_str()), "case {case} is not listed in cases()");
        }
        let mut unique = listed.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), listed.len(), "cases() lists a case twice");
        assert_eq!(listed.len(), defined.len(), "cases() lists one that does not exist");
    }

    /// Never made: only names the type the case table is built for.
    struct Dummy;

    impl super::Harness for Dummy {
        fn new() -> Self {
            unreachable!("the table is only listed")
        }
        fn backend(&self) -> &dyn leasehold_backend::Backend {
            unreachable!()
        }
        fn skew(&self) -> &leasehold_backend::ClockSkew {
            unreachable!()
        }
        fn reopen(&mut self) {}
    }
}
