//! One etcd transaction built from a plan: [`Batch`] applies a plan's
//! steps (`leasehold_backend::plan::Apply`) as compares and operations on
//! one name's keys, with the etcd leases granted for it beforehand
//! ([`Leases`], [`Spares`]). `lease.rs` reads, plans, grants the leases
//! and commits; what a step writes is here.

use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp};
use leasehold_backend::plan::{Apply, Entry, HISTORY_PER_NAME, Issued, NewGrant, NewWaiter, Seen};
use leasehold_backend::unix_ms::to_ms;
use leasehold_backend::{Holder, LeaseName, Token, WaiterTicket, duration_millis, signed};

use super::{Error, Result};
use crate::keys::{GuardValue, HistoryValue, Keys, Record, Slot, Snapshot, WaiterValue, slot};

/// Whole seconds of an etcd lease (an `i64`) for `ttl`: rounded up, at
/// least 1, saturating. The seam admits at most a year (`limits::TTL`),
/// far below etcd's own maximum of 9e9 s.
pub(crate) fn ttl_secs(ttl: Duration) -> i64 {
    signed(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)).max(1))
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("leasehold's own records always serialize")
}

/// The etcd leases a plan's writes attach keys to, granted before the
/// plan is applied (etcd calls cannot run inside [`Apply`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Leases {
    /// For a new or extended grant's live marker.
    pub(crate) grant: Option<i64>,
    /// For a re-made waiter registration, or one moved to another TTL
    /// (`None` when its own lease was kept alive).
    pub(crate) waiter: Option<i64>,
}

/// One transaction being built for one name from a plan: compares,
/// operations, and the history entries it adds.
pub(crate) struct Batch<'a> {
    pub(crate) keys: &'a Keys,
    pub(crate) name: &'a LeaseName,
    pub(crate) snap: &'a Snapshot,
    pub(crate) leases: Leases,
    /// Whether the transaction compares and writes the name's guard: every
    /// decision does, a renewal alone does not (it changes no decision
    /// anyone else makes).
    pub(crate) guarded: bool,
    pub(crate) compares: Vec<Compare>,
    pub(crate) ops: Vec<TxnOp>,
    pub(crate) guard: GuardValue,
    /// etcd leases to revoke once the transaction committed.
    pub(crate) revoke: Vec<i64>,
    /// The grant created or extended, as it is once committed (a new
    /// grant's token is the commit's revision plus the token offset).
    pub(crate) written: Option<Slot>,
    /// The token offset and its key's `mod_revision`, for a new grant.
    pub(crate) offset: (u64, i64),
}

impl<'a> Batch<'a> {
    pub(crate) fn new(keys: &'a Keys, name: &'a LeaseName, snap: &'a Snapshot, leases: Leases) -> Self {
        Self {
            keys,
            name,
            snap,
            leases,
            guarded: true,
            compares: Vec::new(),
            ops: Vec::new(),
            guard: snap.guard,
            revoke: Vec::new(),
            written: None,
            offset: (0, 0),
        }
    }

    /// Whether committing would change anything besides the guard.
    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(crate) fn slot(&self, token: Token) -> &'a Slot {
        self.snap.slot(token).expect("a plan names only grants it was given")
    }

    /// The decision relies on `s` still being live.
    pub(crate) fn rely_on(&mut self, s: &Slot) {
        self.compares.push(Compare::create_revision(
            self.keys.live(self.name, &s.id),
            CompareOp::Equal,
            s.revision,
        ));
    }

    pub(crate) fn put(&mut self, key: String, value: Vec<u8>, lease: Option<i64>) {
        self.ops
            .push(TxnOp::put(key, value, lease.map(|l| PutOptions::new().with_lease(l))));
    }

    pub(crate) fn delete(&mut self, key: String) {
        self.ops.push(TxnOp::delete(key, None));
    }

    pub(crate) fn into_txn(mut self) -> (Txn, Vec<i64>) {
        if self.guarded {
            self.compares.push(Compare::mod_revision(
                self.keys.guard(self.name),
                CompareOp::Equal,
                self.snap.guard_rev,
            ));
            let guard = to_json(&self.guard);
            self.put(self.keys.guard(self.name), guard, None);
        }
        if self.guarded && self.guard.seq > u64::from(HISTORY_PER_NAME) {
            // Keep the newest HISTORY_PER_NAME entries: a bounded range.
            let from = self.keys.history(self.name, 0);
            let to = self
                .keys
                .history(self.name, self.guard.seq - u64::from(HISTORY_PER_NAME) + 1);
            self.ops
                .push(TxnOp::delete(from, Some(DeleteOptions::new().with_range(to))));
        }
        (Txn::new().when(self.compares).and_then(self.ops), self.revoke)
    }
}

