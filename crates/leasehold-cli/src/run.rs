//! Parse arguments, run one command, and map its outcome to an exit code —
//! the only place that decides exit codes for errors.

use std::fmt;
use std::io::{IsTerminal as _, Write};

use clap::Parser;
use leasehold::files::FileError;
use leasehold::symlinks::DirError;
use leasehold::{BackendError, Error as LibError};

use crate::cli::{Cli, Global};
use crate::exit_codes::ExitCode;

/// An error that already knows its exit code and its whole message (what
/// happened, to what, what to do next).
#[derive(Debug)]
pub struct CliError {
    pub code: ExitCode,
    pub message: String,
}

impl CliError {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The exit code for an error, found by walking its chain.
fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<CliError>() {
            return e.code;
        }
        if let Some(e) = cause.downcast_ref::<LibError>() {
            return match e {
                LibError::Store(b) => backend_code(b),
                LibError::Process(_) | LibError::InvalidInput(_) => ExitCode::Usage,
                LibError::Supervise(_) => ExitCode::Failure,
            };
        }
        if let Some(e) = cause.downcast_ref::<BackendError>() {
            return backend_code(e);
        }
        if let Some(e) = cause.downcast_ref::<FileError>() {
            return file_code(e);
        }
    }
    ExitCode::Failure
}

fn backend_code(e: &BackendError) -> ExitCode {
    match e {
        BackendError::Unavailable { .. } => ExitCode::Unavailable,
        BackendError::Corrupt { .. } | BackendError::SchemaTooNew { .. } => ExitCode::DataError,
        BackendError::Unsupported { .. } | BackendError::InvalidUrl { .. } | BackendError::InvalidInput(_) => {
            ExitCode::Usage
        }
    }
}

/// State files: a stale token is 13; what is at a path and is not a valid
/// state file, fence record or input is bad data (65); a missing directory
/// or a full, read-only or forbidden disk is a plain failure (1): the store
/// is not involved, so 69 would mislead.
fn file_code(e: &FileError) -> ExitCode {
    match e {
        FileError::StaleToken { .. } => ExitCode::StaleToken,
        FileError::UnsafeDirectory {
            why: DirError::Missing { .. },
            ..
        } => ExitCode::Failure,
        FileError::InvalidInput { .. }
        | FileError::Corrupt { .. }
        | FileError::CorruptFence { .. }
        | FileError::IsDirectory { .. }
        | FileError::TrailingSlash { .. }
        | FileError::Symlink { .. }
        | FileError::UnsafeDirectory { .. }
        | FileError::NotRegular { .. } => ExitCode::DataError,
        _ => ExitCode::Failure,
    }
}

/// Colour only for a person at a terminal: never into a log file or a
/// pipe, and never when `NO_COLOR` is set (no-color.org).
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn init_logging() {
    // A level from LEASEHOLD_LOG (error, warn, info, debug, trace); no
    // env-filter, which would cost a regex engine at build and start-up.
    let level = std::env::var("LEASEHOLD_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(colour())
        .with_target(false)
        .try_init();
}

/// Whether `--json` was asked for, read from the raw arguments: when they
/// do not parse, clap's view of them is not there to ask. Only before a
/// `--` (after it come a command's own arguments).
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Arguments that do not parse: clap's message on stderr, and with
/// `--json` one JSON document on stdout too. Help and version are not
/// errors and print as clap prints them.
fn usage_error(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) || !json_asked() {
        let _ = e.print();
        return u8::try_from(e.exit_code()).unwrap_or(2);
    }
    let text = e.render().to_string();
    let _ = write!(std::io::stderr(), "{text}");
    // The message is clap's first paragraph (usage and tips follow).
    let message = text.trim().trim_start_matches("error: ");
    let message = message.split("\n\n").next().unwrap_or(message).trim();
    crate::output::print_json(&serde_json::json!({ "error": message, "exit_code": ExitCode::Usage.code() }));
    ExitCode::Usage.code()
}

/// The process's exit code.
pub fn run() -> u8 {
    // `leasehold __guard ...` and `leasehold __anchor`: this binary is the
    // guard of its own `run` and `work` (the library's guard program).
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if let Some(code) = leasehold::supervise::guard::main(&args) {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    init_logging();
    let global = cli.global.clone();
    match crate::commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => report(&global, &err).code(),
    }
}

/// The error and its causes, as `{err:#}` writes them but each once: a
/// library error that names its cause in its own message ("cannot open
/// f: File name too long (os error 36); it is unchanged") also exposes it
/// as its source, and anyhow would repeat it after the message.
fn message(err: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

/// Print an error (stderr; with `--json` also one JSON document on stdout)
/// and return its exit code.
fn report(global: &Global, err: &anyhow::Error) -> ExitCode {
    let code = exit_code_of(err);
    let message = message(err);
    let _ = writeln!(std::io::stderr(), "leasehold: {message}");
    if global.json {
        crate::output::print_json(&serde_json::json!({ "error": message, "exit_code": code.code() }));
    }
    code
}
