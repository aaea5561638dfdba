//! The size of the store's write-ahead log, and when it is large enough to
//! say so.
//!
//! SQLite appends every commit to `-wal` and checkpoints it back into the
//! store once it passes about 4 MiB (1000 pages), restarting the log from
//! its start when no reader still needs its old frames. A log far past that
//! means checkpoints could not finish: a reader has held one snapshot for a
//! long time (a process stopped or stuck inside a read), and every commit
//! since made the log, and each reader's search of it, longer. (The file
//! keeps its length after the reader is gone, until a checkpoint truncates
//! it, which the warning says how to run.)

use std::path::Path;

/// A `-wal` longer than this is worth a warning in `doctor`.
pub const LARGE_WAL_BYTES: u64 = 64 * 1024 * 1024;

/// The warning for a log of `bytes` beside `store`, if it is longer than
/// `limit` ([`LARGE_WAL_BYTES`] outside tests).
#[must_use]
pub fn warning(store: &Path, bytes: u64, limit: u64) -> Option<String> {
    (bytes > limit).then(|| {
        format!(
            "{}-wal is {} MiB, over {} MiB: checkpoints normally keep it to a few MiB, so a long-lived reader \
             may be holding it (a stopped or stuck process that has the store open); find the processes that \
             have it open (fuser -v {}-wal), resume or end the stuck one, then shrink the file with \
             `sqlite3 {} 'PRAGMA wal_checkpoint(TRUNCATE)'` (safe while leasehold runs)",
            store.display(),
            bytes / (1024 * 1024),
            limit / (1024 * 1024),
            store.display(),
            store.display()
        )
    })
}

/// The length of `-wal` beside `store` (0 when there is none).
#[must_use]
pub fn length(store: &Path) -> u64 {
    let mut wal = store.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::symlink_metadata(wal).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_log_past_the_limit_is_warned_about() {
        let store = Path::new("/s.db");
        assert_eq!(warning(store, LARGE_WAL_BYTES, LARGE_WAL_BYTES), None);
        let text = warning(store, LARGE_WAL_BYTES + 1, LARGE_WAL_BYTES).unwrap();
        assert!(text.starts_with("/s.db-wal is 64 MiB, over 64 MiB"), "{text}");
    }
}
