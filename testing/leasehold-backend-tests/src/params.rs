//! Parameters with the suite's defaults. A case changes only what matters to
//! it, with struct-update syntax:
//!
//! ```
//! use leasehold_backend::Mode;
//! use leasehold_backend_tests::params;
//! let p = leasehold_backend::LeaseAcquireParams {
//!     mode: Mode::Shared { limit: Some(2) },
//!     ..params::acquire("job")
//! };
//! assert_eq!(p.owner.label, "test-owner");
//! ```

use std::time::Duration;

use leasehold_backend::{
    Available, Holder, LeaseAcquireParams, LeaseFenceParams, LeaseName, LeaseReleaseParams, LeaseRenewParams, Mode,
    Owner, QueueName, TaskAddParams, TaskClaimParams, TaskRef, Token, WaiterEnqueueParams,
};

/// The default grant TTL.
pub const TTL: Duration = Duration::from_secs(60);

/// The default waiter registration TTL.
pub const WAITER_TTL: Duration = Duration::from_secs(30);

/// The default owner label (not explicit).
pub const OWNER: &str = "test-owner";

/// Who passes fences.
pub const FENCE_CALLER: &str = "test-fence-caller";

/// A valid name (panics on an invalid one: a bug in the case).
#[must_use]
pub fn name(name: &str) -> LeaseName {
    LeaseName::new(name).unwrap_or_else(|e| panic!("bad name {name:?} in a case: {e}"))
}

/// A holder bound to no process: it lives by its TTL alone.
#[must_use]
pub fn holder() -> Holder {
    Holder {
        host: "test-host".into(),
        boot_id: "test-boot".into(),
        pid_ns: Some(4_026_531_836),
        pid: 4242,
        start_time: Some(123_456),
        cmdline: "conformance-test --flag".into(),
        pgid: None,
        guard: None,
        bound: false,
    }
}

/// A holder bound to a process (`run`'s supervisor, a library holder,
/// `--for-pid`) with pid `pid`: it is that process's to end.
#[must_use]
pub fn bound(pid: u32) -> Holder {
    Holder {
        pid,
        bound: true,
        ..holder()
    }
}

/// A holder record of this test process with the command line `cmdline`,
/// bound to it in name only: it lives by its TTL alone.
#[must_use]
pub fn this_process(cmdline: &str) -> Holder {
    Holder {
        pid_ns: None,
        pid: std::process::id(),
        start_time: None,
        cmdline: cmdline.into(),
        ..holder()
    }
}

/// An owner label the caller chose (`--owner`).
#[must_use]
pub fn explicit(label: &str) -> Owner {
    Owner {
        label: label.into(),
        explicit: true,
    }
}

/// A default owner label (`host:pid`), which is informational only.
#[must_use]
pub fn implicit(label: &str) -> Owner {
    Owner {
        label: label.into(),
        explicit: false,
    }
}

/// The shared mode without a limit.
pub const SHARED: Mode = Mode::Shared { limit: None };

/// An exclusive, non-waiting acquisition by [`OWNER`] for [`TTL`].
#[must_use]
pub fn acquire(lease: &str) -> LeaseAcquireParams {
    LeaseAcquireParams {
        name: name(lease),
        owner: implicit(OWNER),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: holder(),
        ticket: None,
        waiter_ttl: WAITER_TTL,
        evict: Vec::new(),
        evict_waiters: Vec::new(),
        waiter_holder: None,
        reacquire_by_process: false,
    }
}

/// A renewal for [`TTL`], without an owner check.
#[must_use]
pub fn renew(lease: &str, token: Token) -> LeaseRenewParams {
    LeaseRenewParams {
        name: name(lease),
        token,
        owner: None,
        grant: None,
        ttl: TTL,
    }
}

/// A release without an owner check.
#[must_use]
pub fn release(lease: &str, token: Token) -> LeaseReleaseParams {
    LeaseReleaseParams {
        name: name(lease),
        token,
        owner: None,
        grant: None,
    }
}

/// A fence check by [`FENCE_CALLER`].
#[must_use]
pub fn fence(lease: &str, token: Token) -> LeaseFenceParams {
    LeaseFenceParams {
        name: name(lease),
        token,
        grant: None,
        caller: FENCE_CALLER.into(),
    }
}

/// A waiter registration for [`WAITER_TTL`].
#[must_use]
pub fn enqueue(lease: &str, mode: Mode) -> WaiterEnqueueParams {
    WaiterEnqueueParams {
        name: name(lease),
        mode,
        holder: holder(),
        ttl: WAITER_TTL,
    }
}

/// The default claim TTL of a task.
pub const CLAIM_TTL: Duration = Duration::from_secs(60);

/// The default `max_attempts` of a task (README, "Task queue").
pub const MAX_ATTEMPTS: u32 = 5;

/// The default worker (claim owner).
pub const WORKER: &str = "test-worker";

/// A valid queue name.
#[must_use]
pub fn queue(queue: &str) -> QueueName {
    name(queue)
}

/// A task of priority 0, claimable now (the store's clock), with
/// [`MAX_ATTEMPTS`].
#[must_use]
pub fn task(queue: &str, id: &str, payload: serde_json::Value) -> TaskAddParams {
    TaskAddParams {
        queue: name(queue),
        id: name(id),
        payload,
        priority: 0,
        available: Available::Now,
        max_attempts: MAX_ATTEMPTS,
    }
}

/// A claim by [`WORKER`] for [`CLAIM_TTL`].
#[must_use]
pub fn claim(queue: &str) -> TaskClaimParams {
    TaskClaimParams {
        queue: name(queue),
        owner: WORKER.into(),
        ttl: CLAIM_TTL,
    }
}

/// A claim by `owner` for [`CLAIM_TTL`].
#[must_use]
pub fn claim_by(queue: &str, owner: &str) -> TaskClaimParams {
    TaskClaimParams {
        owner: owner.into(),
        ..claim(queue)
    }
}

/// The claim `token` of task `id`.
#[must_use]
pub fn task_ref(queue: &str, id: &str, token: Token) -> TaskRef {
    TaskRef {
        queue: name(queue),
        id: name(id),
        token,
    }
}

/// The id of task `id` of `queue`.
#[must_use]
pub fn task_id(queue: &str, id: &str) -> leasehold_backend::TaskIdParams {
    leasehold_backend::TaskIdParams {
        queue: self::queue(queue),
        id: name(id),
    }
}
