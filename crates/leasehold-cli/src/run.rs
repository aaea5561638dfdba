//! Parse arguments, run one command, and map its outcome to an exit code —
//! the only place that decides exit codes for errors.

use std::fmt;
use std::io::{IsTerminal as _, Write};

use clap::Parser;
use leasehold::files::FileError;
use leasehold::lock::LockError;
use leasehold::{BackendError, Error as LibError, ErrorKind, Remedy};

use crate::cli::{Cli, Global};
use crate::exit_codes::{ExitCode, Subject};

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

/// The exit code for an error: the first cause in its chain that knows
/// its kind decides (with what it concerns; see [`ExitCode::of`]).
fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<CliError>() {
            return e.code;
        }
        if let Some((kind, subject)) = kind_of(cause) {
            return ExitCode::of(kind, subject);
        }
    }
    ExitCode::Failure
}

/// The kind of a library error, and what it concerns.
fn kind_of(cause: &(dyn std::error::Error + 'static)) -> Option<(ErrorKind, Subject)> {
    if let Some(e) = cause.downcast_ref::<LibError>() {
        return Some((e.kind(), Subject::Store));
    }
    if let Some(e) = cause.downcast_ref::<BackendError>() {
        return Some((e.kind(), Subject::Store));
    }
    if let Some(e) = cause.downcast_ref::<FileError>() {
        return Some((e.kind(), Subject::File));
    }
    if let Some(e) = cause.downcast_ref::<LockError>() {
        return Some((e.kind(), Subject::Lock));
    }
    None
}

/// A next step that is an option of the caller's, as the CLI's flag.
pub fn remedy_words(remedy: Remedy) -> String {
    match remedy {
        Remedy::AnotherStore => "use another --store",
        Remedy::AllowNetworkFs => "pass --allow-network-fs if you accept the risk (every user on this host)",
        Remedy::FewerConnections => "lower --concurrency",
        _ => "see the documentation",
    }
    .to_owned()
}

/// A cause's message in the CLI's words: a remedy as a flag.
fn cli_text(cause: &(dyn std::error::Error + 'static)) -> String {
    let store = cause
        .downcast_ref::<BackendError>()
        .or_else(|| match cause.downcast_ref::<LibError>() {
            Some(LibError::Store(e)) => Some(e),
            _ => None,
        });
    if let Some(e) = store {
        return e.message_with(remedy_words);
    }
    if let Some(e) = cause.downcast_ref::<LockError>()
        && let Some(remedy) = e.remedy()
    {
        return format!("{e}, or {}", remedy_words(remedy));
    }
    cause.to_string()
}

/// Colour only for a person at a terminal: never into a log file or a
/// pipe, and never when `NO_COLOR` is set (no-color.org).
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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
/// errors: as clap prints help and [`crate::version`] the version, or with
/// `--json` as one document (`{"help": TEXT}`, the version's), exit 0.
fn usage_error(e: clap::Error) -> u8 {
    use clap::error::ErrorKind;
    let e = cut_long_value(e);
    let json = json_asked();
    match e.kind() {
        ErrorKind::DisplayHelp if json => {
            crate::output::print_json(&leasehold::json::Help {
                help: &e.render().to_string(),
            });
            return ExitCode::Success.code();
        }
        ErrorKind::DisplayVersion if json => {
            crate::output::print_json(&crate::version::document());
            return ExitCode::Success.code();
        }
        ErrorKind::DisplayVersion => {
            let _ = write!(std::io::stdout(), "{}", crate::version::text());
            return ExitCode::Success.code();
        }
        _ => {}
    }
    if matches!(e.kind(), ErrorKind::DisplayHelp) || !json {
        let _ = e.print();
        return u8::try_from(e.exit_code()).unwrap_or(2);
    }
    let text = e.render().to_string();
    let _ = write!(std::io::stderr(), "{text}");
    // The message is clap's first paragraph (usage and tips follow).
    let message = text.trim().trim_start_matches("error: ");
    let message = message.split("\n\n").next().unwrap_or(message).trim();
    print_failure(message, ExitCode::Usage);
    ExitCode::Usage.code()
}

/// `e` with the argument value it repeats cut to
/// [`leasehold::VALUE_SHOWN_MAX`] characters (clap repeats it whole: a 4 KB
/// name filled the terminal) and escaped as tables escape text
/// ([`crate::output::for_terminal`]: clap repeats a newline or a U+202E
/// raw). The parsers' own messages show a value through
/// [`leasehold::quoted`], which cuts and escapes it the same way.
fn cut_long_value(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    if let Some(ContextValue::String(value)) = e.get(ContextKind::InvalidValue) {
        let shown = crate::output::for_terminal(&leasehold::shorten(value, leasehold::VALUE_SHOWN_MAX));
        if shown != *value {
            e.insert(ContextKind::InvalidValue, ContextValue::String(shown));
        }
    }
    e
}

/// The process's exit code.
pub fn run() -> u8 {
    // `leasehold __guard ...`: this binary is the guard of its own `run`
    // and `work` (the library's guard program).
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if let Some(code) = leasehold::supervise::guard::main(&args) {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    crate::logging::init(cli.global.log_format, colour());
    let global = cli.global.clone();
    if let Some(limit) = open_files_limit().filter(|n| *n < OPEN_FILES_NEEDED) {
        let message = format!(
            "{}, and leasehold needs at least {OPEN_FILES_NEEDED}: {RAISE_OPEN_FILES}; nothing was done",
            too_many_open_files(limit)
        );
        return report(
            &global,
            &anyhow::Error::new(CliError::new(ExitCode::Unavailable, message)),
        )
        .code();
    }
    match crate::commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => report(&global, &err).code(),
    }
}

/// The open files (descriptors) below which no command starts: `run` opens
/// about a dozen (the store, its journal, pipes and a socket to its guard,
/// the signal pipe), `serve` and `work` more. Below this, each failed
/// where its first `open` did, with that step's words (exit 2 blaming the
/// process identity, 1 for the signal handlers, 69 for permissions).
const OPEN_FILES_NEEDED: u64 = 32;

/// This process's limit of open files (`ulimit -n`, the soft
/// `RLIMIT_NOFILE`); `None` when unlimited.
fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// What `EMFILE` means, with the limit: one wording for the check at start
/// and for an error that ran into it later.
fn too_many_open_files(limit: impl fmt::Display) -> String {
    format!("too many open files (EMFILE): this process may open {limit} (ulimit -n)")
}

/// What to do about [`too_many_open_files`].
const RAISE_OPEN_FILES: &str = "raise the limit (ulimit -n 1024, or LimitNOFILE= in a systemd unit)";

/// Whether an error comes from this process's limit of open files
/// (`EMFILE`; not the system's, `ENFILE`, which a higher `ulimit -n` does
/// not help): an I/O error in the chain, or under a store's error, or one
/// worded into a message (the supervisor's and the process identity's
/// errors carry the system's words, `(os error 24)`, not the error).
fn out_of_files(err: &anyhow::Error) -> bool {
    let worded = format!("(os error {})", libc::EMFILE);
    if err.chain().any(|cause| cause.to_string().contains(&worded)) {
        return true;
    }
    let is_emfile = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|n| n == libc::EMFILE)
    };
    err.chain().any(|cause| {
        let store = cause
            .downcast_ref::<BackendError>()
            .or_else(|| match cause.downcast_ref::<LibError>() {
                Some(LibError::Store(e)) => Some(e),
                _ => None,
            });
        is_emfile(cause) || store.and_then(|e| e.cause()).is_some_and(|c| is_emfile(c))
    })
}

/// The error and its causes, as `{err:#}` writes them: the library's
/// errors print their cause or chain it, never both, so nothing repeats.
fn message(err: &anyhow::Error) -> String {
    err.chain().map(cli_text).collect::<Vec<_>>().join(": ")
}

/// Print an error (stderr; with `--json` also one JSON document on stdout)
/// and return its exit code.
fn report(global: &Global, err: &anyhow::Error) -> ExitCode {
    let (code, message) = if out_of_files(err) {
        let limit = open_files_limit().map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        (
            ExitCode::Unavailable,
            format!("{}; {RAISE_OPEN_FILES}: {}", too_many_open_files(limit), message(err)),
        )
    } else {
        (exit_code_of(err), message(err))
    };
    crate::logging::error(&message, code.code());
    if global.json {
        print_failure(&message, code);
    }
    code
}

/// A failure without details of its own, as JSON.
fn print_failure(message: &str, code: ExitCode) {
    crate::output::print_json(&leasehold::json::Failure {
        words: leasehold::json::Words::Error(message),
        exit_code: code.code(),
        details: (),
    });
}
