//! Value parsers and arguments several commands share: names, tokens,
//! durations within their limits, `--shared [N]` and `--wait [DUR]`.

use std::time::Duration;

use clap::{Args, ValueHint};
use leasehold::limits;
use leasehold::limits::Limit;
use leasehold::{LeaseName, Token};

pub fn parse_name(s: &str) -> Result<LeaseName, String> {
    LeaseName::new(s).map_err(|e| e.to_string())
}

/// The parser of a duration flag: humane text (90s, 5m, 1h30m; a bare
/// number is seconds) within `limit` — the library's parser, which the
/// fuzz suite (fault case 21) runs over every limit.
pub(super) fn within(
    limit: Limit,
) -> impl Fn(&str) -> Result<Duration, leasehold::ParseError> + Clone + Send + Sync + 'static {
    move |s| leasehold::parse_duration_within(s, limit)
}

pub fn parse_token(s: &str) -> Result<Token, String> {
    s.parse()
}

pub(super) fn parse_limit(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{} is not a holder limit; write a whole number of at least 1 (the NAME goes before \
             --shared, or after --shared N)",
            leasehold::quoted(s)
        )),
    }
}

// `--shared [N]`, shared by every command that takes a lease: a shared
// grant, for at most N holders when N is given (`--shared 3` or
// `--shared=3`). The optional value can never be mistaken for the lease
// name: every command that takes it also requires the name, so a value
// taken here leaves the name missing — an error, not a guess.
#[derive(Debug, Clone, Args)]
pub struct SharedArg {
    /// Take a shared grant: many holders, or at most N with `--shared N`.
    #[arg(long, num_args = 0..=1, value_name = "N", value_parser = parse_limit, value_hint = ValueHint::Other)]
    #[allow(clippy::option_option, reason = "clap: absent, bare --shared, or --shared N")]
    pub shared: Option<Option<u32>>,
}

impl SharedArg {
    pub fn mode(&self) -> leasehold::Mode {
        match self.shared {
            None => leasehold::Mode::Exclusive,
            Some(limit) => leasehold::Mode::Shared { limit },
        }
    }
}

/// How long to wait for a held lease or lock: `--wait DUR` (or `--wait=DUR`;
/// a bare number is seconds, as `flock -w`), `--wait forever` or a bare
/// `--wait` without limit. Without `--wait`, a held lease or lock is
/// refused at once (exit 11). As with `--shared N`, the optional value
/// cannot be taken for a name or path: each command also requires one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    For(Duration),
}

impl Wait {
    /// The limit of the wait; `None`: forever.
    pub fn timeout(self) -> Option<Duration> {
        match self {
            Wait::Forever => None,
            Wait::For(d) => Some(d),
        }
    }
}

pub(super) fn parse_wait(s: &str) -> Result<Wait, String> {
    if s.trim() == "forever" {
        return Ok(Wait::Forever);
    }
    leasehold::parse_duration_within(s, limits::WAIT)
        .map(Wait::For)
        .map_err(|e| format!("{e}; or `forever`"))
}

// `--wait [DUR|forever]`, shared by `acquire`, `run` and `lock`.
#[derive(Debug, Clone, Args)]
pub struct WaitArg {
    /// When held, wait (first come, first served) up to DUR — `--wait 10m`,
    /// `--wait=10m`, a bare number is seconds — or forever (`--wait` or
    /// `--wait forever`); then exit 11. Without it: exit 11 at once.
    #[arg(long, num_args = 0..=1, value_name = "DUR", value_parser = parse_wait, default_missing_value = "forever", value_hint = ValueHint::Other)]
    pub wait: Option<Wait>,
}

/// A token to fence a state file with: a token a store issued, so 1 or more.
pub(super) fn parse_fence_token(s: &str) -> Result<Token, String> {
    match s.parse()? {
        Token(0) => Err(format!(
            "{} is not a fencing token: stores issue tokens from 1 up; pass the token `acquire` printed \
             (or $LEASEHOLD_TOKEN under `run`)",
            leasehold::quoted(s)
        )),
        token => Ok(token),
    }
}

pub(super) fn parse_grant(s: &str) -> Result<leasehold::GrantId, String> {
    s.parse()
}
