//! The fenced sink: a resource that checks fencing tokens, with an audit.
//!
//! A separate SQLite database (never the store under test). [`FencedSink::write`]
//! runs in one `BEGIN IMMEDIATE` transaction: read the high-water mark (the
//! highest token accepted, and by whom), decide, write the resource if
//! accepted, append an audit row — so check and write are atomic.
//!
//! The rule: a token above the mark is accepted (and raises it); the mark's
//! own token is accepted only from the writer that set it (the same holder
//! writing again); anything else is refused. Binding the mark to its writer
//! is what lets the sink refuse a token the store handed out a second time
//! (a store rolled back to an older copy, fault case 7): a sink that
//! compared tokens alone would accept the reissued copy of its mark.
//!
//! [`FencedSink::check`] replays the audit in commit order: every accepted
//! token must be at least every token accepted before it, a token must
//! never be accepted from two writers, and the writers' accepted-write
//! intervals (each writer's first to last accepted write) must not
//! overlap: one holder at a time, as the resource saw it — the history
//! check of the cluster and partition cases, beside the grant log's
//! (reissued tokens, overlapping holdings, tokens out of real-time order).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::check::{Report, secs};

/// A handle on the sink database (one per process or thread).
#[derive(Debug)]
pub struct FencedSink {
    path: PathBuf,
    conn: Connection,
}

/// What the sink did with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Refused: the mark was `high` (set by another writer, or higher).
    Refused {
        high: u64,
    },
}

/// One audit row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    pub seq: i64,
    pub token: u64,
    pub writer: String,
    pub accepted: bool,
    /// Boot clock, nanoseconds.
    pub at_ns: u64,
}

impl FencedSink {
    /// Open (creating) the sink at `path`.
    ///
    /// # Errors
    /// When SQLite cannot open or set up the file.
    pub fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(60))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // The sink's own durability is not under test: short transactions.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS mark (id INTEGER PRIMARY KEY CHECK (id = 1), token INTEGER NOT NULL, writer TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS resource (id INTEGER PRIMARY KEY CHECK (id = 1), data TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY, token INTEGER NOT NULL, writer TEXT NOT NULL,
                 accepted INTEGER NOT NULL, at_ns INTEGER NOT NULL);",
        )?;
        Ok(Self {
            path: path.to_owned(),
            conn,
        })
    }

    /// Check `token` from `writer` and, if accepted, write `data` — atomically.
    ///
    /// # Errors
    /// When SQLite fails (the write then did not happen).
    pub fn write(&mut self, token: u64, writer: &str, data: &str) -> rusqlite::Result<Verdict> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mark: Option<(i64, String)> = tx
            .query_row("SELECT token, writer FROM mark WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        let verdict = match mark {
            Some((high, _)) if token < high as u64 => Verdict::Refused { high: high as u64 },
            Some((high, by)) if token == high as u64 && by != writer => Verdict::Refused { high: high as u64 },
            _ => Verdict::Accepted,
        };
        if verdict == Verdict::Accepted {
            tx.execute(
                "INSERT INTO mark (id, token, writer) VALUES (1, ?1, ?2) ON CONFLICT (id) DO UPDATE SET token = ?1, writer = ?2",
                params![token as i64, writer],
            )?;
            tx.execute(
                "INSERT INTO resource (id, data) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET data = ?1",
                [data],
            )?;
        }
        tx.execute(
            "INSERT INTO audit (token, writer, accepted, at_ns) VALUES (?1, ?2, ?3, ?4)",
            params![
                token as i64,
                writer,
                verdict == Verdict::Accepted,
                crate::proc::boot_ns() as i64
            ],
        )?;
        tx.commit()?;
        Ok(verdict)
    }

    /// Whether some process is inside a write transaction of the sink at
    /// `path` (a test pausing a writer must not pause it holding the sink).
    #[must_use]
    pub fn busy(path: &Path) -> bool {
        let Ok(conn) = Connection::open(path) else { return false };
        conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK").is_err()
    }

    /// The audit in commit order.
    ///
    /// # Errors
    /// When SQLite fails.
    pub fn audit(&self) -> rusqlite::Result<Vec<Audit>> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, token, writer, accepted, at_ns FROM audit ORDER BY seq")?;
        stmt.query_map([], |r| {
            Ok(Audit {
                seq: r.get(0)?,
                token: r.get::<_, i64>(1)? as u64,
                writer: r.get(2)?,
                accepted: r.get(3)?,
                at_ns: r.get::<_, i64>(4)? as u64,
            })
        })?
        .collect()
    }

    /// Check the audit: accepted tokens never decrease in commit order, and
    /// no token is accepted from two writers.
    ///
    /// # Errors
    /// When the audit cannot be read.
    pub fn check(&self) -> rusqlite::Result<Report> {
        Ok(check_audit(&self.path, &self.audit()?))
    }
}

