//! Mutants: known safety bugs that a test build can plant, one at a time,
//! to show that the test suites catch each of them (`scripts/mutants`;
//! docs/RELIABILITY.md, "What each case catches"). A bug no test catches
//! is a missing test.
//!
//! Each bug is planted at the one place its behaviour lives — the plans
//! and rules of this crate, the keeper, the guard, the fence record —
//! so it reaches every store that goes through that place. The one
//! exception is [`Mutant::ReissueToken`]: tokens come from each store's
//! own counter, so it is planted in the SQLite and PostgreSQL counters
//! (etcd's token is etcd's own revision, which leasehold does not count).
//!
//! Compiled in only with the cargo feature `mutants`, which no front end
//! offers (the CLI, the guard and the Python package have no such
//! feature; only a test command naming `leasehold-backend/mutants` turns
//! it on), and which refuses to compile in a build with optimisations
//! and without debug assertions — a release build. Without the feature,
//! [`strikes`] is an inline `false` and every planted branch is dead code.
//!
//! With the feature, `LEASEHOLD_MUTANT=NAME` ([`Mutant::name`]) plants one
//! bug in every process that inherits it (the CLI, its guard, test
//! processes). `LEASEHOLD_MUTANT_HITS=FILE`, when set, gets a line `NAME
//! PID` appended the first time the bug changes what a process does, so a
//! run can tell a mutant that no test caught from one that never ran.

/// A bug that can be planted (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// A new grant gets the token the name's previous grant had: the
    /// counter is not advanced (SQLite and PostgreSQL stores).
    ReissueToken,
    /// The store's fence gate (`plan::fence`, [`crate::rules::fence_verdict`])
    /// passes any grant it still has for the token: neither the newest
    /// token nor the grant's expiry is compared.
    FenceGatePassesStale,
    /// A file's fence record (`leasehold::files`) skips the comparison of
    /// the writer's token with its mark: a lower token writes, and the mark
    /// stays where it was.
    FenceRecordSkipsComparison,
    /// An exclusive acquirer is admitted beside one live exclusive grant
    /// ([`crate::rules::compatible`]).
    SecondExclusive,
    /// The keeper's trust window ends 2 s late: `trusted_until = sent +
    /// ttl - margin + 2 s`, so commands are stopped after their lease can
    /// pass on.
    LateTrustWindow,
    /// The guard never sends SIGKILL: a command tree that ignores SIGTERM
    /// outlives its stop.
    GuardNeverKills,
    /// An acquirer is judged against the live grants only, as if no
    /// waiter were ahead of it ([`crate::rules::admits`]): waiters are
    /// overtaken.
    WaiterSkipsFifo,
    /// A renewal of a grant that expired (still in the store, not yet
    /// swept) extends it instead of being refused ([`crate::plan::renew`]).
    RenewalRevivesExpired,
    /// A renewal or release acts on whatever grant the store holds for
    /// the token: another grant's after the store lost data, or one bound
    /// to a running process ([`crate::rules::scope_verdict`]).
    TokenAloneActs,
    /// An explicit owner label re-acquires a grant another live process
    /// holds, sharing its token ([`crate::rules::reacquires`]).
    OwnerSharesGrant,
    /// The proof of death (`leasehold::identity`) does not ask that the
    /// holder's process group is empty: a command left running when its
    /// supervisor and guard were both killed is taken over at once.
    ProofIgnoresGroup,
    /// The proof of death does not ask that a `run` grant's guard is gone:
    /// processes that left the command's group are taken over while the
    /// guard still stops them.
    ProofIgnoresGuard,
}

impl Mutant {
    /// Every mutant, in the order of the table in docs/RELIABILITY.md.
    pub const ALL: [Mutant; 12] = [
        Mutant::ReissueToken,
        Mutant::FenceGatePassesStale,
        Mutant::FenceRecordSkipsComparison,
        Mutant::SecondExclusive,
        Mutant::LateTrustWindow,
        Mutant::GuardNeverKills,
        Mutant::WaiterSkipsFifo,
        Mutant::RenewalRevivesExpired,
        Mutant::TokenAloneActs,
        Mutant::OwnerSharesGrant,
        Mutant::ProofIgnoresGroup,
        Mutant::ProofIgnoresGuard,
    ];

