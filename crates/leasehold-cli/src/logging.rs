//! Where the library's events (`leasehold::telemetry`) and this command's
//! own lines for an operator go: stderr, as text for a person or as one
//! JSON object a line (`--log-format json`) for a log pipeline — through
//! `tracing-subscriber`, not a hand-written logger.
//!
//! Levels from `LEASEHOLD_LOG` (error, warn, info, debug, trace): warn by
//! default, info with `--log-format json` (asking for a machine log is
//! asking for the events). No env-filter, which would cost a regex engine
//! at build and start-up.

use std::io::Write as _;
use std::sync::OnceLock;

/// The CLI's own events (docs/LOGGING.md's second table; a unit test
/// holds it to this list). `metrics.failed` is leasehold-serve's, for
/// the daemons' metrics thread.
#[cfg(test)]
pub const EVENTS: &[&str] = &[
    ERROR,
    RELEASE_FAILED,
    WORK_STOPPED,
    SERVE_LISTENING,
    METRICS_LISTENING,
    "metrics.failed",
];
const ERROR: &str = "error";
pub const RELEASE_FAILED: &str = "release.failed";
pub const WORK_STOPPED: &str = "work.stopped";
pub const SERVE_LISTENING: &str = "serve.listening";
pub const METRICS_LISTENING: &str = "metrics.listening";

/// How log events are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// A line each, for a person.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, message, event and its
    /// fields.
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Whether stderr carries JSON lines only: a command's own lines for an
/// operator then go as events ([`say`]), never as free text.
pub fn json() -> bool {
    FORMAT.get() == Some(&LogFormat::Json)
}

pub fn init(format: LogFormat, colour: bool) {
    let _ = FORMAT.set(format);
    let default = match format {
        LogFormat::Text => tracing::Level::WARN,
        LogFormat::Json => tracing::Level::INFO,
    };
    let level = std::env::var("LEASEHOLD_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(default);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colour).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// A line for an operator that is not an error: `leasehold: LINE` on
/// stderr, or with `--log-format json` an info event named `event`.
pub fn say(event: &str, line: &str) {
    if json() {
        tracing::info!(target: "leasehold", event, "{line}");
    } else {
        // One write per line (eprintln! makes one per piece).
        let _ = std::io::stderr().write_all(format!("leasehold: {line}\n").as_bytes());
    }
}

/// A warning for an operator: as [`say`], at warn level.
pub fn warn(event: &str, line: &str) {
    if json() {
        tracing::warn!(target: "leasehold", event, "{line}");
    } else {
        let _ = std::io::stderr().write_all(format!("leasehold: {line}\n").as_bytes());
    }
}

/// The error a command ended with: `leasehold: MESSAGE` on stderr, or an
/// error event `error` with the exit code.
pub fn error(message: &str, exit_code: u8) {
    if json() {
        tracing::error!(target: "leasehold", event = ERROR, exit_code, "{message}");
    } else {
        let _ = writeln!(std::io::stderr(), "leasehold: {message}");
    }
}

#[cfg(test)]
mod tests {
    /// docs/LOGGING.md's table of the CLI's events is [`super::EVENTS`].
    #[test]
    fn the_docs_list_every_event() {
        let docs = include_str!("../../../docs/LOGGING.md");
        let listed = leasehold_testkit::docs::table_names(docs, "The CLI's own", "The fields are named alike");
        assert_eq!(listed, super::EVENTS);
    }
}
