//! `update FILE -- FILTER...`: the filter runs directly (no shell) with the
//! old content on stdin (for a missing FILE: `--init`, or `null` with
//! `--json`, or nothing) and its stderr passed through; its stdout is the
//! new content. A failed filter leaves FILE untouched, and leasehold exits
//! with the filter's own code (128+N for death by signal N; 127 when it
//! cannot be found, 126 when it cannot be run, as a shell does).
//!
//! The filter dies with `update`: it runs as the leader of its own process
//! group, which SIGTERM, SIGINT or SIGHUP to `update` stops (SIGTERM, then
//! SIGKILL a second later) before `update` exits 128+N with FILE unchanged;
//! and `PR_SET_PDEATHSIG` kills the filter itself should `update` die
//! without a chance to act (kill -9).

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use leasehold::files::UpdateError;

use crate::cli::UpdateArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

#[derive(Debug)]
enum FilterFailure {
    Exited(i32),
    Signalled(i32),
    CannotRun(std::io::Error),
    /// `update` got signal N while the filter ran: the filter was stopped.
    Stopped(i32),
}

/// The filter's process group while it runs (0: none); what the signal
/// thread stops.
static FILTER_GROUP: AtomicI32 = AtomicI32::new(0);

/// The signal that stopped `update` (0: none yet).
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// Watch SIGTERM, SIGINT and SIGHUP for the whole update: before the filter
/// starts (waiting for FILE.lock) one ends `update` at once, nothing
/// written; while it runs, it stops the filter's group — the filter's
/// failure then leaves FILE unchanged.
fn watch_signals(file: std::path::PathBuf) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            STOPPED_BY.store(sig, Ordering::SeqCst);
            let group = FILTER_GROUP.load(Ordering::SeqCst);
            let Some(group) = rustix::process::Pid::from_raw(group) else {
                // No filter yet: nothing to stop, nothing written.
                let name = signal_hook::low_level::signal_name(sig).unwrap_or("a signal");
                eprintln!(
                    "leasehold: stopped by {name} before the filter ran; {} is unchanged",
                    file.display()
                );
                std::process::exit(i32::from(crate::exit_codes::by_signal(sig)));
            };
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
            std::thread::sleep(Duration::from_secs(1));
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    });
    Ok(())
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
            FilterFailure::Stopped(sig) => crate::exit_codes::by_signal(*sig),
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
            FilterFailure::Stopped(sig) => write!(
                f,
                "stopped by {}: the filter {program} was stopped with it",
                signal_hook::low_level::signal_name(*sig).unwrap_or("a signal")
            ),
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
    let parent = rustix::process::getpid();
    let mut command = Command::new(program);
    command
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // Its own group, which a signal to `update` stops whole.
        .process_group(0);
    #[allow(
        unsafe_code,
        reason = "PR_SET_PDEATHSIG must be set in the child, between fork and exec"
    )]
    // SAFETY: only raw system calls (prctl, getppid), which are
    // async-signal-safe, run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            // The backstop: killed with `update` however it dies (this
            // thread forks: the main thread, which lives as long as it).
            // Linux only: macOS has no such request (the group kill on a
            // signal still stops the filter there).
            #[cfg(target_os = "linux")]
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // Already gone before the request took: die now.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("leasehold update exited"));
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| fail(FilterFailure::CannotRun(e)))?;
    FILTER_GROUP.store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
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
    .map_err(|e| fail(FilterFailure::CannotRun(e)));
    FILTER_GROUP.store(0, Ordering::SeqCst);
    let output = output?;
    // A signal while the filter ran: whatever it printed is not written.
    let stopped = STOPPED_BY.load(Ordering::SeqCst);
    if stopped != 0 {
        return Err(fail(FilterFailure::Stopped(stopped)));
    }
    match (output.status.code(), output.status.signal()) {
        (Some(0), _) => Ok(output.stdout),
        (Some(n), _) => Err(fail(FilterFailure::Exited(n))),
        (None, sig) => Err(fail(FilterFailure::Signalled(sig.unwrap_or(0)))),
    }
}

pub fn run(ctx: &Ctx, args: &UpdateArgs) -> anyhow::Result<u8> {
    let file = &args.file;
    watch_signals(file.file.clone())?;
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
