//! The one conformance suite every leasehold backend runs.
//!
//! The contract under test is the documentation of the `leasehold-backend`
//! crate (its crate docs and the docs of [`Backend`] and its types); each case
//! says which sentence of it it checks. The suite is backend-agnostic, in the
//! manner of river's `riverdrivertest` and apalis' `generic_storage_test!`.
//!
//! # Running it for a backend
//!
//! A backend crate implements [`Harness`] in an integration test and expands
//! [`conformance!`] once; every case becomes one `#[test]`:
//!
//! ```ignore
//! struct SqliteHarness { /* a temp dir and the backend */ }
//! impl leasehold_backend_tests::Harness for SqliteHarness { /* ... */ }
//! leasehold_backend_tests::conformance!(SqliteHarness);
//! ```
//!
//! # Adding a case
//!
//! 1. Write `pub fn <area>_<what><H: Harness>(t: &mut Case<H>)` in
//!    `cases/<area>.rs` (a new area module is added to `cases/mod.rs` and
//!    re-exported there with `pub use`), with a doc comment saying what it
//!    proves. Build parameters with [`params`] (struct-update syntax for what
//!    differs from the defaults) and call the store through the [`Case`]
//!    helpers, which turn an unexpected outcome into a panic naming the call.
//! 2. Add its name to the list in [`conformance!`]. A case missing from the
//!    list would never run; this crate's own test `every_case_is_in_the_macro`
//!    fails until it is there.
//! 3. If it needs a capability the backend may lack, start with
//!    `if !t.supports(Capability::ClockSkew) { return; }`: that prints a
//!    `SKIP` line to stderr (uncaptured, so it shows in every run) — a case
//!    never passes silently without testing anything.
//!
//! Cases must be able to fail: assert the exact outcome (`Lost(Gone)`, the
//! token, the history events), never only that a call returned `Ok`. Time
//! moves only through [`Case::advance`] (the store's [`ClockSkew`]), never by
//! sleeping; a real-time [`SLACK`] is allowed only where a read reports time
//! left.

use std::io::Write as _;
use std::time::Duration;

use leasehold_backend::{
    Backend, ClockSkew, Grant, Held, HistoryEntry, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Token, WaiterEnqueueParams, WaiterTicket,
};

pub mod cases;
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

    /// Why this harness cannot make a store here (e.g. its server is not
    /// installed), checked before each case: `Some(reason)` skips the case
    /// with a SKIP line. A harness must return `None` where skipping is not
    /// allowed (CI), and fail there instead.
    #[must_use]
    fn unavailable() -> Option<String> {
        None
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
}

/// Real time a case may take between a write and the read that reports the
/// time left on a grant (`expires_in`): generous, since a durable write may
/// wait for a disk.
pub const SLACK: Duration = Duration::from_secs(5);

/// One running case: a fresh store, and helpers that panic with the name of
/// the call when the store answers something other than what the case expects.
#[derive(Debug)]
pub struct Case<H> {
    name: &'static str,
    harness: H,
}

