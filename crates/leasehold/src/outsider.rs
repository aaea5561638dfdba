//! Ending a grant one does not hold: `leasehold release NAME --token T`.
//!
//! A grant is a capability of its holder. A grant bound to no process (a
//! bare `leasehold acquire`) lives by its TTL, and the script that got
//! its token releases it by that token. A grant bound to a process — a
//! `run` supervisor, a library holder, `--for-pid` — is that process's to
//! end, because only it can stop what runs under the grant first: a
//! release by token alone (which `status` prints to anyone) let the next
//! holder start while the old command still ran, for up to a heartbeat.
//!
//! So [`Store::release_as_outsider`] releases a bound grant only when its
//! holder is provably gone; for a holder that may run it refuses
//! ([`HolderRunning`]) — unless told to stop it ([`OutsiderRelease::stop_holder`]):
//! then, on the holder's own host only, it sends SIGTERM to the holder's
//! process (checked by start time, boot and pid namespace: never a reused
//! pid), and waits until the holder has ended its grant itself (`run`
//! stops its command, then releases) or is provably gone (its grant is
//! then released here). Nothing is released while the holder may still
//! run.

use std::fmt;
use std::time::{Duration, Instant};

use leasehold_backend::{Grant, GrantId, LeaseName, LeaseRelease, LostReason, Token, rules};

use crate::identity::{Liveness, Vantage};
use crate::{Result, Store};

/// How to end a grant one does not hold.
#[derive(Debug, Clone, Default)]
pub struct OutsiderRelease {
    /// The owner label given at acquisition, if any.
    pub owner: Option<String>,
    /// The grant's id, when known: only that grant is released.
    pub grant: Option<GrantId>,
    /// Stop a holder process that may still run (SIGTERM, on its host
    /// only) and wait for it, instead of refusing.
    pub stop_holder: bool,
}

/// What [`Store::release_as_outsider`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned once per call, never stored in bulk")]
pub enum OutsiderReleased {
    /// The grant is released.
    Released,
    /// Its holder process, sent SIGTERM, ended the grant (or died, and
    /// its grant was released here).
    HolderStopped { pid: u32 },
    /// There was no such grant to release.
    Lost(LostReason),
    /// Nothing was released: the grant is bound to a process that may
    /// still run.
    Running(HolderRunning),
}

/// A grant bound to a process that may still run, which an outsider did
/// not end; its `Display` is the one wording of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderRunning {
    pub grant: Grant,
    /// Whether its process runs on this host and could be signalled from
    /// here (else: another host, or no evidence either way).
    pub here: bool,
    /// Whether the holder was sent SIGTERM and did not end its grant in
    /// `waited`.
    pub waited: Option<Duration>,
}

impl fmt::Display for HolderRunning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.grant;
        write!(
            f,
            "{} (token {}) is held by {}: the grant is bound to that process, which alone ends it, stopping its command first",
            g.name, g.token, g.holder
        )?;
        match (self.here, self.waited) {
            (_, Some(waited)) => write!(
                f,
                "; sent SIGTERM, it still held the grant after {}",
                crate::format_duration(waited)
            ),
            (true, None) => write!(f, " (it runs on this host)"),
            (false, None) => write!(
                f,
                "; it runs on {} (or cannot be judged from here): stop it there, or the grant ends when its TTL runs out ({} left)",
                g.holder.host,
                crate::format_duration(g.expires_in)
            ),
        }
    }
}

/// The longest [`Store::release_as_outsider`] waits for a stopped holder
/// beyond its grant's TTL: `run` stops its command within its grace
/// period, which its timing keeps below the TTL, then releases.
const STOP_SLACK: Duration = Duration::from_secs(5);

/// How often a stopped holder's grant is looked at.
const STOP_POLL: Duration = Duration::from_millis(50);

impl Store {
    /// End the grant of `token` of `name` for a caller that does not hold
    /// it (see the module docs of `outsider`): a grant bound to no process
    /// is released by its token (and owner); one bound to a process only
    /// once that process is provably gone — or, with
    /// [`OutsiderRelease::stop_holder`], once it has been stopped.
    ///
    /// # Errors
    /// [`crate::Error::Store`] when the store fails.
    pub fn release_as_outsider(
        &self,
        name: &LeaseName,
        token: Token,
        how: &OutsiderRelease,
    ) -> Result<OutsiderReleased> {
        let owner = how.owner.as_deref();
        // The store's own read: the waiters' liveness, which `status`
        // judges, is not needed here.
        let found = self
            .backend()
            .lease_get(name)?
            .and_then(|s| s.grants.into_iter().find(|g| g.token == token));
        let Some(grant) = found.filter(|g| g.holder.bound) else {
            return self.release_exactly(name, token, owner, how.grant, OutsiderReleased::Released);
        };
        // Another grant, or the owner left out: refused before anything
        // is signalled.
        if let Err(reason) = how
            .grant
            .map_or(Ok(()), |asked| rules::scope_verdict(Some(asked), &grant))
            .and_then(|()| rules::owner_verdict(owner, &grant.owner, grant.owner_explicit))
        {
            return Ok(OutsiderReleased::Lost(reason));
        }
        let vantage = Vantage::read();
        let liveness = vantage.liveness(&grant.holder);
        if matches!(liveness, Liveness::Dead | Liveness::Unbound) {
            return self.release_exactly(name, token, owner, Some(grant.id()), OutsiderReleased::Released);
        }
        let here = liveness == Liveness::Alive && vantage.can_signal(&grant.holder);
        if here && how.stop_holder {
            return self.stop_holder(&grant, owner, &vantage);
        }
        Ok(OutsiderReleased::Running(HolderRunning {
            grant,
            here,
            waited: None,
        }))
    }

    fn release_exactly(
        &self,
        name: &LeaseName,
        token: Token,
        owner: Option<&str>,
        grant: Option<GrantId>,
        released: OutsiderReleased,
    ) -> Result<OutsiderReleased> {
        Ok(match self.release_by_token(name, token, owner, grant)? {
            LeaseRelease::Released => released,
            LeaseRelease::Lost(reason) => OutsiderReleased::Lost(reason),
        })
    }

    /// SIGTERM to `grant`'s holder, then wait for its grant to end: gone
    /// from the store (the holder released it, or it ran out), or its
    /// holder provably gone (released here).
    fn stop_holder(&self, grant: &Grant, owner: Option<&str>, vantage: &Vantage) -> Result<OutsiderReleased> {
        let pid = grant.holder.pid;
        let stopped = OutsiderReleased::HolderStopped { pid };
        vantage.terminate(&grant.holder);
        let start = Instant::now();
        let limit = grant.ttl + STOP_SLACK;
        let id = grant.id();
        while start.elapsed() < limit {
            let still = self
                .backend()
                .lease_get(&grant.name)?
                .is_some_and(|s| s.grants.iter().any(|g| g.id() == id));
            if !still {
                return Ok(stopped);
            }
            if vantage.gone(&grant.holder) {
                return self.release_exactly(&grant.name, grant.token, owner, Some(id), stopped);
            }
            std::thread::sleep(STOP_POLL);
        }
        Ok(OutsiderReleased::Running(HolderRunning {
            grant: grant.clone(),
            here: true,
            waited: Some(start.elapsed()),
        }))
    }
}
