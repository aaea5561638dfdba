//! Schedules kept in the store, and their slots: what `leasehold schedule`
//! edits and `leasehold cron` fires.
//!
//! Everything is a record of the store (`leasehold_backend::record`),
//! written by compare-and-swap:
//!
//! | key | body | written by |
//! |---|---|---|
//! | `schedule/NAME` | the [`Schedule`] | `schedule add`, `pause`, `resume`, `remove` |
//! | `schedule-state/NAME` | [`ScheduleState`]: the last slot accounted for | every claim |
//! | `schedule-slot/LEN:NAME/MS` | a [`SlotRecord`]: what became of the slot at `MS` | its claim, then its daemon |
//!
//! **A slot is claimed once.** A claim is one write of two or three
//! records: the state moves past the slot (expecting the version the
//! claimer read), the slot's record is created (expecting none), and the
//! slots it passed over are recorded as missed in one record. Two daemons
//! that read the same state both try; the store applies one write and
//! refuses the other whole ([`RecordWrite::Conflict`]). So no slot is
//! fired twice, whichever daemons die when — a daemon that dies after
//! claiming leaves its slot's record saying so (`claimed` or `running`,
//! with its process), never a slot for another daemon to fire again.
//!
//! The slot keys carry the name's length (`schedule-slot/3:a/b/…`) so that
//! the slots of `a` and of `a/b` are never listed together.

use std::time::SystemTime;

use leasehold_backend::{
    BackendError, ErrorKind, Expect, Holder, LeaseName, Record, RecordBackend, RecordChange, RecordKey,
    RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};

use leasehold_backend::record::RECORD_CHANGES_MAX;

use super::clock::StoreClock;
use super::plan::{ClaimPlan, Watch, plan_claim};
use super::record::{
    Action, Kept, SCHEDULES_PREFIX, STATES_PREFIX, Schedule, ScheduleState, SlotRecord, decode, encode, queue_of,
    schedule_key, slot_key, slots_prefix, state_key,
};
use crate::{Result, Store};

/// Slot records kept per schedule: the newest are kept, older ones pruned
/// as new ones are written (as a name's history is).
pub const SLOTS_KEPT: u32 = 1000;

/// How often (in claims of a schedule) its old slot records are pruned.
pub const PRUNE_EVERY: u64 = 64;

/// The schedules of a store ([`Store::schedules`]).
pub struct Schedules<'a> {
    store: &'a Store,
    records: &'a dyn RecordBackend,
}

impl std::fmt::Debug for Schedules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedules")
            .field("store", &self.store.url())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The schedules kept in this store.
    ///
    /// # Errors
    /// [`ErrorKind::Unsupported`] for a store that keeps no records.
    pub fn schedules(&self) -> Result<Schedules<'_>> {
        let records = self.backend().records().ok_or_else(|| {
            BackendError::unsupported(
                self.url().to_string(),
                "keeping schedules",
                format!("keep schedules in {}", crate::stores_with(|k| k.schedules)),
            )
        })?;
        Ok(Schedules { store: self, records })
    }
}

/// How a claim ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "one per claim, never stored")]
pub enum SlotClaim {
    /// Written: the slots passed over, recorded as missed in one record,
    /// and the slot this daemon fires (its record written as claimed).
    Claimed {
        missed: Option<SlotRecord>,
        fired: Option<SlotRecord>,
        /// Later slots were due too, or it was late: the fired one is
        /// part of a backlog.
        behind: bool,
        /// The schedule with its state as this claim left it (`None` when
        /// the store did not say the versions it wrote).
        kept: Option<Box<Kept>>,
        /// The version of the fired slot's record as claimed: what its
        /// report expects ([`Schedules::report_many`]).
        fired_version: Option<RecordVersion>,
    },
    /// Nothing was due.
    NothingDue,
    /// Another daemon claimed first (read again).
    Lost,
    /// A record of a slot it would write is there already, though the
    /// state says the slot is due: the state is behind its records (restored from an older copy,
    /// or written so by an older leasehold). Claiming again would conflict
    /// forever; [`Schedules::move_past_recorded`] moves the state on.
    StateBehind,
}

