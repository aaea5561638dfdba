//! How a supervised command is stopped: why ([`Stop`]), the handle any
//! thread stops or signals it with ([`StopHandle`]), and the events its
//! event loop reacts to ([`Event`]) — stops and signals among the guard's
//! reports.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rustix::process::Pid;

use crate::supervise::SuperviseError;
use crate::{Loss, LostReason, Refusal};

/// Why the supervisor stopped the command. `L` is the refusal of the kept
/// kind: [`LostReason`] for a lease, [`crate::ClaimLost`] for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop<L = LostReason> {
    /// The lease (or claim) was lost.
    Lost(Loss<L>),
    /// Nothing was written (or touched) for this long.
    Stalled(Duration),
    /// The supervisor is shutting down (a worker on SIGTERM).
    Shutdown,
}

/// Why, in a few words, for a log event (a front end words the outcome
/// whole: [`crate::supervise::RunError`]).
impl<L: Refusal> std::fmt::Display for Stop<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Lost(loss) => write!(f, "lost: {loss}"),
            Stop::Stalled(limit) => write!(f, "stalled: nothing written for {}", crate::format_duration(*limit)),
            Stop::Shutdown => f.write_str("asked to shut down"),
        }
    }
}

/// What the supervisor reacts to.
#[derive(Debug)]
pub(super) enum Event<L> {
    /// A once-guard's command process leads this group.
    Group(Pid),
    /// A slot's guard is up.
    Ready,
    /// The guard is of this other build, and started nothing.
    OtherBuild(String),
    Started(Pid),
    SpawnError(u8, String),
    Exited(super::super::child::Exit),
    /// The guard found the trust window closed and stopped the command.
    GuardDeadline,
    GuardGone,
    Stop(Stop<L>),
    Signal(i32),
}

/// Stops a supervised command, or passes it a signal, from any thread.
#[derive(Debug)]
pub struct StopHandle<L = LostReason>(pub(super) mpsc::Sender<Event<L>>);

impl<L> Clone for StopHandle<L> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<L: Refusal> StopHandle<L> {
    /// Stop the command (SIGTERM, then SIGKILL after the grace period);
    /// the first reason is the one reported. False once it has finished.
    #[allow(clippy::must_use_candidate, reason = "stopping is the point")]
    pub fn stop(&self, reason: Stop<L>) -> bool {
        self.0.send(Event::Stop(reason)).is_ok()
    }

    /// Send `signal` to the command's process group. False once it has
    /// finished.
    #[allow(clippy::must_use_candidate, reason = "signalling is the point")]
    pub fn signal(&self, signal: i32) -> bool {
        self.0.send(Event::Signal(signal)).is_ok()
    }

    /// Opt in: install process-wide handlers for SIGINT, SIGTERM and SIGHUP
    /// (signal-hook) that forward each to the command's group, until it has
    /// finished. The library installs none unless asked.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn forward_signals(&self) -> Result<(), SuperviseError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals =
            signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|error| SuperviseError::Io {
                what: "cannot install the signal handlers",
                error,
            })?;
        let this = self.clone();
        thread::spawn(move || {
            for sig in signals.forever() {
                if !this.signal(sig) {
                    return;
                }
            }
        });
        Ok(())
    }
}
