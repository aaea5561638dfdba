//! The history checker: the one judge of the fault suite.
//!
//! It reads a history — what every process of a test recorded, one event
//! per line — and says which safety rules the history breaks. It shares no
//! code with what it judges: it uses nothing of leasehold (not the plans,
//! not the rules, not the fences), nothing of the recorder
//! ([`crate::history`]) or the resources ([`crate::resource`]) but the
//! text format below, which it parses itself. Resources record and decide
//! nothing; leasehold decides (its fences answer, its stores grant); this
//! module judges the answers. (Jepsen's checkers are the model: they read
//! histories and never take part in them.)
//!
//! # The history
//!
//! One event per line, `KIND key=value ...`; values hold no spaces. Times
//! (`NS`) are nanoseconds of the boot clock (`CLOCK_BOOTTIME`), which every
//! process of the host shares — and which the SQLite store keeps its expiry
//! on, so a time the test read from that store is on the same clock.
//!
//! ```text
//! grant   name=N token=T grant=G mode=x|s by=B asked=NS|- answered=NS [granted=NS] [acts=own|fenced]
//! end     name=N grant=G at=NS
//! expires name=N grant=G at=NS
//! write   id=K name=N grant=G token=T resource=R fence=store|record|none start=NS value=V
//! answer  id=K end=NS answer=accepted|refused|failed
//! read    resource=R at=NS value=V
//! lost    name=N at=NS [until=NS]
//! ```
//!
//! - `grant`: the grant `G` (its identity: leasehold's grant id, or another
//!   label unique in the history) of `name` with fencing `token`
//!   (`-`: none), exclusive (`x`) or shared (`s`), held by `B`. `asked`:
//!   when the acquisition was asked for (`-`: not known), a moment before
//!   the store could have issued it; `answered`: when the holder learnt of
//!   it, a moment after; `granted`: when the store issued it, on its own
//!   clock, when the test could read that. `acts=own` (the default): the
//!   holder acts on its own between `answered` and its `end` — that
//!   activity is judged by time. `acts=fenced`: every effect of the holder
//!   goes through a fence — only its writes' answers are judged.
//! - `end`: the holder stopped acting (logged by the holder, or by the test
//!   once it saw the holder dead).
//! - `expires`: the earliest moment the store could expire the grant
//!   (read from the store).
//! - `write`/`answer`: one attempt on a resource `R`, begun at `start`
//!   and answered at `end`: `accepted`, `refused` (a fence said no), or
//!   `failed` (an error: it may or may not have taken effect). An attempt
//!   with no `answer` line has an unknown outcome (its process died).
//!   `fence=store`: the store's fence gate was asked (it knows every
//!   grant) — with a `value`, it also changed the resource (a task's
//!   completion), `-` when it only checked; `fence=record`: a fence record that keeps the highest token it
//!   accepted (a state file's fence, `write --fence-token`); `fence=none`:
//!   nothing was asked — the holder's own activity, recorded.
//! - `read`: the content of `R` after everything (`-`: empty or missing).
//! - `lost`: the test made the store lose what it knew of `name` at `NS`
//!   (wiped, flushed, its file replaced), or at some moment between `at`
//!   and `until` (the command that did it was sent and answered). The
//!   store may then issue tokens
//!   again: the token rules, the gate's passes and holders' activity are
//!   judged within each stretch between losses (a grant whose acquisition,
//!   from asked to answered, meets a loss belongs to neither and is left
//!   out of them); the fence records' rules and the final reads, across them —
//!   what a sink that keeps its mark must still refuse.
//!
//! # The rules
//!
//! Each is judged only where the history proves it broken: an event is an
//! interval between two readings of the clock, and an order counts only
//! when the intervals do not overlap.
//!
//! | kind | what never happens |
//! |---|---|
//! | `token-reissued` | two grants of a name with one token |
//! | `token-order` | a grant answered before another was asked for has a token that is not lower |
//! | `overlap` | a holder acting on its own after a grant of its name that began later was issued (one of the two exclusive): two holders at once, or a stopped holder whose last activity came after the next grant |
//! | `outlived` | a holder acting on its own after the store could expire its grant |
//! | `never-ended` | a holder acting on its own that was never seen to stop (its activity cannot be judged) |
//! | `stale-pass` | the store's fence gate passing a grant's write begun after a newer grant of the name was issued |
//! | `fence-went-back` | a fence record accepting a write whose token is not above one it accepted earlier from another grant |
//! | `refused-without-cause` | a fence record refusing a write when no other grant had presented an equal or higher token |
//! | `lost` | a resource's final content is not the value of an acknowledged write that nothing acknowledged came after |
//! | `refused-applied` | a resource's final content is the value of a refused write |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