/// The checker over an audit (see [`FencedSink::check`]).
#[must_use]
pub fn check_audit(path: &Path, audit: &[Audit]) -> Report {
    let accepted = audit.iter().filter(|a| a.accepted).count();
    let mut report = Report::new(format!(
        "sink {}: {} writes, {accepted} accepted, {} refused",
        path.display(),
        audit.len(),
        audit.len() - accepted
    ));
    let mut high: Option<&Audit> = None;
    let mut first_writer: std::collections::HashMap<u64, &Audit> = std::collections::HashMap::new();
    for a in audit.iter().filter(|a| a.accepted) {
        if let Some(h) = high
            && a.token < h.token
        {
            report.push(
                "stale-accepted",
                format!(
                    "token {} from {} accepted at seq {} (boot clock {}) after token {} from {} at seq {} ({})",
                    a.token,
                    a.writer,
                    a.seq,
                    secs(a.at_ns),
                    h.token,
                    h.writer,
                    h.seq,
                    secs(h.at_ns)
                ),
            );
        }
        match first_writer.get(&a.token) {
            Some(f) if f.writer != a.writer => report.push(
                "token-shared",
                format!(
                    "token {} accepted from {} (seq {}, {}) and from {} (seq {}, {})",
                    a.token,
                    f.writer,
                    f.seq,
                    secs(f.at_ns),
                    a.writer,
                    a.seq,
                    secs(a.at_ns)
                ),
            ),
            Some(_) => {}
            None => {
                first_writer.insert(a.token, a);
            }
        }
        if high.is_none_or(|h| a.token >= h.token) {
            high = Some(a);
        }
    }
    check_write_intervals(audit, &mut report);
    report
}

/// Each writer's accepted writes span an interval of the audit (its first
/// to its last accepted write, in commit order); another writer's accepted
/// write inside it means two holders were writing at once.
fn check_write_intervals(audit: &[Audit], report: &mut Report) {
    // Writer -> (its first, its last accepted write), in order of the first.
    let mut intervals: Vec<(&Audit, &Audit)> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for a in audit.iter().filter(|a| a.accepted) {
        if let Some(&i) = index.get(a.writer.as_str()) {
            intervals[i].1 = a;
        } else {
            index.insert(&a.writer, intervals.len());
            intervals.push((a, a));
        }
    }
    // The interval reaching furthest among those begun so far.
    let mut furthest: Option<(&Audit, &Audit)> = None;
    for &(first, last) in &intervals {
        if let Some((f_first, f_last)) = furthest
            && first.seq < f_last.seq
        {
            report.push(
                "write-intervals-overlap",
                format!(
                    "{} wrote (accepted) from seq {} ({}) to seq {} ({}), and {} from seq {} ({}) to seq {} ({})",
                    f_first.writer,
                    f_first.seq,
                    secs(f_first.at_ns),
                    f_last.seq,
                    secs(f_last.at_ns),
                    first.writer,
                    first.seq,
                    secs(first.at_ns),
                    last.seq,
                    secs(last.at_ns)
                ),
            );
        }
        if furthest.is_none_or(|(_, f_last)| last.seq > f_last.seq) {
            furthest = Some((first, last));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_refuses_lower_tokens_and_its_own_token_from_another_writer() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = FencedSink::open(&dir.path().join("sink.db")).unwrap();
        assert_eq!(sink.write(3, "a", "x").unwrap(), Verdict::Accepted);
        assert_eq!(sink.write(3, "a", "x").unwrap(), Verdict::Accepted);
        assert_eq!(sink.write(3, "b", "x").unwrap(), Verdict::Refused { high: 3 });
        assert_eq!(sink.write(2, "c", "x").unwrap(), Verdict::Refused { high: 3 });
        assert_eq!(sink.write(4, "d", "x").unwrap(), Verdict::Accepted);
        sink.check().unwrap().assert_clean();
    }

    /// An accepted write at seq `seq`, `seq` seconds into the boot clock.
    fn audit(seq: i64, token: u64, writer: &str) -> Audit {
        Audit {
            seq,
            token,
            writer: writer.into(),
            accepted: true,
            at_ns: 1_000_000_000 * seq as u64,
        }
    }

    #[test]
    fn the_checker_names_a_stale_acceptance_and_a_shared_token() {
        let report = check_audit(
            Path::new("s"),
            &[audit(1, 5, "pid 10"), audit(2, 4, "pid 11"), audit(3, 5, "pid 12")],
        );
        let text = report.to_string();
        // Single writes one after the other: no write intervals overlap.
        assert_eq!(report.violations.len(), 2, "{text}");
        assert!(text.contains("token 4 from pid 11 accepted at seq 2"), "{text}");
        assert!(text.contains("token 5 accepted from pid 10 (seq 1"), "{text}");
    }

    #[test]
    fn the_checker_names_two_writers_whose_accepted_writes_interleave() {
        let clean = check_audit(
            Path::new("s"),
            &[audit(1, 5, "a"), audit(2, 5, "a"), audit(3, 6, "b"), audit(4, 7, "c")],
        );
        clean.assert_clean();
        // b's accepted writes run from seq 2 to 4, and c wrote at seq 3.
        let report = check_audit(
            Path::new("s"),
            &[audit(1, 5, "a"), audit(2, 6, "b"), audit(3, 7, "c"), audit(4, 6, "b")],
        );
        let text = report.to_string();
        assert!(
            text.contains(
                "write-intervals-overlap: b wrote (accepted) from seq 2 (2.000 s) to seq 4 (4.000 s), and c from seq 3"
            ),
            "{text}"
        );
    }
}