impl Schedules<'_> {
    /// The store they are kept in.
    #[must_use]
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Add `schedule`, created now on the store's clock (its `created` is
    /// set so: a machine whose clock is behind cannot add a schedule in
    /// the past and fire the slots before it existed). An existing
    /// schedule of the name is replaced only when `replace`; otherwise
    /// refused as held.
    ///
    /// A replacement keeps the slots' records and the place in time: its
    /// first slot is the first after the later of the last slot accounted
    /// for and now — never a slot before the replacement, nor one from a
    /// paused period. A paused schedule stays paused (`resume` resumes it).
    ///
    /// # Errors
    /// [`ErrorKind::Held`] when it exists and not `replace`;
    /// [`ErrorKind::Unsupported`] for a task on a store without a queue;
    /// store errors.
    pub fn add(&self, schedule: &Schedule, replace: bool) -> Result<()> {
        self.add_at(schedule, replace, None)
    }

    /// [`Schedules::add`] as if the store's clock read `at` (`None`: read
    /// it) — for tests and imports that date a schedule themselves; what
    /// a user adds is dated by the store.
    ///
    /// # Errors
    /// As [`Schedules::add`].
    pub fn add_at(&self, schedule: &Schedule, replace: bool, at: Option<SystemTime>) -> Result<()> {
        schedule.check()?;
        if let Action::Enqueue { queue, .. } = &schedule.action {
            queue_of(queue)?;
            // Refused now, not at the first slot: a store without a queue
            // would fail every slot.
            self.store.tasks()?;
        }
        loop {
            let now = match at {
                Some(at) => at,
                None => self.now()?,
            };
            let existing = if replace { self.get(&schedule.name)? } else { None };
            let mut added = schedule.clone();
            added.created = now;
            let mut changes = Vec::new();
            let expect = match &existing {
                None => Expect::Absent,
                Some(kept) => {
                    added.paused |= kept.schedule.paused;
                    if let Some(state) = kept.moved_on(now) {
                        changes.push(RecordChange::Put {
                            key: state_key(&schedule.name),
                            body: encode(&state),
                            expect: kept.state_expect(),
                        });
                    }
                    Expect::Version(kept.version)
                }
            };
            changes.push(RecordChange::Put {
                key: schedule_key(&schedule.name),
                body: encode(&added),
                expect,
            });
            match self.write(changes)? {
                RecordWrite::Written { .. } => return Ok(()),
                // Changed between the read and the write: read it again.
                RecordWrite::Conflict { .. } | RecordWrite::TooLate { .. } if replace => {}
                RecordWrite::Conflict { .. } | RecordWrite::TooLate { .. } => {
                    // The error's own wording says that nothing was changed.
                    return Err(BackendError::new(
                        ErrorKind::Held,
                        self.store.url().to_string(),
                        format!("a schedule named {} exists", crate::quoted(schedule.name.as_str())),
                    )
                    .hint("replace it with --replace, or remove it first")
                    .into());
                }
            }
        }
    }

    /// The store's clock now: what every decision about a slot's time is
    /// taken on ([`StoreClock`]) — the latest it may be, given the
    /// reading's uncertainty (etcd's, under a second), so that an add, a
    /// resume or a replacement dated by it never fires a slot from before
    /// it (it may pass over one that falls within the uncertainty).
    ///
    /// # Errors
    /// Store errors.
    pub fn now(&self) -> Result<SystemTime> {
        Ok(StoreClock::read(self.store)?.latest())
    }

    /// The store's records (what [`StoreClock`] reads the clock of).
    pub(crate) fn records(&self) -> &dyn RecordBackend {
        self.records
    }

    fn write(&self, changes: Vec<RecordChange>) -> Result<RecordWrite> {
        self.write_until(changes, None)
    }

    fn write_until(&self, changes: Vec<RecordChange>, not_after: Option<SystemTime>) -> Result<RecordWrite> {
        Ok(self.records.record_write(&RecordWriteParams { changes, not_after })?)
    }

    /// The schedule `name` with its state, if there is one.
    ///
    /// # Errors
    /// Store errors; [`ErrorKind::Corrupt`] for a record leasehold did not
    /// write.
    pub fn get(&self, name: &LeaseName) -> Result<Option<Kept>> {
        let Some(record) = self.records.record_get(&schedule_key(name))? else {
            return Ok(None);
        };
        Ok(Some(Kept {
            schedule: decode(&record)?,
            version: record.version,
            state: self.state(name)?,
        }))
    }

    /// The state of `name` (the last slot accounted for), with its
    /// version, if it has one yet.
    ///
    /// # Errors
    /// As [`Schedules::get`].
    pub fn state(&self, name: &LeaseName) -> Result<Option<(ScheduleState, RecordVersion)>> {
        self.records
            .record_get(&state_key(name))?
            .map(|r| Ok((decode(&r)?, r.version)))
            .transpose()
    }

    /// Every schedule, by name.
    ///
    /// # Errors
    /// As [`Schedules::get`].
    pub fn list(&self) -> Result<Vec<Kept>> {
        // Two listings, not a read per schedule: a daemon reads a thousand
        // schedules every refresh, over a network.
        let mut states = self.states()?;
        self.list_all(SCHEDULES_PREFIX)?
            .iter()
            .map(|record| {
                let schedule: Schedule = decode(record)?;
                Ok(Kept {
                    state: states.remove(schedule.name.as_str()),
                    schedule,
                    version: record.version,
                })
            })
            .collect()
    }

    /// Every schedule's state, by name.
    fn states(&self) -> Result<std::collections::HashMap<String, (ScheduleState, RecordVersion)>> {
        self.list_all(STATES_PREFIX)?
            .iter()
            .map(|r| {
                let name = r
                    .key
                    .as_str()
                    .strip_prefix(STATES_PREFIX)
                    .unwrap_or_default()
                    .to_owned();
                Ok((name, (decode(r)?, r.version)))
            })
            .collect()
    }

    /// Every record under `prefix`, a page at a time.
    fn list_all(&self, prefix: &str) -> Result<Vec<Record>> {
        let mut all = Vec::new();
        loop {
            let page = self.records.record_list(&RecordListParams {
                prefix: prefix.into(),
                after: all.last().map(|r: &Record| r.key.clone()),
                descending: false,
                limit: leasehold_backend::record::RECORD_LIST_MAX,
            })?;
            if page.is_empty() {
                return Ok(all);
            }
            all.extend(page);
        }
    }

    /// Pause or resume `name`: `Ok(false)` when there is no such schedule.
    /// A paused schedule's slots pass unfired and unrecorded; resuming
    /// starts it afresh from now on the store's clock (its state moves to
    /// the later of now and the last slot accounted for — never back), so
    /// a long pause leaves no backlog to catch up on.
    ///
    /// # Errors
    /// Store errors.
    pub fn set_paused(&self, name: &LeaseName, paused: bool) -> Result<bool> {
        loop {
            let now = self.now()?;
            let Some(kept) = self.get(name)? else { return Ok(false) };
            let mut schedule = kept.schedule.clone();
            schedule.paused = paused;
            let mut changes = vec![RecordChange::Put {
                key: schedule_key(name),
                body: encode(&schedule),
                expect: Expect::Version(kept.version),
            }];
            if !paused
                && kept.schedule.paused
                && let Some(state) = kept.moved_on(now)
            {
                changes.push(RecordChange::Put {
                    key: state_key(name),
                    body: encode(&state),
                    expect: kept.state_expect(),
                });
            }
            if let RecordWrite::Written { .. } = self.write(changes)? {
                return Ok(true);
            }
        }
    }

    /// Remove `name` with its state and slot records: `Ok(false)` when
    /// there is no such schedule. A daemon firing one of its slots now
    /// finishes that slot.
    ///
    /// # Errors
    /// Store errors.
    pub fn remove(&self, name: &LeaseName) -> Result<bool> {
        if self.records.record_get(&schedule_key(name))?.is_none() {
            return Ok(false);
        }
        self.delete_slots(name, None)?;
        self.write(vec![
            RecordChange::Delete {
                key: schedule_key(name),
                expect: Expect::Anything,
            },
            RecordChange::Delete {
                key: state_key(name),
                expect: Expect::Anything,
            },
        ])?;
        Ok(true)
    }

    /// The newest `limit` slot records of `name`, newest first.
    ///
    /// # Errors
    /// Store errors; [`ErrorKind::Corrupt`] for a record leasehold did not
    /// write.
    pub fn slots(&self, name: &LeaseName, limit: u32) -> Result<Vec<SlotRecord>> {
        self.slot_records(name, None, limit)?.iter().map(decode).collect()
    }

    fn slot_records(&self, name: &LeaseName, before: Option<SystemTime>, limit: u32) -> Result<Vec<Record>> {
        Ok(self.records.record_list(&RecordListParams {
            prefix: slots_prefix(name),
            after: before.map(|t| slot_key(name, t)),
            descending: true,
            limit: limit.clamp(1, leasehold_backend::record::RECORD_LIST_MAX),
        })?)
    }

    /// The record of `name`'s slot at `slot`, with its version.
    ///
    /// # Errors
    /// As [`Schedules::slots`].
    pub fn slot(&self, name: &LeaseName, slot: SystemTime) -> Result<Option<(SlotRecord, RecordVersion)>> {
        self.records
            .record_get(&slot_key(name, slot))?
            .map(|r| Ok((decode(&r)?, r.version)))
            .transpose()
    }

    /// Write what became of a slot this daemon claimed (or, `expect`ing
    /// the version read, one whose daemon was proved dead). `Ok(false)`:
    /// the record changed meanwhile (or was removed with its schedule).
    ///
    /// # Errors
    /// Store errors.
    pub fn report(&self, name: &LeaseName, record: &SlotRecord, expect: Expect) -> Result<bool> {
        if expect == Expect::Anything && self.records.record_get(&slot_key(name, record.slot))?.is_none() {
            return Ok(false);
        }
        let change = RecordChange::Put {
            key: slot_key(name, record.slot),
            body: encode(record),
            expect,
        };
        Ok(matches!(self.write(vec![change])?, RecordWrite::Written { .. }))
    }

    /// [`Schedules::report`] of many records, each expecting the version
    /// given, in as few writes as the store takes; whether each was
    /// written (a batch that meets a conflict is written one by one, so
    /// one removed schedule costs only its own record).
    ///
    /// # Errors
    /// Store errors.
    pub fn report_many(&self, records: &[(&LeaseName, &SlotRecord, RecordVersion)]) -> Result<Vec<bool>> {
        let mut written = Vec::with_capacity(records.len());
        for batch in records.chunks(RECORD_CHANGES_MAX) {
            let changes = batch
                .iter()
                .map(|(name, record, version)| RecordChange::Put {
                    key: slot_key(name, record.slot),
                    body: encode(record),
                    expect: Expect::Version(*version),
                })
                .collect();
            match self.write(changes)? {
                RecordWrite::Written { .. } => written.extend(std::iter::repeat_n(true, batch.len())),
                RecordWrite::Conflict { .. } | RecordWrite::TooLate { .. } => {
                    for (name, record, version) in batch {
                        written.push(self.report(name, record, Expect::Version(*version))?);
                    }
                }
            }
        }
        Ok(written)
    }

    /// Claim what is due of `kept` at `now`, as [`decide`](super::decide) decides, for the
    /// daemon `daemon`: one write that moves the state past the slots it
    /// accounts for, records the missed ones and creates the fired slot's
    /// record (see the module docs). At most `max_due` due slots are
    /// looked at per claim. `now` is the store's time the slots are judged
    /// at ([`StoreClock`]); a fired slot's deadline is judged again by the
    /// store when the write is applied.
    ///
    /// # Errors
    /// Store errors.
    pub fn claim(&self, kept: &Kept, now: SystemTime, daemon: &Holder, max_due: usize) -> Result<SlotClaim> {
        let mut claims = self.claim_many(&[kept], Watch::at(now), daemon, max_due)?;
        Ok(claims.pop().unwrap_or(SlotClaim::NothingDue))
    }

    /// [`Schedules::claim`] for many schedules at once, as few writes as
    /// the store takes ([`RECORD_CHANGES_MAX`] changes each): slots due at
    /// the same instant are claimed together, each judged at `now` — not
    /// at the end of a queue of claims. A claim another daemon wrote first
    /// is [`SlotClaim::Lost`] and does not hold up the others'.
    ///
    /// # Errors
    /// Store errors (the claims written before one are kept).
    pub fn claim_many(&self, kept: &[&Kept], watch: Watch, daemon: &Holder, max_due: usize) -> Result<Vec<SlotClaim>> {
        let mut outcomes = vec![SlotClaim::NothingDue; kept.len()];
        let mut pending: std::collections::VecDeque<(usize, ClaimPlan)> = kept
            .iter()
            .enumerate()
            .filter_map(|(i, k)| plan_claim(k, watch, daemon, max_due).map(|p| (i, p)))
            .collect();
        // A batch that was too late for one of its deadlines is split, its
        // claims written one by one (each judged again).
        let mut single = false;
        while !pending.is_empty() {
            let mut batch: Vec<(usize, ClaimPlan)> = Vec::new();
            let mut changes = 0;
            while let Some((_, next)) = pending.front() {
                let fits = changes + next.changes.len() <= RECORD_CHANGES_MAX;
                if !batch.is_empty() && (single || !fits) {
                    break;
                }
                changes += next.changes.len();
                batch.extend(pending.pop_front());
            }
            let not_after = batch.iter().filter_map(|(_, p)| p.not_after).min();
            let all: Vec<RecordChange> = batch.iter().flat_map(|(_, p)| p.changes.iter().cloned()).collect();
            match self.write_until(all, not_after)? {
                RecordWrite::Written { versions } => {
                    let mut versions = versions.into_iter();
                    for (i, plan) in batch {
                        let mine: Vec<Option<RecordVersion>> = versions.by_ref().take(plan.changes.len()).collect();
                        outcomes[i] = self.claimed(kept[i], plan, &mine)?;
                    }
                }
                RecordWrite::Conflict { key, .. } => {
                    // The claim that met the conflict is lost, and so is
                    // every other still to write whose schedule changed
                    // since it was read — another daemon claimed it: read
                    // again now, all at once, so that racing daemons cost
                    // a write per meeting, not one per claim. The rest are
                    // tried again.
                    let current = self.versions()?;
                    for (i, plan) in batch.into_iter().rev() {
                        pending.push_front((i, plan));
                    }
                    let mut still = std::collections::VecDeque::with_capacity(pending.len());
                    for (i, plan) in pending.drain(..) {
                        let name = &kept[i].schedule.name;
                        let met = plan.changes.iter().any(|c| *c.key() == key);
                        if met && key.as_str().starts_with(&slots_prefix(name)) {
                            outcomes[i] = SlotClaim::StateBehind;
                        } else if met || current.get(name.as_str()) != Some(&kept[i].versions()) {
                            outcomes[i] = SlotClaim::Lost;
                        } else {
                            still.push_back((i, plan));
                        }
                    }
                    pending = still;
                }
                RecordWrite::TooLate { now: late } => {
                    if batch.len() > 1 {
                        single = true;
                        for entry in batch.into_iter().rev() {
                            pending.push_front(entry);
                        }
                    } else {
                        // Judged again at the store's time of the refusal:
                        // the slot is past its deadline, so missed.
                        for (i, _) in batch {
                            if let Some(plan) = plan_claim(kept[i], Watch { now: late, ..watch }, daemon, max_due) {
                                pending.push_front((i, plan));
                            }
                        }
                    }
                }
            }
        }
        Ok(outcomes)
    }

    /// Every schedule's versions now (its own, its state's), by name.
    fn versions(&self) -> Result<std::collections::HashMap<String, (RecordVersion, Option<RecordVersion>)>> {
        let states = self.states()?;
        Ok(self
            .list_all(SCHEDULES_PREFIX)?
            .into_iter()
            .map(|r| {
                let name = r
                    .key
                    .as_str()
                    .strip_prefix(SCHEDULES_PREFIX)
                    .unwrap_or_default()
                    .to_owned();
                let state = states.get(&name).map(|(_, v)| *v);
                (name, (r.version, state))
            })
            .collect())
    }

    /// A written claim: what it recorded, with the versions it wrote (so
    /// the daemon need not read the schedule again).
    fn claimed(&self, kept: &Kept, plan: ClaimPlan, versions: &[Option<RecordVersion>]) -> Result<SlotClaim> {
        let name = &kept.schedule.name;
        if plan.state.claims.is_multiple_of(PRUNE_EVERY) {
            self.prune(name)?;
        }
        let version = |i: usize| versions.get(i).copied().flatten();
        let moved = match (version(0), version(plan.changes.len() - 1)) {
            (Some(state_version), Some(schedule_version)) => Some(Kept {
                schedule: kept.schedule.clone(),
                version: schedule_version,
                state: Some((plan.state, state_version)),
            }),
            _ => None,
        };
        // The fired slot's record is the change before the schedule's.
        let fired_version = plan.fired.as_ref().and_then(|_| version(plan.changes.len() - 2));
        Ok(SlotClaim::Claimed {
            missed: plan.missed,
            fired: plan.fired,
            behind: plan.behind,
            kept: moved.map(Box::new),
            fired_version,
        })
    }

    /// Move `name`'s state on past the newest record of its slots, when a
    /// claim found that record already there ([`SlotClaim::StateBehind`]:
    /// a state written back by a leasehold before 0.x, or restored from an
    /// older backup): `Ok(Some(slot))` with the slot it moved past.
    ///
    /// # Errors
    /// Store errors.
    pub fn move_past_recorded(&self, name: &LeaseName) -> Result<Option<SystemTime>> {
        let Some(kept) = self.get(name)? else { return Ok(None) };
        let Some(newest) = self
            .slot_records(name, None, 1)?
            .first()
            .map(decode::<SlotRecord>)
            .transpose()?
        else {
            return Ok(None);
        };
        // None when the state is at or past the record already.
        let Some(state) = kept.moved_on(newest.through) else {
            return Ok(None);
        };
        let change = RecordChange::Put {
            key: state_key(name),
            body: encode(&state),
            expect: kept.state_expect(),
        };
        Ok(matches!(self.write(vec![change])?, RecordWrite::Written { .. }).then_some(newest.through))
    }

    /// Delete the slot records of `name` older than the newest
    /// [`SLOTS_KEPT`] — every [`PRUNE_EVERY`]th claim, so a schedule keeps
    /// at most `SLOTS_KEPT + PRUNE_EVERY` records and a claim rarely pays
    /// for reading them.
    fn prune(&self, name: &LeaseName) -> Result<()> {
        let newest = self.slot_records(name, None, SLOTS_KEPT)?;
        let Some(oldest_kept) = newest.get(SLOTS_KEPT as usize - 1).map(|r| r.key.clone()) else {
            return Ok(());
        };
        self.delete_slots(name, Some(&oldest_kept))
    }

    /// Delete the slot records of `name` (those before the key `before`,
    /// when given), oldest first, a batch at a time.
    fn delete_slots(&self, name: &LeaseName, before: Option<&RecordKey>) -> Result<()> {
        loop {
            let older: Vec<RecordChange> = self
                .records
                .record_list(&RecordListParams {
                    prefix: slots_prefix(name),
                    after: None,
                    descending: false,
                    limit: leasehold_backend::record::RECORD_CHANGES_MAX as u32,
                })?
                .into_iter()
                .filter(|r| before.is_none_or(|before| r.key < *before))
                .map(|r| RecordChange::Delete {
                    key: r.key,
                    expect: Expect::Anything,
                })
                .collect();
            if older.is_empty() {
                return Ok(());
            }
            self.write(older)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::schedule::ScheduleSpec;
    use crate::schedule::plan::tests::schedule;
    use crate::schedule::record::CatchUp;

    /// Slot records are pruned to the newest [`SLOTS_KEPT`] every
    /// [`PRUNE_EVERY`] claims: after 1,100 slots each claimed on time, the
    /// last pruning (the 1,088th claim's) kept slots 89–1,088, and the 12
    /// since are there too; every older one is gone.
    #[test]
    fn old_slot_records_are_pruned_the_newest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("s.db")).unwrap();
        let schedules = store.schedules().unwrap();
        // `add` dates the schedule by the store's clock: the slots are the
        // whole seconds after it.
        let store_now = schedules.now().unwrap().duration_since(UNIX_EPOCH).unwrap();
        let start = UNIX_EPOCH + Duration::from_secs(store_now.as_secs() + 1);
        let second = |n: u64| start + Duration::from_secs(n);
        let mut every_second = schedule(CatchUp::None, None);
        every_second.spec = ScheduleSpec::parse("@every 1s", None).unwrap();
        schedules.add(&every_second, false).unwrap();
        let daemon = crate::identity::holder(crate::Binding::ThisProcess).unwrap();
        for n in 1..=1100 {
            let kept = schedules.get(&every_second.name).unwrap().unwrap();
            let claim = schedules.claim(&kept, second(n), &daemon, 10).unwrap();
            assert!(
                matches!(claim, SlotClaim::Claimed { fired: Some(_), .. }),
                "slot {n}: {claim:?}"
            );
        }
        let name = &every_second.name;
        for n in [1, 88] {
            assert!(
                schedules.slot(name, second(n)).unwrap().is_none(),
                "slot {n} was not pruned"
            );
        }
        for n in [89, 90, 1088, 1089, 1100] {
            assert!(
                schedules.slot(name, second(n)).unwrap().is_some(),
                "slot {n} was pruned"
            );
        }
    }
}
