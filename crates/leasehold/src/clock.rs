//! The clock a holder's deadlines are kept on, and how often the threads
//! that watch it look. A fact of the clock, not of a keeper: the keeper's
//! threads and the thread that starts them late (`deferred.rs`) both sleep
//! in slices of [`POLL`], because a condvar's timeout runs on
//! `CLOCK_MONOTONIC`, which does not count suspend.

use std::fmt;
use std::time::Duration;

use leasehold_host as host;

/// The longest a keeper thread (or `deferred`'s) sleeps before it looks at the clock again.
pub const POLL: Duration = Duration::from_millis(100);

/// The clock deadlines are kept on. The real one is the boot clock; tests
/// inject one that jumps (a suspend) while real time barely moves.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Time since some fixed point, counting through suspend.
    fn now(&self) -> Duration;
}

/// The host's boot clock ([`host::boot_clock`]: `CLOCK_BOOTTIME` on Linux,
/// `CLOCK_MONOTONIC` on macOS).
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

impl Clock for BootClock {
    fn now(&self) -> Duration {
        host::boot_clock()
    }
}
