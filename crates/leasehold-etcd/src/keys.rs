//! The key layout of a leasehold store in etcd, and reading one name's keys
//! back into a [`Snapshot`].
//!
//! Under the prefix (default `/leasehold`), per name (percent-encoded so that
//! `/` in a name never nests, and `job` is never a key prefix of `job2`'s
//! keys — every name directory ends in `/`):
//!
//! ```text
//! PREFIX/lease/NAME/t          token key: written only by a transaction that
//!                              grants; its `mod_revision` is the newest token
//! PREFIX/lease/NAME/v          guard: {"seq": N}; every transaction that
//!                              changes the name writes it and compares its
//!                              `mod_revision` with the one it read (optimistic
//!                              concurrency, one name at a time)
//! PREFIX/lease/NAME/r/SLOT     grant record (no etcd lease, durable): owner,
//!                              mode, holder, TTL; `create_revision` = token
//! PREFIX/lease/NAME/g/SLOT     live marker, attached to the grant's etcd lease;
//!                              `create_revision` = token. The grant is live
//!                              exactly while this key exists
//! PREFIX/lease/NAME/w/SLOT     waiter, attached to its own etcd lease;
//!                              `create_revision` = ticket (FIFO order)
//! PREFIX/history/NAME/SEQ      history entry (SEQ zero-padded, from the guard)
//! PREFIX/token-offset          the token offset of `--bump-tokens` (decimal;
//!                              absent: 0), added to the revision of every
//!                              grant made from then on
//! PREFIX/record/KEY            a record (`leasehold_backend::record`): the
//!                              body; its `mod_revision` is its version. KEY
//!                              as given, unencoded, so that etcd's key order
//!                              is the records' bytewise order
//! ```
//!
//! A token is a revision plus the token offset in force when the grant was
//! made, which the grant's record, the token key and a `granted` history
//! entry carry (`token_offset`, absent: 0): `leasehold migrate
//! --bump-tokens N` raises the offset, since etcd 3.4 cannot raise its own
//! revision (3.5's `etcdutl snapshot restore --bump-revision` can).
//!
//! `SLOT` is the etcd lease id the key was first attached to, in hex: a
//! name the creating transaction can choose before it knows its revision.
//! A record (`r/`) without its live marker (`g/`) is a grant whose etcd lease
//! ran out: the next writer records it as `expired` and deletes it.

use std::time::Duration;

use etcd_client::{GetOptions, GetResponse, KeyValue};
use leasehold_backend::{Grant, Holder, LeaseName, Mode, QueuedWaiter, Token, WaiterTicket, unix_ms};
use serde::{Deserialize, Serialize};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "/leasehold";

/// Where a store's keys live.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// A name's part of a key: `%` and `/` percent-encoded.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

