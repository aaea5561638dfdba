//! Records (`leasehold_backend::record`) as keys under `PREFIX/record/`
//! (see `keys`): the value is the body, the version is the key's
//! `mod_revision`.
//!
//! etcd's revision is one cluster-wide counter that every write moves on
//! and compaction never rewinds, so a key written, deleted and written
//! again never has a `mod_revision` it had: versions never repeat for a key
//! with no counter of our own.
//!
//! A batch is ONE transaction: a compare per expectation (`Absent`: no such
//! key, `create_revision == 0`; `Version(v)`: `mod_revision == v`), then
//! every put and delete; or else, if any compare fails, a read of every key
//! at that same revision, which names the key that differed. The new
//! version of every put is the transaction's revision. A batch larger than
//! the cluster takes in one request is refused whole, as invalid input.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use leasehold_backend::{
    Expect, Record, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams, signed,
};

use crate::keys::key_str;
use crate::lease::{Conn, Error, Result};

impl Conn<'_> {
    /// A stored record, or why it cannot be one (a key or body that
    /// leasehold could not have written).
    fn record(&self, kv: &KeyValue) -> Result<Record> {
        let at = key_str(kv);
        let key = self
            .keys
            .split_record(&at)
            .and_then(|k| RecordKey::new(k).ok())
            .ok_or_else(|| Error::Corrupt(format!("key {at:?} is not a record key leasehold writes")))?;
        let body = String::from_utf8(kv.value().to_vec())
            .map_err(|_| Error::Corrupt(format!("record key {at:?} holds a body that is not UTF-8")))?;
        Ok(Record {
            key,
            version: RecordVersion(kv.mod_revision() as u64),
            body,
        })
    }

    pub async fn record_get(&mut self, key: &RecordKey) -> Result<Option<Record>> {
        let resp = self.client.get(self.keys.record_key(key.as_str()), None).await?;
        resp.kvs().first().map(|kv| self.record(kv)).transpose()
    }

    /// One range read: `[prefix, prefix_end)` under the records, narrowed
    /// by the cursor (ascending: from the least key after it, `after` +
    /// NUL, as keys hold no control characters; descending: up to it),
    /// sorted by key, at most `limit`.
    pub async fn record_list(&mut self, p: &RecordListParams) -> Result<Vec<Record>> {
        let mut start = self.keys.record_key(&p.prefix);
        let mut end = p
            .prefix_end()
            .map_or_else(|| self.keys.records_end(), |e| self.keys.record_key(&e));
        match &p.after {
            Some(after) if p.descending => end = end.min(self.keys.record_key(after.as_str())),
            Some(after) => start = start.max(self.keys.record_key(&format!("{after}\0"))),
            None => {}
        }
        if start >= end {
            return Ok(Vec::new());
        }
        let order = if p.descending {
            SortOrder::Descend
        } else {
            SortOrder::Ascend
        };
        let options = GetOptions::new()
            .with_range(end)
            .with_sort(SortTarget::Key, order)
            .with_limit(i64::from(p.limit));
        let resp = self.client.get(start, Some(options)).await?;
        resp.kvs().iter().map(|kv| self.record(kv)).collect()
    }

    pub async fn record_write(&mut self, p: &RecordWriteParams) -> Result<RecordWrite> {
        let mut compares = Vec::new();
        let mut ops = Vec::new();
        let mut reads = Vec::new();
        for change in &p.changes {
            let at = self.keys.record_key(change.key().as_str());
            match change.expect() {
                Expect::Absent => compares.push(Compare::create_revision(at.clone(), CompareOp::Equal, 0)),
                // etcd gives no key the revision 0, and `mod_revision == 0`
                // would hold for an absent key: a compare that never holds.
                Expect::Version(RecordVersion(0)) => {
                    compares.push(Compare::create_revision(at.clone(), CompareOp::Less, 0));
                }
                Expect::Version(v) => compares.push(Compare::mod_revision(at.clone(), CompareOp::Equal, signed(v.0))),
                Expect::Anything => {}
            }
            ops.push(match change {
                RecordChange::Put { body, .. } => TxnOp::put(at.clone(), body.as_bytes(), None),
                RecordChange::Delete { .. } => TxnOp::delete(at.clone(), None),
            });
            reads.push(TxnOp::get(at, Some(GetOptions::new().with_keys_only())));
        }
        let txn = Txn::new().when(compares).and_then(ops).or_else(reads);
        let resp = self.client.txn(txn).await.map_err(|e| {
            if too_large(&e) {
                Error::TooLarge(format!("a write of {} records", p.changes.len()))
            } else {
                Error::Etcd(e)
            }
        })?;
        if resp.succeeded() {
            let revision = resp.header().map_or(0, etcd_client::ResponseHeader::revision);
            let versions = p
                .changes
                .iter()
                .map(|c| matches!(c, RecordChange::Put { .. }).then_some(RecordVersion(revision as u64)))
                .collect();
            return Ok(RecordWrite::Written { versions });
        }
        for (change, read) in p.changes.iter().zip(resp.op_responses()) {
            let TxnOpResponse::Get(read) = read else {
                continue;
            };
            let found = read.kvs().first().map(|kv| RecordVersion(kv.mod_revision() as u64));
            if !change.expect().met_by(found) {
                return Ok(RecordWrite::Conflict {
                    key: change.key().clone(),
                    found,
                });
            }
        }
        // The reads ran at the revision the compares failed at.
        Err(Error::Corrupt(
            "etcd refused a record write's compares, yet its keys as read meet every expectation".into(),
        ))
    }
}

/// Whether etcd refused a request for its size: over the gRPC limit
/// (`--max-request-bytes` plus a margin), or over `--max-request-bytes`
/// itself. The seam's limits allow a batch (64 bodies of 64 KiB) over
/// etcd's default of 1.5 MiB.
fn too_large(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("larger than max") || s.message().contains("request is too large"))
}
