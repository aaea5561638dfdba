//! The grant log: who held which token when, written by the holders.
//!
//! One append-only text file per lease name. Lines:
//!
//! ```text
//! start TOKEN PID MODE NS    # before the holder uses TOKEN (MODE: x exclusive, s shared)
//! end   TOKEN PID MODE NS    # after it stopped using it (before release)
//! ```
//!
//! NS is the boot clock (`CLOCK_BOOTTIME`), common to all processes of the
//! host. Each line is one `write` on an `O_APPEND` descriptor, then
//! `fdatasync`, before the holder goes on — so the log never claims less
//! than happened. A holder the test kills gets its `end` line from the
//! test, after the kill is confirmed (the holder cannot run after that).
//!
//! Because `start` is logged after the grant and `end` before the release,
//! a logged holding lies inside the real one: overlapping logged holdings
//! prove overlapping grants.
//!
//! [`check`] reports: a token started twice (reissued), an exclusive
//! holding overlapping any other holding, exclusive tokens not increasing
//! in the order their holdings began, and holdings that never ended.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::check::{Report, secs};

/// An open grant log.
#[derive(Debug)]
pub struct GrantLog {
    path: PathBuf,
    file: File,
}

impl GrantLog {
    /// Open (creating) the log at `path` for appending.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
        })
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Log the start of a holding, durably, now.
    ///
    /// # Errors
    /// When the write or its sync fails (the holder must then not go on).
    pub fn start(&mut self, token: u64, pid: u32, exclusive: bool) -> std::io::Result<u64> {
        self.line("start", token, pid, exclusive, crate::proc::boot_ns())
    }

    /// Log the end of a holding, durably, now.
    ///
    /// # Errors
    /// When the write or its sync fails.
    pub fn end(&mut self, token: u64, pid: u32, exclusive: bool) -> std::io::Result<u64> {
        self.line("end", token, pid, exclusive, crate::proc::boot_ns())
    }

    /// Log the end of a holding at `ns` (for a holder the test killed).
    ///
    /// # Errors
    /// When the write or its sync fails.
    pub fn end_at(&mut self, token: u64, pid: u32, exclusive: bool, ns: u64) -> std::io::Result<u64> {
        self.line("end", token, pid, exclusive, ns)
    }

    fn line(&mut self, what: &str, token: u64, pid: u32, exclusive: bool, ns: u64) -> std::io::Result<u64> {
        let mode = if exclusive { 'x' } else { 's' };
        self.file
            .write_all(format!("{what} {token} {pid} {mode} {ns}\n").as_bytes())?;
        self.file.sync_data()?;
        Ok(ns)
    }
}

/// One holding, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub token: u64,
    pub pid: u32,
    pub exclusive: bool,
    pub start_ns: u64,
    /// `None`: never logged as ended.
    pub end_ns: Option<u64>,
}

/// Read the holdings of the log at `path`, in the order they started.
///
/// # Errors
/// When the file cannot be read or a line does not parse.
pub fn read(path: &Path) -> std::io::Result<Vec<Holding>> {
    let text = std::fs::read_to_string(path)?;
    let bad = |n: usize, line: &str| std::io::Error::other(format!("{}:{n}: bad line {line:?}", path.display()));
    let mut holdings: Vec<Holding> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        let [what, token, pid, mode, ns] = f[..] else {
            return Err(bad(n + 1, line));
        };
        let (Ok(token), Ok(pid), Ok(ns)) = (token.parse(), pid.parse(), ns.parse()) else {
            return Err(bad(n + 1, line));
        };
        let exclusive = mode == "x";
        match what {
            "start" => holdings.push(Holding {
                token,
                pid,
                exclusive,
                start_ns: ns,
                end_ns: None,
            }),
            "end" => {
                // The latest open holding of this token and pid.
                match holdings
                    .iter_mut()
                    .rev()
                    .find(|h| h.token == token && h.pid == pid && h.end_ns.is_none())
                {
                    Some(h) => h.end_ns = Some(ns),
                    None => return Err(bad(n + 1, line)),
                }
            }
            _ => return Err(bad(n + 1, line)),
        }
    }
    holdings.sort_by_key(|h| h.start_ns);
    Ok(holdings)
}

