//! Records (what schedules are kept in) as documents under
//! `PREFIX/store/records/`: the key and the body as fields, the document's
//! update time (µs) as the version. Firestore gives every write of a
//! document a later update time than the one before, also after it was
//! deleted and made again (update times are commit times, and a
//! document's commits are ordered): versions never repeat for a key. A
//! batch is one commit, each change under the precondition its
//! expectation asks for (exists: false, or the update time it expects);
//! when one fails, nothing is written and the keys are read again to say
//! which one differed.
//!
//! The clock is the server's `readTime` (`record_clock` reads the store's
//! document for it). A write with a `not_after` first reads its keys: it
//! is judged at that read's time — too late, or a conflict with what was
//! read, and nothing is committed — and then committed under the same
//! preconditions. Firestore compares no time in a commit, so the commit
//! lands a round trip after the time judged (a few ms; more if the client
//! stalls in between): the limit is the read's, the commit may be that
//! much past it.

use leasehold_backend::{
    Expect, Record, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};
use serde_json::json;

use crate::lease::{Conn, Error, Result, Turn, rounds};
use crate::rest::{self, Doc, Field, Precondition, ServerTime, Write};

fn version(doc: &Doc) -> Result<RecordVersion> {
    ServerTime::parse(&doc.update_time)
        .and_then(|t| u64::try_from(t.0).ok())
        .map(RecordVersion)
        .ok_or_else(|| Error::Corrupt(format!("{} has the update time {:?}", doc.name, doc.update_time)))
}

fn record(doc: &Doc) -> Result<Record> {
    let corrupt = |what: &str| Error::Corrupt(format!("{}: {what}", doc.name));
    let key = doc.str("key").ok_or_else(|| corrupt("no string field `key`"))?;
    Ok(Record {
        key: RecordKey::new(key).map_err(|e| corrupt(&e.to_string()))?,
        version: version(doc)?,
        body: doc
            .str("body")
            .ok_or_else(|| corrupt("no string field `body`"))?
            .to_owned(),
    })
}

/// The precondition that holds exactly when `expect` is met.
fn precondition(expect: Expect) -> Precondition {
    match expect {
        Expect::Absent => Precondition::Missing,
        Expect::Version(v) => Precondition::Unchanged(rest::format_time(ServerTime(v.0 as i64))),
        Expect::Anything => Precondition::None,
    }
}

