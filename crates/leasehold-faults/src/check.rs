//! Violations, as the checkers report them: precise enough that a failure
//! is understood from the message alone.

use std::fmt;

/// A boot-clock reading in nanoseconds as seconds with milliseconds (`12.345 s`).
#[must_use]
pub fn secs(ns: u64) -> String {
    format!("{}.{:03} s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000_000)
}

/// One broken property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which property (`token-reissued`, `overlap`, `stale-accepted`, ...).
    pub kind: &'static str,
    /// Tokens, processes and times involved, in words.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

/// What a checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was checked (e.g. "grant log: 812 grants by 16 processes").
    pub checked: String,
    pub violations: Vec<Violation>,
}

impl Report {
    /// A report on `checked`, so far clean.
    #[must_use]
    pub fn new(checked: impl Into<String>) -> Self {
        Self {
            checked: checked.into(),
            violations: Vec::new(),
        }
    }

    pub fn push(&mut self, kind: &'static str, detail: impl Into<String>) {
        self.violations.push(Violation {
            kind,
            detail: detail.into(),
        });
    }

    /// Add another report's violations (and what it checked).
    pub fn merge(&mut self, other: Report) {
        if !other.checked.is_empty() {
            self.checked = format!("{}; {}", self.checked, other.checked);
        }
        self.violations.extend(other.violations);
    }

    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Panic, listing every violation (at most 50), unless clean.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} violation(s)", self.checked, self.violations.len())?;
        for v in self.violations.iter().take(50) {
            write!(f, "\n  - {v}")?;
        }
        if self.violations.len() > 50 {
            write!(f, "\n  ... and {} more", self.violations.len() - 50)?;
        }
        Ok(())
    }
}
