//! The decisions every backend makes the same way, written once: whether a
//! grant fits beside others, the FIFO admission of waiters, who may renew or
//! release a grant, and the fence verdict, with the words of the history
//! entries. The planners in [`crate::plan`] put them together into the
//! lease algorithm; backends do the storage.

use std::time::Duration;

use crate::mutant::{self, Mutant};
use crate::{FenceRefusal, Grant, GrantId, HistoryEvent, Holder, LostReason, Mode, Token};

/// Whether a grant of `mode` can join the (real or simulated) set `held`.
///
/// A shared grant joins only shared ones, and only while the set stays
/// within **every** member's limit: each holder was promised at most its
/// own `N`, so the smallest limit among the holders and the newcomer
/// decides ([`shared_limit_reached`]).
#[must_use]
pub fn compatible(held: &[Mode], mode: Mode) -> bool {
    match mode {
        Mode::Exclusive => {
            // Planted bug (scripts/mutants): a second exclusive holder.
            held.is_empty() || mutant::strikes(Mutant::SecondExclusive, || matches!(held, [Mode::Exclusive]))
        }
        Mode::Shared { .. } => !held.iter().any(|m| m.is_exclusive()) && shared_limit_reached(held, mode).is_none(),
    }
}

/// The limit that keeps a shared `mode` out of the shared set `held`, if
/// one does: the smallest of the holders' and the newcomer's limits, when
/// `held` already has that many members. `None` when it fits (or nothing
/// limits it).
#[must_use]
pub fn shared_limit_reached(held: &[Mode], mode: Mode) -> Option<u32> {
    let smallest = held
        .iter()
        .chain(std::iter::once(&mode))
        .filter_map(|m| match m {
            Mode::Shared { limit } => *limit,
            Mode::Exclusive => None,
        })
        .min()?;
    (held.len() >= smallest as usize).then_some(smallest)
}

/// Whether an acquirer of `mode` is granted now (the FIFO rule of the
/// crate docs): start from the live grants, admit the waiters `ahead` of it
/// one by one as if granted, stop at the first that does not fit (it blocks
/// everyone behind it), and grant only if the acquirer fits the set so
/// built.
#[must_use]
pub fn admits(live: impl IntoIterator<Item = Mode>, ahead: impl IntoIterator<Item = Mode>, mode: Mode) -> bool {
    let mut simulated: Vec<Mode> = live.into_iter().collect();
    // Planted bug (scripts/mutants): judged against the live grants alone.
    let live = simulated.len();
    let overtakes =
        |simulated: &[Mode]| mutant::strikes(Mutant::WaiterSkipsFifo, || compatible(&simulated[..live], mode));
    for waiter in ahead {
        if !compatible(&simulated, waiter) {
            return overtakes(&simulated);
        }
        simulated.push(waiter);
    }
    compatible(&simulated, mode) || overtakes(&simulated)
}

/// Whether a renewal or release naming `asked` (or no owner) may act on a
/// grant owned by `owner` (`explicit` when the owner was given at acquire).
///
/// A named owner must be the grant's, explicit or not. A grant acquired
/// with an explicit owner must have it named: that owner is what scopes
/// renew and release (a token alone is printed, logged and passed around
/// in scripts), so leaving it out is refused like naming a wrong one. An
/// implicit owner (`host:pid`) is for information and need not be named.
///
/// # Errors
/// [`LostReason::NotOwner`] for another owner,
/// [`LostReason::OwnerRequired`] for a missing explicit one.
pub fn owner_verdict(asked: Option<&str>, owner: &str, explicit: bool) -> Result<(), LostReason> {
    match asked {
        Some(asked) if asked != owner => Err(LostReason::NotOwner),
        None if explicit => Err(LostReason::OwnerRequired),
        _ => Ok(()),
    }
}

/// Whether a renewal or release naming grant `asked` — or a token alone
/// (`None`) — may act on `grant`, the grant the store holds for the
/// token: a grant is a capability, acted on only by whoever names it.
///
/// - A named grant must be this one. A store that lost data (wiped,
///   flushed, restored from a copy, replaced) issues the token again to
///   someone else; the old holder's renewals must not extend, nor its
///   release end, the newcomer's grant.
/// - A token alone acts only on a grant bound to no process (a bare
///   `leasehold acquire`, whose script releases it by token). A grant
///   bound to a process — a `run` supervisor, a library holder,
///   `--for-pid` — is that process's to end: `status` prints its token to
///   anyone, and a release by token alone let the next holder in while
///   the command still ran.
///
/// # Errors
/// [`LostReason::OtherGrant`] for another grant,
/// [`LostReason::BoundToProcess`] for a token alone on a bound grant.
pub fn scope_verdict(asked: Option<GrantId>, grant: &Grant) -> Result<(), LostReason> {
    // Planted bug (scripts/mutants): the token alone decides.
    if crate::mutant::strikes(crate::mutant::Mutant::TokenAloneActs, || {
        asked.is_some_and(|id| id != grant.id()) || (asked.is_none() && grant.holder.bound)
    }) {
        return Ok(());
    }
    match asked {
        Some(id) if id != grant.id() => Err(LostReason::OtherGrant),
        None if grant.holder.bound => Err(LostReason::BoundToProcess),
        _ => Ok(()),
    }
}

