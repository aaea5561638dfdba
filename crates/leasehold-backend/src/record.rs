//! Records: small documents a store keeps under a key, written by
//! compare-and-swap — what schedules are kept in.
//!
//! A record is a key (a path such as `schedule/nightly`), a body (text the
//! library writes, JSON in practice) and a [`RecordVersion`] the store gives
//! it at every write. A write ([`RecordBackend::record_write`]) is a batch
//! of changes, each with what it expects to find ([`Expect`]): the store
//! applies all of them in one transaction or, if any expectation does not
//! hold, none of them, and says which key differed ([`RecordWrite::Conflict`]).
//! That is the whole contract; what a record means is the library's.
//!
//! The stores' promises, which the conformance suite's `records_*` cases
//! check:
//! - **all or nothing**: a batch with one unmet expectation changes nothing;
//! - **versions never repeat for a key**: every write of a key gives it a
//!   version it never had, even after the key was deleted and written
//!   again (a store-wide counter, or etcd's revision), so a write that
//!   expects a version cannot succeed against a later incarnation of the
//!   key (no ABA);
//! - **lists are in key order** (bytewise), bounded by the prefix given,
//!   resumable after a key, either way round;
//! - **one clock**: [`RecordBackend::record_clock`] reads the store's
//!   clock, and a write with a [`RecordWriteParams::not_after`] is applied
//!   only if that clock has not passed it when the write's transaction
//!   holds its locks ([`RecordWrite::TooLate`] otherwise) — so a decision
//!   about time (a slot on time, within its deadline) holds at the commit,
//!   not only when it was taken. Whose clock it is, per store:
//!   PostgreSQL's `clock_timestamp()`, Redis's `TIME`, Firestore's
//!   `readTime`, the host kernel's for SQLite, and for etcd (whose protocol
//!   carries no time) the member's HTTP `Date`, a whole second, narrowed
//!   over timed readings as htpdate does (`leasehold-etcd`'s `clock.rs`).

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::{BackendError, ErrorKind};

/// The longest record key accepted, in bytes.
pub const RECORD_KEY_MAX: usize = 512;
/// The largest record body accepted, in bytes.
pub const RECORD_BODY_MAX: usize = 64 * 1024;
/// The most changes in one [`RecordWriteParams`].
pub const RECORD_CHANGES_MAX: usize = 64;
/// The most records one [`RecordListParams`] may ask for.
pub const RECORD_LIST_MAX: u32 = 1000;

/// A record's key: 1–[`RECORD_KEY_MAX`] bytes of UTF-8 without control
/// characters. The library builds keys from a kind and a validated name
/// (`schedule/NAME`); the store keeps them as given and orders them
/// bytewise.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey(String);

impl RecordKey {
    /// Validate a key.
    ///
    /// # Errors
    /// [`BackendError`] of kind [`ErrorKind::InvalidInput`] naming what is
    /// wrong: empty, too long, or a control character.
    pub fn new(key: impl Into<String>) -> Result<Self, BackendError> {
        let key = key.into();
        let refuse = |why: String| Err(BackendError::new(ErrorKind::InvalidInput, String::new(), why));
        if key.is_empty() {
            return refuse("a record key must not be empty".into());
        }
        if key.len() > RECORD_KEY_MAX {
            return refuse(format!(
                "a record key is {} bytes long; the limit is {RECORD_KEY_MAX}",
                key.len()
            ));
        }
        if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_control()) {
            return refuse(format!(
                "a record key contains the control character {c:?} at byte {at}"
            ));
        }
        Ok(Self(key))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The version a store gave a record at its last write (never repeated
/// for the same key; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordVersion(pub u64);

impl fmt::Display for RecordVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A record as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: RecordKey,
    pub version: RecordVersion,
    pub body: String,
}

/// What a change expects to find under its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No record: a put creates it.
    Absent,
    /// The record at exactly this version.
    Version(RecordVersion),
    /// Whatever is there, or nothing.
    Anything,
}

impl Expect {
    /// Whether finding `found` meets this expectation.
    #[must_use]
    pub fn met_by(self, found: Option<RecordVersion>) -> bool {
        match self {
            Expect::Absent => found.is_none(),
            Expect::Version(v) => found == Some(v),
            Expect::Anything => true,
        }
    }
}

