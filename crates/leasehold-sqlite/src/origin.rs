//! Which file this store is, so that `doctor` can tell a copy from the
//! store itself.
//!
//! A store records its own file's inode in its `record` table under the
//! reserved key [`KEY`] (no schema change: records are the store's small
//! documents, and the library lists only the prefixes it owns —
//! `schedule/`, `schedule-state/`, `schedule-slot/` — never `store/`):
//! - when it is created (`open.rs`'s `create`: the file is built under a
//!   temporary name and hard-linked into place, so the temporary file's
//!   inode is the store's);
//! - at the first open of a store made before this record existed — only
//!   when the key is missing, so an ordinary open only reads it, and best
//!   effort (a read-only store is opened all the same, without it);
//! - by `leasehold backup` in the copy, as the copy's own inode together
//!   with when and from what it was taken ([`Backup`]);
//! - by `migrate --bump-tokens`, the last step of a restore, in the same
//!   transaction as the bump: the restored file is the store now.
//!
//! A file whose inode is not the one recorded is a copy (`cp` makes a new
//! inode; `mv` within a filesystem keeps it). A plain copy of a live store
//! may miss its latest commits — they may still be in its `-wal` — so
//! [`judge`] warns about it, unless the record says the file was taken by
//! `leasehold backup` (a consistent snapshot), which is said as a fact.
//!
//! Only the inode, not the device: a device number can change across
//! reboots (the order disks are found, a re-created volume) while the file
//! stays where it was, and a warning every boot would teach people to
//! ignore it. A copy on another filesystem that happens to get the same
//! inode number goes unnoticed — a miss, never a false alarm.

use std::time::SystemTime;

use leasehold_backend::{Expect, RecordChange, RecordKey, RecordWriteParams, format_time, unix_ms};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde_json::{Value, json};

use crate::lease;

/// The record key under which a store keeps which file it is.
pub const KEY: &str = "store/file";

/// A backup's stamp: when and from what `leasehold backup` took the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub taken_at: SystemTime,
    /// The store it was taken from, as that store names its file.
    pub from: String,
}

/// What the record says: the file's inode, and the stamp if the file was
/// written by `leasehold backup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub inode: u64,
    pub backup: Option<Backup>,
}

impl Recorded {
    fn body(&self) -> String {
        let mut body = json!({ "inode": self.inode });
        if let Some(b) = &self.backup {
            body["backup"] = json!({
                "taken_ms": unix_ms::to_ms(b.taken_at),
                "taken": format_time(b.taken_at),
                "from": b.from,
            });
        }
        body.to_string()
    }

    /// The record's body, or `None` for one no leasehold writes (then
    /// nothing is judged from it).
    fn parse(body: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(body).ok()?;
        let inode = v.get("inode")?.as_u64()?;
        let backup = match v.get("backup") {
            None | Some(Value::Null) => None,
            Some(b) => Some(Backup {
                taken_at: unix_ms::from_ms(b.get("taken_ms")?.as_i64()?),
                from: b.get("from")?.as_str()?.to_owned(),
            }),
        };
        Some(Self { inode, backup })
    }
}

fn key() -> RecordKey {
    RecordKey::new(KEY).expect("a valid key")
}

/// Write `recorded` in `tx`, whatever was there.
pub(crate) fn record(tx: &Transaction<'_>, recorded: &Recorded) -> lease::Result<()> {
    let params = RecordWriteParams {
        not_after: None,
        changes: vec![RecordChange::Put {
            key: key(),
            body: recorded.body(),
            expect: Expect::Anything,
        }],
    };
    crate::record::write(tx, &params, std::time::SystemTime::now).map(|_| ())
}

/// The record, if there is one leasehold wrote.
pub(crate) fn read(conn: &Connection) -> rusqlite::Result<Option<Recorded>> {
    let body: Option<String> = conn
        .prepare_cached("SELECT body FROM record WHERE key = ?1")?
        .query_row([KEY], |r| r.get(0))
        .optional()?;
    Ok(body.as_deref().and_then(Recorded::parse))
}