impl<H: Harness> Case<H> {
    /// Run `case` against a fresh store; called by [`conformance!`].
    pub fn run(name: &'static str, case: fn(&mut Case<H>)) {
        if let Some(reason) = H::unavailable() {
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIP conformance::{name}: {} cannot make a store here: {reason}",
                std::any::type_name::<H>(),
            );
            return;
        }
        let mut t = Case {
            name,
            harness: H::new(),
        };
        case(&mut t);
    }

    /// The backend under test.
    pub fn backend(&self) -> &dyn Backend {
        self.harness.backend()
    }

    /// Whether the backend has `capability`; if not, prints a SKIP line for
    /// this case to stderr and the case must return.
    pub fn supports(&self, capability: Capability) -> bool {
        let caps = self.backend().capabilities();
        let (has, flag) = match capability {
            Capability::ClockSkew => (caps.clock_skew, "clock_skew"),
            Capability::Reopenable => (caps.reopenable, "reopenable"),
            Capability::Tasks => (caps.tasks, "tasks"),
        };
        if !has {
            // Straight to the stderr descriptor: libtest captures `eprintln!`
            // of passing tests, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIP conformance::{}: backend {} lacks the capability (Capabilities::{flag} = false)",
                self.name,
                std::any::type_name::<H>(),
            );
        }
        has
    }

    /// Move the store's clock forward (no sleeping).
    pub fn advance(&self, by: Duration) {
        assert!(
            self.backend().capabilities().clock_skew,
            "case {} moves the clock without checking `supports(Capability::ClockSkew)`",
            self.name
        );
        self.harness.skew().advance(by);
    }

    /// Close and reopen the store.
    pub fn reopen(&mut self) {
        assert!(
            self.backend().capabilities().reopenable,
            "case {} reopens without checking `supports(Capability::Reopenable)`",
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
            .waiter_remove(&params::name(name), ticket)
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

/// Expand the whole conformance suite for a [`Harness`]: one `#[test]` per
/// case, named after it.
///
/// ```ignore
/// leasehold_backend_tests::conformance!(SqliteHarness);
/// ```
#[macro_export]
macro_rules! conformance {
    ($harness:ty) => {
        $crate::__conformance_cases! { $harness;
            tokens_first_grant_is_positive,
            tokens_increase_across_release,
            tokens_increase_across_expiry,
            tokens_increase_across_fast_takeover,
            tokens_survive_reopen,
            tokens_are_per_name,
            modes_exclusive_excludes_everything,
            modes_shared_coexist,
            modes_shared_limit,
            modes_exclusive_refused_while_shared_live,
            renew_extends_on_the_store_clock,
            renew_after_expiry_is_lost_and_never_revived,
            renew_after_release_is_gone,
            renew_with_wrong_owner_is_not_owner,
            renew_without_explicit_owner_is_refused,
            renew_of_unissued_token_is_gone,
            release_ends_grant_at_once_and_keeps_counter,
            release_twice_is_lost,
            release_with_wrong_owner_is_not_owner,
            release_without_explicit_owner_is_refused,
            reacquire_explicit_owner_is_idempotent,
            reacquire_explicit_owner_extends_expiry,
            reacquire_implicit_owner_is_held,
            reacquire_other_mode_is_not_idempotent,
            reacquire_after_expiry_gets_new_token,
            reacquire_by_the_same_process_renews_its_grant,
            evict_takes_over_live_grant,
            evict_of_stale_token_is_ignored,
            waiters_fifo_blocks_newcomers,
            waiters_exclusive_waiter_blocks_new_shared,
            waiters_shared_waiters_admit_shared_newcomer,
            waiters_registration_expires,
            waiters_refresh_keeps_place,
            waiters_expired_ticket_is_remade_at_back,
            waiters_remove_unblocks,
            fence_exclusive_newest_live_only,
            fence_expired_token_is_not_live,
            fence_shared_any_live_grant,
            fence_verdicts_are_recorded,
            history_newest_first_and_limited,
            history_records_expiry,
            inspect_get_unknown_is_none,
            inspect_get_reports_grant,
            inspect_list_ordered_and_live_only,
            inspect_waiters_counted,
            names_stored_exactly,
            names_are_independent,
            expiry_on_the_store_clock,
            limits_lease_ttls_out_of_range_are_refused,
            limits_task_durations_out_of_range_are_refused,
            task_add_stores_a_pending_task,
            task_add_is_idempotent_by_id,
            task_add_conflict_adds_nothing_of_the_call,
            task_add_ids_are_per_queue,
            task_add_now_is_on_the_store_clock,
            task_add_delay_is_on_the_store_clock,
            task_claim_order_priority_then_available_then_insertion,
            task_claim_delayed_task_waits_for_its_time,
            task_claim_nothing_claimable_is_none,
            task_claim_makes_running_with_attempt_and_token,
            task_claim_expired_claim_is_claimable_again,
            task_claim_expirations_use_up_attempts,
            task_complete_late_worker_is_refused,
            task_stale_token_changes_nothing,
            task_expired_claim_is_stale_without_a_newer_claim,
            task_unknown_task_is_not_found,
            task_heartbeat_extends_the_claim,
            task_fail_retry_after_delay,
            task_fail_never_is_dead,
            task_fail_attempts_used_up_is_dead_even_with_retry,
            task_fail_backoff_is_exponential,
            task_get_unknown_is_none,
            task_stats_counts_per_state_per_queue,
            task_list_filters_by_state_in_claim_order,
            task_purge_deletes_old_finished_tasks_of_the_queue,
            task_lifecycle_one_completion_with_interleaved_claims,
            task_lifecycle_racing_workers_complete_each_task_once,
            task_release_does_not_charge_the_attempt,
            task_release_never_uses_up_attempts,
            task_retry_revives_dead_task,
            task_retry_of_live_or_unknown_is_refused,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($harness:ty; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::Case::<$harness>::run(stringify!($case), $crate::cases::$case::<$harness>);
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    /// A case missing from `conformance!` would never run anywhere.
    #[test]
    fn every_case_is_in_the_macro() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
        let listed: Vec<&str> = lib
            .lines()
            .skip_while(|l| !l.contains("macro_rules! conformance"))
            .take_while(|l| !l.contains("macro_rules! __conformance_cases"))
            .filter_map(|l| l.trim().strip_suffix(','))
            .collect();
        let mut defined = Vec::new();
        for entry in std::fs::read_dir(src.join("cases")).expect("read cases/") {
            let text = std::fs::read_to_string(entry.expect("dir entry").path()).expect("read a case file");
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("pub fn ") {
                    defined.push(rest.split('<').next().expect("a name").to_owned());
                }
            }
        }
        assert!(defined.len() > 40, "found only {} cases", defined.len());
        for case in &defined {
            assert!(
                listed.contains(&case.as_str()),
                "case {case} is not listed in conformance!"
            );
        }
        assert_eq!(
            listed.len(),
            defined.len(),
            "conformance! lists a case twice or one that does not exist"
        );
    }
}
