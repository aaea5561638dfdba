//! `leasehold work QUEUE -- CMD`: claim tasks and run CMD for each.
//!
//! # Model
//!
//! `--concurrency N` worker threads, each with its own store connection,
//! loop: claim → supervise CMD (the `run` supervisor: guard process, own
//! process group, payload on stdin, `LEASEHOLD_TASK_*` in the environment)
//! while a keeper heartbeats the claim → report.
//!
//! | the command… | the task |
//! |---|---|
//! | exits 0 | `done`, with its stdout as the result (JSON if it parses, else a string; cut at `--result-limit`) |
//! | exits non-zero, cannot start, or stalls | `fail`, with the exit code and the tail of its stderr; retried with backoff until its attempts are used up |
//! | loses its claim (renewal refused, or the store down until the holder-side deadline) | nothing is reported: the command is stopped (SIGTERM, SIGKILL after `--grace`) before the claim can pass on, and the task comes back by expiry |
//! | is running when `work` gets SIGTERM/SIGINT | may finish within `--shutdown-timeout`; then it is stopped and the claim handed back without charging an attempt |
//!
//! Claiming stops at the first SIGTERM/SIGINT, at `--max-tasks`, with
//! `--until-empty` when a worker finds nothing claimable now, or with
//! `--drain` when the queue has nothing pending (retries waiting for their
//! backoff included) and nothing running.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::{
    BackendError, BootClock, Claim, Error as LibError, Keeper, LeaseName, Renewal, Renewer, Retry, Store, TaskFail,
    TaskLost, TaskRef, TaskUpdate, Token, WaitTopic, format_duration, host,
};

use crate::cli::WorkArgs;
use crate::commands::Ctx;
use crate::commands::supervisor::{self, Event, Finished, Output, Spec, Stop, Supervised};
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

/// The tail of a failed command's stderr kept as the task's error.
const STDERR_TAIL: usize = 2048;

/// Renews a task claim for a [`Keeper`] (which thinks in lease names: the
/// task id stands in for the name).
#[derive(Debug)]
struct ClaimRenewer {
    store: Arc<Store>,
    queue: LeaseName,
}

impl Renewer for ClaimRenewer {
    fn renew(&self, id: &LeaseName, token: Token, _owner: Option<&str>, ttl: Duration) -> leasehold::Result<Renewal> {
        let task = TaskRef {
            queue: self.queue.clone(),
            id: id.clone(),
            token,
        };
        Ok(match self.store.task_heartbeat(&task, ttl)? {
            TaskUpdate::Applied => Renewal::Renewed,
            TaskUpdate::Lost(_) => Renewal::Lost(leasehold::LostReason::Gone),
        })
    }
}

/// What happened to one task, for counting and reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    Failed,
    Dead,
    Lost,
    HandedBack,
}

#[derive(Debug, Default)]
struct Counters {
    done: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
    lost: AtomicU64,
    handed_back: AtomicU64,
    claimed: AtomicU64,
}

impl Counters {
    fn count(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Done => &self.done,
            Outcome::Failed => &self.failed,
            Outcome::Dead => &self.dead,
            Outcome::Lost => &self.lost,
            Outcome::HandedBack => &self.handed_back,
        };
        c.fetch_add(1, Ordering::SeqCst);
    }

    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
}

/// Shared by the workers.
struct Shared {
    args: WorkArgs,
    /// Set at the first SIGTERM/SIGINT (or when done): stop claiming.
    stopping: AtomicBool,
    counters: Counters,
    /// Senders of the commands running now, to stop them at shutdown.
    running: Mutex<Vec<(u64, mpsc::Sender<Event>)>>,
    next_run: AtomicU64,
    progress: Option<indicatif::ProgressBar>,
    timing: supervisor::Timing,
}

