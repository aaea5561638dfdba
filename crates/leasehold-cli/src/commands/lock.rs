//! `leasehold lock PATH -- CMD`: one instance per machine with flock(2).
//!
//! By default the command inherits the locked descriptor, as with
//! flock(1): leasehold execs the command in its own place, so the holder's
//! pid the kernel lists is the command's, and the lock lasts until the
//! command and every child that kept the descriptor have exited. The file
//! is never changed unless leasehold created it (`leasehold::lock`).
//! With `--no-inherit` the descriptor stays close-on-exec: leasehold runs
//! the command as a child, forwards SIGTERM and SIGHUP (and SIGINT unless a
//! terminal already sent it to the whole foreground group), and the lock
//! ends when leasehold exits.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use leasehold::json;
use leasehold::lock::{self, LockOptions, TryLock};
use leasehold::supervise::child;

use crate::cli::LockArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::run::CliError;

/// The command could not be started (127 not found, 126 not runnable).
/// With `--json` this follows the document that said the lock was taken.
fn cannot_run(ctx: &Ctx, args: &LockArgs, e: &std::io::Error) -> u8 {
    let message = format!("cannot run {}: {e}", child::display(&args.command));
    let details = json::LockNotRun {
        path: &args.path,
        locked: false,
    };
    crate::commands::fail(ctx, details, &message, child::spawn_error_code(e))
}

pub fn run(ctx: &Ctx, args: &LockArgs) -> anyhow::Result<u8> {
    let options = LockOptions {
        shared: args.shared,
        allow_network_fs: ctx.global.allow_network_fs,
        dir: args.dir,
    };
    // A failure's exit code and a remedy's words come from its kind
    // (`run::exit_code_of`).
    let outcome = match args.wait.wait {
        None => lock::try_lock(&args.path, options)?,
        Some(wait) => lock::lock(&args.path, options, wait.timeout())?,
    };
    let held = match outcome {
        TryLock::Locked(held) => held,
        TryLock::Held { path, holders } => {
            let details = json::LockHeld {
                path: &path,
                held: true,
                pid: holders.exclusive_pid(),
                pids: holders.pids(),
            };
            let locked = lock::LockedBy {
                path: &path,
                holders: &holders,
                waited: args.wait.wait.is_some(),
            };
            let err = CliError::new(ExitCode::Held, locked.with_remedy(&leasehold::spelling::Flags));
            return Ok(crate::commands::refuse(ctx, details, &err));
        }
    };
    // Printed before the command runs: with the descriptor inherited, it
    // replaces this process.
    if ctx.global.json {
        crate::output::print_json(&json::Locked {
            path: held.path(),
            locked: true,
            shared: args.shared,
            pid: std::process::id(),
        });
    }
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    if !args.no_inherit {
        rustix::io::fcntl_setfd(held.file(), rustix::io::FdFlags::empty())?;
        command.env("LEASEHOLD_LOCK_FD", held.file().as_raw_fd().to_string());
        let e = command.exec();
        return Ok(cannot_run(ctx, args, &e));
    }
    let mut proc = match command.spawn() {
        Ok(p) => p,
        Err(e) => return Ok(cannot_run(ctx, args, &e)),
    };
    let pid = rustix::process::Pid::from_raw(proc.id() as i32);
    let terminal = child::terminal_foreground();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    thread::spawn(move || {
        for sig in signals.forever() {
            // A terminal's ^C already reached the child (same foreground
            // group); forwarding it would deliver it twice.
            if sig == SIGINT && terminal {
                continue;
            }
            if let (Some(pid), Some(sig)) = (pid, rustix::process::Signal::from_named_raw(sig)) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    let status = proc.wait()?;
    drop(held);
    Ok(child::exit_code(status))
}
