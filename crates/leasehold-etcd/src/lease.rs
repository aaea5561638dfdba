//! Lease operations on etcd: each reads one name's keys at one revision,
//! decides as `leasehold-sqlite`'s `lease.rs` does (the reference; the FIFO
//! admission and the fence verdict are `leasehold_backend::rules`), and
//! commits the decision in ONE transaction guarded by compares. A compare
//! that fails means someone else changed the name in between: read again
//! and decide again (optimistic concurrency, as etcd's `concurrency/stm.go`).
//!
//! The compares of every committing transaction:
//! - the name's guard key still has the `mod_revision` that was read (every
//!   transaction that changes the name writes the guard), and
//! - every live marker the decision relies on still exists with the
//!   `create_revision` (= token) that was read. Markers also vanish by etcd
//!   lease expiry, which writes no guard; this compare catches that.
//!
//! A marker that vanishes between the read and the commit and that the
//! decision did not rely on only makes a name freer than it was judged:
//! the decision stays a correct (conservative) one.
//!
//! Time is the etcd server's: a grant is live while its live marker exists,
//! and etcd deletes it when the grant's etcd lease runs out. TTLs are whole
//! seconds on etcd; a TTL is rounded UP, so the store never expires a grant
//! before the holder's own deadline (request sent + TTL − margin).

use std::time::{Duration, SystemTime};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use leasehold_backend::rules::{self, detail};
use leasehold_backend::unix_ms::{from_ms, to_ms};
use leasehold_backend::{
    Grant, Held, HistoryEntry, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, LostReason, Token, WaiterEnqueueParams, WaiterTicket, duration_millis, signed,
};

use crate::keys::{GuardValue, HistoryValue, Keys, Record, Slot, Snapshot, Waiter, WaiterValue, slot, snapshots};

/// History entries kept per name; older ones are deleted by the writer
/// that adds a newer one (a bounded key range).
pub const HISTORY_PER_NAME: u64 = 1000;

/// How often one call re-reads and re-decides after losing a race before
/// it gives up with an error.
const MAX_ROUNDS: u32 = 200;

#[derive(Debug)]
pub enum Error {
    Etcd(etcd_client::Error),
    /// A key this code could not have written.
    Corrupt(String),
    /// Lost the race `MAX_ROUNDS` times in a row.
    Contended(String),
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        Error::Etcd(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The client and the key layout, for one call.
pub struct Conn<'a> {
    pub client: Client,
    pub keys: &'a Keys,
}

/// Whole seconds of an etcd lease (an `i64`) for `ttl`: rounded up, at
/// least 1, saturating. The seam admits at most a year (`limits::TTL`),
/// far below etcd's own maximum of 9e9 s.
fn ttl_secs(ttl: Duration) -> i64 {
    signed(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)).max(1))
}

fn to_json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("leasehold's own records always serialize")
}

/// One transaction being built for one name: compares, operations, and
/// the history entries it adds.
struct Plan<'a> {
    keys: &'a Keys,
    name: &'a LeaseName,
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
    guard: GuardValue,
    /// etcd leases to revoke once the transaction committed.
    revoke: Vec<i64>,
}

impl<'a> Plan<'a> {
    fn new(keys: &'a Keys, name: &'a LeaseName, snap: &Snapshot) -> Self {
        Self {
            keys,
            name,
            compares: vec![Compare::mod_revision(
                keys.guard(name),
                CompareOp::Equal,
                snap.guard_rev,
            )],
            ops: Vec::new(),
            guard: snap.guard,
            revoke: Vec::new(),
        }
    }

    /// Whether committing would change anything besides the guard.
    fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The decision relies on `s` still being live.
    fn rely_on(&mut self, s: &Slot) {
        self.compares.push(Compare::create_revision(
            self.keys.live(self.name, &s.id),
            CompareOp::Equal,
            s.token.0 as i64,
        ));
    }

    fn put(&mut self, key: String, value: Vec<u8>, lease: Option<i64>) {
        self.ops
            .push(TxnOp::put(key, value, lease.map(|l| PutOptions::new().with_lease(l))));
    }

    fn delete(&mut self, key: String) {
        self.ops.push(TxnOp::delete(key, None));
    }

    fn record(&mut self, event: HistoryEvent, token: Option<Token>, owner: Option<&str>, detail: &str) {
        self.history(event, token.map(|t| t.0), false, owner, detail);
    }

