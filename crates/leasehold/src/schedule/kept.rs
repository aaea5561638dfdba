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

use std::time::{Duration, SystemTime};

use leasehold_backend::{
    BackendError, ErrorKind, Expect, Holder, LeaseName, QueueName, Record, RecordBackend, RecordChange, RecordKey,
    RecordListParams, RecordVersion, RecordWrite, RecordWriteParams, unix_ms,
};
use serde::{Deserialize, Serialize};

use leasehold_backend::record::RECORD_CHANGES_MAX;

use super::ScheduleSpec;
use super::clock::StoreClock;
use crate::{Result, Store};

/// Slot records kept per schedule: the newest are kept, older ones pruned
/// as new ones are written (as a name's history is).
pub const SLOTS_KEPT: u32 = 1000;

/// How often (in claims of a schedule) its old slot records are pruned.
pub const PRUNE_EVERY: u64 = 64;

/// What a schedule does at each slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Run a command under the lease named after the schedule, as
    /// `leasehold run` does.
    Run { command: Vec<String> },
    /// Add a task to a queue, its id naming the slot (so a slot's task is
    /// added once, whoever adds it).
    Enqueue { queue: String, payload: serde_json::Value },
}

/// What a slot does when the previous slot's command still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// Do not run; the slot is recorded as skipped.
    #[default]
    Skip,
    /// Wait for it to end (until the next slot is due, or the deadline).
    Wait,
    /// Stop it (SIGTERM, then SIGKILL after its grace), then run.
    StopPrevious,
}

/// What becomes of slots whose time passed while no daemon could fire
/// them (all down, or the store unreachable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CatchUp {
    /// None runs: each is recorded as missed (cron's way).
    #[default]
    None,
    /// The newest runs, the others are recorded as missed (systemd's
    /// `Persistent=true`).
    Latest,
    /// Each runs, oldest first.
    All,
}

macro_rules! word_enum {
    ($ty:ident { $($variant:ident => $word:literal),* $(,)? }) => {
        impl $ty {
            /// Every value's word, as flags and JSON spell it.
            pub const WORDS: &'static [&'static str] = &[$($word),*];

            /// The word for this value.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $word),* }
            }

            /// The value a word names.
            #[must_use]
            pub fn from_word(word: &str) -> Option<Self> {
                match word { $($word => Some($ty::$variant),)* _ => None }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

word_enum!(Overlap { Skip => "skip", Wait => "wait", StopPrevious => "stop-previous" });
word_enum!(CatchUp { None => "none", Latest => "latest", All => "all" });

/// A schedule as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Its name, which is also the name of the lease its commands run
    /// under.
    pub name: LeaseName,
    pub spec: ScheduleSpec,
    pub action: Action,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    /// A slot not started within this long of its time is missed, never
    /// run late. `None`: no limit.
    #[serde(with = "opt_ms")]
    pub deadline: Option<Duration>,
    /// Each daemon waits a random part of this after a slot's time before
    /// it claims the slot (the first to claim fires it).
    #[serde(with = "ms")]
    pub jitter: Duration,
    /// The TTL of the lease a command runs under.
    #[serde(with = "ms")]
    pub ttl: Duration,
    /// SIGTERM to SIGKILL when a command is stopped (`None`: `run`'s
    /// default for the TTL).
    #[serde(with = "opt_ms")]
    pub grace: Option<Duration>,
    pub paused: bool,
    /// When it was added: its first slot is the first after this.
    #[serde(with = "unix_ms")]
    pub created: SystemTime,
}

impl Schedule {
    /// A schedule with `schedule add`'s defaults: `--overlap skip`,
    /// `--catch-up none`, no deadline, no jitter, a 60 s TTL, `run`'s
    /// grace, not paused.
    #[must_use]
    pub fn new(name: LeaseName, spec: ScheduleSpec, action: Action, created: SystemTime) -> Self {
        Self {
            name,
            spec,
            action,
            overlap: Overlap::Skip,
            catch_up: CatchUp::None,
            deadline: None,
            jitter: Duration::ZERO,
            ttl: Duration::from_secs(60),
            grace: None,
            paused: false,
            created,
        }
    }
}

/// The last slot of a schedule accounted for (fired, skipped or missed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    #[serde(with = "unix_ms")]
    pub last_slot: SystemTime,
    /// The newest slot that was claimed to fire (not missed), whose record
    /// the next claim looks at.
    #[serde(with = "opt_unix_ms")]
    pub last_fired: Option<SystemTime>,
    /// The daemon that claimed it: a daemon reads that slot's record only
    /// when this one is provably gone (one read per dead daemon, not one
    /// per claim).
    #[serde(default)]
    pub last_daemon: Option<Holder>,
    /// Claims written so far (pruning counts them).
    #[serde(default)]
    pub claims: u64,
}