/// Why a renewal or release of a token whose grant the store no longer
/// has is refused, given how the name's history says that grant ended
/// ([`crate::plan::ENDINGS`]): [`LostReason::Expired`] when it expired
/// (it was then removed by whoever looked at the name next — a new
/// holder, say), else [`LostReason::Gone`] (released, taken over from a
/// dead holder, never issued, or ended so long ago that the history no
/// longer says).
#[must_use]
pub fn lost_without_grant(ended: Option<HistoryEvent>) -> LostReason {
    match ended {
        Some(HistoryEvent::Expired) => LostReason::Expired,
        _ => LostReason::Gone,
    }
}

/// Whether the request `p` re-acquires a live grant of `owner` (explicit
/// or not), `mode` and `holder` — renewing it and keeping its token —
/// rather than asking for a new grant; the history detail when it does.
///
/// - The same explicit owner, in the same mode kind, where neither the
///   grant nor the request is bound to a process (seed 002's `touch`: a
///   bare `acquire --owner ID` again extends its grant), or both are bound
///   to the same process: re-acquisition by owner is idempotent. An owner
///   label never lets a second live process act under a grant another
///   process holds: two `run`s, two library holders or a nested `run`
///   with one `--owner` are two holders, and the second is refused (held)
///   — or takes over, with a new token, once the first is provably gone.
/// - With [`LeaseAcquireParams::reacquire_by_process`], neither side naming
///   an owner, the same live process — host, boot, pid namespace, pid and
///   start time all known and equal — in the same mode kind: registering a
///   process again renews its one grant.
///
/// [`LeaseAcquireParams::reacquire_by_process`]: crate::LeaseAcquireParams::reacquire_by_process
#[must_use]
pub fn reacquires(
    p: &crate::LeaseAcquireParams,
    owner: &str,
    owner_explicit: bool,
    mode: Mode,
    holder: &Holder,
) -> Option<&'static str> {
    if mode.is_exclusive() != p.mode.is_exclusive() {
        return None;
    }
    let me = &p.holder;
    let same_process = me.bound
        && holder.bound
        && me.host == holder.host
        && me.boot_id == holder.boot_id
        && me.pid_ns == holder.pid_ns
        && me.pid == holder.pid
        && me.start_time.is_some()
        && me.start_time == holder.start_time
        && me.pgid == holder.pgid;
    let unbound = !me.bound && !holder.bound;
    // Planted bug (scripts/mutants): the owner label alone shares a grant.
    let shares = mutant::strikes(Mutant::OwnerSharesGrant, || !(unbound || same_process));
    if p.owner.explicit && owner_explicit && owner == p.owner.label && (unbound || same_process || shares) {
        return Some("same explicit owner; expiry extended");
    }
    (p.reacquire_by_process && !p.owner.explicit && !owner_explicit && same_process)
        .then_some("same process registered again; expiry extended")
}

/// The fence verdict for `token`, given the newest token ever issued for
/// the name and the token's own grant as (live, mode), if the store still
/// has it.
///
/// # Errors
/// The refusal, when `token` may not write.
pub fn fence_verdict(token: Token, newest: Option<Token>, grant: Option<(bool, Mode)>) -> Result<(), FenceRefusal> {
    let verdict = match grant {
        Some((true, mode)) if mode.is_exclusive() && newest != Some(token) => Err(FenceRefusal::Superseded),
        Some((true, _)) => Ok(()),
        _ if newest.is_some_and(|n| n > token) => Err(FenceRefusal::Superseded),
        _ => Err(FenceRefusal::NotLive),
    };
    // Planted bug (scripts/mutants): any grant the store still has passes.
    if mutant::strikes(Mutant::FenceGatePassesStale, || verdict.is_err() && grant.is_some()) {
        return Ok(());
    }
    verdict
}

/// `host:pid` of a holder, for history details.
#[must_use]
pub fn holder_label(h: &Holder) -> String {
    format!("{}:{}", h.host, h.pid)
}

