//! How results look: one JSON document with `--json`, tables and plain
//! lines for people otherwise.

use std::io::Write as _;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use leasehold::{LeaseState, format_duration};
use serde::Serialize;

/// Print one JSON document (a type of [`leasehold::json`], the one place
/// the JSON shapes are written) on stdout. A closed stdout (a pipe to
/// `head`) is not an error worth reporting.
pub fn print_json(document: &impl Serialize) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, &leasehold::json::value(document));
    let _ = writeln!(out);
    // Flushed now: `fence` and `lock` print before they run a command,
    // which may then write to the same stdout (or replace this process).
    let _ = out.flush();
}

/// A document on one line, flushed at once: one of a stream that a
/// reader takes line by line (`leader --observe`).
pub fn print_json_line(document: &impl Serialize) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &leasehold::json::value(document));
    let _ = writeln!(out);
    let _ = out.flush();
}

/// A time for people and JSON, as [`leasehold::json`] writes it.
pub use leasehold::json::{alive, from_now, rfc3339};

/// At most `max` characters of `s`; a cut is marked with `…`.
pub use leasehold::shorten;

/// `s` safe to show on a terminal: characters that reorder or hide text
/// (bidirectional overrides such as U+202E, zero-width characters) are
/// shown as `\u{…}` escapes, so a hostile name cannot disguise itself or
/// the cells beside it — the set the status page escapes too
/// (`leasehold::hides_or_reorders`).
pub fn for_terminal(s: &str) -> String {
    leasehold::escape_hidden(s)
}

/// A table for people whose every cell goes through [`for_terminal`].
pub struct Table(comfy_table::Table);

impl Table {
    pub fn new(header: &[&str]) -> Self {
        let mut table = comfy_table::Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header(header);
        Self(table)
    }

    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.0.add_row(cells.map(|c| for_terminal(&c)));
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The most of a name or owner a lease table shows on a terminal, in
/// characters: one 255-byte name must not make every row 300 columns wide.
/// Into a pipe or file, and with `--json`, they are whole.
pub const CELL_SHOWN_MAX: usize = 60;

/// The people's table of leases: one row per live grant, one row per free
/// name; names and owners cut to [`CELL_SHOWN_MAX`] on a terminal.
pub fn lease_table(states: &[LeaseState]) -> Table {
    use std::io::IsTerminal as _;
    let terminal = std::io::stdout().is_terminal();
    let cell = |s: &str| {
        if terminal {
            shorten(s, CELL_SHOWN_MAX)
        } else {
            s.to_owned()
        }
    };
    let mut table = Table::new(&["name", "mode", "token", "owner", "holder", "alive?", "expires in"]);
    for state in states {
        if state.grants.is_empty() {
            table.row([
                cell(state.name.as_str()),
                "free".into(),
                format!("(last {})", state.last_token),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        for g in &state.grants {
            table.row([
                cell(state.name.as_str()),
                g.mode.label().into(),
                g.token.to_string(),
                cell(&g.owner),
                g.holder.to_string(),
                alive(g).into(),
                format_duration(g.expires_in),
            ]);
        }
    }
    table
}

/// A store's schema as `migrate` and `doctor` say it: `schema version N`,
/// or for a store that keeps none (Redis, Firestore, etcd: each record is
/// checked as it is read) that it has none — never a `?`.
pub fn schema_words(version: Option<u32>) -> String {
    version.map_or_else(
        || "no schema version (this store has no schema to migrate: each record is checked as it is read)".to_owned(),
        |v| format!("schema version {v}"),
    )
}
