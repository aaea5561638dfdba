//! What the loop does with slot records around a claim: after it, start
//! the fired slot on a thread of its own ([`Firing`](super::firing::Firing))
//! or add the tasks of enqueue slots claimed together, one write per
//! queue; before it, settle the last slot of a daemon that is provably
//! dead. With the wording of what became of a slot (`task_added`,
//! `past_deadline`, `told`) that the firing thread records with too.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use leasehold_backend::{Expect, LeaseName, RecordVersion};

use super::firing::Firing;
use super::{BACKOFF, BACKOFF_MAX, CronEvent, CronOptions, Running, Sink, Watched};
use crate::identity;
use crate::schedule::clock::StoreClock;
use crate::schedule::kept::SlotClaim;
use crate::schedule::record::{Action, Kept, Schedule, SlotOutcome, SlotRecord, queue_of, slot_task_id};
use crate::supervise;
use crate::{Error, NewTask, Result, Store, TaskId, format_duration, format_time};

/// What a claim leaves the daemon to do.
pub(super) enum Fire {
    Nothing,
    /// A slot that fires on a thread of its own.
    Thread(Arc<Running>, JoinHandle<()>),
    /// A task to add with the others claimed at the same time, and the
    /// version of its slot's record.
    Task(Box<(Schedule, SlotRecord, RecordVersion)>),
}

/// What a claim of `w` came to: tell its records, keep the schedule as
/// the claim left it, and start the slot it fires, if any.
pub(super) fn claimed(
    store: &Arc<Store>,
    options: &CronOptions,
    w: &mut Watched,
    claim: SlotClaim,
    clock: &StoreClock,
    sink: &Sink,
) -> Result<Fire> {
    let name = w.kept.schedule.name.clone();
    let schedules = store.schedules()?;
    let (missed, fired, behind, moved, fired_version) = match claim {
        SlotClaim::Claimed {
            missed,
            fired,
            behind,
            kept,
            fired_version,
        } => (missed, fired, behind, kept, fired_version),
        SlotClaim::NothingDue => return Ok(Fire::Nothing),
        SlotClaim::Lost => {
            // Another daemon claimed first, or the schedule changed: read
            // again with the others at the next round.
            w.stale = true;
            return Ok(Fire::Nothing);
        }
        SlotClaim::StateBehind => {
            let step = w.backoff.map_or(BACKOFF, |(_, step)| (step * 2).min(BACKOFF_MAX));
            w.backoff = Some((Instant::now() + step, step));
            let line = match schedules.move_past_recorded(&name)? {
                Some(slot) => format!(
                    "its state was behind the record of its slot {}; moved past it (that slot is not fired again)",
                    format_time(slot)
                ),
                None => format!(
                    "its claim met a slot record it did not expect; tried again in {}",
                    format_duration(step)
                ),
            };
            sink(&CronEvent::Told {
                name: Some(&name),
                line: &line,
            });
            if let Some(fresh) = schedules.get(&name)? {
                w.kept = fresh;
            }
            return Ok(Fire::Nothing);
        }
    };
    w.backoff = None;
    for record in missed.iter().chain(&fired) {
        sink(&CronEvent::Slot { name: &name, record });
    }
    let schedule = w.kept.schedule.clone();
    match moved {
        Some(moved) => w.kept = *moved,
        None => {
            if let Some(fresh) = schedules.get(&name)? {
                w.kept = fresh;
            }
        }
    }
    let Some(record) = fired else { return Ok(Fire::Nothing) };
    // A task on time is added with the others claimed with it (one write
    // per queue, not one per slot); one of a backlog goes on its own
    // thread, after the one before it.
    if let (Action::Enqueue { .. }, false, Some(version)) = (&schedule.action, behind, fired_version) {
        return Ok(Fire::Task(Box::new((schedule, record, version))));
    }
    let running = Arc::new(Running::default());
    running.behind.store(behind, Ordering::SeqCst);
    let thread = {
        let store = store.clone();
        let guard = options.guard.clone();
        let running = running.clone();
        let sink = sink.clone();
        let clock = *clock;
        std::thread::Builder::new()
            .name(format!("cron {name}"))
            .spawn(move || {
                let firing = Firing {
                    store,
                    schedule,
                    running,
                    clock,
                    sink,
                };
                firing.fire(guard, record);
            })
            .map_err(|e| {
                Error::Supervise(supervise::SuperviseError::Io {
                    what: "cannot start a thread for a slot",
                    error: e,
                })
            })?
    };
    Ok(Fire::Thread(running, thread))
}