fn decode(encoded: &str) -> Option<String> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        match rest.get(i + 1..i + 3) {
            Some("25") => out.push('%'),
            Some("2F") => out.push('/'),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl Keys {
    /// `prefix` without a trailing `/` (one is stripped).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The directory of every name's lease keys.
    pub fn leases(&self) -> String {
        format!("{}/lease/", self.prefix)
    }

    /// The directory of one name's lease keys.
    pub fn name_dir(&self, name: &LeaseName) -> String {
        format!("{}{}/", self.leases(), encode(name.as_str()))
    }

    /// The token offset of `--bump-tokens` (outside `lease/`: not a name's key).
    pub fn token_offset(&self) -> String {
        format!("{}/token-offset", self.prefix)
    }

    pub fn token(&self, name: &LeaseName) -> String {
        format!("{}t", self.name_dir(name))
    }

    pub fn guard(&self, name: &LeaseName) -> String {
        format!("{}v", self.name_dir(name))
    }

    pub fn record(&self, name: &LeaseName, slot: &str) -> String {
        format!("{}r/{slot}", self.name_dir(name))
    }

    pub fn live(&self, name: &LeaseName, slot: &str) -> String {
        format!("{}g/{slot}", self.name_dir(name))
    }

    pub fn waiter(&self, name: &LeaseName, slot: &str) -> String {
        format!("{}{slot}", self.waiters(name))
    }

    /// The directory of a name's waiter keys.
    pub fn waiters(&self, name: &LeaseName) -> String {
        format!("{}w/", self.name_dir(name))
    }

    /// The read of the waiter key `ticket` names — the one created at that
    /// revision — as (key range, options): the key holds its lease's id in
    /// its slot, which the ticket alone does not tell.
    pub fn waiter_of(&self, name: &LeaseName, ticket: WaiterTicket) -> (String, GetOptions) {
        let created = i64::try_from(ticket.0).unwrap_or(i64::MAX);
        let options = GetOptions::new()
            .with_prefix()
            .with_min_create_revision(created)
            .with_max_create_revision(created);
        (self.waiters(name), options)
    }

    /// The directory of records (outside `lease/` and `history/`: no
    /// record key is ever one of a name's keys).
    pub fn records(&self) -> String {
        format!("{}/record/", self.prefix)
    }

    /// The least key after every key under [`Keys::records`].
    pub fn records_end(&self) -> String {
        format!("{}/record0", self.prefix)
    }

    /// The key of the record `key`.
    pub fn record_key(&self, key: &str) -> String {
        format!("{}{key}", self.records())
    }

    /// The record key of a key under [`Keys::records`].
    pub fn split_record<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(&self.records())
    }

    pub fn history_dir(&self, name: &LeaseName) -> String {
        format!("{}/history/{}/", self.prefix, encode(name.as_str()))
    }

    pub fn history(&self, name: &LeaseName, seq: u64) -> String {
        format!("{}{seq:020}", self.history_dir(name))
    }

    /// Split a key under [`Keys::leases`] into its name and the rest
    /// (`t`, `v`, `r/SLOT`, ...).
    pub fn split<'k>(&self, key: &'k str) -> Option<(LeaseName, &'k str)> {
        let rest = key.strip_prefix(&self.leases())?;
        let (encoded, tail) = rest.split_once('/')?;
        let name = LeaseName::stored(decode(encoded)?).ok()?;
        Some((name, tail))
    }
}

/// The slot of a key created with etcd lease `lease`.
pub fn slot(lease: i64) -> String {
    format!("{lease:016x}")
}

/// What a grant record (`r/SLOT`) holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub owner: String,
    pub owner_explicit: bool,
    pub mode: Mode,
    pub holder: Holder,
    pub acquired_ms: i64,
    pub ttl_ms: u64,
    /// Added to the record's `create_revision` to make its token.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub token_offset: u64,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A key under the prefix, or its value, that leasehold could not have
/// written: the store's data is damaged or not leasehold's (the store
/// reports it as corrupt). `Display` says which key and why, the cause
/// included (so there is no `source()`).
#[derive(Debug)]
pub enum BadKey {
    /// A key outside leasehold's layout.
    Foreign { key: String },
    /// A token offset key whose value is not a decimal.
    NotAnOffset { key: String, value: String },
    /// A JSON value that does not read as what its key holds.
    Unreadable { key: String, error: serde_json::Error },
}

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadKey::Foreign { key } => write!(f, "key {key:?} is not one leasehold writes"),
            BadKey::NotAnOffset { key, value } => write!(f, "key {key:?} holds {value:?}, not a token offset"),
            BadKey::Unreadable { key, error } => write!(f, "key {key:?} holds an unreadable value: {error}"),
        }
    }
}

impl std::error::Error for BadKey {}

/// The value of the token key and of [`Keys::token_offset`]: a decimal
/// offset, empty for 0.
pub fn parse_offset(kv: &KeyValue) -> Result<u64, BadKey> {
    let text = std::str::from_utf8(kv.value()).unwrap_or("?");
    if text.is_empty() {
        return Ok(0);
    }
    text.parse().map_err(|_| BadKey::NotAnOffset {
        key: key_str(kv),
        value: text.to_owned(),
    })
}

/// What a waiter key (`w/SLOT`) holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaiterValue {
    pub mode: Mode,
    /// The TTL its etcd lease was granted with, in whole seconds.
    pub ttl_s: i64,
    /// The waiting process (absent from registrations written before
    /// leasehold recorded it: such a waiter is never proved dead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
}

/// What the guard key (`v`) holds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct GuardValue {
    /// The sequence number of the name's newest history entry.
    pub seq: u64,
}

