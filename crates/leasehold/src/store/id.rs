//! A store's identity: a record (`store/identity`) made at first use —
//! a random id, when and by whom it was made — so that a holder can tell
//! a store that lost its data (wiped, flushed, its keys evicted, deleted
//! and made again, replaced, restored from a copy) from one that only
//! ended its grant.
//!
//! A keeper reads the identity at its first renewal (made then if the
//! store has none: a store is used from its first kept grant on) and again
//! when a renewal is refused because the store no longer has the grant, or
//! holds its token for another grant: if the identity changed or is gone,
//! the loss is [`LostReason::StoreLostData`](leasehold_backend::LostReason::StoreLostData),
//! which says what happened and what to do. The first renewal, not the
//! acquisition, makes it: a short `run` pays nothing for it, and a store
//! wiped before a grant's first renewal is still refused as "another
//! grant" or "gone" — the same stop, a vaguer word. A store without
//! records has no identity (none of the built-in ones).

use std::io::Read;
use std::time::SystemTime;

use leasehold_backend::{ErrorKind, Expect, RecordChange, RecordKey, RecordWrite, RecordWriteParams};
use serde::{Deserialize, Serialize};

use crate::{Error, Result, Store};

/// The record key of a store's identity.
pub const KEY: &str = "store/identity";

/// Who a store is: made once, at its first use, and never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreIdentity {
    /// 32 random hexadecimal digits.
    pub id: String,
    /// When it was made (RFC 3339, UTC).
    pub made: String,
    /// Who made it (`host:pid`).
    pub by: String,
}

impl std::fmt::Display for StoreIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (made {} by {})", self.id, self.made, self.by)
    }
}

impl Store {
    /// The store's identity, if it has one (see the `identity` module
    /// docs). Only reads.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails, or holds an identity record
    /// that does not parse (kind `Corrupt`, naming the key).
    pub fn identity(&self) -> Result<Option<StoreIdentity>> {
        let Some(records) = self.backend().records() else {
            return Ok(None);
        };
        let Some(record) = records.record_get(&key())? else {
            return Ok(None);
        };
        serde_json::from_str(&record.body).map(Some).map_err(|e| {
            Error::Store(leasehold_backend::BackendError::new(
                ErrorKind::Corrupt,
                String::new(),
                format!("the store's identity record ({KEY}) does not parse ({e}): the store is damaged; check it with `leasehold doctor`"),
            ))
        })
    }

    /// The store's identity, made now if it has none (the first writer
    /// wins; a loser reads the winner's).
    ///
    /// # Errors
    /// As [`Store::identity`], and when the write fails.
    pub(crate) fn identity_made(&self) -> Result<Option<StoreIdentity>> {
        if let Some(known) = self.identity()? {
            return Ok(Some(known));
        }
        let Some(records) = self.backend().records() else {
            return Ok(None);
        };
        let made = StoreIdentity {
            id: random_id()?,
            made: crate::json::rfc3339(SystemTime::now()),
            by: crate::identity::default_owner(),
        };
        let body = serde_json::to_string(&made).expect("an identity serializes");
        let written = records.record_write(&RecordWriteParams {
            not_after: None,
            changes: vec![RecordChange::Put {
                key: key(),
                body,
                expect: Expect::Absent,
            }],
        })?;
        match written {
            RecordWrite::Written { .. } => Ok(Some(made)),
            RecordWrite::Conflict { .. } | RecordWrite::TooLate { .. } => self.identity(),
        }
    }
}

fn key() -> RecordKey {
    RecordKey::new(KEY).expect("a valid record key")
}

/// 128 random bits from the kernel, as 32 hexadecimal digits.
fn random_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            Error::Store(leasehold_backend::BackendError::new(
                ErrorKind::Failed,
                String::new(),
                format!("cannot read /dev/urandom to make the store's identity ({e}); mount /dev"),
            ))
        })?;
    Ok(bytes.iter().fold(String::with_capacity(32), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    }))
}
