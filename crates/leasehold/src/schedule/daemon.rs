//! The loop of `leasehold cron`: fire the store's schedules, each slot
//! once across every daemon on every machine.
//!
//! One thread watches the schedules: it reads them every `refresh`, sleeps
//! until the next slot is due (plus this daemon's jitter for it), and then
//! claims it ([`Schedules::claim`](super::Schedules::claim): one compare-and-swap write; the daemon
//! that loses the race reads again and finds nothing due). A claimed slot
//! fires on a thread of its own:
//! - **run**: the command runs as `leasehold run` runs one
//!   ([`supervise::run_with`]), under the lease named after the schedule,
//!   bound to this daemon — stopped before that lease can pass on, with
//!   `LEASEHOLD_TOKEN`, `LEASEHOLD_GRANT` and `LEASEHOLD_SLOT` (the slot's
//!   time, RFC 3339) in its environment. The lease is what keeps slots of
//!   one schedule from overlapping, across daemons: `--overlap skip` tries
//!   it once, `wait` waits for it (until the next slot is due, or the
//!   deadline), `stop-previous` waits while the daemon running the previous
//!   slot, which watches the schedule's state, stops its command.
//! - **enqueue**: the task is added with an id naming the slot
//!   ([`slot_task_id`]), so it is one task whoever adds it.
//!
//! Before a claim, the daemon looks at the record of the schedule's last
//! fired slot: one still `claimed` or `running` whose daemon is provably
//! dead (a process of this host that is gone) is recorded as `lost` — or,
//! for an enqueue, its task is added (again: the same id) and it is
//! recorded as enqueued. A daemon on another host that stopped answering
//! cannot be proved dead from here; its slot's record keeps saying
//! `claimed` or `running` (its command, if any, was stopped before its
//! lease could pass on).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{Expect, Holder, LeaseName, Mode};

use super::kept::{Action, Kept, Overlap, SlotClaim, SlotOutcome, SlotRecord, queue_of, slot_task_id};
use crate::identity::{self, Binding};
use crate::supervise::{self, GuardProgram, LeaseRun, Output, RunError, RunOutcome, Spec, Stop, StopHandle, Timing};
use crate::{Cancel, Error, NewTask, Result, Store, TaskId, format_duration, format_time};

/// How `leasehold cron` runs.
#[derive(Debug, Clone)]
pub struct CronOptions {
    /// The guard program commands run under.
    pub guard: GuardProgram,
    /// How often the schedules are read again (added, paused, removed).
    pub refresh: Duration,
    /// Only these schedules (empty: all).
    pub only: Vec<LeaseName>,
    /// Due slots looked at per claim (a longer backlog is worked through
    /// one claim after another).
    pub max_due: usize,
}

impl CronOptions {
    /// Every schedule, read again every 2 s.
    #[must_use]
    pub fn new(guard: GuardProgram) -> Self {
        Self {
            guard,
            refresh: Duration::from_secs(2),
            only: Vec::new(),
            max_due: 1000,
        }
    }
}

/// What the daemon tells its caller, as it happens.
#[derive(Debug)]
pub enum CronEvent<'a> {
    /// A slot's record was written: claimed, missed, or what became of it.
    Slot {
        name: &'a LeaseName,
        record: &'a SlotRecord,
    },
    /// Something failed; the daemon goes on (the store may be down).
    Failed {
        name: Option<&'a LeaseName>,
        error: &'a Error,
    },
}

/// The longest sleep of the loop between looks at `cancel`.
const NAP: Duration = Duration::from_millis(50);