/// A boot-clock reading in nanoseconds as seconds with milliseconds (`12.345 s`).
#[must_use]
pub fn secs(ns: u64) -> String {
    format!("{}.{:03} s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000_000)
}

/// At most this many violations of one kind are kept (the rest counted):
/// a badly broken history would otherwise fill memory.
const KEEP_PER_KIND: usize = 200;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule (`token-reissued`, `overlap`, ...; see the module docs),
    /// or what a case itself saw (`trial`, ...).
    pub kind: &'static str,
    /// Tokens, grants, holders and times involved, in words.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

/// What a history held, for the figures of docs/RELIABILITY.md.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub grants: usize,
    pub writes: usize,
    pub accepted: usize,
    pub refused: usize,
    /// Failed, or never answered.
    pub unknown: usize,
    pub reads: usize,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.grants += o.grants;
        self.writes += o.writes;
        self.accepted += o.accepted;
        self.refused += o.refused;
        self.unknown += o.unknown;
        self.reads += o.reads;
    }
}

/// What the checker found (and what a case adds of its own).
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was judged (e.g. "history /tmp/x/history: 12 grants of 1 name, ...").
    pub checked: String,
    pub counts: Counts,
    pub violations: Vec<Violation>,
    /// Violations not kept (beyond the first 200 of a kind, `KEEP_PER_KIND`), by kind:
    /// counted all the same.
    pub omitted: BTreeMap<&'static str, usize>,
}

impl Report {
    /// A report on `checked`, so far clean.
    #[must_use]
    pub fn new(checked: impl Into<String>) -> Self {
        Self {
            checked: checked.into(),
            ..Self::default()
        }
    }

    pub fn push(&mut self, kind: &'static str, detail: impl Into<String>) {
        if self.violations.iter().filter(|v| v.kind == kind).count() >= KEEP_PER_KIND {
            *self.omitted.entry(kind).or_default() += 1;
            return;
        }
        self.violations.push(Violation {
            kind,
            detail: detail.into(),
        });
    }

    /// Add another report's violations, counts and what it checked.
    pub fn merge(&mut self, other: Report) {
        if !other.checked.is_empty() {
            self.checked = if self.checked.is_empty() {
                other.checked
            } else {
                format!("{}; {}", self.checked, other.checked)
            };
        }
        self.counts.add(other.counts);
        self.violations.extend(other.violations);
        for (kind, n) in other.omitted {
            *self.omitted.entry(kind).or_default() += n;
        }
    }

    /// Violations of `kind`.
    #[must_use]
    pub fn count(&self, kind: &str) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count() + self.omitted.get(kind).copied().unwrap_or(0)
    }

    /// Every violation, kept or not.
    #[must_use]
    pub fn total(&self) -> usize {
        self.violations.len() + self.omitted.values().sum::<usize>()
    }

    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.omitted.is_empty()
    }

    /// Panic, listing every violation (at most 50), unless clean.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        write!(f, "{}: {total} violation(s)", self.checked)?;
        for v in self.violations.iter().take(50) {
            write!(f, "\n  - {v}")?;
        }
        if total > 50 {
            write!(f, "\n  ... and {} more", total - 50)?;
        }
        Ok(())
    }
}

mod history;
mod rules;
#[cfg(test)]
mod tests;

use history::{Answer, Grant, Write, parse};
use rules::{activity, final_reads, record_fences, store_passes, stretches, tokens};

/// Judge the history in `text` (`source` names it in the report).
///
/// # Errors
/// A history that does not parse: it cannot be judged, and a case must
/// fail rather than count zero checks.
pub fn check_text(source: &str, text: &str) -> Result<Report, String> {
    let h = parse(text).map_err(|e| format!("history {source}: {e}"))?;
    let names: BTreeSet<&str> = h.grants.iter().map(|g| g.name.as_str()).collect();
    let counts = Counts {
        grants: h.grants.len(),
        writes: h.writes.len(),
        accepted: h.writes.iter().filter(|w| w.answer == Answer::Accepted).count(),
        refused: h.writes.iter().filter(|w| w.answer == Answer::Refused).count(),
        unknown: h.writes.iter().filter(|w| w.answer == Answer::Unknown).count(),
        reads: h.reads.len(),
    };
    let mut report = Report::new(format!(
        "history {source}: {} grants of {} names; {} writes ({} accepted, {} refused, {} unknown); {} reads",
        counts.grants,
        names.len(),
        counts.writes,
        counts.accepted,
        counts.refused,
        counts.unknown,
        counts.reads
    ));
    report.counts = counts;
    let mut by_name: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in &h.grants {
        by_name.entry(&g.name).or_default().push(g);
    }
    let mut writes_of: HashMap<(&str, &str), Vec<&Write>> = HashMap::new();
    for w in &h.writes {
        writes_of.entry((&w.name, &w.grant)).or_default().push(w);
    }
    for (name, grants) in &by_name {
        let losses: Vec<(u64, u64)> = h
            .losses
            .iter()
            .filter(|(n, ..)| n == name)
            .map(|&(_, at, until)| (at, until))
            .collect();
        for stretch in stretches(grants, &losses) {
            tokens(&stretch, &mut report);
            activity(&stretch, &writes_of, &mut report);
            store_passes(&stretch, &h.writes, &mut report);
        }
    }
    record_fences(&h.writes, &mut report);
    final_reads(&h, &mut report);
    Ok(report)
}

/// Judge the history file at `path`.
///
/// # Errors
/// A file that cannot be read or does not parse.
pub fn check_file(path: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("history {}: cannot be read: {e}", path.display()))?;
    check_text(&path.display().to_string(), &text)
}
