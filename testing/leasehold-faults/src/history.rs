//! The recorder: every process of a test appends what it did to one history
//! file, and decides nothing. [`crate::checker`] (which reads the same text
//! with its own parser) says what the format means and judges it.
//!
//! Each event is one line, written with one `write` on an `O_APPEND`
//! descriptor, so lines of concurrent processes never interleave. Lines are
//! not synced: the fault cases kill processes, never the machine, and the
//! kernel keeps what a killed process wrote. Times are the boot clock
//! ([`crate::proc::boot_ns`]), which all processes of the host share.
//!
//! An attempt on a resource is two lines: `write` before leasehold is asked
//! (so an attempt whose process dies before the answer is still known, with
//! an unknown outcome), `answer` after.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::proc::boot_ns;

/// An open history.
#[derive(Debug)]
pub struct History {
    path: PathBuf,
    file: File,
    /// This process's attempts so far (their ids are `PID.START.N`).
    attempts: u64,
    /// When this handle was opened: with the pid, unique per process even
    /// when a pid is used again.
    opened: u64,
}

/// How a holder acts: on its own (judged by time), or only through fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acts {
    /// Its activity between the grant and its end must end before the next
    /// grant (and before the store could expire its grant).
    Own,
    /// Every effect goes through a fence: only the answers are judged (the
    /// holder was paused together with everything that could stop it).
    Fenced,
}

/// A grant, as its holder (or the test, for a holder that is a CLI call)
/// records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    pub name: String,
    /// `None`: a grant without a fencing token (`leasehold lock`).
    pub token: Option<u64>,
    /// The grant's identity: leasehold's grant id, or a label unique in
    /// the history.
    pub grant: String,
    pub exclusive: bool,
    /// Who holds it (`pid:N`, `thread:N`).
    pub by: String,
    /// When the acquisition was asked for (before the store could issue it).
    pub asked: Option<u64>,
    /// When the holder learnt of it (after the store issued it).
    pub answered: u64,
    /// When the store issued it, on its own clock, if the test read that.
    pub granted: Option<u64>,
    pub acts: Acts,
}

/// The fence an attempt went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The store's fence gate (`leasehold fence`, `Store::fence`, a task's
    /// completion): it knows every grant.
    Store,
    /// A fence record that keeps the highest token it accepted
    /// (`leasehold::files::FencedFile`, `write --fence-token`).
    Record,
    /// None: the holder's own action, only recorded.
    None,
}

/// What leasehold answered to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accepted,
    Refused,
    /// An error: it may or may not have taken effect.
    Failed,
}

impl Answer {
    /// What a `leasehold` command that asks a fence (`fence`, `write
    /// --fence-token`) answered by its exit code: 0 accepted, 13 refused
    /// (README, "Exit codes"), anything else an error.
    #[must_use]
    pub fn of_exit(code: i32) -> Self {
        match code {
            0 => Self::Accepted,
            13 => Self::Refused,
            _ => Self::Failed,
        }
    }
}

/// One attempt on a resource, before it is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt<'a> {
    pub name: &'a str,
    pub grant: &'a str,
    pub token: Option<u64>,
    /// The resource (a path, or `gate:NAME`).
    pub resource: &'a str,
    pub fence: Fence,
    /// What it writes (its value when read back; `-`: nothing).
    pub value: &'a str,
}

/// A word of the history: no spaces (the format splits on them), not empty.
fn word(what: &str, s: &str) -> String {
    assert!(
        !s.is_empty() && !s.contains(char::is_whitespace),
        "history: {what} {s:?} must be one word (the format splits on spaces)"
    );
    s.to_owned()
}

