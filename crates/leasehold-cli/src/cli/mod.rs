//! Command-line arguments. The `///` comments are the help text. The
//! top (`Cli`, the global options, the list of commands) is here; each
//! command group's arguments are in a module of its own.

mod admin;
mod files;
mod lease;
mod queue;
mod run;
mod schedule;
mod values;

pub use admin::*;
pub use files::*;
pub use lease::*;
pub use queue::*;
pub use run::*;
pub use schedule::*;
pub use values::*;

use clap::{Args, Parser, Subcommand, ValueHint};

const EXAMPLES: &str = "\
Examples:
  T=$(leasehold acquire nightly-report --ttl 2m)   # prints the token; exit 11 if held
  leasehold renew nightly-report --token \"$T\"       # exit 12 if lost
  leasehold fence nightly-report --token \"$T\" -- ./publish.sh
  leasehold release nightly-report --token \"$T\"
  leasehold list --live
  agent-state | leasehold write state.json --json      # atomic, durable, validated
  leasehold update state.json --json -- jq '.runs += 1'
  leasehold write out.json --fence-token \"$T\" < report.json   # exit 13 if stale
  leasehold run daily-publish --ttl 90s -- ./agent.sh     # exit 11 if already running
  leasehold run daily-publish --if-held skip -- ./agent.sh
  leasehold run daily-publish --wait 10m -- ./agent.sh     # wait up to 10m (--wait: forever)
  leasehold lock ~/.local/state/my-agent -- my-agent --serve

Exit codes: 0 ok, 1 failure, 2 usage, 10 nothing to claim, 11 held, 12 lost,
13 stale token, 14 no such task, 65 bad data, 69 store unavailable,
75 lease lost while running.";

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
    // The help lists this build's stores (`store_help`), so a store added
    // to the library is never missing here.
    #[arg(long, global = true, env = "LEASEHOLD_STORE", value_name = "URL", help = store_help(), value_hint = ValueHint::Url)]
    pub store: Option<String>,

    /// Use a SQLite store (or lock file) on a network filesystem anyway.
    #[arg(long, global = true)]
    pub allow_network_fs: bool,

    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Log events on stderr as text lines or as JSON, one object a line
    /// (levels: `LEASEHOLD_LOG`, warn by default, info with json).
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_LOG_FORMAT",
        value_enum,
        default_value_t,
        value_name = "FORMAT"
    )]
    pub log_format: crate::logging::LogFormat,
}