type Sink = Arc<dyn Fn(&CronEvent<'_>) + Send + Sync>;

/// A command of a slot that runs now: its stop handle, once started.
#[derive(Default)]
struct Running {
    /// Ends its wait for the lease, or stops its command as soon as it
    /// starts (the daemon is shutting down).
    cancel: Cancel,
    handle: Mutex<Option<StopHandle>>,
    /// Fired as part of a backlog: later slots were due when it was
    /// claimed (`--catch-up all`).
    behind: AtomicBool,
    /// Stopped for the next slot (`stop-previous`).
    superseded: AtomicBool,
}

/// Run the daemon until `cancel`: then stop the commands it runs (SIGTERM,
/// then SIGKILL after their grace), record their slots, and return.
///
/// # Errors
/// When it cannot start: the store keeps no schedules, or this process's
/// identity cannot be read; and when the store's file was deleted or
/// replaced while it ran ([`BackendError::is_store_replaced`], after
/// stopping its commands as on cancel). Other errors of the store while
/// running are told to `on_event` and retried.
///
/// [`BackendError::is_store_replaced`]: crate::BackendError::is_store_replaced
pub fn run(
    store: &Arc<Store>,
    options: &CronOptions,
    cancel: &Cancel,
    on_event: impl Fn(&CronEvent<'_>) + Send + Sync + 'static,
) -> Result<()> {
    store.schedules()?;
    let daemon = identity::holder(Binding::ThisProcess).map_err(Error::Process)?;
    let sink: Sink = Arc::new(on_event);
    let mut fires: Vec<(LeaseName, Arc<Running>, JoinHandle<()>)> = Vec::new();
    let mut kept: Vec<Kept> = Vec::new();
    let mut read_at: Option<Instant> = None;
    // The store's file deleted or replaced under the daemon: it stops —
    // every claim would fail, and a daemon started on the store now at
    // the path fires the slots (DESIGN §3, a store's identity).
    let mut replaced: Option<Error> = None;
    while !cancel.is_cancelled() && replaced.is_none() {
        fires.retain(|(_, _, thread)| !thread.is_finished());
        if read_at.is_none_or(|at| at.elapsed() >= options.refresh) {
            match store.schedules().and_then(|s| s.list()) {
                Ok(all) => {
                    kept = all
                        .into_iter()
                        .filter(|k| options.only.is_empty() || options.only.contains(&k.schedule.name))
                        .collect();
                    read_at = Some(Instant::now());
                }
                Err(error) => {
                    failed(&sink, &mut replaced, None, error);
                    read_at = Some(Instant::now());
                }
            }
        }
        let now = SystemTime::now();
        let mut next_due: Option<SystemTime> = None;
        for entry in &mut kept {
            if entry.schedule.paused {
                continue;
            }
            let Some(slot) = entry.schedule.spec.next_after(entry.accounted_until()) else {
                continue;
            };
            let at = slot + jitter(&entry.schedule.name, slot, entry.schedule.jitter, &daemon);
            if at > now {
                next_due = Some(next_due.map_or(at, |n| n.min(at)));
                continue;
            }
            // While this daemon works through a backlog (slots claimed
            // while later ones were due too: `--catch-up all`), each slot
            // waits for its run of the one before: one after another, not
            // all at once and then skipped as overlapping.
            let behind = fires
                .iter()
                .any(|(n, r, t)| *n == entry.schedule.name && r.behind.load(Ordering::SeqCst) && !t.is_finished());
            if behind {
                next_due = Some(now + NAP / 5);
                continue;
            }
            match fire_due(store, options, entry, &daemon, &sink) {
                Ok(Some((running, thread))) => fires.push((entry.schedule.name.clone(), running, thread)),
                Ok(None) => {}
                Err(error) => failed(&sink, &mut replaced, Some(&entry.schedule.name), error),
            }
            // Read it again for the next round: the claim moved it on.
            match store.schedules().and_then(|s| s.get(&entry.schedule.name)) {
                Ok(Some(fresh)) => *entry = fresh,
                Ok(None) => entry.schedule.paused = true,
                Err(error) => failed(&sink, &mut replaced, Some(&entry.schedule.name), error),
            }
            next_due = Some(SystemTime::now());
        }
        let until_refresh = read_at.map_or(Duration::ZERO, |at| options.refresh.saturating_sub(at.elapsed()));
        let until_due = next_due.map_or(until_refresh, |at| {
            at.duration_since(SystemTime::now()).unwrap_or_default()
        });
        // Naps of at most 50 ms, so that a cancel is seen soon — but the
        // last one ends exactly when the slot is due: a daemon woken at the
        // slot's time fires it then, not up to a nap later.
        let nap = until_due.min(until_refresh);
        std::thread::sleep(if nap <= NAP { nap } else { NAP });
    }
    for (_, running, _) in &fires {
        running.cancel.cancel();
        if let Some(handle) = running.handle.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            handle.stop(Stop::Shutdown);
        }
    }
    for (_, _, thread) in fires {
        let _ = thread.join();
    }
    replaced.map_or(Ok(()), Err)
}

/// Tell the daemon's failure, or — for a store whose file was deleted or
/// replaced under it — keep it as the reason the daemon stops.
fn failed(sink: &Sink, replaced: &mut Option<Error>, name: Option<&LeaseName>, error: Error) {
    if matches!(&error, Error::Store(e) if e.is_store_replaced()) {
        replaced.get_or_insert(error);
    } else {
        sink(&CronEvent::Failed { name, error: &error });
    }
}

/// This daemon's wait after `slot` before claiming it: a part of `jitter`
/// that differs by daemon and slot (so the same daemon is not always
/// first), from a hash — no randomness needed.
fn jitter(name: &LeaseName, slot: SystemTime, jitter: Duration, daemon: &Holder) -> Duration {
    use std::hash::{Hash, Hasher};
    if jitter.is_zero() {
        return Duration::ZERO;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (name, slot, &daemon.host, daemon.pid).hash(&mut h);
    let ms = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(h.finish() % ms)
}

/// Claim what is due of `entry` and, if a slot is this daemon's to fire,
/// start it.
fn fire_due(
    store: &Arc<Store>,
    options: &CronOptions,
    entry: &Kept,
    daemon: &Holder,
    sink: &Sink,
) -> Result<Option<(Arc<Running>, JoinHandle<()>)>> {
    let schedules = store.schedules()?;
    let name = &entry.schedule.name;
    // Read afresh: another daemon may have claimed since the last read.
    let Some(fresh) = schedules.get(name)? else {
        return Ok(None);
    };
    if fresh.schedule.paused {
        return Ok(None);
    }
    settle_previous(store, &fresh, sink)?;
    let now = SystemTime::now();
    let claim = schedules.claim(&fresh, now, daemon, options.max_due)?;
    let SlotClaim::Claimed { missed, fired, behind } = claim else {
        return Ok(None);
    };
    for record in missed.iter().chain(&fired) {
        sink(&CronEvent::Slot { name, record });
    }
    let Some(record) = fired else { return Ok(None) };
    let running = Arc::new(Running::default());
    running.behind.store(behind, Ordering::SeqCst);
    let thread = {
        let store = store.clone();
        let schedule = fresh.schedule.clone();
        let guard = options.guard.clone();
        let running = running.clone();
        let sink = sink.clone();
        std::thread::Builder::new()
            .name(format!("cron {name}"))
            .spawn(move || {
                let record = fire(&store, &schedule, guard, record, &running, &sink);
                sink(&CronEvent::Slot {
                    name: &schedule.name,
                    record: &record,
                });
            })
            .map_err(|e| {
                Error::Supervise(supervise::SuperviseError::Io {
                    what: "cannot start a thread for a slot",
                    error: e,
                })
            })?
    };
    Ok(Some((running, thread)))
}

/// The record of the schedule's last fired slot, settled if its daemon is
/// provably dead: `lost`, or for an enqueue, enqueued now (the same id).
fn settle_previous(store: &Store, fresh: &Kept, sink: &Sink) -> Result<()> {
    let Some(last) = fresh.state.and_then(|(s, _)| s.last_fired) else {
        return Ok(());
    };
    let schedules = store.schedules()?;
    let name = &fresh.schedule.name;
    let Some((mut record, version)) = schedules.slot(name, last)? else {
        return Ok(());
    };
    let dead = record.outcome.is_open() && record.daemon.as_ref().is_some_and(identity::provably_gone);
    if !dead {
        return Ok(());
    }
    let who = record
        .daemon
        .as_ref()
        .map_or_else(String::new, |d| format!("pid {} on {}", d.pid, d.host));
    match &fresh.schedule.action {
        Action::Enqueue { queue, payload } => {
            let id = enqueue(store, name, last, queue, payload)?;
            record.outcome = SlotOutcome::Enqueued;
            record.detail = format!("task {id}, added for its daemon ({who}), which died before it reported");
        }
        Action::Run { .. } => {
            record.outcome = SlotOutcome::Lost;
            record.detail = format!("its daemon ({who}) died before it reported; its command was stopped with it");
        }
    }
    record.ended = Some(SystemTime::now());
    if schedules.report(name, &record, Expect::Version(version))? {
        sink(&CronEvent::Slot { name, record: &record });
    }
    Ok(())
}

fn enqueue(
    store: &Store,
    name: &LeaseName,
    slot: SystemTime,
    queue: &str,
    payload: &serde_json::Value,
) -> Result<String> {
    let id = slot_task_id(name, slot);
    let task_id = TaskId::new(id.clone()).map_err(|e| {
        Error::Store(crate::BackendError::new(
            crate::ErrorKind::InvalidInput,
            String::new(),
            format!("the task id {id:?} of a slot: {e}"),
        ))
    })?;
    let mut task = NewTask::new(payload.clone());
    task.id = Some(task_id);
    store.task_add(&queue_of(queue)?, vec![task])?;
    Ok(id)
}

/// Fire a claimed slot; what became of it.
fn fire(
    store: &Arc<Store>,
    schedule: &super::Schedule,
    guard: GuardProgram,
    mut record: SlotRecord,
    running: &Arc<Running>,
    sink: &Sink,
) -> SlotRecord {
    let name = &schedule.name;
    record.started = Some(SystemTime::now());
    match &schedule.action {
        Action::Enqueue { queue, payload } => match enqueue(store, name, record.slot, queue, payload) {
            Ok(id) => {
                record.outcome = SlotOutcome::Enqueued;
                record.detail = format!("task {id} added to {queue}");
            }
            Err(e) => {
                record.outcome = SlotOutcome::Failed;
                record.detail = format!("cannot add its task: {e}");
            }
        },
        Action::Run { command } => run_command(store, schedule, guard, command, &mut record, running, sink),
    }
    record.ended = Some(SystemTime::now());
    if let Err(error) = store
        .schedules()
        .and_then(|s| s.report(name, &record, Expect::Anything))
    {
        sink(&CronEvent::Failed {
            name: Some(name),
            error: &error,
        });
    }
    record
}

fn run_command(
    store: &Arc<Store>,
    schedule: &super::Schedule,
    guard: GuardProgram,
    command: &[String],
    record: &mut SlotRecord,
    running: &Arc<Running>,
    sink: &Sink,
) {
    let name = &schedule.name;
    let timing = match Timing::new(schedule.ttl, None, schedule.grace, None) {
        Ok(t) => t,
        Err(e) => {
            record.outcome = SlotOutcome::Failed;
            record.detail = e.to_string();
            return;
        }
    };
    // How long this slot may wait for the previous one's lease: until the
    // next slot is due, and no later than the deadline.
    let next = schedule.spec.next_after(record.slot);
    let mut until = next.unwrap_or(record.slot + Duration::from_secs(3600));
    if let Some(deadline) = schedule.deadline {
        until = until.min(record.slot + deadline);
    }
    let wait_for = until.duration_since(SystemTime::now()).unwrap_or_default();
    let wait = match schedule.overlap {
        Overlap::Skip => None,
        Overlap::Wait | Overlap::StopPrevious => Some(Some(wait_for)),
    };
    let spec = Spec {
        command: command.iter().map(Into::into).collect(),
        guard,
        grace: timing.grace,
        stdin: None,
        output: Output::Inherit,
        stall: None,
    };
    let lease = LeaseRun {
        wait,
        cancel: running.cancel.clone(),
        env: vec![
            ("LEASEHOLD_SLOT".into(), format_time(record.slot)),
            ("LEASEHOLD_SCHEDULE".into(), name.to_string()),
        ],
        ..LeaseRun::new(name.clone(), timing)
    };
    let watcher_stop = Arc::new(AtomicBool::new(false));
    let outcome = supervise::run_with(
        store,
        &lease,
        spec,
        |_| {},
        |grant, handle| {
            *running.handle.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle.clone());
            record.outcome = SlotOutcome::Running;
            record.token = Some(grant.token.0);
            record.started = Some(SystemTime::now());
            if let Ok(s) = store.schedules()
                && let Err(error) = s.report(name, record, Expect::Anything)
            {
                sink(&CronEvent::Failed {
                    name: Some(name),
                    error: &error,
                });
            }
            if schedule.overlap == Overlap::StopPrevious {
                watch_for_next(
                    store.clone(),
                    name.clone(),
                    record.slot,
                    handle,
                    running.clone(),
                    watcher_stop.clone(),
                );
            }
        },
    );
    watcher_stop.store(true, Ordering::SeqCst);
    settle(record, outcome, schedule.overlap, running);
}

/// What a slot's run came to, into its record.
fn settle(record: &mut SlotRecord, outcome: Result<RunOutcome>, overlap: Overlap, running: &Running) {
    match outcome {
        Ok(RunOutcome::Held(held)) => {
            record.outcome = SlotOutcome::Skipped;
            record.detail = format!(
                "the previous slot's command still ran ({}); --overlap {}",
                held.by(Mode::Exclusive),
                overlap
            );
        }
        Ok(RunOutcome::Ran(ran)) => {
            record.token = Some(ran.grant.token.0);
            match ran.ended {
                Ok(0) => {
                    record.outcome = SlotOutcome::Ran;
                    record.exit_code = Some(0);
                    record.detail = "exit 0".into();
                }
                Ok(code) => {
                    record.outcome = SlotOutcome::Failed;
                    record.exit_code = Some(i32::from(code));
                    record.detail = format!("exit {code}");
                }
                Err(RunError::Interrupted { .. }) if running.superseded.load(Ordering::SeqCst) => {
                    record.outcome = SlotOutcome::Stopped;
                    record.detail = "stopped for the next slot; --overlap stop-previous".into();
                }
                Err(why) => {
                    record.outcome = SlotOutcome::Failed;
                    record.detail = why.to_string();
                }
            }
        }
        Err(e) => {
            record.outcome = SlotOutcome::Failed;
            record.detail = e.to_string();
        }
    }
}

/// `--overlap stop-previous`: while this slot's command runs, read the
/// schedule's state every 100 ms; once a later slot was claimed, stop the
/// command (its grace, then SIGKILL) so that slot's run gets the lease.
fn watch_for_next(
    store: Arc<Store>,
    name: LeaseName,
    slot: SystemTime,
    handle: StopHandle,
    running: Arc<Running>,
    done: Arc<AtomicBool>,
) {
    let _ = std::thread::Builder::new()
        .name(format!("cron {name} watch"))
        .spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                let later = store
                    .schedules()
                    .and_then(|s| s.state(&name))
                    .ok()
                    .flatten()
                    .is_some_and(|(state, _)| state.last_slot > slot);
                if later {
                    running.superseded.store(true, Ordering::SeqCst);
                    handle.stop(Stop::Shutdown);
                    return;
                }
            }
        });
}

/// A line for a slot's record, as `leasehold cron` logs it.
#[must_use]
pub fn describe(name: &LeaseName, record: &SlotRecord) -> String {
    use std::fmt::Write as _;
    let mut line = format!("{name} {} {}", format_time(record.slot), record.outcome);
    if record.count > 1 {
        let _ = write!(
            line,
            " ({} slots, through {})",
            record.count,
            format_time(record.through)
        );
    }
    if let Some(d) = record.duration() {
        let _ = write!(line, " after {}", format_duration(d));
    }
    if !record.detail.is_empty() {
        line.push_str(": ");
        line.push_str(&record.detail);
    }
    line
}