/// A history entry. `token_is_revision`: the token is the entry key's
/// `create_revision` (a `granted` entry is written by the transaction that
/// creates the grant, before its token — that transaction's revision — is
/// known).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HistoryValue {
    pub at_ms: i64,
    pub event: String,
    pub token: Option<u64>,
    #[serde(default)]
    pub token_is_revision: bool,
    /// Added to the revision when `token_is_revision`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub token_offset: u64,
    pub owner: Option<String>,
    pub detail: String,
}

/// One grant of a name as read: its durable record, and the etcd lease of
/// its live marker if the marker still exists.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The suffix of its `r/` and `g/` keys.
    pub id: String,
    /// The record's `create_revision`: what compares name.
    pub revision: i64,
    /// The revision plus the record's token offset.
    pub token: Token,
    pub record: Record,
    /// `Some(etcd lease id)` while the grant is live.
    pub lease: Option<i64>,
}

impl Slot {
    pub fn is_live(&self) -> bool {
        self.lease.is_some()
    }

    pub fn grant(&self, name: &LeaseName, expires_in: Duration) -> Grant {
        let r = &self.record;
        Grant {
            name: name.clone(),
            token: self.token,
            owner: r.owner.clone(),
            owner_explicit: r.owner_explicit,
            mode: r.mode,
            holder: r.holder.clone(),
            acquired_at: unix_ms::from_ms(r.acquired_ms),
            ttl: Duration::from_millis(r.ttl_ms),
            expires_in,
        }
    }
}

/// A live waiter registration.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: String,
    pub ticket: WaiterTicket,
    pub lease: i64,
    pub value: WaiterValue,
}

impl Waiter {
    /// As the planners and readers see it.
    pub fn queued(&self) -> QueuedWaiter {
        QueuedWaiter {
            ticket: self.ticket,
            mode: self.value.mode,
            holder: self.value.holder.clone(),
        }
    }
}

/// The waiters of a name as a waiter between attempts reads them
/// (`Backend::lease_waiting`): `kvs`, the name's waiter keys, in FIFO
/// order; the first `proved` with who waits, the rest with their mode only
/// (who waits is most of a registration, and of reading it).
pub fn queued_waiters(keys: &Keys, kvs: &[KeyValue], proved: usize) -> Result<Vec<QueuedWaiter>, BadKey> {
    /// A registration read for its mode alone.
    #[derive(Deserialize)]
    struct ModeOnly {
        mode: Mode,
    }
    let mut out = Vec::with_capacity(kvs.len());
    for (i, kv) in kvs.iter().enumerate() {
        waiter_key(keys, kv)?;
        let ticket = WaiterTicket(kv.create_revision() as u64);
        out.push(if i < proved {
            let value: WaiterValue = json(kv)?;
            QueuedWaiter {
                ticket,
                mode: value.mode,
                holder: value.holder,
            }
        } else {
            QueuedWaiter {
                ticket,
                mode: json::<ModeOnly>(kv)?.mode,
                holder: None,
            }
        });
    }
    Ok(out)
}

/// A waiter key's registration, the key checked to be one.
pub fn waiter_value(keys: &Keys, kv: &KeyValue) -> Result<WaiterValue, BadKey> {
    waiter_key(keys, kv)?;
    json(kv)
}

/// `Err` unless `kv` is a waiter key (`w/SLOT`) of some name.
fn waiter_key(keys: &Keys, kv: &KeyValue) -> Result<(), BadKey> {
    let key = key_str(kv);
    if keys.split(&key).is_some_and(|(_, tail)| tail.starts_with("w/")) {
        Ok(())
    } else {
        Err(BadKey::Foreign { key })
    }
}

/// One name's keys at one revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The newest token ever issued (the token key's `mod_revision` plus
    /// the offset it holds).
    pub last_token: Option<Token>,
    /// The guard's `mod_revision` (0: no guard yet) and value.
    pub guard_rev: i64,
    pub guard: GuardValue,
    /// Grant records, oldest (smallest token) first.
    pub slots: Vec<Slot>,
    /// Live waiters in FIFO order.
    pub waiters: Vec<Waiter>,
}

impl Snapshot {
    pub fn slot(&self, token: Token) -> Option<&Slot> {
        self.slots.iter().find(|s| s.token == token)
    }

    pub fn live(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.is_live())
    }
}