/// What became of a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotOutcome {
    /// Claimed by a daemon, which has not reported since.
    Claimed,
    /// Its command runs under the lease (token recorded).
    Running,
    /// Its command exited 0.
    Ran,
    /// Its command exited non-zero, or could not start, or was stopped
    /// (lease lost, stalled, shut down).
    Failed,
    /// Stopped for the next slot (`--overlap stop-previous`).
    Stopped,
    /// Not run: the previous slot's command still ran (`--overlap skip`,
    /// or `wait` until the next slot or the deadline).
    Skipped,
    /// Not run: no daemon fired it in time (the deadline, the catch-up
    /// policy). A record of missed slots may stand for many (`count`).
    Missed,
    /// Its task was added to the queue.
    Enqueued,
    /// Its daemon died before reporting (proved dead by a daemon on its
    /// host); its command was stopped with it.
    Lost,
}

impl SlotOutcome {
    /// Every outcome: the closing ones, then `claimed` and `running` (the
    /// order of the status page's counts and of the metrics).
    pub const ALL: [SlotOutcome; 9] = [
        SlotOutcome::Ran,
        SlotOutcome::Failed,
        SlotOutcome::Stopped,
        SlotOutcome::Skipped,
        SlotOutcome::Missed,
        SlotOutcome::Enqueued,
        SlotOutcome::Lost,
        SlotOutcome::Claimed,
        SlotOutcome::Running,
    ];

    /// Whether the slot is still in its daemon's hands.
    #[must_use]
    pub fn is_open(self) -> bool {
        matches!(self, SlotOutcome::Claimed | SlotOutcome::Running)
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SlotOutcome::Claimed => "claimed",
            SlotOutcome::Running => "running",
            SlotOutcome::Ran => "ran",
            SlotOutcome::Failed => "failed",
            SlotOutcome::Stopped => "stopped",
            SlotOutcome::Skipped => "skipped",
            SlotOutcome::Missed => "missed",
            SlotOutcome::Enqueued => "enqueued",
            SlotOutcome::Lost => "lost",
        }
    }
}

impl std::fmt::Display for SlotOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of one slot (or of `count` missed slots from `slot` to
/// `through`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    #[serde(with = "unix_ms")]
    pub slot: SystemTime,
    pub outcome: SlotOutcome,
    /// Slots this record stands for (more than 1 only for missed ones).
    pub count: u64,
    /// The last of them.
    #[serde(with = "unix_ms")]
    pub through: SystemTime,
    /// The daemon that claimed it (`None` for missed slots).
    pub daemon: Option<Holder>,
    #[serde(with = "unix_ms")]
    pub claimed: SystemTime,
    #[serde(with = "opt_unix_ms")]
    pub started: Option<SystemTime>,
    #[serde(with = "opt_unix_ms")]
    pub ended: Option<SystemTime>,
    /// The token of the lease its command ran under.
    pub token: Option<u64>,
    pub exit_code: Option<i32>,
    /// Why, in words ("exit 3", "held by pid 4242 on h1", "3m late; the
    /// deadline is 1m").
    pub detail: String,
}

impl SlotRecord {
    /// How late the slot was started, if it was.
    #[must_use]
    pub fn lateness(&self) -> Option<Duration> {
        self.started.map(|s| s.duration_since(self.slot).unwrap_or_default())
    }

    /// How long its command ran, if it ended.
    #[must_use]
    pub fn duration(&self) -> Option<Duration> {
        Some(self.ended?.duration_since(self.started?).unwrap_or_default())
    }
}

/// A schedule with the store's versions of its records, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub schedule: Schedule,
    pub version: RecordVersion,
    pub state: Option<(ScheduleState, RecordVersion)>,
}

impl Kept {
    /// The versions read: the schedule's and its state's.
    fn versions(&self) -> (RecordVersion, Option<RecordVersion>) {
        (self.version, self.state.as_ref().map(|(_, v)| *v))
    }

    /// What a write of the state expects: the version read, or none.
    fn state_expect(&self) -> Expect {
        self.state.as_ref().map_or(Expect::Absent, |(_, v)| Expect::Version(*v))
    }

    /// The last slot accounted for: the state's, or the schedule's
    /// creation before its first slot.
    #[must_use]
    pub fn accounted_until(&self) -> SystemTime {
        self.state.as_ref().map_or(self.schedule.created, |(s, _)| s.last_slot)
    }

