//! Lease operations on etcd: each reads one name's keys at one revision,
//! plans with `leasehold_backend::plan` (the algorithm every store
//! applies), applies the plan to a [`Batch`] and commits it in ONE
//! transaction guarded by compares. A compare that fails means someone
//! else changed the name in between: read again and plan again (optimistic
//! concurrency, as etcd's `concurrency/stm.go`).
//!
//! The compares of every committing transaction:
//! - the name's guard key still has the `mod_revision` that was read (every
//!   transaction that changes the name writes the guard), and
//! - every live marker the decision relies on still exists with the
//!   `create_revision` (= token) that was read. Markers also vanish by etcd
//!   lease expiry, which writes no guard; this compare catches that.
//!
//! A renewal alone is not guarded (it changes no decision anyone else
//! makes): it moves its live marker to a fresh etcd lease only if the
//! marker still has its token and the etcd lease that was read — as does
//! a re-acquisition, inside its guarded transaction.
//!
//! A marker that vanishes between the read and the commit and that the
//! decision did not rely on only makes a name freer than it was judged:
//! the decision stays a correct (conservative) one.
//!
//! Time is the etcd server's: a grant is live while its live marker exists,
//! and etcd deletes it when the grant's etcd lease runs out. TTLs are whole
//! seconds on etcd; a TTL is rounded UP, so the store never expires a grant
//! before the holder's own deadline (request sent + TTL − margin).

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use leasehold_backend::plan::{self, Acquire, Apply, HISTORY_PER_NAME, Issued, NewGrant, NewWaiter, Op, Plan, Seen};
use leasehold_backend::unix_ms::from_ms;
use leasehold_backend::{
    Grant, HistoryEntry, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, Token, TokensBumpParams, TokensBumpRefused, TokensBumped, WaiterEnqueueParams, WaiterRefresh,
    WaiterRefreshParams, WaiterTicket,
};

use crate::keys::{BadKey, HistoryValue, Keys, Slot, Snapshot, parse_offset, snapshots};

mod batch;

use self::batch::{Batch, Leases, Spares, seen, ttl_secs};

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
    /// A request over the cluster's size limit (`--max-request-bytes`),
    /// refused before anything was written: what it was.
    TooLarge(String),
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        Error::Etcd(e)
    }
}

impl From<BadKey> for Error {
    fn from(e: BadKey) -> Self {
        Error::Corrupt(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The client and the key layout, for one call.
pub struct Conn<'a> {
    pub client: Client,
    pub keys: &'a Keys,
    pub offset: &'a OffsetCache,
    pub waiter_leases: &'a WaiterLeases,
}

/// The etcd lease of each waiter registration this process refreshed, by
/// its name's directory, ticket and TTL in seconds: a refresh is then one
/// keep-alive, with no read to find the lease (half of what 200 idle
/// waiters' refreshes cost). A registration keeps its lease for its life
/// at one TTL (an attempt moves it to another lease only for another TTL,
/// a key of this map's); a lease that ended (the registration removed or
/// expired) answers its keep-alive with nothing left, and its entry goes.
#[derive(Debug, Default)]
pub struct WaiterLeases(std::sync::Mutex<std::collections::HashMap<(String, u64, i64), i64>>);

impl WaiterLeases {
    /// At most this many remembered: a process waits for a few names at a
    /// time, and the map never grows past it.
    const MOST: usize = 1024;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, u64, i64), i64>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The token offset (`PREFIX/token-offset`) as this process last read it:
/// (offset, the key's `mod_revision`, 0 when absent). Every transaction
/// that grants compares that `mod_revision`, so a grant made with an offset
/// a bump has since raised fails its compare; the cache is then dropped and
/// read again.
pub type OffsetCache = std::sync::Mutex<Option<(u64, i64)>>;

impl Conn<'_> {
    /// The token offset and its key's `mod_revision` (see [`OffsetCache`]).
    async fn token_offset(&mut self) -> Result<(u64, i64)> {
        if let Some(cached) = *self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            return Ok(cached);
        }
        let resp = self.client.get(self.keys.token_offset(), None).await?;
        let read = match resp.kvs().first() {
            Some(kv) => (parse_offset(kv)?, kv.mod_revision()),
            None => (0, 0),
        };
        *self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(read);
        Ok(read)
    }

