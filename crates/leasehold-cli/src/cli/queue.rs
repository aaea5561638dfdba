//! The queue commands' arguments: task add/claim/… and work, the worker
//! that runs a command per task.

use std::time::Duration;

use clap::{Args, Subcommand, ValueHint};
use leasehold::limits;
use leasehold::{LeaseName, Token};

use super::values::{parse_name, parse_token, within};

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum TaskCommand {
    /// Add a task (idempotent by --id), or many from JSON lines with --batch.
    Add(TaskAddArgs),
    /// Claim the next task: prints it as JSON (exit 10 when nothing is available).
    Claim(TaskClaimArgs),
    /// Extend your claim (exit 12 if it is lost).
    Heartbeat(TaskHeartbeatArgs),
    /// Mark your claimed task done (exit 12 if your claim is stale: the result is refused).
    Done(TaskDoneArgs),
    /// Report a failed attempt: retried with backoff, or dead (exit 12 if stale).
    Fail(TaskFailArgs),
    /// Revive a dead task.
    Retry(TaskIdArgs),
    /// List tasks, claimable ones first.
    List(TaskListArgs),
    /// Show one task.
    Show(TaskIdArgs),
    /// Count tasks per state.
    Stats(TaskStatsArgs),
    /// Delete finished tasks older than a duration.
    Purge(TaskPurgeArgs),
}

pub fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not valid JSON ({e})"))
}

pub fn parse_state(s: &str) -> Result<leasehold::TaskState, String> {
    leasehold::TaskState::parse(s).ok_or_else(|| {
        format!(
            "{} is not a state; use pending, running, done or dead",
            leasehold::quoted(s)
        )
    })
}

pub(super) fn parse_max_attempts(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{} is not a number of attempts; write a whole number of at least 1",
            leasehold::quoted(s)
        )),
    }
}

/// A start time (RFC 3339) at most [`limits::DELAY`] from now.
pub(super) fn parse_start(s: &str) -> Result<std::time::SystemTime, leasehold::ParseError> {
    leasehold::parse_time_within(s, limits::DELAY, std::time::SystemTime::now())
}

#[derive(Debug, Args)]
pub struct TaskAddArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    /// The task's id (default: a generated one). The same id again is a no-op;
    /// with another payload it is an error.
    #[arg(long, value_parser = parse_name, conflicts_with = "batch", value_hint = ValueHint::Other)]
    pub id: Option<LeaseName>,

    /// The task's JSON payload (default: null).
    #[arg(long, value_parser = parse_json, conflicts_with = "batch", value_hint = ValueHint::Other)]
    pub payload: Option<serde_json::Value>,

    /// Higher is claimed first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_hint = ValueHint::Other)]
    pub priority: i64,

    /// Not claimable before this much time has passed (on the store's clock).
    #[arg(long, value_parser = within(limits::DELAY), conflicts_with = "at", value_hint = ValueHint::Other)]
    pub delay: Option<Duration>,

    /// Not claimable before this time (RFC 3339).
    #[arg(long, value_parser = parse_start, value_hint = ValueHint::Other)]
    pub at: Option<std::time::SystemTime>,

    /// Claims before the task is dead.
    #[arg(long, default_value_t = leasehold::DEFAULT_MAX_ATTEMPTS, value_parser = parse_max_attempts, value_hint = ValueHint::Other)]
    pub max_attempts: u32,

    /// Read tasks as JSON lines from stdin: {"id": .., "payload": .., "priority": ..}
    /// (id and priority optional). All or nothing: a bad line adds nothing.
    #[arg(long)]
    pub batch: bool,
}

#[derive(Debug, Args)]
pub struct TaskClaimArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    /// How long the claim lives without a heartbeat.
    #[arg(long, default_value = "60s", value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Duration,

    /// Owner label of the claim (default host:pid).
    #[arg(long, value_hint = ValueHint::Other)]
    pub owner: Option<String>,
}

#[derive(Debug, Args)]
pub struct TaskRefArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    #[arg(value_parser = parse_name)]
    pub id: LeaseName,

    /// The claim's token, from `task claim`.
    #[arg(long, value_parser = parse_token, value_hint = ValueHint::Other)]
    pub token: Token,
}

#[derive(Debug, Args)]
pub struct TaskHeartbeatArgs {
    #[command(flatten)]
    pub task: TaskRefArgs,

    /// New TTL from now (default: the claim's own TTL).
    #[arg(long, value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct TaskDoneArgs {
    #[command(flatten)]
    pub task: TaskRefArgs,

