//! Who holds a name when an acquirer is kept out ([`Held`]), and the one
//! wording of it every front end prints: the holders, a shared limit, the
//! refusal with or without a wait.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Grant, Holder, Mode, QueuedWaiter, WaiterTicket};

/// Why an acquisition did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The live grants, oldest first.
    pub grants: Vec<Grant>,
    /// Live waiters ahead of this acquirer.
    pub waiters_ahead: u32,
    /// Those waiters, in FIFO order, with who waits: the caller may prove
    /// some dead and ask again with [`crate::LeaseAcquireParams::evict_waiters`].
    #[serde(default)]
    pub ahead: Vec<QueuedWaiter>,
    /// The acquirer's (refreshed or re-made) waiter registration.
    pub ticket: Option<WaiterTicket>,
}

impl Held {
    /// The shared limit that keeps an acquirer of `mode` out, when that is
    /// what does: every live grant is shared and there are as many as the
    /// smallest limit among them and `mode` ([`crate::rules::compatible`]).
    #[must_use]
    pub fn shared_limit(&self, mode: Mode) -> Option<SharedLimit> {
        if mode.is_exclusive() || self.grants.iter().any(|g| g.mode.is_exclusive()) {
            return None;
        }
        let live: Vec<Mode> = self.grants.iter().map(|g| g.mode).collect();
        crate::rules::shared_limit_reached(&live, mode).map(|limit| SharedLimit {
            holders: live.len(),
            limit,
            own: mode == Mode::Shared { limit: Some(limit) },
        })
    }
}

/// A shared lease at its limit; its `Display` is the one wording of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimit {
    pub holders: usize,
    /// The smallest limit among the holders and the acquirer.
    pub limit: u32,
    /// Whether the acquirer asked for that limit itself.
    pub own: bool,
}

impl fmt::Display for SharedLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (holders, limit) = (self.holders, self.limit);
        if self.own {
            write!(f, "{holders} shared holder(s), and this request allows at most {limit}")
        } else {
            write!(
                f,
                "{holders} shared holder(s), and a holder asked for at most {limit} (the smallest limit among the holders and this request counts)"
            )
        }
    }
}

/// The most of a holder's command line its description shows, in
/// characters.
pub const HOLDER_COMMAND_MAX: usize = 60;

/// Where a holder runs, for people: `HOST pid PID (COMMAND)`, the command
/// cut to [`HOLDER_COMMAND_MAX`] characters.
impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pid {}", self.host, self.pid)?;
        if !self.cmdline.is_empty() {
            write!(f, " ({})", crate::shorten(&self.cmdline, HOLDER_COMMAND_MAX))?;
        }
        Ok(())
    }
}

impl Held {
    /// Who holds it, as every front end says it: each holder's mode,
    /// owner, host, pid and command, token and expiry (or the waiters
    /// queued ahead, when only they keep the acquirer out) — and the shared
    /// limit, when that is what keeps an acquirer of `mode` out.
    #[must_use]
    pub fn by(&self, mode: Mode) -> HeldBy<'_> {
        HeldBy { held: self, mode }
    }

    /// The refusal of `name` to an acquirer of `mode`, as every front end
    /// says it: `NAME is held: WHO`, or after a wait of `waited`, `NAME is
    /// still held after waiting D: WHO`. The front end adds its next step
    /// (an option's name is its own).
    #[must_use]
    pub fn refusal<'a>(&'a self, name: &'a str, mode: Mode, waited: Option<Duration>) -> HeldRefusal<'a> {
        HeldRefusal {
            name,
            by: self.by(mode),
            waited,
        }
    }
}

/// Who holds it, to an exclusive acquirer ([`Held::by`]).
impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.by(Mode::Exclusive).fmt(f)
    }
}

/// [`Held::by`]'s wording.
#[derive(Debug, Clone, Copy)]
pub struct HeldBy<'a> {
    held: &'a Held,
    mode: Mode,
}

impl fmt::Display for HeldBy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.held.grants.is_empty() {
            write!(f, "{} waiter(s) queued ahead", self.held.waiters_ahead)?;
        }
        for (i, g) in self.held.grants.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "{} by {} ({}), token {}, expires in {}",
                g.mode.label(),
                // Escaped as tables escape them: an owner or command line
                // must not reorder or hide the message's words.
                crate::escape_hidden(&g.owner),
                crate::escape_hidden(&g.holder.to_string()),
                g.token,
                crate::format_duration(g.expires_in)
            )?;
        }
        match self.held.shared_limit(self.mode) {
            Some(limit) => write!(f, " — {limit}"),
            None => Ok(()),
        }
    }
}

/// [`Held::refusal`]'s wording.
#[derive(Debug, Clone, Copy)]
pub struct HeldRefusal<'a> {
    name: &'a str,
    by: HeldBy<'a>,
    waited: Option<Duration>,
}

impl fmt::Display for HeldRefusal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = crate::escape_hidden(self.name);
        match self.waited {
            None => write!(f, "{name} is held: {}", self.by),
            Some(d) => write!(
                f,
                "{name} is still held after waiting {}: {}",
                crate::format_duration(d),
                self.by
            ),
        }
    }
}