    /// The state moved on to `now` (a resume, a replacement): the slots
    /// up to now are passed over unrecorded. `None` when it is there
    /// already — state never moves back, so no slot with a record is ever
    /// due again.
    fn moved_on(&self, now: SystemTime) -> Option<ScheduleState> {
        (now > self.accounted_until()).then(|| ScheduleState {
            last_slot: now,
            last_fired: self.state.as_ref().and_then(|(s, _)| s.last_fired),
            last_daemon: self.state.as_ref().and_then(|(s, _)| s.last_daemon.clone()),
            claims: self.state.as_ref().map_or(0, |(s, _)| s.claims),
        })
    }

    /// The next slot as of `now`: the first after the last one accounted
    /// for and after `now` (slots already due are a daemon's to account
    /// for); `None` while paused. What `schedule list` and the status page
    /// call next.
    #[must_use]
    pub fn next_slot(&self, now: SystemTime) -> Option<SystemTime> {
        if self.schedule.paused {
            return None;
        }
        self.schedule.spec.next_after(self.accounted_until().max(now))
    }
}

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
struct ClaimPlan {
    changes: Vec<RecordChange>,
    state: ScheduleState,
    missed: Option<SlotRecord>,
    fired: Option<SlotRecord>,
    behind: bool,
    /// The fired slot's deadline: the write is applied only before it.
    not_after: Option<SystemTime>,
}

/// What a claim of `kept` at `now` writes, as [`decide`] decides; `None`
/// when nothing is due.
fn plan_claim(kept: &Kept, watch: Watch, daemon: &Holder, max_due: usize) -> Option<ClaimPlan> {
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
                "keep schedules in a SQLite, PostgreSQL or etcd store",
            )
        })?;
        Ok(Schedules { store: self, records })
    }
}

fn key(text: String) -> RecordKey {
    RecordKey::new(text).expect("keys built from a lease name are valid")
}

const SCHEDULES_PREFIX: &str = "schedule/";
const STATES_PREFIX: &str = "schedule-state/";

fn schedule_key(name: &LeaseName) -> RecordKey {
    key(format!("{SCHEDULES_PREFIX}{name}"))
}

fn state_key(name: &LeaseName) -> RecordKey {
    key(format!("{STATES_PREFIX}{name}"))
}

fn slots_prefix(name: &LeaseName) -> String {
    format!("schedule-slot/{}:{name}/", name.as_str().len())
}

/// The key of the slot at `slot` (milliseconds, zero-padded so that keys
/// sort as times do).
fn slot_key(name: &LeaseName, slot: SystemTime) -> RecordKey {
    key(format!("{}{:016}", slots_prefix(name), unix_ms::to_ms(slot)))
}

/// The id of the task a slot adds: the schedule and the slot time, so a
/// slot's task is one task whoever adds it.
#[must_use]
pub fn slot_task_id(name: &LeaseName, slot: SystemTime) -> String {
    format!("{name}@{}", crate::format_time(slot))
}

fn corrupt(key: &RecordKey, e: &serde_json::Error) -> crate::Error {
    BackendError::new(
        ErrorKind::Corrupt,
        String::new(),
        format!("the record {key} is not what leasehold writes ({e}); it was left as found"),
    )
    .into()
}

fn decode<T: serde::de::DeserializeOwned>(record: &Record) -> Result<T> {
    serde_json::from_str(&record.body).map_err(|e| corrupt(&record.key, &e))
}

fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("schedule records are plain data")
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

    /// Claim what is due of `kept` at `now`, as [`decide`] decides, for the
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

mod opt_unix_ms {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option, reason = "serde's with = signature")]
    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&super::unix_ms::to_ms(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map(super::unix_ms::from_ms))
    }
}

mod ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod opt_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::ref_option, reason = "serde's with = signature")]
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// A queue name from an action (validated when the schedule was added).
///
/// # Errors
/// [`ErrorKind::Corrupt`] for a queue name no leasehold would store.
pub fn queue_of(queue: &str) -> Result<QueueName> {
    QueueName::new(queue).map_err(|e| {
        BackendError::new(
            ErrorKind::Corrupt,
            String::new(),
            format!("a schedule names the queue {queue:?}, which is not a queue name ({e})"),
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn schedule(catch_up: CatchUp, deadline: Option<Duration>) -> Schedule {
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

    fn at(mins: u64) -> SystemTime {
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

    #[test]
    fn slot_keys_sort_as_times_and_keep_names_apart() {
        let a = LeaseName::new("a").unwrap();
        let ab = LeaseName::new("a/b").unwrap();
        assert!(slot_key(&a, at(2)) > slot_key(&a, at(1)));
        assert!(slot_key(&a, at(100_000)) > slot_key(&a, at(3)));
        assert!(!slot_key(&ab, at(1)).as_str().starts_with(&slots_prefix(&a)));
    }

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
