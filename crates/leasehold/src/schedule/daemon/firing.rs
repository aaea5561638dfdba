//! A claimed slot on the thread that fires it: the deadline judged again
//! at the start, the command run under the schedule's lease as
//! `leasehold run` runs one (or the task added), what became of it
//! recorded (`settle`), and `--overlap stop-previous`'s watch for the
//! next slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{Expect, LeaseName, Mode};

use super::slots::{enqueue, past_deadline, task_added, told};
use super::{CronEvent, Running, Sink};
use crate::schedule::clock::StoreClock;
use crate::schedule::record::{Action, Overlap, Schedule, SlotOutcome, SlotRecord};
use crate::supervise::{self, GuardProgram, LeaseRun, Output, RunError, RunOutcome, Spec, Stop, StopHandle, Timing};
use crate::{Result, Store, format_duration, format_time};

/// A claimed slot on the thread that fires it.
pub(super) struct Firing {
    pub(super) store: Arc<Store>,
    pub(super) schedule: Schedule,
    pub(super) running: Arc<Running>,
    /// The store's clock, as the daemon last read it.
    pub(super) clock: StoreClock,
    pub(super) sink: Sink,
}

impl Firing {
    /// Fire a claimed slot — unless the store's clock says it is past its
    /// deadline by now (a claim is judged at its commit; a start is judged
    /// again, since a thread may start late) — and record what became of it.
    pub(super) fn fire(self, guard: GuardProgram, mut record: SlotRecord) {
        let Firing {
            store,
            schedule,
            clock,
            sink,
            ..
        } = &self;
        let name = &schedule.name;
        let now = clock.now();
        match (&schedule.action, past_deadline(schedule, &record, now)) {
            (_, Some(missed)) => {
                record.outcome = SlotOutcome::Missed;
                record.detail = missed;
            }
            (Action::Enqueue { queue, payload }, None) => {
                record.started = Some(now);
                let added = enqueue(store, name, record.slot, queue, payload);
                task_added(&mut record, queue, added.as_deref());
            }
            (Action::Run { command }, None) => {
                record.started = Some(now);
                self.run_command(guard, command, &mut record);
            }
        }
        record.ended = Some(clock.now());
        // Told only once written: a record removed meanwhile (its schedule
        // removed) is not reported as if it were kept.
        match store
            .schedules()
            .and_then(|s| s.report(name, &record, Expect::Anything))
        {
            Ok(written) => told(sink, name, &record, written),
            Err(error) => sink(&CronEvent::Failed {
                name: Some(name),
                error: &error,
            }),
        }
    }

    fn run_command(&self, guard: GuardProgram, command: &[String], record: &mut SlotRecord) {
        let Firing {
            store,
            schedule,
            running,
            clock,
            sink,
        } = self;
        let name = &schedule.name;
        let timing = match Timing::new(schedule.ttl, None, schedule.grace) {
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
        let wait_for = until.duration_since(clock.now()).unwrap_or_default();
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
            // The deadline holds through the wait for the lease too.
            start_by: schedule
                .deadline
                .map(|d| Instant::now() + (record.slot + d).duration_since(clock.now()).unwrap_or_default()),
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
                record.started = Some(clock.now());
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
        settle(record, outcome, schedule, running);
    }
}

/// What a slot's run came to, into its record.
fn settle(record: &mut SlotRecord, outcome: Result<RunOutcome>, schedule: &Schedule, running: &Running) {
    let (overlap, deadline) = (schedule.overlap, schedule.deadline);
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
                Err(RunError::TooLate { late, .. }) => {
                    record.outcome = SlotOutcome::Missed;
                    record.started = None;
                    record.detail = format!(
                        "claimed in time, but its lease came {} too late to start it; the deadline is {}",
                        format_duration(late),
                        format_duration(deadline.unwrap_or_default())
                    );
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
