//! The lease commands' arguments: acquire, renew, release, fence,
//! status, list, history, leader.

use std::time::Duration;

use clap::{Args, ValueHint};
use leasehold::limits;
use leasehold::{LeaseName, Token};

use super::values::{SharedArg, WaitArg, parse_grant, parse_name, parse_token, within};

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The lease name (1-255 bytes of UTF-8, no control characters).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How long the grant lives without renewal (90s, 5m, 1h30m; bare number = seconds).
    /// Default 60s; with --for-pid, the grant lives as long as that process (at most a year) unless --ttl is given.
    #[arg(long, value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Option<Duration>,

    /// Owner label. When given, renew/release must name it too, and acquiring
    /// again with it while the grant is live returns the same token.
    #[arg(long, value_hint = ValueHint::Other)]
    pub owner: Option<String>,

    #[command(flatten)]
    pub shared: SharedArg,

    /// Bind the grant to process PID: live while it lives, taken over at once
    /// when it is provably gone.
    #[arg(long, value_name = "PID", value_hint = ValueHint::Other)]
    pub for_pid: Option<u32>,

    #[command(flatten)]
    pub wait: WaitArg,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// The fencing token printed by `acquire`.
    #[arg(long, value_parser = parse_token, value_hint = ValueHint::Other)]
    pub token: Token,

    /// The owner label given to `acquire`, if any.
    #[arg(long, value_hint = ValueHint::Other)]
    pub owner: Option<String>,

    /// The grant (16 hex digits, printed by `acquire --json`, exported by
    /// `run` as `LEASEHOLD_GRANT`): only that grant is acted on — after a
    /// store lost data its token may belong to another. Without it, a
    /// token alone acts only on a grant bound to no process.
    #[arg(long, value_parser = parse_grant, value_name = "GRANT", value_hint = ValueHint::Other)]
    pub grant: Option<leasehold::GrantId>,
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    #[command(flatten)]
    pub lease: TokenArgs,

    /// New TTL from now (default: the grant's own TTL).
    #[arg(long, value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub lease: TokenArgs,

    /// When the grant is bound to a process that may still run (a `run`
    /// supervisor, a library holder, `--for-pid`), stop that process
    /// (SIGTERM; on its own host only) and wait until it has ended its
    /// grant — `run` stops its command first — instead of refusing.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct FenceArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// The token the writer holds.
    #[arg(long, value_parser = parse_token, value_hint = ValueHint::Other)]
    pub token: Token,

    /// The writer's grant (16 hex digits): the token's grant in the store
    /// must be this one. Under `leasehold run`, `LEASEHOLD_GRANT` is used
    /// when TOKEN is `LEASEHOLD_TOKEN`.
    #[arg(long, value_parser = parse_grant, value_name = "GRANT", value_hint = ValueHint::Other)]
    pub grant: Option<leasehold::GrantId>,

    /// The command to run when the token passes.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lease to show (default: every live lease).
    #[arg(value_parser = parse_name)]
    pub name: Option<LeaseName>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only grants whose holder is not proven dead (TTL not run out, and
    /// its process not provably gone). Exits 0 when it lists something, 1
    /// when nothing (as grep does).
    #[arg(long)]
    pub live: bool,

    /// Leave out grants held by PID or its ancestors (implies --live): "who
    /// else holds this?".
    #[arg(long, value_name = "PID", value_hint = ValueHint::Other)]
    pub exclude_ancestry_of: Option<u32>,

    /// Print nothing; only the exit code answers (with --live: 0 something
    /// is held, 1 nothing is).
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How many entries, newest first, at least 1 (with --timeline: all the store keeps).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..), value_hint = ValueHint::Other)]
    pub limit: u32,

    /// Draw the grants as a timeline: bars labelled with their tokens, with
    /// releases, expiries, takeovers, refusals and fence verdicts marked.
    #[arg(long)]
    pub timeline: bool,

    /// With --timeline: how far back to draw (1m to 7d and more).
    #[arg(long, default_value = "1h", value_parser = within(limits::AGE), requires = "timeline", value_name = "DUR", value_hint = ValueHint::Other)]
    pub since: Duration,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// Print each change of leader (with --json one document per line) until SIGINT or SIGTERM.
    #[arg(long)]
    pub observe: bool,
}
