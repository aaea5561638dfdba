//! Arguments of the commands that run a command under a lease or lock:
//! run (with `--if-held`) and lock.

use std::time::Duration;

use clap::{Args, ValueHint};
use leasehold::LeaseName;
use leasehold::limits;

use super::values::{SharedArg, WaitArg, parse_name, within};

/// What `run` does when the lease is held (and `--wait` is not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IfHeld {
    /// Exit 11 naming the holder.
    Fail,
    /// Exit 0 with one line on stderr (for cron).
    Skip,
}

/// `--if-held fail|skip`, which also answers the old spelling `--if-held
/// wait [--wait-timeout DUR]` (now `--wait [DUR]`) with the new one,
/// rather than with a list of values that leaves out waiting.
#[derive(Debug, Clone, Copy)]
pub(super) struct IfHeldParser;

impl clap::builder::TypedValueParser for IfHeldParser {
    type Value = IfHeld;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<IfHeld, clap::Error> {
        if value == "wait" {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                "`--if-held wait` is the old spelling of waiting: use --wait (forever) or --wait DUR (e.g. --wait 10m) \
                 instead; --if-held takes fail or skip\n",
            )
            .with_cmd(cmd));
        }
        clap::builder::EnumValueParser::<IfHeld>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            <IfHeld as clap::ValueEnum>::value_variants()
                .iter()
                .filter_map(clap::ValueEnum::to_possible_value),
        ))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lease name (1-255 bytes of UTF-8, no control characters).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How long the grant lives without renewal.
    #[arg(long, default_value = "60s", value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Duration,

    /// How often to renew. Default: TTL/3, shorter where the TTL is short
    /// (so that a late renewal still fits before the command must stop):
    /// 20s for --ttl 60s, 275ms for --ttl 2s, 75ms for --ttl 1s.
    #[arg(long, value_parser = within(limits::HEARTBEAT), value_hint = ValueHint::Other)]
    pub heartbeat: Option<Duration>,

    #[command(flatten)]
    pub shared: SharedArg,

    /// When the lease is held (without --wait): fail (exit 11) or skip
    /// (exit 0, one line on stderr, for cron).
    #[arg(long, value_parser = IfHeldParser, default_value = "fail", conflicts_with = "wait", value_hint = ValueHint::Other)]
    pub if_held: IfHeld,

    #[command(flatten)]
    pub wait: WaitArg,

    /// Time between SIGTERM and SIGKILL when the command must stop.
    /// Default: TTL/5, at most 10s (10s for --ttl 60s, 2s for --ttl 10s).
    #[arg(long, value_parser = within(limits::GRACE), value_hint = ValueHint::Other)]
    pub grace: Option<Duration>,

    /// Stop the command (exit 75) when it writes nothing to stdout/stderr for DUR.
    #[arg(long, value_parser = within(limits::STALL), value_name = "DUR", value_hint = ValueHint::Other)]
    pub stall_timeout: Option<Duration>,

    /// With --stall-timeout: touching FILE also counts as progress.
    #[arg(long, value_name = "FILE", requires = "stall_timeout")]
    pub progress_file: Option<std::path::PathBuf>,

    /// Owner label recorded with the grant (default host:pid).
    #[arg(long, value_hint = ValueHint::Other)]
    pub owner: Option<String>,

    /// The command and its arguments, run directly (no shell).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(mut_arg("store", |a| a.hide(true)))]
pub struct LockArgs {
    /// The lock file (created if missing), or a directory, locked through
    /// `.leasehold.lock` inside it. A trailing slash (`state/my-agent/`)
    /// names a directory, as --dir does.
    pub path: std::path::PathBuf,

    /// PATH is a directory, as a trailing slash says: created if missing
    /// (0700, missing parents too, like mkdir -p); a file there is refused.
    #[arg(long)]
    pub dir: bool,

    #[command(flatten)]
    pub wait: WaitArg,

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
