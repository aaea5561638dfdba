//! Where a store's documents live, and what a name's document holds.
//!
//! Under the prefix (a root collection id, default `leasehold`):
//!
//! ```text
//! PREFIX/store                          the store's document: `floor` (the
//!                                       `--bump-tokens` floor new names
//!                                       start from) and `names` (how many
//!                                       names were ever made: every
//!                                       creation writes it, so a bump and a
//!                                       creation never cross unseen)
//! PREFIX/store/leases/ID                one per name, never deleted: `name`,
//!                                       `newest` (the newest token, an
//!                                       integer, so it can be ordered by)
//!                                       and `state` (JSON: `State`)
//! PREFIX/store/leases/ID/history/CHUNK  32 history entries each, in order;
//!                                       CHUNK = zero-padded chunk number
//! PREFIX/store/records/ID               a record (what schedules are kept
//!                                       in): `key`, `body`; its update
//!                                       time (µs) is its version
//! ```
//!
//! ID is the name with `%` and `/` percent-encoded, and a leading `.` or
//! `_` too (Firestore refuses ids `.`, `..` and `__…__`).

use leasehold_backend::LeaseName;
pub use leasehold_backend::document::State;

/// The default root collection.
pub const DEFAULT_PREFIX: &str = "leasehold";

/// History entries per chunk document.
pub const CHUNK: u64 = 32;

/// Chunks kept per name: with the up to `CHUNK - 1` newest entries in the
/// name's own document, a name keeps between 1,024 and 1,055 entries —
/// never fewer than `HISTORY_PER_NAME` (1,000), never more than it plus
/// `HISTORY_PRUNE_EVERY - 1` (1,063), the bound every store keeps.
pub const CHUNKS_KEPT: u64 = 32;

/// A name's document id.
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.char_indices() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '.' if i == 0 => out.push_str("%2E"),
            '_' if i == 0 => out.push_str("%5F"),
            c => out.push(c),
        }
    }
    out
}

/// The paths of one store's documents (below `documents/`).
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
}

impl Layout {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn store(&self) -> String {
        format!("{}/store", self.prefix)
    }

    /// The collection of name documents is `leases` under this parent.
    pub fn leases_parent(&self) -> String {
        self.store()
    }

    pub fn name(&self, name: &LeaseName) -> String {
        format!("{}/store/leases/{}", self.prefix, encode(name.as_str()))
    }

    /// The collection of records is `records` under [`Layout::store`].
    pub fn record(&self, key: &str) -> String {
        format!("{}/store/records/{}", self.prefix, encode(key))
    }

    pub fn chunk(&self, name: &LeaseName, chunk: u64) -> String {
        format!("{}/history/{chunk:012}", self.name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_nest_or_take_reserved_forms() {
        assert_eq!(encode("a/b"), "a%2Fb");
        assert_eq!(encode("100%"), "100%25");
        assert_eq!(encode(".."), "%2E.");
        assert_eq!(encode("__x__"), "%5F_x__");
        assert_eq!(encode("a.b_c"), "a.b_c");
        // Distinct names, distinct ids.
        assert_ne!(encode("a%2Fb"), encode("a/b"));
    }
}