/// One change of a [`RecordWriteParams`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordChange {
    /// Write `body` under `key` (create or replace).
    Put {
        key: RecordKey,
        body: String,
        expect: Expect,
    },
    /// Delete `key` (nothing to do if it is absent and `expect` allows it).
    Delete { key: RecordKey, expect: Expect },
}

impl RecordChange {
    #[must_use]
    pub fn key(&self) -> &RecordKey {
        match self {
            RecordChange::Put { key, .. } | RecordChange::Delete { key, .. } => key,
        }
    }

    #[must_use]
    pub fn expect(&self) -> Expect {
        match self {
            RecordChange::Put { expect, .. } | RecordChange::Delete { expect, .. } => *expect,
        }
    }
}

/// Changes to apply together, all or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordWriteParams {
    pub changes: Vec<RecordChange>,
    /// Apply only if the store's clock, read once the write holds its
    /// locks, has not passed this instant; else nothing is applied and the
    /// write ends [`RecordWrite::TooLate`]. `None`: whenever.
    pub not_after: Option<SystemTime>,
}

impl RecordWriteParams {
    /// `changes`, applied whenever the store gets to them.
    #[must_use]
    pub fn new(changes: Vec<RecordChange>) -> Self {
        Self {
            changes,
            not_after: None,
        }
    }
}

/// The store's clock, as one reading found it: its time was within
/// `within` of `at` while the reading was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTime {
    pub at: SystemTime,
    /// How far off `at` may be (etcd's: half a second at first, less as
    /// readings narrow it; the others' are read to the microsecond, so
    /// this is zero).
    pub within: Duration,
}

impl StoreTime {
    /// An exact reading.
    #[must_use]
    pub fn exactly(at: SystemTime) -> Self {
        Self {
            at,
            within: Duration::ZERO,
        }
    }
}

impl RecordWriteParams {
    /// Refuse, before anything is written, a batch that is empty, longer
    /// than [`RECORD_CHANGES_MAX`], names a key twice, or has a body over
    /// [`RECORD_BODY_MAX`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming what is wrong.
    pub fn check(&self) -> Result<(), BackendError> {
        let refuse = |why: String| Err(BackendError::new(ErrorKind::InvalidInput, String::new(), why));
        if self.changes.is_empty() || self.changes.len() > RECORD_CHANGES_MAX {
            return refuse(format!(
                "a record write has {} changes; it must have 1 to {RECORD_CHANGES_MAX}",
                self.changes.len()
            ));
        }
        let mut keys: Vec<&RecordKey> = self.changes.iter().map(RecordChange::key).collect();
        keys.sort();
        if let Some(twice) = keys.windows(2).find_map(|pair| (pair[0] == pair[1]).then_some(pair[0])) {
            return refuse(format!("a record write names the key {twice} twice"));
        }
        for change in &self.changes {
            if let RecordChange::Put { key, body, .. } = change
                && body.len() > RECORD_BODY_MAX
            {
                return refuse(format!(
                    "the record {key} would be {} bytes; the limit is {RECORD_BODY_MAX}",
                    body.len()
                ));
            }
        }
        Ok(())
    }
}

/// How a write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordWrite {
    /// Every change was applied. `versions[i]` is the new version of the
    /// `i`th change's key (`None` for a delete).
    Written { versions: Vec<Option<RecordVersion>> },
    /// Nothing was applied: `key` was found at `found` (`None`: absent),
    /// which its change did not expect.
    Conflict {
        key: RecordKey,
        found: Option<RecordVersion>,
    },
    /// Nothing was applied: the store's clock read `now`, past the write's
    /// [`RecordWriteParams::not_after`].
    TooLate { now: SystemTime },
}

/// Which records to list: those whose key starts with `prefix`, in key
/// order (`descending`: the greatest first), after the key `after` in
/// that order, at most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordListParams {
    pub prefix: String,
    pub after: Option<RecordKey>,
    pub descending: bool,
    pub limit: u32,
}

