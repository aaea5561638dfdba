//! One module per command (`commands/<area>/<verb>.rs`); `dispatch` routes.

mod backup;
mod completions;
mod cron;
mod doctor;
mod files;
mod leader;
mod lease;
mod lock;
mod man;
mod migrate;
mod run;
mod schedule;
mod serve;
mod task;
mod work;

use std::time::Duration;

use anyhow::Context as _;
use leasehold::spelling::Flags;
use leasehold::supervise::{GuardProgram, Timing};
use leasehold::{Store, StoreOptions, StoreUrl, json};
use serde::Serialize;

use crate::cli::{Cli, Command, Global};
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// What every command may need: the global options and a lazily opened
/// store (commands that need no store never open one).
pub struct Ctx {
    pub global: Global,
}

impl Ctx {
    pub fn store_url(&self) -> anyhow::Result<StoreUrl> {
        Ok(match &self.global.store {
            Some(url) => StoreUrl::parse(url)?,
            None => StoreUrl::default_location()?,
        })
    }

    /// Open the store, creating it (a file store) if there is none: for
    /// commands that write.
    pub fn open_store(&self) -> anyhow::Result<Store> {
        self.open(false)
    }

    /// Open the store only if it exists: for commands that only read
    /// (`status`, `list`, `history`, `doctor`), where a mistyped path
    /// must be an error (69, naming the path) rather than a new empty
    /// store saying nobody holds anything.
    pub fn open_existing_store(&self) -> anyhow::Result<Store> {
        self.open(true)
    }

    fn open(&self, must_exist: bool) -> anyhow::Result<Store> {
        let url = self.store_url()?;
        let options = StoreOptions {
            allow_network_fs: self.global.allow_network_fs,
            must_exist,
            ..StoreOptions::default()
        };
        Store::open(&url, &options).with_context(|| format!("cannot open the store {}", url.redacted()))
    }
}

/// Run one command; `Ok` carries the exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let ctx = Ctx { global: cli.global };
    match cli.command {
        Command::Acquire(args) => lease::acquire::run(&ctx, &args),
        Command::Renew(args) => lease::renew::run(&ctx, &args),
        Command::Release(args) => lease::release::run(&ctx, &args),
        Command::Fence(args) => lease::fence::run(&ctx, &args),
        Command::Status(args) => lease::status::run(&ctx, &args),
        Command::List(args) => lease::list::run(&ctx, &args),
        Command::History(args) => lease::history::run(&ctx, &args),
        Command::Leader(args) => leader::run(&ctx, &args),
        Command::Write(args) => files::write::run(&ctx, &args),
        Command::Update(args) => files::update::run(&ctx, &args),
        Command::Run(args) => run::run(&ctx, &args),
        Command::Lock(args) => lock::run(&ctx, &args),
        Command::Doctor => Ok(doctor::run(&ctx)),
        Command::Migrate(args) => migrate::run(&ctx, &args),
        Command::Backup(args) => backup::run(&ctx, &args),
        Command::Completions(args) => Ok(completions::run(&ctx, &args)),
        Command::Man(args) => man::run(&ctx, &args),
        Command::Task(command) => task::dispatch(&ctx, command),
        Command::Serve(args) => serve::run(&ctx, &args),
        Command::Schedule(command) => schedule::dispatch(&ctx, command),
        Command::Cron(args) => cron::run(&ctx, &args),
        Command::Work(args) => work::run(&ctx, &args),
    }
}

/// A fence for `token`: with the grant given, or else the grant of the
/// `leasehold run` this runs under when the token is its
/// (`LEASEHOLD_TOKEN`/`LEASEHOLD_GRANT`), so a command under `run` names
/// its grant without passing it. A malformed `LEASEHOLD_GRANT` is a usage
/// error; `unchanged` says what was left alone.
pub fn fence_of(
    token: leasehold::Token,
    grant: Option<leasehold::GrantId>,
    unchanged: impl FnOnce() -> String,
) -> anyhow::Result<leasehold::files::Fence> {
    if let Some(grant) = grant {
        return Ok(leasehold::files::Fence {
            token,
            grant: Some(grant),
        });
    }
    leasehold::files::Fence::with_grant_from_env(token)
        .map_err(|e| CliError::new(ExitCode::Usage, format!("{e}; {}", unchanged())).into())
}

/// End a command with an expected refusal (held, stale, nothing to
/// claim): see [`fail`].
pub fn refuse(ctx: &Ctx, details: impl Serialize, err: &crate::run::CliError) -> u8 {
    fail(ctx, details, &err.message, err.code.code())
}

/// End a command that failed in a way it reports itself (a refusal, a
/// command that could not start): `message` on stderr, `code` as the exit
/// code, and with `--json` on stdout `details` in the shape every failure
/// has ([`json::Failure`], docs/JSON.md).
pub fn fail(ctx: &Ctx, details: impl Serialize, message: &str, code: u8) -> u8 {
    if ctx.global.json {
        crate::output::print_json(&json::Failure {
            // A refusal that is no failure (`run --if-held skip`, exit 0)
            // says why as a message, not as an error.
            words: if code == 0 {
                json::Words::Message(message)
            } else {
                json::Words::Error(message)
            },
            exit_code: code,
            details,
        });
    }
    eprintln!("leasehold: {message}");
    code
}

/// The guard of `run` and `work`: `leasehold-guard` beside this binary,
/// which starts in less time than this one (a twentieth of its size, and
/// its start-up is the guard's); else — missing, or another build (a
/// `leasehold` upgraded alone) — this binary itself (`leasehold __guard`,
/// routed before argument parsing in [`crate::run::run`]), so that
/// `leasehold` works alone. `$LEASEHOLD_GUARD` is not read: the command
/// always has a guard of its own build.
pub fn guard_program() -> anyhow::Result<GuardProgram> {
    let exe = std::env::current_exe().context("cannot find the leasehold binary to start the guard")?;
    let itself = GuardProgram::new(&exe);
    let beside = exe.with_file_name(leasehold::supervise::GUARD_NAME);
    Ok(if beside.is_file() {
        GuardProgram::new(beside).or_else(itself)
    } else {
        itself
    })
}

/// The timing of `run` and `work` from their flags (`--ttl`,
/// `--heartbeat`, `--grace`); a combination that cannot stop the command
/// in time is a usage error naming the flags.
pub fn timing(ttl: Duration, heartbeat: Option<Duration>, grace: Option<Duration>) -> anyhow::Result<Timing> {
    Timing::new(ttl, heartbeat, grace).map_err(|e| CliError::new(ExitCode::Usage, e.worded(&Flags)).into())
}
