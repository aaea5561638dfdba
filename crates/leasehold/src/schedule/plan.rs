//! Which due slots a claim fires and which it records as missed
//! ([`decide`]: catch-up and deadline), and what the claim writes
//! (`plan_claim`: the records' changes, expecting the versions read).
//! Pure: the store's time comes in as [`Watch`], nothing is read here.

use std::time::{Duration, SystemTime};

use leasehold_backend::{Expect, Holder, RecordChange};

use super::record::{
    CatchUp, Kept, Schedule, ScheduleState, SlotOutcome, SlotRecord, encode, schedule_key, slot_key, state_key,
};

/// The first slot to fire among the due ones and those passed over, as
/// [`decide`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Slots passed over: recorded as missed (with why).
    pub missed: Vec<SystemTime>,
    pub missed_why: String,
    /// The slot to fire now, if any.
    pub fire: Option<SystemTime>,
}

impl Decision {
    /// The last slot this decision accounts for.
    #[must_use]
    pub fn last(&self) -> Option<SystemTime> {
        self.fire.or_else(|| self.missed.last().copied())
    }
}

/// How long after its time a slot still counts as on time: a daemon alive
/// at the slot's time claims it within milliseconds, so a slot claimed
/// later than this (plus the schedule's jitter) was missed at its time —
/// no daemon could fire it — and the catch-up policy decides. Unless the
/// daemon claiming it was watching since before its time
/// ([`Watch::since`]): then it was alive, only busy, and the slot is on
/// time however long its claim took.
pub const ON_TIME: Duration = Duration::from_secs(1);

/// When a daemon claims: the store's time, and since when it has watched
/// its schedules without a pause (`None`: a caller that did not watch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// The store's time the slots are judged at: none later is due.
    pub now: SystemTime,
    /// Since when this daemon's loop has run without a gap it could not
    /// account for (a freeze, the store unreachable): a slot due since
    /// then was seen by a live daemon.
    pub since: Option<SystemTime>,
}

impl Watch {
    /// A claim at `now` by a caller that did not watch.
    #[must_use]
    pub fn at(now: SystemTime) -> Self {
        Self { now, since: None }
    }
}

/// Which of `due` (slots not yet accounted for, at most `now`, oldest
/// first; `more`: later due slots were not listed) to fire first, and
/// which to record as missed before it:
/// - a slot later than the deadline is missed, never run;
/// - the newest due slot fires if it is on time ([`ON_TIME`] + jitter, or
///   due since `watch.since`), or late with `--catch-up latest` or `all`;
/// - an older due slot (its time passed while no daemon fired it) fires
///   only with `--catch-up all`.
#[must_use]
pub fn decide(schedule: &Schedule, due: &[SystemTime], more: bool, watch: Watch) -> Decision {
    let now = watch.now;
    let late_after = ON_TIME + schedule.jitter;
    let mut missed = Vec::new();
    let mut why = String::new();
    for (i, &slot) in due.iter().enumerate() {
        let age = now.duration_since(slot).unwrap_or_default();
        let newest = i + 1 == due.len() && !more;
        let past_deadline = schedule.deadline.is_some_and(|d| age > d);
        let fires = !past_deadline
            && match schedule.catch_up {
                CatchUp::All => true,
                CatchUp::Latest => newest,
                CatchUp::None => newest && (age <= late_after || watch.since.is_some_and(|since| since <= slot)),
            };
        if fires {
            return Decision {
                missed,
                missed_why: why,
                fire: Some(slot),
            };
        }
        why = if let (true, Some(d)) = (past_deadline, schedule.deadline) {
            format!(
                "{} late; the deadline is {}",
                crate::format_duration(age),
                crate::format_duration(d)
            )
        } else {
            format!("no daemon fired it in time; --catch-up {}", schedule.catch_up)
        };
        missed.push(slot);
    }
    Decision {
        missed,
        missed_why: why,
        fire: None,
    }
}

/// One schedule's claim, as written: its changes (the state first, the
/// schedule last) and what they record.
#[derive(Debug, Clone)]
pub(super) struct ClaimPlan {
    pub(super) changes: Vec<RecordChange>,
    pub(super) state: ScheduleState,
    pub(super) missed: Option<SlotRecord>,
    pub(super) fired: Option<SlotRecord>,
    pub(super) behind: bool,
    /// The fired slot's deadline: the write is applied only before it.
    pub(super) not_after: Option<SystemTime>,
}

