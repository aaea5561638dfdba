//! How to run a supervised command: its program, guard, grace, input,
//! what its output does and its stall limit.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::supervise::GuardProgram;

/// What the command's output does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Inherited: the command writes straight to our stdout and stderr.
    Inherit,
    /// Piped through us (to watch for stalls), unchanged.
    Forward,
    /// stdout collected (up to `stdout_limit` bytes; more is an error the
    /// caller reports), stderr forwarded and its last `stderr_tail` bytes
    /// kept.
    Collect { stdout_limit: usize, stderr_tail: usize },
    /// stdout and stderr both collected whole ([`Finished::stdout`](super::Finished::stdout),
    /// [`Finished::stderr`](super::Finished::stderr)), nothing forwarded: Python's
    /// `store.run(capture_output=True)`, as `subprocess.run`'s.
    Capture,
}

/// How to run the command.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The program and its arguments, run directly (no shell).
    pub command: Vec<OsString>,
    /// The guard program ([`GuardProgram::find`] for the default).
    pub guard: GuardProgram,
    /// SIGTERM to SIGKILL ([`crate::supervise::Timing::grace`]).
    pub grace: Duration,
    /// Bytes for the command's stdin (then closed); `None`: inherited.
    pub stdin: Option<Vec<u8>>,
    pub output: Output,
    /// Stop the command after this long without output (or a touch of the
    /// progress file).
    pub stall: Option<(Duration, Option<PathBuf>)>,
}

impl Spec {
    /// A command as `leasehold run` runs one: stdin inherited, output
    /// inherited — or, with a stall limit (and optionally a progress file
    /// whose touch counts as output), forwarded through the supervisor,
    /// which must see the output to notice that there is none.
    #[must_use]
    pub fn watched(
        command: Vec<OsString>,
        guard: GuardProgram,
        grace: Duration,
        stall: Option<(Duration, Option<PathBuf>)>,
    ) -> Self {
        Self {
            command,
            guard,
            grace,
            stdin: None,
            output: if stall.is_some() {
                Output::Forward
            } else {
                Output::Inherit
            },
            stall,
        }
    }
}