impl Shared {
    /// One line per task when not on a terminal; the bar otherwise.
    fn report(&self, claim: &Claim, outcome: Outcome, took: Duration, detail: &str) {
        self.counters.count(outcome);
        let label = match outcome {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Dead => "dead",
            Outcome::Lost => "lost",
            Outcome::HandedBack => "handed back",
        };
        let line = format!(
            "{label} {} (attempt {}/{}, token {}) in {}{}{detail}",
            claim.id,
            claim.attempt,
            claim.max_attempts,
            claim.token,
            format_duration(took),
            if detail.is_empty() { "" } else { ": " }
        );
        match &self.progress {
            Some(bar) => {
                if outcome != Outcome::Done {
                    bar.println(line);
                }
                bar.inc(1);
                let c = &self.counters;
                bar.set_message(format!(
                    "done {} · failed {} · dead {} · lost {} · running {}",
                    Counters::get(&c.done),
                    Counters::get(&c.failed),
                    Counters::get(&c.dead),
                    Counters::get(&c.lost),
                    self.running.lock().map_or(0, |r| r.len())
                ));
            }
            None if !self.args.command.is_empty() => eprintln!("leasehold: {line}"),
            None => {}
        }
    }

    fn take_slot(&self) -> bool {
        match self.args.max_tasks {
            None => true,
            Some(max) => self.counters.claimed.fetch_add(1, Ordering::SeqCst) < max,
        }
    }
}

pub fn run(ctx: &Ctx, args: &WorkArgs) -> anyhow::Result<u8> {
    let timing = supervisor::timing(args.ttl, args.heartbeat, args.grace, None)
        .map_err(|message| CliError::new(ExitCode::Usage, message))?;
    // Open once up front so a bad store fails before any thread starts.
    let first = ctx.open_store()?;
    let total = first
        .task_stats(Some(&args.queue))?
        .first()
        .map(|s| s.pending + s.running);
    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = match total {
            Some(n) if args.until_empty || args.drain => indicatif::ProgressBar::new(n),
            _ => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {pos}/{len} tasks [{elapsed}] {per_sec} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let shared = Arc::new(Shared {
        args: args.clone(),
        stopping: AtomicBool::new(false),
        counters: Counters::default(),
        running: Mutex::new(Vec::new()),
        next_run: AtomicU64::new(0),
        progress,
        timing,
    });
    watch_shutdown(&shared)?;

    let mut stores = vec![first];
    for _ in 1..args.concurrency {
        stores.push(ctx.open_store()?);
    }
    let workers: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let shared = shared.clone();
            thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || worker(&shared, &Arc::new(store)))
                .expect("spawn a worker thread")
        })
        .collect();
    let mut error = None;
    for w in workers {
        match w.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => error = error.or(Some(e)),
            Err(_) => error = error.or(Some(anyhow::anyhow!("a worker thread panicked"))),
        }
    }
    if let Some(bar) = &shared.progress {
        bar.finish_and_clear();
    }
    let c = &shared.counters;
    let summary = serde_json::json!({
        "queue": args.queue,
        "done": Counters::get(&c.done),
        "failed": Counters::get(&c.failed),
        "dead": Counters::get(&c.dead),
        "lost": Counters::get(&c.lost),
        "handed_back": Counters::get(&c.handed_back),
    });
    if ctx.global.json {
        output::print_json(&summary);
    } else {
        eprintln!(
            "leasehold: {}: {} done, {} failed (will retry), {} dead, {} lost, {} handed back",
            args.queue, summary["done"], summary["failed"], summary["dead"], summary["lost"], summary["handed_back"]
        );
    }
    match error {
        Some(e) => Err(e),
        None => Ok(ExitCode::Success.code()),
    }
}

