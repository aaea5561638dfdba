//! Records (`leasehold_backend::record`) in the `record` table: a batch is
//! checked and applied inside one `BEGIN IMMEDIATE` transaction; versions
//! come from the one counter in `record_version`.

use leasehold_backend::{
    Record, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};
use rusqlite::{OptionalExtension, Transaction, params};

use crate::lease::{Error, Result};

fn version(tx: &Transaction<'_>, key: &RecordKey) -> Result<Option<RecordVersion>> {
    let found: Option<i64> = tx
        .prepare_cached("SELECT version FROM record WHERE key = ?1")?
        .query_row([key.as_str()], |row| row.get(0))
        .optional()?;
    found.map(stored_version).transpose()
}

fn stored_version(v: i64) -> Result<RecordVersion> {
    u64::try_from(v)
        .map(RecordVersion)
        .map_err(|_| Error::BadRow(format!("a record has the version {v}, which no leasehold writes")))
}

pub(crate) fn get(tx: &Transaction<'_>, key: &RecordKey) -> Result<Option<Record>> {
    let row: Option<(i64, String)> = tx
        .prepare_cached("SELECT version, body FROM record WHERE key = ?1")?
        .query_row([key.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    row.map(|(version, body)| {
        Ok(Record {
            key: key.clone(),
            version: stored_version(version)?,
            body,
        })
    })
    .transpose()
}

pub(crate) fn list(tx: &Transaction<'_>, params: &RecordListParams) -> Result<Vec<Record>> {
    // The range [prefix, end) and the cursor are both bounds on the key,
    // bytewise (TEXT compares with BINARY, and keys are UTF-8).
    let end = params.prefix_end();
    let after = params.after.as_ref().map(RecordKey::as_str);
    let sql = if params.descending {
        "SELECT key, version, body FROM record
         WHERE key >= ?1 AND (?2 IS NULL OR key < ?2) AND (?3 IS NULL OR key < ?3)
         ORDER BY key DESC LIMIT ?4"
    } else {
        "SELECT key, version, body FROM record
         WHERE key >= ?1 AND (?2 IS NULL OR key < ?2) AND (?3 IS NULL OR key > ?3)
         ORDER BY key LIMIT ?4"
    };
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params![params.prefix, end, after, params.limit], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, String>(2)?,
        ))
    })?;
    let mut records = Vec::new();
    for row in rows {
        let (key, version, body) = row?;
        let key = RecordKey::new(key).map_err(|e| Error::BadRow(format!("a record key no leasehold writes: {e}")))?;
        records.push(Record {
            key,
            version: stored_version(version)?,
            body,
        });
    }
    Ok(records)
}

/// Apply the batch if every expectation holds and `clock` (read now,
/// inside the write lock) has not passed its `not_after`; `(outcome,
/// commit)`.
pub(crate) fn write(
    tx: &Transaction<'_>,
    params: &RecordWriteParams,
    clock: impl FnOnce() -> std::time::SystemTime,
) -> Result<(RecordWrite, bool)> {
    if let Some(late) = leasehold_backend::record::too_late(params.not_after, clock()) {
        return Ok((late, false));
    }
    for change in &params.changes {
        let found = version(tx, change.key())?;
        if !change.expect().met_by(found) {
            let conflict = RecordWrite::Conflict {
                key: change.key().clone(),
                found,
            };
            return Ok((conflict, false));
        }
    }
    let mut last: i64 = tx
        .prepare_cached("SELECT last FROM record_version WHERE id = 1")?
        .query_row([], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    let mut versions = Vec::with_capacity(params.changes.len());
    for change in &params.changes {
        match change {
            RecordChange::Put { key, body, .. } => {
                last += 1;
                tx.prepare_cached(
                    "INSERT INTO record (key, version, body) VALUES (?1, ?2, ?3)
                     ON CONFLICT (key) DO UPDATE SET version = excluded.version, body = excluded.body",
                )?
                .execute(params![key.as_str(), last, body])?;
                versions.push(Some(stored_version(last)?));
            }
            RecordChange::Delete { key, .. } => {
                tx.prepare_cached("DELETE FROM record WHERE key = ?1")?
                    .execute([key.as_str()])?;
                versions.push(None);
            }
        }
    }
    tx.prepare_cached(
        "INSERT INTO record_version (id, last) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET last = excluded.last",
    )?
    .execute([last])?;
    Ok((RecordWrite::Written { versions }, true))
}
