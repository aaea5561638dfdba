//! Command-line arguments. The `///` comments are the help text.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use leasehold::{LeaseName, Token};

const EXAMPLES: &str = "\
Examples:
  T=$(leasehold acquire nightly-report --ttl 2m)   # prints the token; exit 11 if held
  leasehold renew nightly-report --token \"$T\"       # exit 12 if lost
  leasehold fence nightly-report --token \"$T\" -- ./publish.sh
  leasehold release nightly-report --token \"$T\"
  leasehold list --live
  leasehold run daily-publish --ttl 90s -- ./agent.sh     # exit 11 if already running
  leasehold run daily-publish --if-held skip -- ./agent.sh
  leasehold lock ~/.local/state/my-agent -- my-agent --serve

Exit codes: 0 ok, 1 failure, 2 usage, 10 nothing to claim, 11 held, 12 lost,
13 stale token, 65 bad data, 69 store unavailable, 75 lease lost while running.";

/// Keep background jobs and agents from running twice, and keep their state
/// intact when they crash.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Where lease state lives: `sqlite://PATH`, `postgres://...`, `etcd://HOST:PORT`.
    /// Default: `sqlite://$XDG_STATE_HOME/leasehold/leasehold.db`
    #[arg(long, global = true, env = "LEASEHOLD_STORE", value_name = "URL")]
    pub store: Option<String>,

    /// Use a SQLite store (or lock file) on a network filesystem anyway.
    #[arg(long, global = true)]
    pub allow_network_fs: bool,

    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lease; prints its fencing token (exit 11 if held).
    Acquire(AcquireArgs),
    /// Extend a lease you hold (exit 12 if it is lost).
    Renew(RenewArgs),
    /// Give a lease up at once (exit 12 if it was already lost).
    Release(ReleaseArgs),
    /// Run CMD only if TOKEN is still the current grant of NAME (exit 13 if stale).
    Fence(FenceArgs),
    /// Show one lease, or every live lease.
    Status(StatusArgs),
    /// List leases: name, mode, token, owner, holder, alive?, expires in.
    List(ListArgs),
    /// Show what happened to a lease: grants, releases, expiries, takeovers, refusals.
    History(HistoryArgs),
    /// Run CMD under a lease: heartbeat, stop CMD before the lease can pass on (exit 75).
    Run(RunArgs),
    /// Run CMD holding a flock on PATH: one instance per machine (exit 11 if held).
    Lock(LockArgs),
    /// Internal: the guard between the `run` supervisor and its command.
    #[command(name = "__guard", hide = true)]
    Guard(GuardArgs),
    /// Internal: holds a process group open for `run` until the command joins it.
    #[command(name = "__anchor", hide = true)]
    Anchor,
    /// Check the store and this host: filesystem, fsync, boot id, process identity, schema.
    Doctor,
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

pub fn parse_name(s: &str) -> Result<LeaseName, String> {
    LeaseName::new(s).map_err(|e| e.to_string())
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    leasehold::parse_duration(s)
}

pub fn parse_token(s: &str) -> Result<Token, String> {
    s.parse()
}

fn parse_limit(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{s:?} is not a holder limit; write a whole number of at least 1"
        )),
    }
}

/// `--shared[=N]`, shared by every command that takes a lease.
#[derive(Debug, Clone, Args)]
pub struct SharedArg {
    /// Take a shared grant (up to N holders; no limit without =N).
    #[arg(long, num_args = 0..=1, require_equals = true, value_name = "N", value_parser = parse_limit)]
    #[allow(clippy::option_option, reason = "clap: absent, bare --shared, or --shared=N")]
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

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The lease name (1-255 bytes of UTF-8, no control characters).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How long the grant lives without renewal (90s, 5m, 1h30m; bare number = seconds).
    /// Default 60s; with --for-pid, the grant lives as long as that process unless --ttl is given.
    #[arg(long, value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// Owner label. When given, renew/release must name it too, and acquiring
    /// again with it while the grant is live returns the same token.
    #[arg(long)]
    pub owner: Option<String>,

