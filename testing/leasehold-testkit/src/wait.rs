//! Waiting for something a test cannot be told about (a file a child
//! writes, a process that ends, a server that notices): polling, with a
//! bound.

use std::time::{Duration, Instant};

/// Poll `what` every 5 ms for up to `limit`; the time it took, or `None`.
///
/// The time is a measurement too (how soon a command was stopped), which
/// is why the polls are this close.
pub fn wait_until(limit: Duration, mut what: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if what() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