fn json<T: for<'de> Deserialize<'de>>(kv: &KeyValue) -> Result<T, BadKey> {
    serde_json::from_slice(kv.value()).map_err(|error| BadKey::Unreadable {
        key: key_str(kv),
        error,
    })
}

pub fn key_str(kv: &KeyValue) -> String {
    String::from_utf8_lossy(kv.key()).into_owned()
}

/// Group the keys of one or more names (a range read under
/// [`Keys::leases`] or a name directory) into a snapshot per name, ordered
/// by name.
pub fn snapshots(keys: &Keys, resp: &GetResponse) -> Result<Vec<(LeaseName, Snapshot)>, BadKey> {
    let mut out: Vec<(LeaseName, Snapshot)> = Vec::new();
    let mut records: Vec<(LeaseName, String, i64, Record)> = Vec::new();
    let mut live: Vec<(LeaseName, String, i64)> = Vec::new();
    for kv in resp.kvs() {
        let key = key_str(kv);
        let Some((name, tail)) = keys.split(&key) else {
            return Err(BadKey::Foreign { key });
        };
        let idx = if let Some(i) = out.iter().position(|(n, _)| *n == name) {
            i
        } else {
            out.push((name.clone(), Snapshot::default()));
            out.len() - 1
        };
        let snap = &mut out[idx].1;
        match tail.split_once('/') {
            None if tail == "t" => snap.last_token = Some(Token(kv.mod_revision() as u64 + parse_offset(kv)?)),
            None if tail == "v" => {
                snap.guard_rev = kv.mod_revision();
                snap.guard = json(kv)?;
            }
            Some(("r", slot)) => records.push((name, slot.to_owned(), kv.create_revision(), json(kv)?)),
            Some(("g", slot)) => live.push((name, slot.to_owned(), kv.lease())),
            Some(("w", slot)) => snap.waiters.push(Waiter {
                id: slot.to_owned(),
                ticket: WaiterTicket(kv.create_revision() as u64),
                lease: kv.lease(),
                value: json(kv)?,
            }),
            _ => return Err(BadKey::Foreign { key }),
        }
    }
    for (name, slot, revision, record) in records {
        let lease = live
            .iter()
            .find(|(n, s, _)| *n == name && *s == slot)
            .map(|(_, _, lease)| *lease);
        let snap = &mut out.iter_mut().find(|(n, _)| *n == name).expect("grouped above").1;
        snap.slots.push(Slot {
            id: slot,
            revision,
            token: Token(revision as u64 + record.token_offset),
            record,
            lease,
        });
    }
    for (_, snap) in &mut out {
        snap.slots.sort_by_key(|s| s.token);
        snap.waiters.sort_by_key(|w| w.ticket.0);
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_encode_without_nesting_or_prefix_clashes() {
        let keys = Keys::new("/app/");
        for name in ["job", "job/1", "50%", "a%2Fb", "../x", "ünï"] {
            let n = LeaseName::new(name).unwrap();
            let dir = keys.name_dir(&n);
            assert_eq!(dir.matches('/').count(), 4, "{dir}");
            let guard = keys.guard(&n);
            let (back, tail) = keys.split(&guard).unwrap();
            assert_eq!((back.as_str(), tail), (name, "v"));
        }
        let job = keys.name_dir(&LeaseName::new("job").unwrap());
        assert!(!keys.name_dir(&LeaseName::new("job2").unwrap()).starts_with(&job));
        assert!(!keys.name_dir(&LeaseName::new("job/1").unwrap()).starts_with(&job));
        assert_eq!(decode("bad%2"), None);
    }

    #[test]
    fn records_are_kept_apart_from_names_and_in_their_own_range() {
        let keys = Keys::new("/app/");
        let record = keys.record_key("lease/job/v");
        assert_eq!(record, "/app/record/lease/job/v");
        assert!(keys.split(&record).is_none(), "a record key read as a name's key");
        assert_eq!(keys.split_record(&record), Some("lease/job/v"));
        let (start, end) = (keys.records(), keys.records_end());
        assert!(start < record && record < end && keys.record_key("\u{10FFFF}") < end);
        let name = LeaseName::new("job").unwrap();
        for other in [keys.guard(&name), keys.history(&name, 1), keys.token_offset()] {
            assert!(!(start <= other && other < end), "{other} lies among the records");
        }
    }
}