    #[command(flatten)]
    pub shared: SharedArg,

    /// Bind the grant to process PID: live while it lives, taken over at once
    /// when it is provably gone.
    #[arg(long, value_name = "PID")]
    pub for_pid: Option<u32>,

    /// Wait (in FIFO order) until it is free, forever or up to DUR.
    #[arg(long, num_args = 0..=1, require_equals = true, value_name = "DUR", value_parser = parse_duration)]
    #[allow(clippy::option_option, reason = "clap: absent, bare --wait, or --wait=DUR")]
    pub wait: Option<Option<Duration>>,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// The fencing token printed by `acquire`.
    #[arg(long, value_parser = parse_token)]
    pub token: Token,

    /// The owner label given to `acquire`, if any.
    #[arg(long)]
    pub owner: Option<String>,
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    #[command(flatten)]
    pub lease: TokenArgs,

    /// New TTL from now (default: the grant's own TTL).
    #[arg(long, value_parser = parse_duration)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub lease: TokenArgs,
}

#[derive(Debug, Args)]
pub struct FenceArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// The token the writer holds.
    #[arg(long, value_parser = parse_token)]
    pub token: Token,

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
    /// Only names with a live grant.
    #[arg(long)]
    pub live: bool,

    /// Leave out grants held by PID or its ancestors (implies --live): "who
    /// else holds this?".
    #[arg(long, value_name = "PID")]
    pub exclude_ancestry_of: Option<u32>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How many entries, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

/// What `run` does when the lease is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IfHeld {
    /// Exit 11 naming the holder.
    Fail,
    /// Exit 0 with one line on stderr (for cron).
    Skip,
    /// Wait in FIFO order (up to --wait-timeout).
    Wait,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease name (1-255 bytes of UTF-8, no control characters).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How long the grant lives without renewal.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// How often to renew (default: TTL/3).
    #[arg(long, value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,

    #[command(flatten)]
    pub shared: SharedArg,

    /// When the lease is held: fail (exit 11), skip (exit 0), or wait.
    #[arg(long, value_enum, default_value = "fail")]
    pub if_held: IfHeld,

    /// With --if-held wait: give up after DUR (exit 11). Default: wait forever.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub wait_timeout: Option<Duration>,

    /// Time between SIGTERM and SIGKILL when the command must stop.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Stop the command (exit 75) when it writes nothing to stdout/stderr for DUR.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub stall_timeout: Option<Duration>,

    /// With --stall-timeout: touching FILE also counts as progress.
    #[arg(long, value_name = "FILE", requires = "stall_timeout")]
    pub progress_file: Option<std::path::PathBuf>,

    /// Owner label recorded with the grant (default host:pid).
    #[arg(long)]
    pub owner: Option<String>,

    /// The command and its arguments, run directly (no shell).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock file, or a directory (locked through `.leasehold.lock` inside it).
    pub path: std::path::PathBuf,

    /// Wait until it is free, forever or up to DUR.
    #[arg(long, num_args = 0..=1, require_equals = true, value_name = "DUR", value_parser = parse_duration)]
    #[allow(clippy::option_option, reason = "clap: absent, bare --wait, or --wait=DUR")]
    pub wait: Option<Option<Duration>>,

    /// Take a shared lock (many holders; excludes an exclusive one).
    #[arg(long)]
    pub shared: bool,

    /// Do not pass the locked descriptor to the command: the lock ends when
    /// leasehold exits, even if the command's children live on.
    #[arg(long)]
    pub no_inherit: bool,

    /// The command and its arguments, run directly (no shell).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct GuardArgs {
    #[arg(long)]
    pub control_fd: i32,
    #[arg(long)]
    pub report_fd: i32,
    #[arg(long, value_parser = parse_duration)]
    pub grace: Duration,
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}