fn maybe(n: Option<u64>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

impl History {
    /// Open (creating) the history at `path` for appending.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: path.to_owned(),
            file,
            attempts: 0,
            opened: boot_ns(),
        })
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.file.write_all(format!("{line}\n").as_bytes())
    }

    /// Record a grant.
    ///
    /// # Errors
    /// When the line cannot be written (the holder must then not go on).
    pub fn grant(&mut self, g: &GrantRecord) -> std::io::Result<()> {
        let mut line = format!(
            "grant name={} token={} grant={} mode={} by={} asked={} answered={}",
            word("name", &g.name),
            maybe(g.token),
            word("grant", &g.grant),
            if g.exclusive { 'x' } else { 's' },
            word("holder", &g.by),
            maybe(g.asked),
            g.answered
        );
        if let Some(granted) = g.granted {
            let _ = write!(line, " granted={granted}");
        }
        if g.acts == Acts::Fenced {
            line += " acts=fenced";
        }
        self.line(&line)
    }

    /// The store lost what it knew of `name` between `at` and `until`
    /// (the test wiped, flushed or replaced it): grants on either side are
    /// judged apart for their tokens (the checker's `lost`).
    ///
    /// # Errors
    /// When the line cannot be written.
    pub fn lost(&mut self, name: &str, at: u64, until: u64) -> std::io::Result<()> {
        self.line(&format!("lost name={} at={at} until={until}", word("name", name)))
    }

    /// Record that the holder of `grant` stopped acting, at `at`.
    ///
    /// # Errors
    /// When the line cannot be written.
    pub fn end(&mut self, name: &str, grant: &str, at: u64) -> std::io::Result<()> {
        self.line(&format!(
            "end name={} grant={} at={at}",
            word("name", name),
            word("grant", grant)
        ))
    }

    /// Record the earliest moment the store could expire `grant` (read from it).
    ///
    /// # Errors
    /// When the line cannot be written.
    pub fn expires(&mut self, name: &str, grant: &str, at: u64) -> std::io::Result<()> {
        self.line(&format!(
            "expires name={} grant={} at={at}",
            word("name", name),
            word("grant", grant)
        ))
    }

    /// Record `attempt`, ask leasehold with `ask`, record its answer; the answer.
    ///
    /// # Errors
    /// When a line cannot be written.
    pub fn attempt<T>(
        &mut self,
        attempt: &Attempt<'_>,
        ask: impl FnOnce() -> (Answer, T),
    ) -> std::io::Result<(Answer, T)> {
        self.attempts += 1;
        let id = format!("{}.{}.{}", std::process::id(), self.opened, self.attempts);
        let start = boot_ns();
        self.line(&format!(
            "write id={id} name={} grant={} token={} resource={} fence={} start={start} value={}",
            word("name", attempt.name),
            word("grant", attempt.grant),
            maybe(attempt.token),
            word("resource", attempt.resource),
            match attempt.fence {
                Fence::Store => "store",
                Fence::Record => "record",
                Fence::None => "none",
            },
            word("value", attempt.value)
        ))?;
        let (answer, detail) = ask();
        let end = boot_ns();
        self.line(&format!(
            "answer id={id} end={end} answer={}",
            match answer {
                Answer::Accepted => "accepted",
                Answer::Refused => "refused",
                Answer::Failed => "failed",
            }
        ))?;
        Ok((answer, detail))
    }

    /// Record what `resource` held after everything (`-`: empty or missing),
    /// read after `at` (taken before the read: an attempt begun later is
    /// not expected in it).
    ///
    /// # Errors
    /// When the line cannot be written.
    pub fn read(&mut self, resource: &str, at: u64, value: &str) -> std::io::Result<()> {
        let value = if value.is_empty() { "-" } else { value };
        self.line(&format!(
            "read resource={} at={at} value={}",
            word("resource", resource),
            word("value", value)
        ))
    }
}

/// The value of `key=` in a history line (for the readers below, which
/// look things up for the cases; the checker parses on its own).
fn field(line: &str, key: &str) -> Option<String> {
    line.split(' ')
        .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .map(str::to_owned)
}

