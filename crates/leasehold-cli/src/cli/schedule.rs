//! The schedule commands' arguments: schedule add/list/show/next/… and
//! cron, the daemon that keeps them.

use std::time::Duration;

use clap::{Args, Subcommand, ValueHint};
use leasehold::LeaseName;
use leasehold::limits;

use super::values::{parse_name, within};

#[derive(Debug, Subcommand)]
#[command(defer = true)]
#[allow(clippy::large_enum_variant, reason = "parsed once per call")]
pub enum ScheduleCommand {
    /// Add a schedule: a command to run (`-- CMD...`) or a task to enqueue (--queue), at each slot.
    Add(ScheduleAddArgs),
    /// List the schedules: name, cron, zone, next slot, paused?
    List,
    /// Show a schedule and what became of its latest slots.
    Show(ScheduleShowArgs),
    /// Print a schedule's next slots, in its zone.
    Next(ScheduleNextArgs),
    /// Pause a schedule: its slots pass unfired until it is resumed.
    Pause(ScheduleNameArg),
    /// Resume a paused schedule from now (no backlog of the paused time).
    Resume(ScheduleNameArg),
    /// Remove a schedule with its slots' records.
    Remove(ScheduleNameArg),
}

#[derive(Debug, Args)]
pub struct ScheduleNameArg {
    /// The schedule's name (also the name of the lease its commands run under).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,
}

#[derive(Debug, Args)]
pub struct ScheduleAddArgs {
    /// The schedule's name (also the name of the lease its commands run under).
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// When: five cron fields (`30 2 * * *`), six with seconds first, `@daily`
    /// and the other shorthands, or `@every DUR` (`@every 5m`).
    #[arg(long, value_name = "EXPR", value_hint = ValueHint::Other)]
    pub cron: String,

    /// The time zone cron fields are read in (IANA, `Europe/Berlin`). Default: UTC.
    #[arg(long, value_name = "ZONE", value_hint = ValueHint::Other)]
    pub tz: Option<String>,

    /// When the previous slot's command still runs: skip this slot, wait for
    /// it (until the next slot or the deadline), or stop it and run.
    #[arg(long, default_value = "skip", value_parser = clap::builder::PossibleValuesParser::new(leasehold::schedule::Overlap::WORDS), value_hint = ValueHint::Other)]
    pub overlap: String,

    /// Slots missed while no daemon could fire them: none run (record them
    /// missed), the latest runs, or all run.
    #[arg(long, default_value = "none", value_parser = clap::builder::PossibleValuesParser::new(leasehold::schedule::CatchUp::WORDS), value_hint = ValueHint::Other)]
    pub catch_up: String,

    /// A slot not started within DUR of its time is recorded as missed, never run late.
    #[arg(long, value_name = "DUR", value_parser = within(limits::DELAY), value_hint = ValueHint::Other)]
    pub deadline: Option<Duration>,

    /// Each daemon waits a random part of DUR after a slot's time before it fires it.
    #[arg(long, value_name = "DUR", default_value = "0", value_parser = within(limits::DELAY), value_hint = ValueHint::Other)]
    pub jitter: Duration,

    /// The TTL of the lease a command runs under (renewed while it runs).
    #[arg(long, default_value = "60s", value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Duration,

    /// Time between SIGTERM and SIGKILL when a command must stop. Default: as `run`.
    #[arg(long, value_parser = within(limits::GRACE), value_hint = ValueHint::Other)]
    pub grace: Option<Duration>,

    /// Enqueue a task to this queue at each slot instead of running a command.
    #[arg(long, value_name = "QUEUE", conflicts_with = "command", value_hint = ValueHint::Other)]
    pub queue: Option<String>,

    /// With --queue: the task's payload (JSON). Default: null.
    #[arg(long, value_name = "JSON", requires = "queue", value_hint = ValueHint::Other)]
    pub payload: Option<String>,

    /// Replace a schedule of the same name (its slots' records are kept).
    #[arg(long)]
    pub replace: bool,

    /// Add it paused.
    #[arg(long)]
    pub paused: bool,

    /// The command and its arguments, run directly (no shell).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ScheduleShowArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How many of the latest slots' records to show.
    #[arg(short = 'n', long, default_value_t = 20, value_hint = ValueHint::Other)]
    pub slots: u32,
}

#[derive(Debug, Args)]
pub struct ScheduleNextArgs {
    #[arg(value_parser = parse_name)]
    pub name: LeaseName,

    /// How many slots to print.
    #[arg(short = 'n', long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000), value_hint = ValueHint::Other)]
    pub count: u32,
}

#[derive(Debug, Args)]
pub struct CronArgs {
    /// Fire only these schedules (default: every schedule in the store).
    #[arg(value_parser = parse_name, value_name = "SCHEDULE")]
    pub only: Vec<LeaseName>,

    /// How often to read the schedules again (added, paused, removed).
    #[arg(long, default_value = "2s", value_parser = within(limits::POLL_INTERVAL), value_hint = ValueHint::Other)]
    pub refresh: Duration,
    /// Serve this daemon's own Prometheus metrics at `http://ADDR/metrics`
    /// (loopback only: 127.0.0.1:9464, localhost:0 for any free port).
    #[arg(long, value_name = "ADDR", value_hint = ValueHint::Other)]
    pub metrics_listen: Option<String>,
}
