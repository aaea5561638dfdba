//! Records (`leasehold_backend::record`) in the `record` table, each write
//! inside one transaction opened by the caller.
//!
//! A write first adds its number of puts to the one row of
//! `record_version` and keeps that row locked to its commit, so writes of
//! records take turns: the next one reads the keys' versions only once the
//! previous one committed (each statement of a `READ COMMITTED`
//! transaction sees what committed before it; under a stricter isolation
//! the wait ends in a serialization failure, which is retried), and two
//! writers never both pass the same comparison. Row locks on the keys
//! alone (`FOR UPDATE`) would not do: a key that is absent has no row to
//! lock, and two writers expecting it absent would both pass. A conflict
//! rolls the transaction back, the counter with it.
//!
//! The clock (`record_clock`, and a write's `not_after`) is the server's
//! (`clock::NOW`). A write reads it in the statement that takes its turn,
//! once the counter's row lock is granted (`RETURNING` is computed after
//! the row is updated, so after any wait for the lock): a write that
//! waited for another is judged when it is applied, and one too late rolls
//! back with nothing changed, the counter with it.
//!
//! Versions come from that counter, not from a sequence (not
//! transactional, as the crate's docs on tokens say), so a key deleted and
//! written again never gets a version it had. The key column is
//! `COLLATE "C"`: order and range bounds are bytewise, whatever the
//! database's collation.

use std::time::SystemTime;

use leasehold_backend::{
    Record, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};
use postgres::Row;
use postgres::types::ToSql;

use crate::clock::NOW;
use crate::db::{Db, Error, Result};

fn stored_version(v: i64) -> Result<RecordVersion> {
    u64::try_from(v)
        .map(RecordVersion)
        .map_err(|_| Error::BadRow(format!("a record has the version {v}, which no leasehold writes")))
}

/// A row of `key, version, body`.
fn read_row(r: &Row) -> Result<Record> {
    let key = RecordKey::new(r.get::<_, String>(0))
        .map_err(|e| Error::BadRow(format!("a record key no leasehold writes: {e}")))?;
    Ok(Record {
        key,
        version: stored_version(r.get(1))?,
        body: r.get(2),
    })
}

pub(crate) fn get(db: &mut Db<'_>, key: &RecordKey) -> Result<Option<Record>> {
    db.query_opt("SELECT key, version, body FROM record WHERE key = $1", &[&key.as_str()])?
        .map(|r| read_row(&r))
        .transpose()
}

pub(crate) fn list(db: &mut Db<'_>, params: &RecordListParams) -> Result<Vec<Record>> {
    // Only the bounds there are, so that each is a bound of the index scan
    // (an `$n IS NULL OR` would leave the scan unbounded on that side).
    let end = params.prefix_end();
    let after = params.after.as_ref().map(RecordKey::as_str);
    let limit = i64::from(params.limit);
    let (order, beyond) = if params.descending { ("DESC", "<") } else { ("", ">") };
    let mut bound: Vec<&(dyn ToSql + Sync)> = vec![&params.prefix];
    let mut range = vec!["key >= $1".to_owned()];
    if let Some(end) = &end {
        bound.push(end);
        range.push(format!("key < ${}", bound.len()));
    }
    if let Some(after) = &after {
        bound.push(after);
        range.push(format!("key {beyond} ${}", bound.len()));
    }
    bound.push(&limit);
    let sql = format!(
        "SELECT key, version, body FROM record WHERE {} ORDER BY key {order} LIMIT ${}",
        range.join(" AND "),
        bound.len()
    );
    db.query(&sql, &bound)?.iter().map(read_row).collect()
}

/// Apply the batch if the server's clock, read once the write holds its
/// turn, has not passed its `not_after` and every expectation holds;
/// `(outcome, commit)`.
pub(crate) fn write(db: &mut Db<'_>, params: &RecordWriteParams) -> Result<(RecordWrite, bool)> {
    let puts = params
        .changes
        .iter()
        .filter(|c| matches!(c, RecordChange::Put { .. }))
        .count() as i64;
    let turn = db
        .query_opt(
            &format!("UPDATE record_version SET last = last + $1 WHERE id = 1 RETURNING last, {NOW}"),
            &[&puts],
        )?
        .ok_or_else(|| Error::BadRow("record_version has lost its row".into()))?;
    let (last, now): (i64, SystemTime) = (turn.get(0), turn.get(1));
    if let Some(late) = leasehold_backend::record::too_late(params.not_after, now) {
        return Ok((late, false));
    }
    let keys: Vec<&str> = params.changes.iter().map(|c| c.key().as_str()).collect();
    let found: Vec<(String, i64)> = db
        .query("SELECT key, version FROM record WHERE key = ANY($1)", &[&keys])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for change in &params.changes {
        let found = found
            .iter()
            .find(|(k, _)| k == change.key().as_str())
            .map(|&(_, v)| stored_version(v))
            .transpose()?;
        if !change.expect().met_by(found) {
            let conflict = RecordWrite::Conflict {
                key: change.key().clone(),
                found,
            };
            return Ok((conflict, false));
        }
    }
    let mut next = last - puts;
    let mut versions = Vec::with_capacity(params.changes.len());
    for change in &params.changes {
        match change {
            RecordChange::Put { key, body, .. } => {
                next += 1;
                db.execute(
                    "INSERT INTO record (key, version, body) VALUES ($1, $2, $3) \
                     ON CONFLICT (key) DO UPDATE SET version = excluded.version, body = excluded.body",
                    &[&key.as_str(), &next, body],
                )?;
                versions.push(Some(stored_version(next)?));
            }
            RecordChange::Delete { key, .. } => {
                db.execute("DELETE FROM record WHERE key = $1", &[&key.as_str()])?;
                versions.push(None);
            }
        }
    }
    Ok((RecordWrite::Written { versions }, true))
}