/// A TTL in history details.
#[must_use]
pub fn humanize(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The words of history entries, the same on every store.
pub mod detail {
    use std::time::Duration;

    use super::{holder_label, humanize};
    use crate::{FenceRefusal, Holder, LostReason, Mode, Token};

    #[must_use]
    pub fn granted(mode: Mode, ttl: Duration, to: &Holder) -> String {
        format!("{} for {} to {}", mode.label(), humanize(ttl), holder_label(to))
    }

    #[must_use]
    pub fn expired(ttl: Duration, holder: &Holder) -> String {
        format!("TTL of {} ran out (holder {})", humanize(ttl), holder_label(holder))
    }

    #[must_use]
    pub fn fast_takeover(gone: &Holder, by: &Holder) -> String {
        format!(
            "holder {} proved gone by {} before its TTL ran out",
            holder_label(gone),
            holder_label(by)
        )
    }

    #[must_use]
    pub fn released() -> String {
        "released by its holder".to_owned()
    }

    #[must_use]
    pub fn stale(op: &str, reason: LostReason) -> String {
        format!("{op} refused: {reason}")
    }

    #[must_use]
    pub fn fence_passed(caller: &str) -> String {
        format!("passed by {caller}")
    }

    #[must_use]
    pub fn fence_refused(caller: &str, reason: FenceRefusal, newest: Option<Token>) -> String {
        let newest = newest.map_or_else(|| "none".to_owned(), |t| t.to_string());
        format!("refused for {caller}: {reason} (newest token {newest})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Mode = Mode::Exclusive;
    const S: Mode = Mode::Shared { limit: None };
    const S2: Mode = Mode::Shared { limit: Some(2) };

    #[test]
    fn fifo_admission() {
        assert!(admits([], [], X));
        assert!(!admits([S], [], X));
        assert!(!admits([S], [X], S), "a waiting exclusive blocks new shared");
        assert!(admits([S], [S], S));
        assert!(!admits([S], [S], S2), "shared waiters ahead count toward the limit");
    }

    #[test]
    fn owner() {
        assert_eq!(owner_verdict(Some("alice"), "alice", true), Ok(()));
        assert_eq!(owner_verdict(Some("mallory"), "alice", true), Err(LostReason::NotOwner));
        assert_eq!(
            owner_verdict(None, "alice", true),
            Err(LostReason::OwnerRequired),
            "an explicit owner must be named"
        );
        assert_eq!(
            owner_verdict(None, "host:42", false),
            Ok(()),
            "an implicit owner need not be"
        );
        assert_eq!(owner_verdict(Some("host:42"), "host:42", false), Ok(()));
        assert_eq!(
            owner_verdict(Some("other"), "host:42", false),
            Err(LostReason::NotOwner)
        );
    }

    #[test]
    fn reacquisition_by_owner_or_by_the_same_process() {
        let process = Holder {
            host: "h".into(),
            boot_id: "b".into(),
            pid_ns: Some(1),
            pid: 42,
            start_time: Some(7),
            cmdline: String::new(),
            pgid: None,
            guard: None,
            bound: true,
        };
        let request = |explicit: bool, by_process: bool| crate::LeaseAcquireParams {
            name: crate::LeaseName::new("n").unwrap(),
            owner: crate::Owner {
                label: "me".into(),
                explicit,
            },
            mode: S,
            ttl: Duration::from_secs(1),
            holder: process.clone(),
            ticket: None,
            waiter_ttl: Duration::from_secs(1),
            evict: Vec::new(),
            evict_waiters: Vec::new(),
            waiter_holder: None,
            reacquire_by_process: by_process,
        };
        assert!(
            reacquires(&request(true, false), "me", true, S, &process).is_some(),
            "same explicit owner"
        );
        assert!(
            reacquires(&request(true, false), "me", true, X, &process).is_none(),
            "another mode kind"
        );
        assert!(reacquires(&request(true, false), "you", true, S, &process).is_none());
        assert!(
            reacquires(&request(false, false), "me", false, S, &process).is_none(),
            "not asked"
        );
        assert!(
            reacquires(&request(false, true), "x", false, S, &process).is_some(),
            "same process"
        );
        assert!(
            reacquires(&request(false, true), "x", true, S, &process).is_none(),
            "the grant names an owner"
        );
        for other in [
            Holder {
                start_time: Some(8),
                ..process.clone()
            },
            Holder {
                start_time: None,
                ..process.clone()
            },
            Holder {
                pid: 43,
                ..process.clone()
            },
            Holder {
                boot_id: "c".into(),
                ..process.clone()
            },
            Holder {
                host: "g".into(),
                ..process.clone()
            },
            Holder {
                pid_ns: Some(2),
                ..process.clone()
            },
            Holder {
                bound: false,
                ..process.clone()
            },
        ] {
            assert!(
                reacquires(&request(false, true), "x", false, S, &other).is_none(),
                "{other:?}"
            );
        }
    }

    #[test]
    fn fence() {
        let t = Token(5);
        assert_eq!(fence_verdict(t, Some(t), Some((true, X))), Ok(()));
        assert_eq!(
            fence_verdict(t, Some(Token(6)), Some((true, X))),
            Err(FenceRefusal::Superseded)
        );
        assert_eq!(fence_verdict(t, Some(Token(6)), Some((true, S))), Ok(()));
        assert_eq!(fence_verdict(t, Some(t), Some((false, X))), Err(FenceRefusal::NotLive));
        assert_eq!(fence_verdict(t, Some(Token(6)), None), Err(FenceRefusal::Superseded));
    }
}