    fn history(&mut self, event: HistoryEvent, token: Option<u64>, is_rev: bool, owner: Option<&str>, detail: &str) {
        self.guard.seq += 1;
        let value = HistoryValue {
            at_ms: to_ms(SystemTime::now()),
            event: event.as_str().to_owned(),
            token,
            token_is_revision: is_rev,
            owner: owner.map(str::to_owned),
            detail: detail.to_owned(),
        };
        self.put(self.keys.history(self.name, self.guard.seq), to_json(&value), None);
    }

    /// Remove a grant whose etcd lease ran out, recording it.
    fn expire(&mut self, s: &Slot) {
        self.delete(self.keys.record(self.name, &s.id));
        let r = &s.record;
        self.record(
            HistoryEvent::Expired,
            Some(s.token),
            Some(&r.owner),
            &detail::expired(Duration::from_millis(r.ttl_ms), &r.holder),
        );
    }

    /// Remove a live grant (release, fast takeover), relying on it being live.
    fn remove(&mut self, s: &Slot) {
        self.rely_on(s);
        self.delete(self.keys.live(self.name, &s.id));
        self.delete(self.keys.record(self.name, &s.id));
        self.revoke.extend(s.lease);
    }

    /// A granted waiter leaves the queue.
    fn leave_queue(&mut self, w: &Waiter) {
        self.delete(self.keys.waiter(self.name, &w.id));
        self.revoke.push(w.lease);
    }

    fn into_txn(mut self) -> (Txn, Vec<i64>) {
        let guard = to_json(&self.guard);
        self.put(self.keys.guard(self.name), guard, None);
        if self.guard.seq > HISTORY_PER_NAME {
            // Keep the newest HISTORY_PER_NAME entries: a bounded range.
            let from = self.keys.history(self.name, 0);
            let to = self.keys.history(self.name, self.guard.seq - HISTORY_PER_NAME + 1);
            self.ops
                .push(TxnOp::delete(from, Some(DeleteOptions::new().with_range(to))));
        }
        (Txn::new().when(self.compares).and_then(self.ops), self.revoke)
    }
}

/// A lease granted for this call and not yet attached to anything; revoked
/// when the call ends unused.
#[derive(Default)]
struct Spare(Option<(i64, i64)>);