impl RecordListParams {
    /// Refuse a limit of 0 or over [`RECORD_LIST_MAX`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`].
    pub fn check(&self) -> Result<(), BackendError> {
        if self.limit == 0 || self.limit > RECORD_LIST_MAX {
            return Err(BackendError::new(
                ErrorKind::InvalidInput,
                String::new(),
                format!(
                    "a record list asks for {} records; it must ask for 1 to {RECORD_LIST_MAX}",
                    self.limit
                ),
            ));
        }
        Ok(())
    }

    /// The least string greater than every string starting with
    /// `prefix` (`None`: no bound, the prefix is empty or all `\u{10FFFF}`),
    /// for stores that read a key range `[prefix, end)`.
    #[must_use]
    pub fn prefix_end(&self) -> Option<String> {
        let mut chars: Vec<char> = self.prefix.chars().collect();
        while let Some(last) = chars.pop() {
            if let Some(next) = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32) {
                chars.push(next);
                return Some(chars.into_iter().collect());
            }
        }
        None
    }

    /// Whether `key` is in the listed range: starts with the prefix and
    /// lies after `after` in the list's order.
    #[must_use]
    pub fn admits(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
            && self.after.as_ref().is_none_or(|after| {
                if self.descending {
                    key < after.as_str()
                } else {
                    key > after.as_str()
                }
            })
    }
}

/// The records of a store. Implemented by every store that keeps
/// schedules ([`crate::Backend::records`]).
pub trait RecordBackend: Send + Sync {
    /// The record under `key`, if any.
    fn record_get(&self, key: &RecordKey) -> Result<Option<Record>, BackendError>;

    /// Records as `params` asks (see [`RecordListParams`]).
    fn record_list(&self, params: &RecordListParams) -> Result<Vec<Record>, BackendError>;

    /// Apply `params.changes` in one transaction if every expectation
    /// holds, else none of them ([`RecordWrite::Conflict`]).
    fn record_write(&self, params: &RecordWriteParams) -> Result<RecordWrite, BackendError>;

    /// The store's clock now (see the module docs for whose clock it is):
    /// every decision about a schedule's time is taken on it, whichever
    /// machine asks.
    fn record_clock(&self) -> Result<StoreTime, BackendError>;
}

/// Whether a write with `not_after` may be applied at the store's `now`:
/// `Some(TooLate)` when it may not.
#[must_use]
pub fn too_late(not_after: Option<SystemTime>, now: SystemTime) -> Option<RecordWrite> {
    not_after
        .filter(|&limit| now > limit)
        .map(|_| RecordWrite::TooLate { now })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(prefix: &str) -> RecordListParams {
        RecordListParams {
            prefix: prefix.into(),
            after: None,
            descending: false,
            limit: 10,
        }
    }

    #[test]
    fn prefix_end_is_the_least_string_after_the_prefix() {
        assert_eq!(list("slot/a/").prefix_end().as_deref(), Some("slot/a0"));
        assert_eq!(list("").prefix_end(), None);
        assert_eq!(list("a\u{10FFFF}").prefix_end().as_deref(), Some("b"));
        assert_eq!(list("\u{10FFFF}").prefix_end(), None);
    }

    #[test]
    fn a_batch_naming_a_key_twice_is_refused() {
        let key = RecordKey::new("k").unwrap();
        let put = RecordChange::Put {
            key: key.clone(),
            body: String::new(),
            expect: Expect::Anything,
        };
        let twice = RecordWriteParams {
            not_after: None,
            changes: vec![
                put.clone(),
                RecordChange::Delete {
                    key,
                    expect: Expect::Anything,
                },
            ],
        };
        assert!(twice.check().unwrap_err().to_string().contains("twice"));
        assert!(RecordWriteParams::new(vec![put]).check().is_ok());
        assert!(RecordWriteParams::new(vec![]).check().is_err());
    }

    #[test]
    fn keys_refuse_control_characters_and_length() {
        assert!(RecordKey::new("schedule/nightly").is_ok());
        assert!(RecordKey::new("").is_err());
        assert!(RecordKey::new("a\nb").is_err());
        assert!(RecordKey::new("x".repeat(RECORD_KEY_MAX + 1)).is_err());
    }
}