/// Add the tasks of slots claimed together — one write per queue (of up
/// to [`TASKS_PER_ADD`]) — and record them, a batch of records at a time.
/// A slot past its deadline by now is recorded missed instead.
pub(super) fn add_tasks(
    store: &Store,
    tasks: Vec<(Schedule, SlotRecord, RecordVersion)>,
    clock: &StoreClock,
    sink: &Sink,
) -> Result<()> {
    let mut records: Vec<(Schedule, SlotRecord, RecordVersion)> = Vec::with_capacity(tasks.len());
    let mut by_queue: std::collections::BTreeMap<String, Vec<(usize, TaskId)>> = std::collections::BTreeMap::new();
    for (schedule, mut record, version) in tasks {
        let now = clock.now();
        record.started = Some(now);
        if let Some(missed) = past_deadline(&schedule, &record, now) {
            record.outcome = SlotOutcome::Missed;
            record.started = None;
            record.detail = missed;
        } else if let Action::Enqueue { queue, .. } = &schedule.action {
            match task_id(&schedule.name, record.slot) {
                Ok(id) => by_queue.entry(queue.clone()).or_default().push((records.len(), id)),
                Err(e) => {
                    record.outcome = SlotOutcome::Failed;
                    record.detail = format!("cannot add its task: {e}");
                }
            }
        }
        records.push((schedule, record, version));
    }
    for (queue, slots) in by_queue {
        for chunk in slots.chunks(TASKS_PER_ADD) {
            let new: Vec<NewTask> = chunk
                .iter()
                .map(|(i, id)| {
                    let payload = match &records[*i].0.action {
                        Action::Enqueue { payload, .. } => payload.clone(),
                        Action::Run { .. } => serde_json::Value::Null,
                    };
                    let mut task = NewTask::new(payload);
                    task.id = Some(id.clone());
                    task
                })
                .collect();
            let added = queue_of(&queue).and_then(|q| store.task_add(&q, new));
            for (i, id) in chunk {
                let record = &mut records[*i].1;
                let id = id.to_string();
                task_added(record, &queue, added.as_ref().map(|_| id.as_str()));
                record.ended = Some(clock.now());
            }
        }
    }
    let reports: Vec<(&LeaseName, &SlotRecord, RecordVersion)> =
        records.iter().map(|(s, r, v)| (&s.name, r, *v)).collect();
    let written = store.schedules()?.report_many(&reports)?;
    for ((name, record, _), written) in reports.into_iter().zip(written) {
        told(sink, name, record, written);
    }
    Ok(())
}

/// What adding a slot's task to `queue` came to (its id, or why not), into
/// the slot's record: one wording, whether added alone or with others.
pub(super) fn task_added(record: &mut SlotRecord, queue: &str, added: std::result::Result<&str, &Error>) {
    match added {
        Ok(id) => {
            record.outcome = SlotOutcome::Enqueued;
            record.detail = format!("task {id} added to {queue}");
        }
        Err(e) => {
            record.outcome = SlotOutcome::Failed;
            record.detail = format!("cannot add its task: {e}");
        }
    }
}

/// Tasks added per write when slots of one queue fire together.
pub(super) const TASKS_PER_ADD: usize = 500;

/// Why `record`'s slot may no longer start at `now` (its deadline
/// passed), if so.
pub(super) fn past_deadline(schedule: &Schedule, record: &SlotRecord, now: SystemTime) -> Option<String> {
    let late = now.duration_since(record.slot).unwrap_or_default();
    let deadline = schedule.deadline?;
    (late > deadline).then(|| {
        format!(
            "claimed in time, but {} late at its start; the deadline is {}",
            format_duration(late),
            format_duration(deadline)
        )
    })
}

/// Tell a slot's record once written — or that it could not be (its
/// schedule removed meanwhile), not as if it were kept.
pub(super) fn told(sink: &Sink, name: &LeaseName, record: &SlotRecord, written: bool) {
    if written {
        sink(&CronEvent::Slot { name, record });
    } else {
        sink(&CronEvent::Told {
            name: Some(name),
            line: &format!(
                "the record of its slot {} is gone (the schedule was removed?); what became of the slot was not recorded: {}",
                format_time(record.slot),
                record.outcome
            ),
        });
    }
}

/// The record of the schedule's last fired slot, settled if its daemon is
/// provably dead: `lost`, or for an enqueue, enqueued now (the same id).
/// Read only when the daemon the state names is provably gone (or the
/// state, written by an older leasehold, names none).
pub(super) fn settle_previous(store: &Store, fresh: &Kept, here: &identity::Vantage, sink: &Sink) -> Result<()> {
    let Some((state, _)) = &fresh.state else { return Ok(()) };
    let Some(last) = state.last_fired else { return Ok(()) };
    if state.last_daemon.as_ref().is_some_and(|d| !here.gone(d)) {
        return Ok(());
    }
    let schedules = store.schedules()?;
    let name = &fresh.schedule.name;
    let Some((mut record, version)) = schedules.slot(name, last)? else {
        return Ok(());
    };
    let dead = record.outcome.is_open() && record.daemon.as_ref().is_some_and(|d| here.gone(d));
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
    record.ended = Some(schedules.now()?);
    if schedules.report(name, &record, Expect::Version(version))? {
        sink(&CronEvent::Slot { name, record: &record });
    }
    Ok(())
}

/// The id of a slot's task ([`slot_task_id`]), as a task id.
pub(super) fn task_id(name: &LeaseName, slot: SystemTime) -> Result<TaskId> {
    let id = slot_task_id(name, slot);
    TaskId::new(id.clone()).map_err(|e| {
        Error::Store(crate::BackendError::new(
            crate::ErrorKind::InvalidInput,
            String::new(),
            format!("the task id {id:?} of a slot: {e}"),
        ))
    })
}

pub(super) fn enqueue(
    store: &Store,
    name: &LeaseName,
    slot: SystemTime,
    queue: &str,
    payload: &serde_json::Value,
) -> Result<String> {
    let task_id = task_id(name, slot)?;
    let id = task_id.to_string();
    let mut task = NewTask::new(payload.clone());
    task.id = Some(task_id);
    store.task_add(&queue_of(queue)?, vec![task])?;
    Ok(id)
}