impl Apply for Batch<'_> {
    type Error = Error;

    fn remove_grant(&mut self, token: Token, live: bool) -> Result<()> {
        let s = self.slot(token);
        if live {
            self.rely_on(s);
            self.delete(self.keys.live(self.name, &s.id));
            self.revoke.extend(s.lease);
        }
        self.delete(self.keys.record(self.name, &s.id));
        Ok(())
    }

    /// The live marker moves to a fresh etcd lease, only if it is still
    /// this grant's marker on the lease that was read.
    fn extend_grant(&mut self, token: Token, ttl: Duration, holder: Option<&Holder>) -> Result<()> {
        let s = self.slot(token);
        let lease = self.leases.grant.expect("an extension has its lease");
        let live = self.keys.live(self.name, &s.id);
        self.rely_on(s);
        self.compares
            .push(Compare::lease(live.clone(), CompareOp::Equal, s.lease.expect("live")));
        self.put(live, Vec::new(), Some(lease));
        let record = Record {
            holder: holder.unwrap_or(&s.record.holder).clone(),
            ttl_ms: duration_millis(ttl),
            ..s.record.clone()
        };
        self.put(self.keys.record(self.name, &s.id), to_json(&record), None);
        self.revoke.extend(s.lease);
        self.written = Some(Slot {
            lease: Some(lease),
            record,
            ..s.clone()
        });
        Ok(())
    }

    /// The token is this transaction's revision (the create revision of
    /// the new record and marker, and the token key's new `mod_revision`)
    /// plus the token offset, which the record and the token key keep; the
    /// offset must not have changed since it was read.
    fn insert_grant(&mut self, g: &NewGrant) -> Result<()> {
        let lease = self.leases.grant.expect("a grant has its lease");
        let id = slot(lease);
        let record = Record {
            owner: g.owner.label.clone(),
            owner_explicit: g.owner.explicit,
            mode: g.mode,
            holder: g.holder.clone(),
            acquired_ms: to_ms(SystemTime::now()),
            ttl_ms: duration_millis(g.ttl),
            token_offset: self.offset.0,
        };
        let record_key = self.keys.record(self.name, &id);
        self.compares
            .push(Compare::create_revision(record_key.clone(), CompareOp::Equal, 0));
        self.compares.push(Compare::mod_revision(
            self.keys.token_offset(),
            CompareOp::Equal,
            self.offset.1,
        ));
        let offset = if self.offset.0 == 0 {
            String::new()
        } else {
            self.offset.0.to_string()
        };
        self.put(self.keys.token(self.name), offset.into_bytes(), None);
        self.put(record_key, to_json(&record), None);
        self.put(self.keys.live(self.name, &id), Vec::new(), Some(lease));
        self.written = Some(Slot {
            id,
            revision: 0,
            token: Token(0),
            record,
            lease: Some(lease),
        });
        Ok(())
    }

    fn refresh_waiter(&mut self, ticket: WaiterTicket, ttl: Duration) -> Result<()> {
        let Some(lease) = self.leases.waiter else {
            return Ok(()); // kept alive on its own lease
        };
        let w = self.snap.waiters.iter().find(|w| w.ticket == ticket).expect("read");
        let key = self.keys.waiter(self.name, &w.id);
        self.compares
            .push(Compare::create_revision(key.clone(), CompareOp::Equal, ticket.0 as i64));
        let value = WaiterValue {
            ttl_s: ttl_secs(ttl),
            ..w.value.clone()
        };
        self.put(key, to_json(&value), Some(lease));
        self.revoke.push(w.lease);
        Ok(())
    }

    fn enqueue_waiter(&mut self, w: &NewWaiter) -> Result<()> {
        let lease = self.leases.waiter.expect("a new registration has its lease");
        let value = WaiterValue {
            mode: w.mode,
            ttl_s: ttl_secs(w.ttl),
            holder: Some(w.holder.clone()),
        };
        self.put(self.keys.waiter(self.name, &slot(lease)), to_json(&value), Some(lease));
        Ok(())
    }

    fn remove_waiter(&mut self, ticket: WaiterTicket) -> Result<()> {
        let w = self.snap.waiters.iter().find(|w| w.ticket == ticket).expect("read");
        self.delete(self.keys.waiter(self.name, &w.id));
        self.revoke.push(w.lease);
        Ok(())
    }

    fn record(&mut self, e: &Entry) -> Result<()> {
        self.guard.seq += 1;
        let (token, token_is_revision, token_offset) = match e.token {
            Issued::Existing(t) => (Some(t.0), false, 0),
            Issued::New => (None, true, self.offset.0),
        };
        let value = HistoryValue {
            at_ms: to_ms(SystemTime::now()),
            event: e.event.as_str().to_owned(),
            token,
            token_is_revision,
            token_offset,
            owner: e.owner.clone(),
            detail: e.detail.clone(),
        };
        self.put(self.keys.history(self.name, self.guard.seq), to_json(&value), None);
        Ok(())
    }
}

/// Leases granted for this call and not yet attached to anything, as (id,
/// seconds): one for grants, one for waiter registrations. Revoked when
/// the call ends unused.
#[derive(Default)]
pub(crate) struct Spares {
    pub(crate) grant: Option<(i64, i64)>,
    pub(crate) waiter: Option<(i64, i64)>,
}

impl Spares {
    /// The spares `leases` attached keys to are in use now.
    pub(crate) fn used(&mut self, leases: Leases) {
        for (spare, lease) in [(&mut self.grant, leases.grant), (&mut self.waiter, leases.waiter)] {
            if lease.is_some() && spare.map(|(id, _)| id) == lease {
                *spare = None;
            }
        }
    }
}

/// A grant row as the planners read it, with whether it is live.
pub(crate) fn seen(snap: &Snapshot, name: &LeaseName) -> Vec<Seen> {
    snap.slots
        .iter()
        .map(|s| (s.grant(name, Duration::ZERO), s.is_live()))
        .collect()
}
