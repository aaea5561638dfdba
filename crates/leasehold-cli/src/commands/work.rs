//! `leasehold work QUEUE -- CMD`: claim tasks and run CMD for each, through
//! `leasehold::worker` (the model, outcomes and failure handling are told
//! in `crates/leasehold/src/worker.rs`). Here: the arguments, the progress
//! bar (or one line per task when stderr is not a terminal), the summary
//! and the exit code. The first SIGTERM/SIGINT/SIGHUP shuts the worker
//! down: running tasks may finish within `--shutdown-timeout`, then are
//! stopped and their claims handed back.

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::time::Duration;

use leasehold::worker::{CommandJob, Counts, Job, Outcome, Until, WorkEvent, Worker, WorkerHandle, WorkerOptions};
use leasehold::{format_duration, json};

use crate::cli::WorkArgs;
use crate::commands::{Ctx, guard_program, timing};
use crate::exit_codes::ExitCode;
use crate::output;

fn bar_message(c: &Counts) -> String {
    format!(
        "done {} · failed {} · dead {} · lost {} · running {}",
        c.done, c.failed, c.dead, c.lost, c.running
    )
}

/// Run CMD for each task until the worker stops, then print the summary.
pub fn run(ctx: &Ctx, args: &WorkArgs) -> anyhow::Result<u8> {
    let timing = timing(args.ttl, args.heartbeat, args.grace)?;
    super::serve::daemon_metrics(args.metrics_listen.as_deref())?;
    // One store for every worker thread.
    let store = Arc::new(ctx.open_store()?);
    let total = store
        .task_stats(Some(&args.queue))?
        .first()
        .map(|s| s.pending + s.running);
    let progress = std::io::stderr().is_terminal().then(|| progress_bar(args, total));
    let job = Job::Command(CommandJob {
        command: args.command.clone(),
        guard: guard_program()?,
        result_limit: args.result_limit,
    });
    let worker = Worker::new(store, worker_options(args, timing), job);
    let handle = worker.handle();
    handle.shutdown_on_signals()?;
    let outcome = worker.run(|event| show(event, progress.as_ref(), &handle));
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    summary(ctx, &args.queue, handle.counts());
    match outcome {
        Ok(_) => Ok(ExitCode::Success.code()),
        Err(e) => {
            let error = anyhow::Error::from(e.error);
            Err(match e.context {
                Some(context) => error.context(context),
                None => error,
            })
        }
    }
}

/// A bar towards `total` when the worker stops at an empty queue, a
/// spinner otherwise.
fn progress_bar(args: &WorkArgs, total: Option<u64>) -> indicatif::ProgressBar {
    let bar = match total {
        Some(n) if args.until_empty || args.drain => indicatif::ProgressBar::new(n),
        _ => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} tasks [{elapsed}] {per_sec} eta {eta} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn worker_options(args: &WorkArgs, timing: leasehold::supervise::Timing) -> WorkerOptions {
    WorkerOptions {
        queue: args.queue.clone(),
        timing,
        owner: args.owner.clone(),
        concurrency: args.concurrency as usize,
        until: match (args.until_empty, args.drain) {
            (true, _) => Until::Empty,
            (false, true) => Until::Drained,
            (false, false) => Until::Stopped,
        },
        max_tasks: args.max_tasks,
        shutdown_timeout: args.shutdown_timeout,
    }
}

/// One event for a person: a finished task on the bar (and above it
/// unless done), or as a line when stderr is not a terminal.
fn show(event: &WorkEvent, progress: Option<&indicatif::ProgressBar>, handle: &WorkerHandle) {
    match event {
        WorkEvent::Finished { task, outcome, took } => {
            let detail = outcome.to_string();
            let line = format!(
                "{} {} (attempt {}/{}, token {}) in {}{}{detail}",
                outcome.kind(),
                task.id,
                task.attempt,
                task.max_attempts,
                task.token,
                format_duration(*took),
                if detail.is_empty() { "" } else { ": " }
            );
            match progress {
                Some(bar) => {
                    if !matches!(outcome, Outcome::Done { .. }) {
                        bar.println(line);
                    }
                    bar.inc(1);
                    bar.set_message(bar_message(&handle.counts()));
                }
                // With --log-format json the library's event says it.
                None if crate::logging::json() => {}
                // One write per line (eprintln! makes one per piece).
                None => {
                    let _ = std::io::stderr().write_all(format!("leasehold: {line}\n").as_bytes());
                }
            }
        }
        WorkEvent::StoreUnavailable { error, retry_in } => {
            if !crate::logging::json() {
                eprintln!("leasehold: {error}; retrying in {}", format_duration(*retry_in));
            }
        }
        WorkEvent::Claimed(_) | WorkEvent::Started(_) => {}
    }
}

/// What the worker did, once it stopped.
fn summary(ctx: &Ctx, queue: &leasehold::QueueName, c: Counts) {
    if ctx.global.json {
        output::print_json(&json::WorkSummary {
            queue,
            done: c.done,
            failed: c.failed,
            dead: c.dead,
            lost: c.lost,
            handed_back: c.handed_back,
        });
    } else {
        crate::logging::say(
            crate::logging::WORK_STOPPED,
            &format!(
                "{queue}: {} done, {} failed (will retry), {} dead, {} lost, {} handed back",
                c.done, c.failed, c.dead, c.lost, c.handed_back
            ),
        );
    }
}
