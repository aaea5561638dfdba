//! The decisions every backend makes the same way, written once: whether a
//! grant fits beside others, the FIFO admission of waiters, who may renew or
//! release a grant, and the fence verdict. Backends do the storage; these
//! functions decide.

use std::time::Duration;

use crate::{FenceRefusal, Holder, LostReason, Mode, Token};

/// Whether a grant of `mode` can join the (real or simulated) set `held`.
#[must_use]
pub fn compatible(held: &[Mode], mode: Mode) -> bool {
    match mode {
        Mode::Exclusive => held.is_empty(),
        Mode::Shared { limit } => {
            !held.iter().any(|m| m.is_exclusive()) && limit.is_none_or(|limit| held.len() < limit as usize)
        }
    }
}

/// Whether an acquirer of `mode` is granted now (the FIFO rule of the
/// crate docs): start from the live grants, admit the waiters `ahead` of it
/// one by one as if granted, stop at the first that does not fit (it blocks
/// everyone behind it), and grant only if the acquirer fits the set so
/// built.
#[must_use]
pub fn admits(live: impl IntoIterator<Item = Mode>, ahead: impl IntoIterator<Item = Mode>, mode: Mode) -> bool {
    let mut simulated: Vec<Mode> = live.into_iter().collect();
    for waiter in ahead {
        if !compatible(&simulated, waiter) {
            return false;
        }
        simulated.push(waiter);
    }
    compatible(&simulated, mode)
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

/// The fence verdict for `token`, given the newest token ever issued for
/// the name and the token's own grant as (live, mode), if the store still
/// has it.
///
/// # Errors
/// The refusal, when `token` may not write.
pub fn fence_verdict(token: Token, newest: Option<Token>, grant: Option<(bool, Mode)>) -> Result<(), FenceRefusal> {
    match grant {
        Some((true, mode)) if mode.is_exclusive() && newest != Some(token) => Err(FenceRefusal::Superseded),
        Some((true, _)) => Ok(()),
        _ if newest.is_some_and(|n| n > token) => Err(FenceRefusal::Superseded),
        _ => Err(FenceRefusal::NotLive),
    }
}

/// What a store does at its fence gate, decided from what it read: the
/// newest token of the name and the token's own grant with whether it is
/// live. The store then removes the found grant if `expire_found` (it is
/// no longer live), records `event` with `owner` and `detail`, and returns
/// `outcome` — all in the gate's one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencePlan {
    pub expire_found: bool,
    pub event: crate::HistoryEvent,
    pub owner: Option<String>,
    pub detail: String,
    pub outcome: crate::LeaseFence,
}

/// Plan the fence gate for `p` (see [`FencePlan`]).
#[must_use]
pub fn fence_plan(
    p: &crate::LeaseFenceParams,
    newest: Option<Token>,
    found: Option<(crate::Grant, bool)>,
) -> FencePlan {
    let verdict = fence_verdict(p.token, newest, found.as_ref().map(|(g, live)| (*live, g.mode)));
    match (verdict, found) {
        (Ok(()), Some((grant, _))) => FencePlan {
            expire_found: false,
            event: crate::HistoryEvent::FencePassed,
            owner: Some(grant.owner.clone()),
            detail: detail::fence_passed(&p.caller),
            outcome: crate::LeaseFence::Passed(grant),
        },
        (Err(reason), found) => FencePlan {
            expire_found: found.is_some_and(|(_, live)| !live),
            event: crate::HistoryEvent::FenceRefused,
            owner: None,
            detail: detail::fence_refused(&p.caller, reason, newest),
            outcome: crate::LeaseFence::Refused { newest, reason },
        },
        (Ok(()), None) => unreachable!("a fence passes only with a live grant"),
    }
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