/// The grants of `name` a history holds, as (token, grant, answered, ended),
/// in the order they were recorded — for a case that needs one of its
/// holders' tokens or pids (the checker reads the history on its own).
///
/// # Errors
/// When the file cannot be read.
pub fn grants_of(path: &Path, name: &str) -> std::io::Result<Vec<Recorded>> {
    let text = std::fs::read_to_string(path)?;
    let mut grants: Vec<Recorded> = Vec::new();
    for line in text.lines() {
        if field(line, "name").as_deref() != Some(name) {
            continue;
        }
        if line.starts_with("grant ") {
            grants.push(Recorded {
                token: field(line, "token").and_then(|t| t.parse().ok()),
                grant: field(line, "grant").unwrap_or_default(),
                by: field(line, "by").unwrap_or_default(),
                answered: field(line, "answered").and_then(|t| t.parse().ok()).unwrap_or(0),
                end: None,
            });
        } else if line.starts_with("end ") {
            let grant = field(line, "grant").unwrap_or_default();
            let at = field(line, "at").and_then(|t| t.parse().ok());
            if let Some(g) = grants.iter_mut().find(|g| g.grant == grant && g.end.is_none()) {
                g.end = at;
            }
        }
    }
    Ok(grants)
}

/// The attempts recorded for `grant` (its label), as (start, answer:
/// `None` when never answered), in the order they began — for a case that
/// asserts its own premise (a late write was attempted).
///
/// # Errors
/// When the file cannot be read.
pub fn attempts_of(path: &Path, grant: &str) -> std::io::Result<Vec<(u64, Option<Answer>)>> {
    let text = std::fs::read_to_string(path)?;
    let mut attempts: Vec<(String, u64, Option<Answer>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("write ") && field(line, "grant").as_deref() == Some(grant) {
            let start = field(line, "start").and_then(|t| t.parse().ok()).unwrap_or(0);
            attempts.push((field(line, "id").unwrap_or_default(), start, None));
        } else if line.starts_with("answer ") {
            let id = field(line, "id").unwrap_or_default();
            if let Some(a) = attempts.iter_mut().find(|a| a.0 == id) {
                a.2 = match field(line, "answer").as_deref() {
                    Some("accepted") => Some(Answer::Accepted),
                    Some("refused") => Some(Answer::Refused),
                    _ => Some(Answer::Failed),
                };
            }
        }
    }
    attempts.sort_by_key(|a| a.1);
    Ok(attempts.into_iter().map(|(_, start, answer)| (start, answer)).collect())
}

/// A grant as [`grants_of`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub token: Option<u64>,
    pub grant: String,
    /// The holder (`pid:N`, ...).
    pub by: String,
    pub answered: u64,
    pub end: Option<u64>,
}

impl Recorded {
    /// The holder's pid, when it is a process (`pid:N`).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.by.strip_prefix("pid:").and_then(|p| p.parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the recorder writes, the checker reads (the two share only the format).
    #[test]
    fn the_checker_reads_what_the_recorder_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history");
        let mut h = History::open(&path).unwrap();
        let now = boot_ns();
        h.grant(&GrantRecord {
            name: "job".into(),
            token: Some(3),
            grant: "g3".into(),
            exclusive: true,
            by: "pid:1".into(),
            asked: Some(now - 10),
            answered: now,
            granted: Some(now - 5),
            acts: Acts::Own,
        })
        .unwrap();
        let attempt = Attempt {
            name: "job",
            grant: "g3",
            token: Some(3),
            resource: "file",
            fence: Fence::Record,
            value: "v1",
        };
        let (answer, ()) = h.attempt(&attempt, || (Answer::Accepted, ())).unwrap();
        assert_eq!(answer, Answer::Accepted);
        h.end("job", "g3", boot_ns()).unwrap();
        h.read("file", boot_ns(), "v1").unwrap();
        let report = crate::checker::check_file(&path).unwrap();
        report.assert_clean();
        assert_eq!(
            (report.counts.grants, report.counts.accepted, report.counts.reads),
            (1, 1, 1)
        );
        let grants = grants_of(&path, "job").unwrap();
        assert_eq!(grants.len(), 1);
        assert_eq!((grants[0].token, grants[0].pid()), (Some(3), Some(1)));
        assert!(grants[0].end.is_some());
    }

    #[test]
    #[should_panic(expected = "must be one word")]
    fn a_value_with_a_space_is_refused_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("history")).unwrap();
        let _ = h.read("file", 1, "two words");
    }
}