/// At open: record `inode` as the store's file if nothing is recorded yet
/// (a store made before this record existed). One read when the record is
/// there, which is every open but the first; the write, when needed, is
/// best effort — a store that cannot be written now (read-only, busy) is
/// opened all the same and recorded at a later open.
pub(crate) fn remember_if_missing(conn: &mut Connection, inode: u64) {
    let outcome = (|| -> lease::Result<()> {
        if conn
            .prepare_cached("SELECT 1 FROM record WHERE key = ?1")?
            .exists([KEY])?
        {
            return Ok(());
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let missing = !tx
            .prepare_cached("SELECT 1 FROM record WHERE key = ?1")?
            .exists([KEY])?;
        if missing {
            record(&tx, &Recorded { inode, backup: None })?;
        }
        tx.commit()?;
        Ok(())
    })();
    if let Err(e) = outcome {
        tracing::debug!(error = ?e, "the store's file was not recorded; it will be at a later open");
    }
}

/// What a store's record and its file's actual inode say, for `describe`:
/// facts, and warnings that do not fail `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// A fact (label, text).
    Fact(&'static str, String),
    /// A warning (label, what was found and what to do).
    Warning(&'static str, String),
}

/// How to end the copy warning, and the step a restore ends with.
const RESTORE: &str = "if it was put back in place of a lost store, finish the restore as README.md \
     \"Restoring a store\" says: `leasehold migrate --bump-tokens N` (which also records this file as the store's own)";

/// Judge the record (`None`: none yet) against the file's inode.
#[must_use]
pub fn judge(recorded: Option<&Recorded>, inode: u64) -> Judgement {
    let Some(recorded) = recorded else {
        return Judgement::Fact(
            "store file",
            format!("inode {inode}, not recorded yet (it is at the next open that can write)"),
        );
    };
    match (&recorded.backup, recorded.inode == inode) {
        (None, true) => Judgement::Fact("store file", format!("inode {inode}, the file the store was made as")),
        (None, false) => Judgement::Warning(
            "copy",
            format!(
                "this file (inode {inode}) is a copy of the store's file (inode {}), not one taken by \
                 `leasehold backup`: a plain copy of a live store may miss its latest commits (they can still \
                 be in its -wal), and a store restored from it would issue tokens again; {RESTORE}",
                recorded.inode
            ),
        ),
        (Some(b), same) => Judgement::Fact(
            "backup",
            format!(
                "this file is {} taken by `leasehold backup` at {} from {}; {RESTORE}",
                if same { "the backup" } else { "a copy of a backup" },
                format_time(b.taken_at),
                b.from
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        for backup in [
            None,
            Some(Backup {
                taken_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                from: "/var/lib/s.db".into(),
            }),
        ] {
            let r = Recorded { inode: 42, backup };
            assert_eq!(Recorded::parse(&r.body()), Some(r));
        }
        assert_eq!(Recorded::parse("{}"), None);
        assert_eq!(Recorded::parse("not json"), None);
    }

    #[test]
    fn a_copy_warns_and_a_backup_or_the_store_itself_does_not() {
        let own = Recorded { inode: 7, backup: None };
        assert!(matches!(judge(Some(&own), 7), Judgement::Fact("store file", _)));
        let Judgement::Warning("copy", text) = judge(Some(&own), 8) else {
            panic!("a copy is not warned about")
        };
        assert!(text.contains("inode 8") && text.contains("--bump-tokens"), "{text}");
        let backup = Recorded {
            inode: 9,
            backup: Some(Backup {
                taken_at: UNIX_EPOCH,
                from: "/s.db".into(),
            }),
        };
        for inode in [9, 10] {
            let Judgement::Fact("backup", text) = judge(Some(&backup), inode) else {
                panic!("a backup is warned about")
            };
            assert!(text.contains("from /s.db"), "{text}");
        }
        assert!(matches!(judge(None, 7), Judgement::Fact(..)));
    }
}