/// What a claim of `kept` at `now` writes, as [`decide`] decides; `None`
/// when nothing is due.
pub(super) fn plan_claim(kept: &Kept, watch: Watch, daemon: &Holder, max_due: usize) -> Option<ClaimPlan> {
    let (schedule, now) = (&kept.schedule, watch.now);
    let due = schedule.spec.slots_between(kept.accounted_until(), now, max_due);
    let decision = decide(schedule, &due.slots, due.more, watch);
    let last = decision.last()?;
    let previous = kept.state.as_ref().map(|(s, _)| s);
    let state = ScheduleState {
        last_slot: last,
        last_fired: decision.fire.or_else(|| previous.and_then(|s| s.last_fired)),
        last_daemon: if decision.fire.is_some() {
            Some(daemon.clone())
        } else {
            previous.and_then(|s| s.last_daemon.clone())
        },
        claims: previous.map_or(0, |s| s.claims) + 1,
    };
    let mut changes = vec![RecordChange::Put {
        key: state_key(&schedule.name),
        body: encode(&state),
        expect: kept.state_expect(),
    }];
    let missed = if let (Some(&first), Some(&through)) = (decision.missed.first(), decision.missed.last()) {
        let missed = SlotRecord {
            slot: first,
            outcome: SlotOutcome::Missed,
            count: decision.missed.len() as u64,
            through,
            daemon: None,
            claimed: now,
            started: None,
            ended: None,
            token: None,
            exit_code: None,
            detail: decision.missed_why.clone(),
        };
        changes.push(RecordChange::Put {
            key: slot_key(&schedule.name, first),
            body: encode(&missed),
            expect: Expect::Absent,
        });
        Some(missed)
    } else {
        None
    };
    let fired = decision.fire.map(|slot| SlotRecord {
        slot,
        outcome: SlotOutcome::Claimed,
        count: 1,
        through: slot,
        daemon: Some(daemon.clone()),
        claimed: now,
        started: None,
        ended: None,
        token: None,
        exit_code: None,
        detail: String::new(),
    });
    if let Some(record) = &fired {
        changes.push(RecordChange::Put {
            key: slot_key(&schedule.name, record.slot),
            body: encode(record),
            expect: Expect::Absent,
        });
    }
    // The schedule itself must still be there, unchanged (not paused or
    // removed since it was read): re-put at the version read.
    changes.push(RecordChange::Put {
        key: schedule_key(&schedule.name),
        body: encode(schedule),
        expect: Expect::Version(kept.version),
    });
    // A fired slot that was not the newest due, or not on time, is part
    // of a backlog: the next slot waits for its run (one after another,
    // not skipped as overlapping).
    let late_after = ON_TIME + schedule.jitter;
    let behind = decision.fire.is_some_and(|f| {
        due.more
            || due.slots.last().is_some_and(|last| *last > f)
            || (now.duration_since(f).unwrap_or_default() > late_after && watch.since.is_none_or(|since| since > f))
    });
    Some(ClaimPlan {
        changes,
        not_after: decision.fire.zip(schedule.deadline).map(|(slot, d)| slot + d),
        state,
        missed,
        fired,
        behind,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::UNIX_EPOCH;

    use leasehold_backend::LeaseName;

    use super::*;
    use crate::schedule::ScheduleSpec;
    use crate::schedule::record::Action;

    pub(in crate::schedule) fn schedule(catch_up: CatchUp, deadline: Option<Duration>) -> Schedule {
        let command = Action::Run {
            command: vec!["true".into()],
        };
        let spec = ScheduleSpec::parse("@every 1m", None).unwrap();
        Schedule {
            catch_up,
            deadline,
            ..Schedule::new(LeaseName::new("s").unwrap(), spec, command, UNIX_EPOCH)
        }
    }

    pub(in crate::schedule) fn at(mins: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(60 * mins)
    }

    #[test]
    fn an_on_time_slot_fires_under_every_policy() {
        for catch_up in [CatchUp::None, CatchUp::Latest, CatchUp::All] {
            let d = decide(
                &schedule(catch_up, None),
                &[at(10)],
                false,
                Watch::at(at(10) + Duration::from_millis(20)),
            );
            assert_eq!((d.fire, d.missed.len()), (Some(at(10)), 0), "{catch_up}");
        }
    }

    #[test]
    fn slots_due_after_downtime_follow_the_catch_up_policy() {
        let due = [at(1), at(2), at(3)];
        let now = at(3) + Duration::from_secs(30);
        let none = decide(&schedule(CatchUp::None, None), &due, false, Watch::at(now));
        assert_eq!((none.fire, none.missed), (None, due.to_vec()));
        let latest = decide(&schedule(CatchUp::Latest, None), &due, false, Watch::at(now));
        assert_eq!((latest.fire, latest.missed), (Some(at(3)), vec![at(1), at(2)]));
        let all = decide(&schedule(CatchUp::All, None), &due, false, Watch::at(now));
        assert_eq!((all.fire, all.missed), (Some(at(1)), vec![]));
    }

    /// A slot due while a daemon watched (busy, not gone) is on time
    /// however late its claim; one due before the daemon watched is late.
    #[test]
    fn a_slot_due_while_a_daemon_watched_is_on_time_however_late_its_claim() {
        let none = schedule(CatchUp::None, None);
        let now = at(10) + Duration::from_secs(5);
        let watched = Watch {
            now,
            since: Some(at(10) - Duration::from_millis(1)),
        };
        assert_eq!(decide(&none, &[at(10)], false, watched).fire, Some(at(10)));
        let since_after = Watch {
            now,
            since: Some(at(10) + Duration::from_millis(1)),
        };
        assert_eq!(decide(&none, &[at(10)], false, since_after).fire, None);
        assert_eq!(decide(&none, &[at(10)], false, Watch::at(now)).fire, None);
        // The deadline holds all the same.
        let strict = schedule(CatchUp::None, Some(Duration::from_secs(2)));
        assert_eq!(decide(&strict, &[at(10)], false, watched).fire, None);
    }

    #[test]
    fn a_slot_past_its_deadline_is_missed_never_run() {
        let due = [at(1), at(2), at(3)];
        let now = at(3) + Duration::from_secs(90);
        let d = decide(
            &schedule(CatchUp::All, Some(Duration::from_secs(100))),
            &due,
            false,
            Watch::at(now),
        );
        assert_eq!((d.fire, d.missed), (Some(at(3)), vec![at(1), at(2)]));
        assert!(d.missed_why.contains("deadline"), "{}", d.missed_why);
        let d = decide(
            &schedule(CatchUp::Latest, Some(Duration::from_secs(60))),
            &due,
            false,
            Watch::at(now),
        );
        assert_eq!((d.fire, d.missed), (None, due.to_vec()));
    }

    #[test]
    fn the_newest_listed_slot_is_not_the_newest_due_when_more_are() {
        let d = decide(
            &schedule(CatchUp::Latest, None),
            &[at(1), at(2)],
            true,
            Watch::at(at(9)),
        );
        assert_eq!((d.fire, d.missed), (None, vec![at(1), at(2)]));
    }
}