    /// The name `LEASEHOLD_MUTANT` takes.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Mutant::ReissueToken => "reissue-token",
            Mutant::FenceGatePassesStale => "fence-gate-passes-stale",
            Mutant::FenceRecordSkipsComparison => "fence-record-skips-comparison",
            Mutant::SecondExclusive => "second-exclusive",
            Mutant::LateTrustWindow => "late-trust-window",
            Mutant::GuardNeverKills => "guard-never-kills",
            Mutant::WaiterSkipsFifo => "waiter-skips-fifo",
            Mutant::RenewalRevivesExpired => "renewal-revives-expired",
            Mutant::TokenAloneActs => "token-alone-acts",
            Mutant::OwnerSharesGrant => "owner-shares-grant",
            Mutant::ProofIgnoresGroup => "proof-ignores-group",
            Mutant::ProofIgnoresGuard => "proof-ignores-guard",
        }
    }

    /// The mutant called `name`, if there is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Whether the build can plant mutants at all (the feature `mutants`).
pub const COMPILED_IN: bool = cfg!(feature = "mutants");

#[cfg(all(feature = "mutants", not(debug_assertions)))]
compile_error!(
    "the `mutants` feature of leasehold-backend plants known safety bugs for scripts/mutants; \
     it is refused in a release build. Build without it (it is off by default)."
);

/// Whether `mutant` is planted here and changes what happens now:
/// `differs` says whether the bug's answer differs from the right one at
/// this call. Without the feature `mutants`, always `false`, and `differs`
/// is never called.
#[cfg(not(feature = "mutants"))]
#[inline]
#[must_use]
pub fn strikes(_mutant: Mutant, _differs: impl FnOnce() -> bool) -> bool {
    false
}

/// Whether `mutant` is planted here and changes what happens now:
/// `differs` says whether the bug's answer differs from the right one at
/// this call (called only when `mutant` is the one planted). The first
/// time it does in this process, the hit is recorded
/// (`LEASEHOLD_MUTANT_HITS`).
///
/// # Panics
/// When `LEASEHOLD_MUTANT` names no mutant: a run that meant to plant one
/// must not go on without it.
#[cfg(feature = "mutants")]
#[must_use]
pub fn strikes(mutant: Mutant, differs: impl FnOnce() -> bool) -> bool {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};
    static PLANTED: OnceLock<Option<Mutant>> = OnceLock::new();
    static RECORDED: AtomicBool = AtomicBool::new(false);
    let planted = *PLANTED.get_or_init(|| {
        let name = std::env::var("LEASEHOLD_MUTANT").ok().filter(|n| !n.is_empty())?;
        let known = Mutant::from_name(&name);
        assert!(
            known.is_some(),
            "LEASEHOLD_MUTANT={name:?} names no mutant; the mutants are: {}",
            Mutant::ALL.map(Mutant::name).join(", ")
        );
        known
    });
    let strikes = planted == Some(mutant) && differs();
    if strikes && !RECORDED.swap(true, Ordering::Relaxed) {
        record_hit(mutant);
    }
    strikes
}

/// Append `NAME PID` to `LEASEHOLD_MUTANT_HITS`, if set. Best effort: a
/// hit that cannot be recorded makes the run look as if the mutant never
/// struck, which the script reports rather than hides.
#[cfg(feature = "mutants")]
fn record_hit(mutant: Mutant) {
    use std::io::Write;
    let Some(path) = std::env::var_os("LEASEHOLD_MUTANT_HITS") else {
        return;
    };
    // One short write with O_APPEND: lines from many processes never mix.
    let line = format!("{} {}\n", mutant.name(), std::process::id());
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_read_back() {
        for m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
            assert_eq!(Mutant::ALL.iter().filter(|n| n.name() == m.name()).count(), 1, "{m:?}");
        }
        assert_eq!(Mutant::from_name("no-such-mutant"), None);
    }

    /// The script's list and this one agree: every mutant the code can
    /// plant is run, and the script runs no name the code does not know.
    #[test]
    fn the_script_runs_every_mutant() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/mutants");
        let text = std::fs::read_to_string(script).expect("scripts/mutants");
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("MUTANTS = \""))
            .and_then(|l| l.strip_suffix("\".split()"))
            .expect("scripts/mutants has a line MUTANTS = \"...\".split()");
        let listed: Vec<&str> = line.split_whitespace().collect();
        let known: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(listed, known, "scripts/mutants' MUTANTS and Mutant::ALL differ");
    }
}