/// First SIGTERM/SIGINT/SIGHUP: stop claiming, give running tasks
/// `--grace`, then stop them (their claims are handed back).
fn watch_shutdown(shared: &Arc<Shared>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let shared = shared.clone();
    thread::spawn(move || {
        if signals.forever().next().is_none() {
            return;
        }
        shared.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + shared.args.shutdown_timeout;
        while Instant::now() < deadline {
            if shared.running.lock().is_ok_and(|r| r.is_empty()) {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        if let Ok(running) = shared.running.lock() {
            for (_, tx) in running.iter() {
                let _ = tx.send(Event::Stop(Stop::Shutdown));
            }
        }
    });
    Ok(())
}

fn is_unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<LibError>(),
            Some(LibError::Store(BackendError::Unavailable { .. }))
        ) || matches!(c.downcast_ref::<BackendError>(), Some(BackendError::Unavailable { .. }))
    })
}

fn worker(shared: &Arc<Shared>, store: &Arc<Store>) -> anyhow::Result<()> {
    let args = &shared.args;
    let mut idle = Duration::from_millis(100);
    let topic = WaitTopic::queue(&args.queue);
    while !shared.stopping.load(Ordering::SeqCst) {
        if !shared.take_slot() {
            break;
        }
        let sent = host::boot_clock();
        let claim = match store.task_claim(&args.queue, args.ttl, args.owner.as_deref()) {
            Ok(claim) => claim,
            Err(e) => {
                let e = anyhow::Error::from(e);
                if !is_unavailable(&e) {
                    return Err(e.context(format!("cannot claim from queue {}", args.queue)));
                }
                // The store may come back: say so, and try again later.
                eprintln!("leasehold: {e:#}; retrying in {}", format_duration(idle));
                shared.counters.claimed.fetch_sub(1, Ordering::SeqCst);
                thread::sleep(idle);
                idle = (idle * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        let Some(claim) = claim else {
            if args.max_tasks.is_some() {
                shared.counters.claimed.fetch_sub(1, Ordering::SeqCst);
            }
            if args.until_empty || (args.drain && drained(store, &args.queue)?) {
                break;
            }
            // Idle: wake on the store's announcement that the queue got a
            // claimable task (PostgreSQL's NOTIFY), or poll after `idle`.
            if store.backend().wait_for_change(&topic, idle).is_err() {
                thread::sleep(idle);
            }
            idle = (idle * 2).min(Duration::from_secs(2));
            continue;
        };
        idle = Duration::from_millis(100);
        let started = Instant::now();
        let (outcome, detail) = run_task(shared, store, &claim, sent)?;
        shared.report(&claim, outcome, started.elapsed(), &detail);
    }
    Ok(())
}

/// Whether the queue has nothing left to work on: no pending task (a
/// retry waiting for its backoff is pending) and none running.
fn drained(store: &Store, queue: &LeaseName) -> anyhow::Result<bool> {
    let stats = store.task_stats(Some(queue))?;
    Ok(stats.first().is_none_or(|s| s.pending + s.running == 0))
}

fn run_task(
    shared: &Arc<Shared>,
    store: &Arc<Store>,
    claim: &Claim,
    sent: Duration,
) -> anyhow::Result<(Outcome, String)> {
    let args = &shared.args;
    let mut payload = serde_json::to_vec(&claim.payload).expect("a JSON value always serializes");
    payload.push(b'\n');
    let mut supervised = Supervised::spawn(Spec {
        command: args.command.clone(),
        grace: shared.timing.grace,
        stdin: Some(payload),
        output: Output::Collect {
            stdout_limit: args.result_limit,
            stderr_tail: STDERR_TAIL,
        },
        stall: None,
    })?;
    let renewer = Arc::new(ClaimRenewer {
        store: store.clone(),
        queue: claim.queue.clone(),
    });
    let keeper = Keeper::start_with_clock(
        renewer,
        &claim.id,
        claim.token,
        sent,
        shared.timing.keeper.clone(),
        Arc::new(BootClock),
    );
    supervised.follow(&keeper);
    let run_id = shared.next_run.fetch_add(1, Ordering::SeqCst);
    shared
        .running
        .lock()
        .map_err(|_| anyhow::anyhow!("worker state poisoned"))?
        .push((run_id, supervised.sender()));
    let started = supervised.start(&serde_json::json!({
        "LEASEHOLD_QUEUE": claim.queue.to_string(),
        "LEASEHOLD_TASK_ID": claim.id.to_string(),
        "LEASEHOLD_TASK_TOKEN": claim.token.to_string(),
        "LEASEHOLD_TASK_ATTEMPT": claim.attempt.to_string(),
        "LEASEHOLD_STORE": store.url().to_string(),
    }));
    let finished = match started {
        Ok(()) => supervised.wait(),
        Err(e) => {
            supervised.abort();
            Finished {
                spawn_error: Some((126, format!("{e:#}"))),
                ..Finished::default()
            }
        }
    };
    if let Ok(mut running) = shared.running.lock() {
        running.retain(|(id, _)| *id != run_id);
    }
    let loss = keeper.stop();
    let task = claim.task_ref();
    if let Some(stop) = &finished.stopped {
        return Ok(match stop {
            Stop::Lost(loss) => (
                Outcome::Lost,
                format!("the claim was lost ({loss}); the command was stopped"),
            ),
            Stop::Shutdown => match store.task_release(&task)? {
                TaskUpdate::Applied => (Outcome::HandedBack, "work is shutting down".into()),
                TaskUpdate::Lost(_) => (Outcome::Lost, "the claim was lost while shutting down".into()),
            },
            Stop::Stalled(limit) => fail(store, &task, &format!("stalled for {}", format_duration(*limit)))?,
        });
    }
    if loss.is_some() {
        // Lost just as the command finished: its report would be refused.
        return Ok((Outcome::Lost, "the claim was lost as the command finished".into()));
    }
    match (finished.code, &finished.spawn_error) {
        (_, Some((code, message))) => fail(store, &task, &format!("exit {code}: {message}")),
        (Some(0), None) => complete(store, &task, &finished, shared.args.result_limit),
        (Some(code), None) => {
            let tail = String::from_utf8_lossy(&finished.stderr_tail);
            let tail = tail.trim();
            let error = if tail.is_empty() {
                format!("exit {code}")
            } else {
                format!("exit {code}: {tail}")
            };
            fail(store, &task, &error)
        }
        (None, None) => fail(store, &task, "the guard process died; the command was killed"),
    }
}

fn complete(store: &Store, task: &TaskRef, finished: &Finished, limit: usize) -> anyhow::Result<(Outcome, String)> {
    let stdout = &finished.stdout;
    let result = if stdout.iter().all(u8::is_ascii_whitespace) {
        None
    } else if finished.stdout_overflow {
        Some(serde_json::Value::String(String::from_utf8_lossy(stdout).into_owned()))
    } else {
        Some(
            serde_json::from_slice(stdout)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(stdout).into_owned())),
        )
    };
    let note = if finished.stdout_overflow {
        format!("stdout was longer than --result-limit {limit} bytes; the result keeps the first {limit} as a string")
    } else {
        String::new()
    };
    Ok(
        match store
            .task_complete(task, result.as_ref())
            .context("cannot report the task done")?
        {
            TaskUpdate::Applied => (Outcome::Done, note),
            TaskUpdate::Lost(lost) => (Outcome::Lost, lost_detail(lost)),
        },
    )
}

fn fail(store: &Store, task: &TaskRef, error: &str) -> anyhow::Result<(Outcome, String)> {
    Ok(
        match store
            .task_fail(task, error, Retry::Backoff)
            .context("cannot report the task failed")?
        {
            TaskFail::Retrying { available_at } => (
                Outcome::Failed,
                format!("{error} (retry at {})", output::rfc3339(available_at)),
            ),
            TaskFail::Dead => (Outcome::Dead, format!("{error} (no attempts left)")),
            TaskFail::Lost(lost) => (Outcome::Lost, lost_detail(lost)),
        },
    )
}

fn lost_detail(lost: TaskLost) -> String {
    match lost {
        TaskLost::NotFound => "the task was deleted while it ran; its report was dropped".into(),
        TaskLost::Stale => "the claim expired before the report; the report was refused".into(),
    }
}