// `defer`: a subcommand's arguments are built only when it is the one
// used — every call used to build all of them (a third of `--version`'s
// instructions). The structs flattened into several subcommands carry no
// doc comment: a deferred subcommand would take it for its own about.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Take a lease; prints its fencing token (exit 11 if held).
    Acquire(AcquireArgs),
    /// Extend a lease you hold (exit 12 if it is lost).
    Renew(RenewArgs),
    /// Give a lease up at once (exit 12 if it was already lost).
    ///
    /// A grant bound to a process that may still run (`run`, a library
    /// holder, `--for-pid`) is ended only by that process: refused (exit
    /// 12) unless --force stops it first.
    Release(ReleaseArgs),
    /// Run CMD only if TOKEN is still the current grant of NAME (exit 13 if stale).
    Fence(FenceArgs),
    /// Show one lease, or every live lease.
    Status(StatusArgs),
    /// List leases: name, mode, token, owner, holder, alive?, expires in.
    List(ListArgs),
    /// Show what happened to a lease: grants, releases, expiries, takeovers, refusals.
    History(HistoryArgs),
    /// Show who leads NAME (a lease campaigned for; `run --wait` makes a command a candidate).
    ///
    /// Prints the leader once (exit 0, also when nobody leads). With
    /// --observe, prints each change of leader as it happens — the first
    /// line the current state — until SIGINT or SIGTERM (then exit 0).
    Leader(LeaderArgs),
    /// Replace FILE atomically and durably with standard input.
    ///
    /// Temp file beside FILE, fsync, rename, fsync of the directory; under
    /// the lock FILE.lock. With --json the data must parse as JSON (exit 65
    /// otherwise, FILE untouched) and the result is printed as JSON.
    Write(WriteArgs),
    /// Read-modify-write FILE under the lock FILE.lock with FILTER.
    ///
    /// FILTER (run directly, no shell) gets the old content on stdin (empty
    /// when FILE does not exist); its stdout replaces FILE only if it exits
    /// 0 (and parses, with --json). Otherwise FILE is untouched and leasehold
    /// exits with the filter's own code (128+N for signal N). With --json a
    /// corrupt existing FILE is refused (exit 65) and left as it is.
    Update(UpdateArgs),
    /// Run CMD under a lease: heartbeat, stop CMD before the lease can pass on (exit 75).
    Run(RunArgs),
    /// Run CMD holding a flock on PATH: one instance per machine (exit 11 if held).
    Lock(LockArgs),
    /// Check the store and this host: filesystem, fsync, boot id, process identity, schema.
    Doctor,
    /// Create or upgrade the store's schema now (every command does it on first use).
    ///
    /// Useful once per deployment, run by a role allowed to create tables,
    /// before workers that may only use them start. Concurrent runs are
    /// safe; a store written by a newer leasehold is refused (exit 65).
    /// After restoring a store from a backup, --bump-tokens N makes every
    /// token from now on exceed every token issued before by more than N.
    Migrate(MigrateArgs),
    /// Copy the SQLite store to DEST while it is in use: a consistent snapshot, marked as a backup.
    ///
    /// A plain `cp` of the store is not a backup: its latest commits may
    /// still be in its -wal. DEST must not exist (nothing is overwritten;
    /// a symbolic link there is refused) and its directory must; the copy
    /// is private (0600) and durable when this exits 0. PostgreSQL and etcd
    /// refuse (exit 2) and name their own tools. To put a copy back, see
    /// README.md, "Restoring a store".
    Backup(BackupArgs),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
    /// Write the manual pages (leasehold.1 and one per subcommand) into DIR.
    ///
    /// Generated from this command's own definition, as `scripts/dist`
    /// puts them in every archive and wheel. A page already there is
    /// replaced; a link in a page's place is refused.
    Man(ManArgs),
    /// A task queue whose claims are leases: add, claim, heartbeat, done, fail, retry, list, show, stats, purge.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Work a queue: claim tasks and run CMD for each (payload on stdin), done on exit 0, fail otherwise.
    Work(WorkArgs),
    /// Schedules kept in the store: add, list, show, next, pause, resume, remove (`leasehold cron` fires them).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Fire the store's schedules: start it on as many machines as you like; each slot fires once.
    ///
    /// Runs until SIGINT or SIGTERM (then stops the commands it runs and
    /// exits 0). Prints a line per slot (with --json one document per
    /// line). See docs/SCHEDULES.md.
    Cron(CronArgs),
    /// Serve a live status page: leases, timelines, queues, schedules; /metrics for Prometheus; /api JSON.
    ///
    /// Listens on 127.0.0.1:7878 by default, read-only. Another address needs
    /// --token-file (exit 2 without it); retry and purge need --allow-actions
    /// and the token. Every asset is served by the binary. See docs/SERVE.md.
    Serve(ServeArgs),
}

/// `--store`'s help: every URL scheme this build opens, from the
/// library's one list ([`leasehold::built_in_schemes`]).
fn store_help() -> String {
    let schemes: Vec<String> = leasehold::built_in_schemes()
        .iter()
        .map(|s| format!("`{s}://`"))
        .collect();
    format!(
        "Where lease state lives: a URL of one of this build's stores ({}; see README.md). \
         Default: `sqlite://$XDG_STATE_HOME/leasehold/leasehold.db`",
        schemes.join(", ")
    )
}
