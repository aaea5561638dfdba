//! `update FILE -- FILTER...`: the filter runs directly (no shell) with the
//! old content on stdin (for a missing FILE: `--init`, or `null` with
//! `--json`, or nothing) and its stderr passed through; its stdout is the
//! new content. A failed filter leaves FILE untouched, and leasehold exits
//! with the filter's own code (128+N for death by signal N; 127 when it
//! cannot be found, 126 when it cannot be run, as a shell does).

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};

use leasehold::files::UpdateError;

use crate::cli::UpdateArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

#[derive(Debug)]
enum FilterFailure {
    Exited(i32),
    Signalled(i32),
    CannotRun(std::io::Error),
}

#[derive(Debug)]
struct FilterError {
    program: String,
    failure: FilterFailure,
}

impl FilterError {
    fn code(&self) -> u8 {
        match &self.failure {
            FilterFailure::Exited(n) => u8::try_from(*n).unwrap_or(1),
            FilterFailure::Signalled(sig) => u8::try_from(128 + sig).unwrap_or(255),
            FilterFailure::CannotRun(e) if e.kind() == std::io::ErrorKind::NotFound => 127,
            FilterFailure::CannotRun(_) => 126,
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let program = &self.program;
        match &self.failure {
            FilterFailure::Exited(n) => write!(f, "the filter {program} exited with {n}"),
            FilterFailure::Signalled(sig) => write!(f, "the filter {program} was killed by signal {sig}"),
            FilterFailure::CannotRun(e) => write!(f, "cannot run the filter {program}: {e}"),
        }
    }
}

/// Run the filter with `input` on stdin; its stdout when it exits 0.
fn run_filter(argv: &[OsString], input: &[u8]) -> Result<Vec<u8>, FilterError> {
    let (program, rest) = argv.split_first().expect("clap requires a FILTER");
    let fail = |failure| FilterError {
        program: program.to_string_lossy().into_owned(),
        failure,
    };
    let mut child = Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| fail(FilterFailure::CannotRun(e)))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let output = std::thread::scope(|s| {
        // Fed from a thread so a filter that writes before it has read
        // everything cannot deadlock us; a filter that never reads (EPIPE) is
        // fine.
        s.spawn(move || {
            let _ = stdin.write_all(input);
        });
        child.wait_with_output()
    })
    .map_err(|e| fail(FilterFailure::CannotRun(e)))?;
    match (output.status.code(), output.status.signal()) {
        (Some(0), _) => Ok(output.stdout),
        (Some(n), _) => Err(fail(FilterFailure::Exited(n))),
        (None, sig) => Err(fail(FilterFailure::Signalled(sig.unwrap_or(0)))),
    }
}

pub fn run(ctx: &Ctx, args: &UpdateArgs) -> anyhow::Result<u8> {
    let file = &args.file;
    let options = super::options(ctx, file);
    // A missing FILE reads as --init; with --json as `null`, the JSON for
    // "nothing yet", which jq and most filters start from (`.runs += 1`
    // gives {"runs":1}); otherwise as empty.
    let missing: &[u8] = match &args.init {
        Some(init) => init.as_bytes(),
        None if ctx.global.json => b"null\n",
        None => b"",
    };
    let mut bytes = 0;
    let filter = |old: Option<&[u8]>| -> Result<Vec<u8>, FilterError> {
        let new = run_filter(&args.filter, old.unwrap_or(missing))?;
        bytes = new.len();
        Ok(new)
    };
    let fence = super::fence(file)?;
    let result = match fence {
        Some(fence) => super::fenced(file).update(fence, &options, filter),
        None => leasehold::files::update(&file.file, &options, filter),
    };
    match result {
        Ok(()) => {
            super::written(ctx, file, fence, bytes);
            Ok(ExitCode::Success.code())
        }
        Err(UpdateError::File(e)) => Err(e.into()),
        Err(UpdateError::Filter(e)) => {
            let message = format!("{e}; {} is unchanged", file.file.display());
            let details = leasehold::json::NotWritten {
                file: &file.file,
                written: false,
            };
            Ok(crate::commands::fail(ctx, details, &message, e.code()))
        }
    }
}