    /// The task's result, as JSON.
    #[arg(long, value_parser = parse_json, value_hint = ValueHint::Other)]
    pub result: Option<serde_json::Value>,
}

#[derive(Debug, Args)]
pub struct TaskFailArgs {
    #[command(flatten)]
    pub task: TaskRefArgs,

    /// What went wrong (kept as the task's last error).
    #[arg(long, default_value = "failed", value_hint = ValueHint::Other)]
    pub error: String,

    /// Retry after this delay instead of the default exponential backoff.
    #[arg(long, value_parser = within(limits::DELAY), conflicts_with = "no_retry", value_hint = ValueHint::Other)]
    pub retry_in: Option<Duration>,

    /// Do not retry: the task is dead.
    #[arg(long)]
    pub no_retry: bool,
}

#[derive(Debug, Args)]
pub struct TaskIdArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    #[arg(value_parser = parse_name)]
    pub id: LeaseName,
}

#[derive(Debug, Args)]
pub struct TaskListArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    /// Only tasks in this state (pending, running, done, dead).
    #[arg(long, value_parser = parse_state, value_hint = ValueHint::Other)]
    pub state: Option<leasehold::TaskState>,

    /// At most this many (at least 1); a cut list says that more exist.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..), value_hint = ValueHint::Other)]
    pub limit: u32,
}

#[derive(Debug, Args)]
pub struct TaskStatsArgs {
    /// One queue (default: all).
    #[arg(value_parser = parse_name)]
    pub queue: Option<LeaseName>,
}

#[derive(Debug, Args)]
pub struct TaskPurgeArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    /// Which finished tasks: done or dead.
    #[arg(long, value_parser = parse_state, value_hint = ValueHint::Other)]
    pub state: leasehold::TaskState,

    /// Only those last updated longer ago than this.
    #[arg(long, value_parser = within(limits::AGE), value_hint = ValueHint::Other)]
    pub older_than: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct WorkArgs {
    #[arg(value_parser = parse_name)]
    pub queue: LeaseName,

    /// How long each claim lives without a heartbeat.
    #[arg(long, default_value = "60s", value_parser = within(limits::TTL), value_hint = ValueHint::Other)]
    pub ttl: Duration,

    /// How often to renew a claim. Default: TTL/3, shorter where the TTL is
    /// short (20s for --ttl 60s, 275ms for --ttl 2s, 75ms for --ttl 1s).
    #[arg(long, value_parser = within(limits::HEARTBEAT), value_hint = ValueHint::Other)]
    pub heartbeat: Option<Duration>,

    /// After SIGTERM to a command, how long before SIGKILL. Default: TTL/5,
    /// at most 10s (10s for --ttl 60s, 2s for --ttl 10s).
    #[arg(long, value_parser = within(limits::GRACE), value_hint = ValueHint::Other)]
    pub grace: Option<Duration>,

    /// After `work` gets SIGTERM/SIGINT, how long running tasks may finish
    /// before they are stopped (their claims handed back).
    #[arg(long, default_value = "10s", value_parser = within(limits::GRACE), value_name = "DUR", value_hint = ValueHint::Other)]
    pub shutdown_timeout: Duration,

    /// Serve this daemon's own Prometheus metrics at `http://ADDR/metrics`
    /// (loopback only: 127.0.0.1:9464, localhost:0 for any free port).
    #[arg(long, value_name = "ADDR", value_hint = ValueHint::Other)]
    pub metrics_listen: Option<String>,

    /// How many tasks to run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024), value_hint = ValueHint::Other)]
    pub concurrency: u32,

    /// Exit as soon as nothing is claimable now — even while a failed task
    /// waits for its retry, or another worker's task runs.
    #[arg(long, conflicts_with = "drain")]
    pub until_empty: bool,

    /// Exit once the queue has no pending task (delayed ones and retries
    /// waiting for their backoff included) and no running one: work
    /// through retries too. Dead tasks do not count.
    #[arg(long)]
    pub drain: bool,

    /// Exit after this many tasks.
    #[arg(long, value_hint = ValueHint::Other)]
    pub max_tasks: Option<u64>,

    /// Owner label of the claims (default host:pid).
    #[arg(long, value_hint = ValueHint::Other)]
    pub owner: Option<String>,

    /// Largest result kept from a command's stdout; more is cut (and said so).
    #[arg(long, default_value_t = 1 << 20, value_hint = ValueHint::Other)]
    pub result_limit: usize,

    /// The command to run for each task.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}
