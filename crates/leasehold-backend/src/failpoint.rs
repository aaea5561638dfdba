//! Failpoints: named places where a test can make the process die, to
//! check that what a crash leaves behind is recovered (fault case 4), or
//! stop, to check what a process stopped there does to the others (case
//! 30).
//!
//! Compiled in only with the cargo feature `failpoints` (off by default;
//! `cargo test --workspace` turns it on through `leasehold-faults`'s
//! dev-dependency, so the test binary has them). Without the feature,
//! [`hit`] is an empty inline function and costs nothing.
//!
//! With the feature, `LEASEHOLD_FAILPOINT=NAME[=ACTION]` arms one point:
//!
//! | ACTION | effect |
//! |---|---|
//! | `kill` (default) | SIGKILL to this process: no destructor, no rollback, no flush — a crash |
//! | `abort` | `std::process::abort()` (SIGABRT) |
//! | `sleep(MS)` | sleep MS milliseconds, then go on (for widening a race window) |
//! | `stop` | SIGSTOP to this process, then go on once it is resumed (SIGCONT): a process stopped at this very step — inside a transaction, holding its locks (fault case 30) |
//!
//! Names are `OP/STEP`: `acquire/begin`, `acquire/before-commit`,
//! `write/after-rename`, ... [`ALL`] lists every point that leasehold's
//! code passes through; a test checks that the list and the code agree.

/// Every failpoint in leasehold, `OP/STEP`.
pub const ALL: &[&str] = &[
    "acquire/begin",
    "acquire/token",
    "acquire/before-commit",
    "acquire/after-commit",
    "renew/begin",
    "renew/before-commit",
    "renew/after-commit",
    "release/begin",
    "release/before-commit",
    "release/after-commit",
    "claim/begin",
    "claim/token",
    "claim/before-commit",
    "claim/after-commit",
    "complete/begin",
    "complete/before-commit",
    "complete/after-commit",
    "write/created",
    "write/written",
    "write/synced",
    "write/renamed",
    "write/dir-synced",
];

/// Pass the failpoint `OP/STEP` (see the module docs).
#[macro_export]
macro_rules! failpoint {
    ($op:expr, $step:expr) => {
        $crate::failpoint::hit($op, $step)
    };
}

/// Pass the failpoint `op/step`: a no-op unless the feature is on and
/// `LEASEHOLD_FAILPOINT` names it.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_op: &str, _step: &str) {}

/// Pass the failpoint `op/step`: a no-op unless the feature is on and
/// `LEASEHOLD_FAILPOINT` names it.
#[cfg(feature = "failpoints")]
pub fn hit(op: &str, step: &str) {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, Action)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| std::env::var("LEASEHOLD_FAILPOINT").ok().and_then(|s| parse(&s)));
    let Some((name, action)) = armed else { return };
    let matches = name.len() == op.len() + 1 + step.len()
        && name.starts_with(op)
        && name.as_bytes()[op.len()] == b'/'
        && name.ends_with(step);
    if !matches {
        return;
    }
    match action {
        Action::Kill => {
            eprintln!("leasehold: failpoint {name}: SIGKILL");
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
            // Delivery is immediate for a signal to oneself; never go on.
            std::process::abort();
        }
        Action::Abort => {
            eprintln!("leasehold: failpoint {name}: abort");
            std::process::abort();
        }
        Action::Sleep(ms) => std::thread::sleep(std::time::Duration::from_millis(*ms)),
        Action::Stop => {
            eprintln!("leasehold: failpoint {name}: SIGSTOP (pid {})", std::process::id());
            // Every thread stops; this one goes on from here on SIGCONT.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
        }
    }
}

#[cfg(feature = "failpoints")]
#[derive(Debug, Clone, Copy)]
enum Action {
    Kill,
    Abort,
    Sleep(u64),
    Stop,
}

#[cfg(feature = "failpoints")]
fn parse(spec: &str) -> Option<(String, Action)> {
    let (name, action) = match spec.split_once('=') {
        None => (spec, Action::Kill),
        Some((name, "kill")) => (name, Action::Kill),
        Some((name, "abort")) => (name, Action::Abort),
        Some((name, "stop")) => (name, Action::Stop),
        Some((name, other)) => {
            let ms = other.strip_prefix("sleep(")?.strip_suffix(')')?.parse().ok()?;
            (name, Action::Sleep(ms))
        }
    };
    (!name.is_empty()).then(|| (name.to_owned(), action))
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert!(matches!(parse("acquire/begin"), Some((n, Action::Kill)) if n == "acquire/begin"));
        assert!(matches!(parse("a/b=abort"), Some((_, Action::Abort))));
        assert!(matches!(parse("a/b=sleep(25)"), Some((_, Action::Sleep(25)))));
        assert!(matches!(parse("a/b=stop"), Some((_, Action::Stop))));
        assert!(parse("a/b=sleep(x)").is_none());
        assert!(parse("a/b=explode").is_none());
        assert!(parse("=kill").is_none());
    }
}