    fn forget_token_offset(&self) {
        *self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Raise the token offset by `p.by`: every token from now on is a
    /// revision after this one plus the new offset, above the cluster's
    /// revision now plus the old offset (which bounds every token issued)
    /// plus `p.by`. A grant made meanwhile with the old offset fails its
    /// compare of the offset key and is made again.
    pub async fn tokens_bump(
        &mut self,
        p: &TokensBumpParams,
    ) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
        let key = self.keys.token_offset();
        for _ in 0..MAX_ROUNDS {
            let resp = self.client.get(key.clone(), None).await?;
            let revision = resp.header().map_or(0, etcd_client::ResponseHeader::revision);
            let (offset, mod_revision) = match resp.kvs().first() {
                Some(kv) => (parse_offset(kv)?, kv.mod_revision()),
                None => (0, 0),
            };
            let highest = Token(revision as u64 + offset);
            let floor = match p.floor_above(highest) {
                Ok(floor) => floor,
                Err(reason) => return Ok(Err(reason)),
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, mod_revision)])
                .and_then([TxnOp::put(key.clone(), (offset + p.by).to_string(), None)]);
            let committed = self.client.txn(txn).await?.succeeded();
            self.forget_token_offset();
            if committed {
                return Ok(Ok(TokensBumped { highest, floor }));
            }
        }
        Err(Error::Contended("raising the token offset".into()))
    }

    async fn snapshot(&mut self, name: &LeaseName) -> Result<Snapshot> {
        let resp = self
            .client
            .get(self.keys.name_dir(name), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut all = snapshots(self.keys, &resp)?;
        Ok(all.pop().map(|(_, s)| s).unwrap_or_default())
    }

    /// Grant (or reuse from `spares`) the etcd leases `plan`'s writes
    /// attach keys to; keep alive a refreshed waiter's own lease when its
    /// TTL is unchanged.
    async fn leases<T>(&mut self, plan: &Plan<T>, snap: &Snapshot, spares: &mut Spares) -> Result<Leases> {
        let mut leases = Leases::default();
        for op in &plan.ops {
            match op {
                Op::InsertGrant(NewGrant { ttl, .. }) | Op::ExtendGrant { ttl, .. } => {
                    leases.grant = Some(self.lease(&mut spares.grant, *ttl).await?);
                }
                Op::EnqueueWaiter(w) => leases.waiter = Some(self.lease(&mut spares.waiter, w.ttl).await?),
                Op::RefreshWaiter { ticket, ttl } => {
                    let w = snap.waiters.iter().find(|w| w.ticket == *ticket).expect("read");
                    if w.value.ttl_s == ttl_secs(*ttl) {
                        // A lease that lapsed since the read is gone with the
                        // registration, which the next acquisition re-makes
                        // at the back of the queue.
                        self.keep_alive(w.lease).await?;
                    } else {
                        leases.waiter = Some(self.lease(&mut spares.waiter, *ttl).await?);
                    }
                }
                _ => {}
            }
        }
        Ok(leases)
    }

    /// Commit `batch`: `Some(revision)` if its compares held, `None` to
    /// decide again (another client changed the name, or a lease it
    /// attaches to ran out before the commit — then a new one is granted).
    async fn commit(&mut self, batch: Batch<'_>, spares: &mut Spares) -> Result<Option<i64>> {
        let leases = batch.leases;
        let (txn, revoke) = batch.into_txn();
        match self.client.txn(txn).await.map_err(Error::from) {
            Ok(resp) if resp.succeeded() => {
                spares.used(leases);
                for lease in revoke {
                    self.revoke(lease).await;
                }
                Ok(Some(resp.header().map_or(0, etcd_client::ResponseHeader::revision)))
            }
            Ok(_) => Ok(None),
            Err(e) if lease_gone(&e) => {
                spares.used(leases);
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

    /// Keep an etcd lease alive for another TTL: false when it is gone
    /// (its TTL ran out). etcd answers TTL 0 for such a lease, which
    /// etcd-client turns into this error before handing out a keeper —
    /// not a store that is unavailable (the Python suite's 200 `async
    /// with` waiters on etcd saw it once).
    async fn keep_alive(&mut self, lease: i64) -> Result<bool> {
        match self.client.lease_keep_alive(lease).await {
            Ok((mut keeper, mut stream)) => {
                keeper.keep_alive().await?;
                Ok(stream.message().await?.is_some_and(|r| r.ttl() > 0))
            }
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m == "lease not found" => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Keep a waiter's place (`Backend::waiter_refresh`): a keep-alive of
    /// its own etcd lease, which holds its key alone — no transaction and
    /// no read of the name, whose queue an attempt reads whole (200
    /// waiters refreshing by attempts cost several % of a core). A place
    /// whose TTL is to change is re-made by an attempt instead.
    pub async fn waiter_refresh(&mut self, p: &WaiterRefreshParams) -> Result<WaiterRefresh> {
        let key = (self.keys.name_dir(&p.name), p.ticket.0, ttl_secs(p.ttl));
        let known = self.waiter_leases.lock().get(&key).copied();
        let lease = if let Some(lease) = known {
            lease
        } else {
            let (waiters, options) = self.keys.waiter_of(&p.name, p.ticket);
            let resp = self.client.get(waiters, Some(options)).await?;
            let Some(kv) = resp.kvs().first() else {
                return Ok(WaiterRefresh::Gone);
            };
            if crate::keys::waiter_value(self.keys, kv)?.ttl_s != key.2 {
                return Ok(WaiterRefresh::NotOffered);
            }
            kv.lease()
        };
        let refreshed = self.keep_alive(lease).await?;
        let mut leases = self.waiter_leases.lock();
        if !refreshed {
            leases.remove(&key);
            return Ok(WaiterRefresh::Gone);
        }
        if leases.len() >= WaiterLeases::MOST {
            leases.clear();
        }
        leases.insert(key, lease);
        Ok(WaiterRefresh::Refreshed)
    }

    /// Revoke an etcd lease, best effort: one that is not revoked runs out
    /// by itself, and nothing still attached to it is relied upon.
    async fn revoke(&mut self, lease: i64) {
        let _ = self.client.lease_revoke(lease).await;
    }

    /// A fresh etcd lease of `ttl` (reused across the rounds of one call).
    async fn lease(&mut self, spare: &mut Option<(i64, i64)>, ttl: Duration) -> Result<i64> {
        let secs = ttl_secs(ttl);
        if let Some((id, s)) = *spare
            && s == secs
        {
            return Ok(id);
        }
        if let Some((id, _)) = spare.take() {
            self.revoke(id).await;
        }
        let id = self.client.lease_grant(secs, None).await?.id();
        *spare = Some((id, secs));
        Ok(id)
    }

    async fn drop_spares(&mut self, spares: Spares) {
        for (id, _) in spares.grant.into_iter().chain(spares.waiter) {
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

    /// Run `round` until it commits (`Some`) — at most `MAX_ROUNDS` times —
    /// with this call's spare leases, revoked at the end if unused.
    async fn rounds<T>(
        &mut self,
        what: impl FnOnce() -> String,
        mut round: impl AsyncFnMut(&mut Self, &mut Spares) -> Result<Option<T>>,
    ) -> Result<T> {
        let mut spares = Spares::default();
        let mut out = Ok(None);
        for _ in 0..MAX_ROUNDS {
            out = round(self, &mut spares).await;
            if !matches!(out, Ok(None)) {
                break;
            }
        }
        self.drop_spares(spares).await;
        out?.ok_or_else(|| Error::Contended(what()))
    }

    pub async fn acquire(&mut self, p: &LeaseAcquireParams) -> Result<LeaseAcquire> {
        let what = || format!("acquiring {}", p.name);
        self.rounds(what, async |c, spares| c.acquire_round(p, spares).await)
            .await
    }

    /// One round of an acquisition; `None` to decide again.
    async fn acquire_round(&mut self, p: &LeaseAcquireParams, spares: &mut Spares) -> Result<Option<LeaseAcquire>> {
        let name = &p.name;
        let snap = self.snapshot(name).await?;
        let grants = seen(&snap, name);
        let queue: Vec<_> = snap.waiters.iter().map(crate::keys::Waiter::queued).collect();
        let plan = plan::acquire(p, &grants, &queue);
        let leases = self.leases(&plan, &snap, spares).await?;
        let mut batch = Batch::new(self.keys, name, &snap, leases);
        batch.offset = self.token_offset().await?;
        let offset = batch.offset.0;
        plan.apply(&mut batch)?;
        let written = batch.written.take();
        match plan.outcome {
            Acquire::Acquired(token) => {
                let Some(rev) = self.commit(batch, spares).await? else {
                    // Perhaps the offset moved (a bump): read it again.
                    self.forget_token_offset();
                    return Ok(None);
                };
                let written = written.expect("an acquisition writes its grant");
                let slot = match token {
                    Issued::New => Slot {
                        revision: rev,
                        token: Token(rev as u64 + offset),
                        ..written
                    },
                    // A re-acquisition keeps its grant and token.
                    Issued::Existing(kept) => Slot { token: kept, ..written },
                };
                Ok(self.granted(name, &slot).await?.map(LeaseAcquire::Acquired))
            }
            Acquire::Held(waiting) => {
                let mut issued = None;
                if !batch.is_empty() {
                    let Some(rev) = self.commit(batch, spares).await? else {
                        return Ok(None);
                    };
                    issued = Some(WaiterTicket(rev as u64));
                }
                let live = snap.slots.iter().filter(|s| waiting.live.contains(&s.token));
                let grants = self.grants(name, live).await?;
                Ok(Some(LeaseAcquire::Held(waiting.held(grants, issued))))
            }
        }
    }

    /// Rounds of: read the name, plan with the grant of `token` (and the
    /// newest token), apply the plan, let `adjust` fit the batch to the
    /// outcome, commit. The committed round's grant (as written, else as
    /// found) and outcome.
    /// One token-scoped operation, read–plan–commit in rounds. Without the
    /// token's grant, the planner also gets how the name's history says
    /// it ended (`plan::ENDINGS`), when `ending` asks for it.
    async fn by_token<T>(
        &mut self,
        (name, token, op): (&LeaseName, Token, &str),
        ending: bool,
        planner: impl Fn(Option<Token>, Option<&Seen>, Option<HistoryEvent>) -> Plan<T>,
        adjust: impl Fn(&T, &mut Batch<'_>, &Slot),
    ) -> Result<(Option<Slot>, T)> {
        let what = || format!("{op} {name} token {token}");
        self.rounds(what, async |c, spares| {
            let snap = c.snapshot(name).await?;
            let found = snap.slot(token);
            let grant = found.map(|s| (s.grant(name, Duration::ZERO), s.is_live()));
            let ended = match found {
                None if ending => c.ended(name, token).await?,
                _ => None,
            };
            let plan = planner(snap.last_token, grant.as_ref(), ended);
            let leases = c.leases(&plan, &snap, spares).await?;
            let mut batch = Batch::new(c.keys, name, &snap, leases);
            plan.apply(&mut batch)?;
            if let Some(s) = found {
                adjust(&plan.outcome, &mut batch, s);
            }
            let slot = batch.written.take().or_else(|| found.cloned());
            Ok(c.commit(batch, spares).await?.map(|_| (slot, plan.outcome)))
        })
        .await
    }

    pub async fn renew(&mut self, p: &LeaseRenewParams) -> Result<LeaseRenew> {
        // A renewal alone is not guarded: it changes no decision anyone
        // else makes.
        let renewed = |o: &std::result::Result<(), _>, b: &mut Batch<'_>, _: &Slot| b.guarded = o.is_err();
        let at = (&p.name, p.token, "renewing");
        match self
            .by_token(at, true, |_, found, ended| plan::renew(p, found, ended), renewed)
            .await?
        {
            (Some(slot), Ok(())) => {
                let left = self.remaining(slot.lease.expect("renewed")).await?;
                Ok(LeaseRenew::Renewed(slot.grant(&p.name, left)))
            }
            (_, outcome) => Ok(LeaseRenew::Lost(outcome.expect_err("a renewal writes its grant"))),
        }
    }

    pub async fn release(&mut self, p: &LeaseReleaseParams) -> Result<LeaseRelease> {
        let at = (&p.name, p.token, "releasing");
        let (_, outcome) = self
            .by_token(at, true, |_, found, ended| plan::release(p, found, ended), |_, _, _| ())
            .await?;
        Ok(outcome.map_or_else(LeaseRelease::Lost, |()| LeaseRelease::Released))
    }

    pub async fn fence(&mut self, p: &LeaseFenceParams) -> Result<LeaseFence> {
        // A fence passes only while the grant is still live at the commit.
        let passed = |o: &LeaseFence, b: &mut Batch<'_>, s: &Slot| {
            if matches!(o, LeaseFence::Passed(_)) {
                b.rely_on(s);
            }
        };
        let at = (&p.name, p.token, "fencing");
        match self
            .by_token(at, false, |newest, found, _| plan::fence(p, newest, found), passed)
            .await?
        {
            (Some(slot), LeaseFence::Passed(mut grant)) => {
                grant.expires_in = self.remaining(slot.lease.expect("live")).await?;
                Ok(LeaseFence::Passed(grant))
            }
            (_, outcome) => Ok(outcome),
        }
    }

    pub async fn waiter_enqueue(&mut self, p: &WaiterEnqueueParams) -> Result<WaiterTicket> {
        let w = NewWaiter {
            mode: p.mode,
            holder: p.holder.clone(),
            ttl: p.ttl,
        };
        let what = || format!("queueing for {}", p.name);
        self.rounds(what, async |c, spares| {
            let snap = c.snapshot(&p.name).await?;
            let leases = Leases {
                grant: None,
                waiter: Some(c.lease(&mut spares.waiter, p.ttl).await?),
            };
            let mut batch = Batch::new(c.keys, &p.name, &snap, leases);
            batch.enqueue_waiter(&w)?;
            let committed = c.commit(batch, spares).await?;
            Ok(committed.map(|rev| WaiterTicket(rev as u64)))
        })
        .await
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
            waiters: snap.waiters.iter().map(crate::keys::Waiter::queued).collect(),
        }))
    }

    pub async fn get(&mut self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let snap = self.snapshot(name).await?;
        self.state(name, &snap).await
    }

    /// [`Self::get`] as a waiter reads it (`Backend::lease_waiting`): the
    /// name's keys but its waiters, and the waiters queued before `ticket`
    /// (etcd filters them by creation revision: a ticket is one), in one
    /// transaction — one revision. The seam's default read the whole
    /// queue, every registration decoded, at every reading: a queue of
    /// 200 waiters cost 5.7 % of a core.
    pub async fn waiting(
        &mut self,
        name: &LeaseName,
        ticket: WaiterTicket,
        proved: usize,
    ) -> Result<Option<LeaseState>> {
        let dir = self.keys.name_dir(name);
        let waiters = self.keys.waiters(name);
        let mut reads = vec![TxnOp::get(dir, Some(GetOptions::new().with_range(waiters.clone())))];
        // 0 would mean no bound: a ticket is a revision, never below 2.
        let before = i64::try_from(ticket.0).unwrap_or(i64::MAX).saturating_sub(1);
        if before > 0 {
            reads.push(TxnOp::get(
                waiters,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_max_create_revision(before)
                        .with_sort(SortTarget::Create, SortOrder::Ascend),
                ),
            ));
        }
        let resp = self.client.txn(Txn::new().and_then(reads)).await?;
        let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
            etcd_client::TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let Some(name_keys) = gets.next() else {
            return Ok(None);
        };
        let snap = snapshots(self.keys, &name_keys)?
            .pop()
            .map(|(_, s)| s)
            .unwrap_or_default();
        let Some(mut state) = self.state(name, &snap).await? else {
            return Ok(None);
        };
        if let Some(ahead) = gets.next() {
            state.waiters = crate::keys::queued_waiters(self.keys, ahead.kvs(), proved)?;
        }
        Ok(Some(state))
    }

    pub async fn list(&mut self, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
        let resp = self
            .client
            .get(self.keys.leases(), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut out = Vec::new();
        for (name, snap) in snapshots(self.keys, &resp)? {
            if p.live_only && snap.live().next().is_none() {
                continue;
            }
            if let Some(state) = self.state(&name, &snap).await? {
                out.push(state);
            }
        }
        Ok(out)
    }

    /// How the grant of `token` ended, by the newest of `plan::ENDINGS`
    /// recorded for it in the name's history (read whole: only for a token
    /// the store no longer has).
    async fn ended(&mut self, name: &LeaseName, token: Token) -> Result<Option<HistoryEvent>> {
        let entries = self
            .history(&LeaseHistoryParams {
                name: name.clone(),
                limit: HISTORY_PER_NAME,
            })
            .await?;
        Ok(plan::ending(entries.iter().map(|e| (e.event, e.token)), token))
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
                Some(Token(kv.create_revision() as u64 + v.token_offset))
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