impl Conn<'_> {
    async fn snapshot(&mut self, name: &LeaseName) -> Result<Snapshot> {
        let resp = self
            .client
            .get(self.keys.name_dir(name), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut all = snapshots(self.keys, &resp).map_err(Error::Corrupt)?;
        Ok(all.pop().map(|(_, s)| s).unwrap_or_default())
    }

    /// Commit `plan`; `Some(revision)` if its compares held.
    async fn commit(&mut self, plan: Plan<'_>) -> Result<Option<i64>> {
        let (txn, revoke) = plan.into_txn();
        let resp = self.client.txn(txn).await?;
        if !resp.succeeded() {
            return Ok(None);
        }
        for lease in revoke {
            self.revoke(lease).await;
        }
        Ok(Some(resp.header().map_or(0, etcd_client::ResponseHeader::revision)))
    }

    /// Commit a plan that attaches keys to the lease in `spare`:
    /// `Some(revision)` once committed (the lease is then in use), `None`
    /// to decide again (another client changed the name, or the lease ran
    /// out before the commit — then a new one is granted).
    async fn commit_using(&mut self, plan: Plan<'_>, spare: &mut Spare) -> Result<Option<i64>> {
        match self.commit(plan).await {
            Ok(Some(rev)) => {
                spare.0 = None;
                Ok(Some(rev))
            }
            Ok(None) => Ok(None),
            Err(e) if lease_gone(&e) => {
                spare.0 = None;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A committed grant, after re-checking its etcd lease (etcd issue
    /// 11456: a lock must never be reported granted when its lease already
    /// ran out, e.g. after a long pause). `None` when it has: the next
    /// round finds it expired and decides again.
    async fn granted(&mut self, name: &LeaseName, slot: &Slot) -> Result<Option<Grant>> {
        let left = self
            .remaining(slot.lease.expect("a committed grant has a lease"))
            .await?;
        Ok((!left.is_zero()).then(|| slot.grant(name, left)))
    }

    /// Revoke an etcd lease, best effort: one that is not revoked runs out
    /// by itself, and nothing still attached to it is relied upon.
    async fn revoke(&mut self, lease: i64) {
        let _ = self.client.lease_revoke(lease).await;
    }

    /// A fresh etcd lease of `ttl` (reused across the rounds of one call).
    async fn lease(&mut self, spare: &mut Spare, ttl: Duration) -> Result<i64> {
        let secs = ttl_secs(ttl);
        if let Some((id, s)) = spare.0
            && s == secs
        {
            return Ok(id);
        }
        if let Some((id, _)) = spare.0.take() {
            self.revoke(id).await;
        }
        let id = self.client.lease_grant(secs, None).await?.id();
        spare.0 = Some((id, secs));
        Ok(id)
    }

    async fn drop_spare(&mut self, spare: Spare) {
        if let Some((id, _)) = spare.0 {
            self.revoke(id).await;
        }
    }

    /// Seconds left on an etcd lease (0 when it is gone).
    async fn remaining(&mut self, lease: i64) -> Result<Duration> {
        let ttl = self.client.lease_time_to_live(lease, None).await?.ttl();
        Ok(Duration::from_secs(u64::try_from(ttl).unwrap_or(0)))
    }

    async fn grants<'s>(&mut self, name: &LeaseName, live: impl Iterator<Item = &'s Slot>) -> Result<Vec<Grant>> {
        let mut out = Vec::new();
        for s in live {
            let left = match s.lease {
                Some(l) => self.remaining(l).await?,
                None => Duration::ZERO,
            };
            out.push(s.grant(name, left));
        }
        Ok(out)
    }

    pub async fn acquire(&mut self, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
        let mut spare = Spare::default();
        let mut waiter_spare = Spare::default();
        let out = self.acquire_rounds(p, &mut spare, &mut waiter_spare).await;
        self.drop_spare(spare).await;
        self.drop_spare(waiter_spare).await;
        out
    }

    async fn acquire_rounds(
        &mut self,
        p: &LeaseAcquireParams,
        spare: &mut Spare,
        waiter_spare: &mut Spare,
    ) -> Result<LeaseAcquire> {
        let name = &p.name;
        let keys = self.keys;
        for _ in 0..MAX_ROUNDS {
            let snap = self.snapshot(name).await?;
            let mut plan = Plan::new(keys, name, &snap);
            let mut live: Vec<&Slot> = Vec::new();
            for s in &snap.slots {
                if s.is_live() {
                    live.push(s);
                } else {
                    plan.expire(s);
                }
            }

            // Fast takeover: only tokens still live here are removed, so a
            // stale proof cannot evict a newer grant.
            for token in &p.evict {
                if let Some(i) = live.iter().position(|s| s.token == *token) {
                    let s = live.remove(i);
                    plan.remove(s);
                    plan.record(
                        HistoryEvent::FastTakeover,
                        Some(s.token),
                        Some(&s.record.owner),
                        &detail::fast_takeover(&s.record.holder, &p.holder),
                    );
                }
            }

            let mine = p.ticket.and_then(|t| snap.waiters.iter().position(|w| w.ticket == t));

            // Re-acquisition by the same explicit owner, or by the same
            // process: the same token, the live marker moved to a fresh
            // etcd lease.
            if let Some((s, why)) = live.iter().copied().find_map(|s| {
                let r = &s.record;
                rules::reacquires(p, &r.owner, r.owner_explicit, r.mode, &r.holder).map(|why| (s, why))
            }) {
                let lease = self.lease(spare, p.ttl).await?;
                plan.rely_on(s);
                plan.put(keys.live(name, &s.id), Vec::new(), Some(lease));
                let record = Record {
                    holder: p.holder.clone(),
                    ttl_ms: duration_millis(p.ttl),
                    ..s.record.clone()
                };
                plan.put(keys.record(name, &s.id), to_json(&record), None);
                plan.revoke.extend(s.lease);
                if let Some(i) = mine {
                    plan.leave_queue(&snap.waiters[i]);
                }
                plan.record(HistoryEvent::Reacquired, Some(s.token), Some(&p.owner.label), why);
                if self.commit_using(plan, spare).await?.is_none() {
                    continue;
                }
                let slot = Slot {
                    lease: Some(lease),
                    record,
                    ..s.clone()
                };
                match self.granted(name, &slot).await? {
                    Some(grant) => return Ok(LeaseAcquire::Acquired(grant)),
                    None => continue,
                }
            }

            // FIFO: serve, in order, every waiter ahead that could be granted;
            // the first one that cannot blocks everyone behind it.
            let ahead = &snap.waiters[..mine.unwrap_or(snap.waiters.len())];
            let admitted = rules::admits(
                live.iter().map(|s| s.record.mode),
                ahead.iter().map(|w| w.value.mode),
                p.mode,
            );

            if !admitted {
                let mut remade = false;
                match (p.ticket, mine) {
                    (Some(_), Some(i)) => {
                        let w = &snap.waiters[i];
                        self.refresh_waiter(&mut plan, name, w, p.waiter_ttl, waiter_spare)
                            .await?;
                    }
                    (Some(_), None) => {
                        // The registration expired: re-make it, at the back.
                        let lease = self.lease(waiter_spare, p.waiter_ttl).await?;
                        let value = WaiterValue {
                            mode: p.mode,
                            ttl_s: ttl_secs(p.waiter_ttl),
                        };
                        plan.put(keys.waiter(name, &slot(lease)), to_json(&value), Some(lease));
                        remade = true;
                    }
                    (None, _) => {}
                }
                let mut ticket = p.ticket;
                if !plan.is_empty() {
                    let Some(rev) = self.commit_using(plan, waiter_spare).await? else {
                        continue;
                    };
                    if remade {
                        ticket = Some(WaiterTicket(rev as u64));
                    }
                }
                let grants = self.grants(name, live.into_iter()).await?;
                return Ok(LeaseAcquire::Held(Held {
                    grants,
                    waiters_ahead: ahead.len() as u32,
                    ticket,
                }));
            }

            // Grant. The token is this transaction's revision: the create
            // revision of the new record and marker, and the token key's new
            // mod_revision.
            let lease = self.lease(spare, p.ttl).await?;
            let s = slot(lease);
            let record = Record {
                owner: p.owner.label.clone(),
                owner_explicit: p.owner.explicit,
                mode: p.mode,
                holder: p.holder.clone(),
                acquired_ms: to_ms(SystemTime::now()),
                ttl_ms: duration_millis(p.ttl),
            };
            plan.compares
                .push(Compare::create_revision(keys.record(name, &s), CompareOp::Equal, 0));
            plan.put(keys.token(name), Vec::new(), None);
            plan.put(keys.record(name, &s), to_json(&record), None);
            plan.put(keys.live(name, &s), Vec::new(), Some(lease));
            if let Some(i) = mine {
                plan.leave_queue(&snap.waiters[i]);
            }
            plan.history(
                HistoryEvent::Granted,
                None,
                true,
                Some(&p.owner.label),
                &detail::granted(p.mode, p.ttl, &p.holder),
            );
            let Some(rev) = self.commit_using(plan, spare).await? else {
                continue;
            };
            let slot = Slot {
                id: s,
                token: Token(rev as u64),
                record,
                lease: Some(lease),
            };
            if let Some(grant) = self.granted(name, &slot).await? {
                return Ok(LeaseAcquire::Acquired(grant));
            }
        }
        Err(Error::Contended(format!("acquiring {name}")))
    }

    /// Keep a waiter's registration for another `ttl`: a keep-alive of its
    /// etcd lease when that was granted for the same TTL, else a move to a
    /// fresh lease inside `plan`.
    async fn refresh_waiter(
        &mut self,
        plan: &mut Plan<'_>,
        name: &LeaseName,
        w: &Waiter,
        ttl: Duration,
        spare: &mut Spare,
    ) -> Result<()> {
        if w.value.ttl_s == ttl_secs(ttl) {
            let (mut keeper, mut stream) = self.client.lease_keep_alive(w.lease).await?;
            keeper.keep_alive().await?;
            // A lapsed lease answers with TTL 0; the registration is then
            // gone and the next acquisition re-makes it.
            let _ = stream.message().await?;
            return Ok(());
        }
        let lease = self.lease(spare, ttl).await?;
        let value = WaiterValue {
            mode: w.value.mode,
            ttl_s: ttl_secs(ttl),
        };
        plan.compares.push(Compare::create_revision(
            self.keys.waiter(name, &w.id),
            CompareOp::Equal,
            w.ticket.0 as i64,
        ));
        plan.put(self.keys.waiter(name, &w.id), to_json(&value), Some(lease));
        plan.revoke.push(w.lease);
        Ok(())
    }

    /// Find the live grant a token-scoped operation acts on, or say why not
    /// (adding the refusal, and the expiry it found, to `plan`).
    fn live_grant<'s>(
        plan: &mut Plan<'_>,
        snap: &'s Snapshot,
        token: Token,
        owner: Option<&str>,
        op: &str,
    ) -> std::result::Result<&'s Slot, LostReason> {
        let reason = match snap.slot(token) {
            None => LostReason::Gone,
            Some(s) => match rules::owner_verdict(owner, &s.record.owner, s.record.owner_explicit) {
                Err(reason) => reason,
                Ok(()) if !s.is_live() => {
                    plan.expire(s);
                    LostReason::Expired
                }
                Ok(()) => return Ok(s),
            },
        };
        plan.record(
            HistoryEvent::StaleRefused,
            Some(token),
            owner,
            &detail::stale(op, reason),
        );
        Err(reason)
    }

    pub async fn renew(&mut self, p: &LeaseRenewParams) -> Result<LeaseRenew> {
        let mut spare = Spare::default();
        let out = self.renew_rounds(p, &mut spare).await;
        self.drop_spare(spare).await;
        out
    }

    async fn renew_rounds(&mut self, p: &LeaseRenewParams, spare: &mut Spare) -> Result<LeaseRenew> {
        let name = &p.name;
        let keys = self.keys;
        for _ in 0..MAX_ROUNDS {
            let snap = self.snapshot(name).await?;
            let mut plan = Plan::new(keys, name, &snap);
            let s = match Self::live_grant(&mut plan, &snap, p.token, p.owner.as_deref(), "renew") {
                Ok(s) => s,
                Err(reason) => match self.commit(plan).await? {
                    Some(_) => return Ok(LeaseRenew::Lost(reason)),
                    None => continue,
                },
            };
            // A token-scoped refresh: move the live marker to a fresh etcd
            // lease of the asked TTL, only if it is still this grant's marker
            // on the lease that was read. Not a guarded transaction: a
            // renewal changes no decision anyone else makes.
            let lease = self.lease(spare, p.ttl).await?;
            let old = s.lease.expect("live");
            let record = Record {
                ttl_ms: duration_millis(p.ttl),
                ..s.record.clone()
            };
            let live_key = keys.live(name, &s.id);
            let txn = Txn::new()
                .when([
                    Compare::create_revision(live_key.clone(), CompareOp::Equal, s.token.0 as i64),
                    Compare::lease(live_key.clone(), CompareOp::Equal, old),
                ])
                .and_then([
                    TxnOp::put(live_key, Vec::new(), Some(PutOptions::new().with_lease(lease))),
                    TxnOp::put(keys.record(name, &s.id), to_json(&record), None),
                ]);
            match self.client.txn(txn).await {
                Ok(r) if r.succeeded() => {}
                Ok(_) => continue,
                Err(e) => {
                    let e = Error::from(e);
                    if !lease_gone(&e) {
                        return Err(e);
                    }
                    spare.0 = None;
                    continue;
                }
            }
            spare.0 = None;
            self.revoke(old).await;
            let left = self.remaining(lease).await?;
            let slot = Slot {
                lease: Some(lease),
                record,
                ..s.clone()
            };
            return Ok(LeaseRenew::Renewed(slot.grant(name, left)));
        }
        Err(Error::Contended(format!("renewing {name} token {}", p.token)))
    }

    pub async fn release(&mut self, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
        let name = &p.name;
        for _ in 0..MAX_ROUNDS {
            let snap = self.snapshot(name).await?;
            let mut plan = Plan::new(self.keys, name, &snap);
            let outcome = match Self::live_grant(&mut plan, &snap, p.token, p.owner.as_deref(), "release") {
                Err(reason) => LeaseRelease::Lost(reason),
                Ok(s) => {
                    plan.remove(s);
                    plan.record(
                        HistoryEvent::Released,
                        Some(p.token),
                        Some(&s.record.owner),
                        "released by its holder",
                    );
                    LeaseRelease::Released
                }
            };
            if self.commit(plan).await?.is_some() {
                return Ok(outcome);
            }
        }
        Err(Error::Contended(format!("releasing {name} token {}", p.token)))
    }

    pub async fn fence(&mut self, p: &LeaseFenceParams) -> Result<LeaseFence> {
        let name = &p.name;
        for _ in 0..MAX_ROUNDS {
            let snap = self.snapshot(name).await?;
            let mut plan = Plan::new(self.keys, name, &snap);
            let newest = snap.last_token;
            let found = snap.slot(p.token);
            if let Some(s) = found.filter(|s| !s.is_live()) {
                plan.expire(s);
            }
            let verdict = rules::fence_verdict(p.token, newest, found.map(|s| (s.is_live(), s.record.mode)))
                .map(|()| found.expect("a passing token has a grant"));
            let outcome = match verdict {
                Ok(s) => {
                    plan.rely_on(s);
                    plan.record(
                        HistoryEvent::FencePassed,
                        Some(p.token),
                        Some(&s.record.owner),
                        &detail::fence_passed(&p.caller),
                    );
                    Ok(s)
                }
                Err(reason) => {
                    plan.record(
                        HistoryEvent::FenceRefused,
                        Some(p.token),
                        None,
                        &detail::fence_refused(&p.caller, reason, newest),
                    );
                    Err(reason)
                }
            };
            if self.commit(plan).await?.is_none() {
                continue;
            }
            return Ok(match outcome {
                Ok(s) => {
                    let left = self.remaining(s.lease.expect("live")).await?;
                    LeaseFence::Passed(s.grant(name, left))
                }
                Err(reason) => LeaseFence::Refused { newest, reason },
            });
        }
        Err(Error::Contended(format!("fencing {name} token {}", p.token)))
    }

    pub async fn waiter_enqueue(&mut self, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
        let mut spare = Spare::default();
        let out = self.enqueue_rounds(p, &mut spare).await;
        self.drop_spare(spare).await;
        out
    }

    async fn enqueue_rounds(&mut self, p: &WaiterEnqueueParams, spare: &mut Spare) -> Result<WaiterTicket> {
        let name = &p.name;
        for _ in 0..MAX_ROUNDS {
            let snap = self.snapshot(name).await?;
            let lease = self.lease(spare, p.ttl).await?;
            let mut plan = Plan::new(self.keys, name, &snap);
            let value = WaiterValue {
                mode: p.mode,
                ttl_s: ttl_secs(p.ttl),
            };
            plan.put(self.keys.waiter(name, &slot(lease)), to_json(&value), Some(lease));
            if let Some(rev) = self.commit_using(plan, spare).await? {
                return Ok(WaiterTicket(rev as u64));
            }
        }
        Err(Error::Contended(format!("queueing for {name}")))
    }

    pub async fn waiter_remove(&mut self, name: &LeaseName, ticket: WaiterTicket) -> Result<()> {
        let snap = self.snapshot(name).await?;
        if let Some(w) = snap.waiters.iter().find(|w| w.ticket == ticket) {
            // Its own etcd lease holds only this key: revoking it removes
            // the registration (and a failed revoke lets it run out).
            self.revoke(w.lease).await;
        }
        Ok(())
    }

    async fn state(&mut self, name: &LeaseName, snap: &Snapshot) -> Result<Option<LeaseState>> {
        let Some(last_token) = snap.last_token else {
            return Ok(None);
        };
        let grants = self.grants(name, snap.live()).await?;
        Ok(Some(LeaseState {
            name: name.clone(),
            last_token,
            grants,
            waiters: snap.waiters.len() as u32,
        }))
    }

    pub async fn get(&mut self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let snap = self.snapshot(name).await?;
        self.state(name, &snap).await
    }

    pub async fn list(&mut self, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
        let resp = self
            .client
            .get(self.keys.leases(), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut out = Vec::new();
        for (name, snap) in snapshots(self.keys, &resp).map_err(Error::Corrupt)? {
            if p.live_only && snap.live().next().is_none() {
                continue;
            }
            if let Some(state) = self.state(&name, &snap).await? {
                out.push(state);
            }
        }
        Ok(out)
    }

    pub async fn history(&mut self, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
        let resp = self
            .client
            .get(
                self.keys.history_dir(&p.name),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Key, SortOrder::Descend)
                        .with_limit(i64::from(p.limit)),
                ),
            )
            .await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            let v: HistoryValue = serde_json::from_slice(kv.value()).map_err(|e| {
                Error::Corrupt(format!("history key {:?} is unreadable: {e}", crate::keys::key_str(kv)))
            })?;
            let event = HistoryEvent::parse(&v.event)
                .ok_or_else(|| Error::Corrupt(format!("unknown history event {:?}", v.event)))?;
            let token = if v.token_is_revision {
                Some(Token(kv.create_revision() as u64))
            } else {
                v.token.map(Token)
            };
            out.push(HistoryEntry {
                at: from_ms(v.at_ms),
                event,
                token,
                owner: v.owner,
                detail: v.detail,
            });
        }
        Ok(out)
    }
}

/// Whether a failed transaction put a key on an etcd lease that no longer
/// exists (it ran out between its grant and the commit): retry with a new one.
fn lease_gone(e: &Error) -> bool {
    matches!(e, Error::Etcd(etcd_client::Error::GRpcStatus(s)) if s.message().contains("requested lease not found"))
}
