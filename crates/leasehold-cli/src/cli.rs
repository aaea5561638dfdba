//! Command-line arguments. The `///` comments are the help text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueHint};
use leasehold::limits::{self, Limit};
use leasehold::{LeaseName, Token};

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

pub fn parse_name(s: &str) -> Result<LeaseName, String> {
    LeaseName::new(s).map_err(|e| e.to_string())
}

/// The parser of a duration flag: humane text (90s, 5m, 1h30m; a bare
/// number is seconds) within `limit` — the library's parser, which the
/// fuzz suite (fault case 21) runs over every limit.
fn within(limit: Limit) -> impl Fn(&str) -> Result<Duration, leasehold::ParseError> + Clone + Send + Sync + 'static {
    move |s| leasehold::parse_duration_within(s, limit)
}

pub fn parse_token(s: &str) -> Result<Token, String> {
    s.parse()
}

/// A token to fence a state file with: a token a store issued, so 1 or more.
fn parse_fence_token(s: &str) -> Result<Token, String> {
    match s.parse()? {
        Token(0) => Err(format!(
            "{} is not a fencing token: stores issue tokens from 1 up; pass the token `acquire` printed \
             (or $LEASEHOLD_TOKEN under `run`)",
            leasehold::quoted(s)
        )),
        token => Ok(token),
    }
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.starts_with('+') => Ok(mode),
        _ => Err(format!(
            "{} is not a file mode; write octal permission bits such as 644 or 0600",
            leasehold::quoted(s)
        )),
    }
}

fn parse_limit(s: &str) -> Result<u32, String> {
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

fn parse_wait(s: &str) -> Result<Wait, String> {
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

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The new file to write (its directory must exist).
    pub dest: PathBuf,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// After restoring the store from an older copy: make every name's
    /// next token exceed every token the store may have issued by more
    /// than N — at least the most grants any one name could have had since
    /// the copy (on etcd: every write to the cluster since). Too large
    /// costs nothing. See README.md, "Restoring a store".
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=leasehold::TokensBumpParams::MAX), value_hint = ValueHint::Other)]
    pub bump_tokens: Option<u64>,
}

// What `write` and `update` share.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// The state file. A symlink here is refused (write to the resolved path).
    pub file: PathBuf,

    /// Permission bits in octal (644, 0600). Default: the existing file's;
    /// 0644 less the umask for a new file.
    #[arg(long, value_parser = parse_mode, value_name = "OCTAL", value_hint = ValueHint::Other)]
    pub mode: Option<u32>,

    /// Refuse (exit 13, nothing changed) if a higher token was already
    /// written to FILE; otherwise record TOKEN durably first, then write.
    #[arg(long, value_parser = parse_fence_token, value_name = "TOKEN", value_hint = ValueHint::Other)]
    pub fence_token: Option<Token>,

    /// The lease TOKEN is of, recorded with it: a token of another lease is
    /// then refused (exit 13), naming both. Under `leasehold run`,
    /// `LEASEHOLD_NAME` is used when TOKEN is `LEASEHOLD_TOKEN`.
    #[arg(long, requires = "fence_token", value_parser = parse_name, value_name = "NAME", value_hint = ValueHint::Other)]
    pub fence_lease: Option<LeaseName>,

    /// FILE now belongs to the lease of --fence-lease: a record of another
    /// lease is replaced by TOKEN, whatever the tokens.
    #[arg(long, requires = "fence_lease")]
    pub fence_new_lease: bool,

    /// Replace FILE even when it has other hard links (they keep the old
    /// content). Without it such a FILE is refused (exit 65), unchanged.
    #[arg(long)]
    pub break_hard_links: bool,

    /// When another writer or update holds FILE.lock, wait at most DUR
    /// (then exit 11, FILE unchanged). Default: as long as it takes, saying
    /// on stderr who holds it.
    #[arg(long, value_name = "DUR", value_parser = parse_wait, value_hint = ValueHint::Other)]
    pub wait: Option<Wait>,

    /// The fence record (default: FILE.fence). Files sharing one record are
    /// fenced together.
    #[arg(long, requires = "fence_token", value_name = "PATH")]
    pub fence_file: Option<PathBuf>,

    /// The grant holding TOKEN (16 hex digits), recorded with it: another
    /// grant with the same token (a store restored from a backup) is then
    /// refused. Under `leasehold run`, `LEASEHOLD_GRANT` is used when TOKEN
    /// is `LEASEHOLD_TOKEN`.
    #[arg(long, requires = "fence_token", value_parser = parse_grant, value_name = "GRANT", value_hint = ValueHint::Other)]
    pub fence_grant: Option<leasehold::GrantId>,
}

fn parse_grant(s: &str) -> Result<leasehold::GrantId, String> {
    s.parse()
}

// `lock`, `write` and `update` open no store: `--store` (global, so
// accepted, e.g. from LEASEHOLD_STORE) is left out of their help.
#[derive(Debug, Args)]
#[command(mut_arg("store", |a| a.hide(true)))]
pub struct WriteArgs {
    #[command(flatten)]
    pub file: FileArgs,
}

#[derive(Debug, Args)]
#[command(mut_arg("store", |a| a.hide(true)))]
pub struct UpdateArgs {
    #[command(flatten)]
    pub file: FileArgs,

    /// What the filter reads when FILE does not exist yet. Default: `null`
    /// with --json (so `jq '.runs += 1'` starts from nothing), else empty.
    #[arg(long, value_name = "CONTENT", value_hint = ValueHint::Other)]
    pub init: Option<String>,

    /// The filter and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "FILTER")]
    pub filter: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (it must exist), e.g.
    /// ~/.local/share/man/man1.
    #[arg(value_hint = ValueHint::DirPath)]
    pub dir: PathBuf,
}

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

fn parse_max_attempts(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{} is not a number of attempts; write a whole number of at least 1",
            leasehold::quoted(s)
        )),
    }
}

/// A start time (RFC 3339) at most [`limits::DELAY`] from now.
fn parse_start(s: &str) -> Result<std::time::SystemTime, leasehold::ParseError> {
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
struct IfHeldParser;

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

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen: an address or a host name, and a port (127.0.0.1:7878,
    /// `[::1]:7878`, localhost:7878). Anything but loopback needs --token-file.
    #[arg(long, default_value = leasehold_serve::DEFAULT_LISTEN, value_name = "HOST:PORT", value_hint = ValueHint::Other)]
    pub listen: String,

    /// A file whose first line is the token (at least 16 characters):
    /// needed to read on a non-loopback address, and for every action.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Offer retrying dead tasks and purging done ones (always with the token).
    #[arg(long)]
    pub allow_actions: bool,

    /// How often the store is read (one reading serves every viewer).
    #[arg(long, default_value = "1s", value_parser = within(limits::HEARTBEAT), value_name = "DUR", value_hint = ValueHint::Other)]
    pub refresh: Duration,

    /// How long history entries followed by serve are kept in memory, so
    /// timelines reach back further than the store keeps (it prunes each
    /// name to its newest 1000 entries).
    #[arg(long, default_value = "7d", value_parser = within(limits::AGE), value_name = "DUR", value_hint = ValueHint::Other)]
    pub retention: Duration,

    /// Answer requests that reach the page by this name too (repeatable).
    /// Without it only localhost, IP addresses and the --listen host are
    /// answered: a page elsewhere cannot read this one through DNS
    /// rebinding.
    #[arg(long = "allow-host", value_name = "NAME", value_hint = ValueHint::Other)]
    pub allow_hosts: Vec<String>,
}