fn describe(h: &Holding) -> String {
    let end = h.end_ns.map_or_else(|| "never ended".to_owned(), secs);
    let mode = if h.exclusive { "exclusive" } else { "shared" };
    format!(
        "token {} ({mode}, pid {}, {} .. {end})",
        h.token,
        h.pid,
        secs(h.start_ns)
    )
}

/// Check the log at `path` (see the module docs).
///
/// # Errors
/// When the log cannot be read.
pub fn check(path: &Path) -> std::io::Result<Report> {
    Ok(check_holdings(path, &read(path)?))
}

/// The checker over holdings sorted by start.
#[must_use]
pub fn check_holdings(path: &Path, holdings: &[Holding]) -> Report {
    let pids: std::collections::BTreeSet<u32> = holdings.iter().map(|h| h.pid).collect();
    let mut report = Report::new(format!(
        "grant log {}: {} holdings by {} processes",
        path.display(),
        holdings.len(),
        pids.len()
    ));
    let mut seen: std::collections::HashMap<u64, &Holding> = std::collections::HashMap::new();
    for h in holdings {
        if let Some(first) = seen.get(&h.token) {
            report.push(
                "token-reissued",
                format!(
                    "{} and again {}: the store handed out a token twice (was it restored from an older copy?)",
                    describe(first),
                    describe(h)
                ),
            );
        } else {
            seen.insert(h.token, h);
        }
        if h.end_ns.is_none() {
            report.push("never-ended", describe(h));
        }
    }
    // Overlaps: holdings are sorted by start; keep the ones still open.
    let mut open: Vec<&Holding> = Vec::new();
    let mut last_exclusive: Option<&Holding> = None;
    for h in holdings {
        open.retain(|o| o.end_ns.is_none_or(|e| e > h.start_ns));
        for o in &open {
            if o.exclusive || h.exclusive {
                report.push("overlap", format!("{} overlaps {}", describe(o), describe(h)));
            }
        }
        if h.exclusive {
            if let Some(prev) = last_exclusive
                && prev.token > h.token
            {
                report.push(
                    "token-order",
                    format!("{} began after {}, with a lower token", describe(h), describe(prev)),
                );
            }
            last_exclusive = Some(h);
        }
        open.push(h);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_log_passes_and_each_fault_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants");
        let mut log = GrantLog::open(&path).unwrap();
        log.line("start", 1, 10, true, 100).unwrap();
        log.line("end", 1, 10, true, 200).unwrap();
        log.line("start", 2, 11, false, 300).unwrap();
        log.line("start", 3, 12, false, 310).unwrap();
        log.line("end", 2, 11, false, 400).unwrap();
        log.line("end", 3, 12, false, 400).unwrap();
        check(&path).unwrap().assert_clean();

        log.line("start", 4, 13, true, 500).unwrap();
        log.line("start", 4, 14, true, 550).unwrap(); // reissued and overlapping
        log.line("end", 4, 13, true, 600).unwrap();
        log.line("start", 3, 15, true, 700).unwrap(); // lower token later, never ended
        log.line("end", 4, 14, true, 650).unwrap();
        let report = check(&path).unwrap();
        let kinds: Vec<_> = report.violations.iter().map(|v| v.kind).collect();
        assert_eq!(
            kinds,
            [
                "token-reissued",
                "token-reissued",
                "never-ended",
                "overlap",
                "token-order"
            ],
            "{report}"
        );
        assert!(
            report
                .to_string()
                .contains("token 4 (exclusive, pid 13, 0.000 s .. 0.000 s) overlaps token 4 (exclusive, pid 14")
        );
    }
}