impl Conn<'_> {
    fn record_doc(&self, key: &RecordKey) -> String {
        self.rest.doc_name(&self.layout.record(key.as_str()))
    }

    pub fn record_get(&self, key: &RecordKey) -> Result<Option<Record>> {
        let (mut docs, _) = self.rest.batch_get(&[self.record_doc(key)], None)?;
        docs.pop().flatten().as_ref().map(record).transpose()
    }

    /// A query on the `key` field (Firestore orders strings by their
    /// UTF-8 bytes, as the records' contract asks).
    pub fn record_list(&self, p: &RecordListParams) -> Result<Vec<Record>> {
        let filter = |op: &str, value: &str| json!({ "fieldFilter": { "field": { "fieldPath": "key" }, "op": op, "value": { "stringValue": value } } });
        let mut filters = vec![filter("GREATER_THAN_OR_EQUAL", &p.prefix)];
        if let Some(end) = p.prefix_end() {
            filters.push(filter("LESS_THAN", &end));
        }
        if let Some(after) = &p.after {
            filters.push(filter(
                if p.descending { "LESS_THAN" } else { "GREATER_THAN" },
                after.as_str(),
            ));
        }
        let direction = if p.descending { "DESCENDING" } else { "ASCENDING" };
        let query = json!({
            "from": [{ "collectionId": "records" }],
            "where": { "compositeFilter": { "op": "AND", "filters": filters } },
            "orderBy": [{ "field": { "fieldPath": "key" }, "direction": direction }],
            "limit": p.limit,
        });
        let (docs, _) = self.rest.query(&self.layout.store(), &query)?;
        docs.iter().map(record).collect()
    }

    pub fn record_write(&self, p: &RecordWriteParams) -> Result<RecordWrite> {
        let writes: Vec<Write> = p
            .changes
            .iter()
            .map(|c| match c {
                RecordChange::Put { key, body, expect } => Write::Set {
                    name: self.record_doc(key),
                    fields: vec![
                        ("key", Field::Str(key.as_str().to_owned())),
                        ("body", Field::Str(body.clone())),
                    ],
                    precondition: precondition(*expect),
                },
                RecordChange::Delete { key, expect } => Write::Delete {
                    name: self.record_doc(key),
                    precondition: precondition(*expect),
                },
            })
            .collect();
        // No document has the update time 0 (Firestore reads that
        // precondition as none at all) or one past i64: such an
        // expectation is never met, and the batch is a conflict.
        let never = |e: Expect| matches!(e, Expect::Version(RecordVersion(v)) if v == 0 || i64::try_from(v).is_err());
        if p.changes.iter().any(|c| never(c.expect())) {
            return rounds(|| "reading records".to_owned(), Turn::Prompt, || self.conflict(p));
        }
        rounds(
            || "writing records".to_owned(),
            Turn::Prompt,
            || {
                if let Some(judged) = self.judge(p)? {
                    return Ok(Some(judged));
                }
                self.commit_records(p, &writes)
            },
        )
    }

    /// For a write with a `not_after`: read its keys, and end it when the
    /// read's time is past the limit (`TooLate`) or what was read does not
    /// meet an expectation (`Conflict`). `None`: commit it.
    fn judge(&self, p: &RecordWriteParams) -> Result<Option<RecordWrite>> {
        let Some(not_after) = p.not_after else {
            return Ok(None);
        };
        let names: Vec<String> = p.changes.iter().map(|c| self.record_doc(c.key())).collect();
        let (docs, at) = self.rest.batch_get(&names, None)?;
        if let Some(late) = leasehold_backend::record::too_late(Some(not_after), at.system_time()) {
            return Ok(Some(late));
        }
        first_unmet(p, docs)
    }

    /// Commit `writes`, the changes of `p`: how it ended, or `None` when a
    /// precondition failed and every expectation holds again (try again).
    fn commit_records(&self, p: &RecordWriteParams, writes: &[Write]) -> Result<Option<RecordWrite>> {
        match self.rest.commit(writes) {
            Ok(done) => Ok(Some(RecordWrite::Written {
                versions: p
                    .changes
                    .iter()
                    .zip(done.updates)
                    .map(|(c, at)| match (c, at) {
                        (RecordChange::Put { .. }, Some(t)) => Some(RecordVersion(t.0 as u64)),
                        _ => None,
                    })
                    .collect(),
            })),
            Err(rest::Error::Conflict) => self.conflict(p),
            Err(e) => Err(e.into()),
        }
    }

    /// The server's clock: the `readTime` of a read of the store's
    /// document.
    pub fn record_clock(&self) -> Result<ServerTime> {
        let (_, at) = self.rest.batch_get(&[self.rest.doc_name(&self.layout.store())], None)?;
        Ok(at)
    }

    /// The first change whose expectation the store does not meet now
    /// (`None` if all are met again: try the commit again).
    fn conflict(&self, p: &RecordWriteParams) -> Result<Option<RecordWrite>> {
        let names: Vec<String> = p.changes.iter().map(|c| self.record_doc(c.key())).collect();
        let (docs, _) = self.rest.batch_get(&names, None)?;
        first_unmet(p, docs)
    }
}

/// The first change of `p` whose expectation `docs` (its keys' documents,
/// as read, in order) do not meet; `None` when all are met.
fn first_unmet(p: &RecordWriteParams, docs: Vec<Option<Doc>>) -> Result<Option<RecordWrite>> {
    for (change, doc) in p.changes.iter().zip(docs) {
        let found = doc.as_ref().map(version).transpose()?;
        if !change.expect().met_by(found) {
            return Ok(Some(RecordWrite::Conflict {
                key: change.key().clone(),
                found,
            }));
        }
    }
    Ok(None)
}
