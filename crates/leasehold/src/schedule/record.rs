//! The records a schedule keeps in the store, and their keys: the
//! [`Schedule`] itself (with its [`Action`], [`Overlap`] and [`CatchUp`]
//! policies), its [`ScheduleState`], each slot's [`SlotRecord`], and
//! [`Kept`] — a schedule with the versions read. Their JSON bodies and
//! keys are a format other leasehold versions read: the table in `kept.rs`
//! names them.

use std::time::{Duration, SystemTime};

use leasehold_backend::{
    BackendError, ErrorKind, Expect, Holder, LeaseName, QueueName, Record, RecordKey, RecordVersion, unix_ms,
};
use serde::{Deserialize, Serialize};

use super::ScheduleSpec;
use crate::Result;

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
    pub(super) fn versions(&self) -> (RecordVersion, Option<RecordVersion>) {
        (self.version, self.state.as_ref().map(|(_, v)| *v))
    }

    /// What a write of the state expects: the version read, or none.
    pub(super) fn state_expect(&self) -> Expect {
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
    pub(super) fn moved_on(&self, now: SystemTime) -> Option<ScheduleState> {
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

pub(super) fn key(text: String) -> RecordKey {
    RecordKey::new(text).expect("keys built from a lease name are valid")
}

pub(super) const SCHEDULES_PREFIX: &str = "schedule/";
pub(super) const STATES_PREFIX: &str = "schedule-state/";

pub(super) fn schedule_key(name: &LeaseName) -> RecordKey {
    key(format!("{SCHEDULES_PREFIX}{name}"))
}

pub(super) fn state_key(name: &LeaseName) -> RecordKey {
    key(format!("{STATES_PREFIX}{name}"))
}

pub(super) fn slots_prefix(name: &LeaseName) -> String {
    format!("schedule-slot/{}:{name}/", name.as_str().len())
}

/// The key of the slot at `slot` (milliseconds, zero-padded so that keys
/// sort as times do).
pub(super) fn slot_key(name: &LeaseName, slot: SystemTime) -> RecordKey {
    key(format!("{}{:016}", slots_prefix(name), unix_ms::to_ms(slot)))
}

/// The id of the task a slot adds: the schedule and the slot time, so a
/// slot's task is one task whoever adds it.
#[must_use]
pub fn slot_task_id(name: &LeaseName, slot: SystemTime) -> String {
    format!("{name}@{}", crate::format_time(slot))
}

pub(super) fn corrupt(key: &RecordKey, e: &serde_json::Error) -> crate::Error {
    BackendError::new(
        ErrorKind::Corrupt,
        String::new(),
        format!("the record {key} is not what leasehold writes ({e}); it was left as found"),
    )
    .into()
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(record: &Record) -> Result<T> {
    serde_json::from_str(&record.body).map_err(|e| corrupt(&record.key, &e))
}

pub(super) fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("schedule records are plain data")
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
    use super::*;
    use crate::schedule::plan::tests::at;

    #[test]
    fn slot_keys_sort_as_times_and_keep_names_apart() {
        let a = LeaseName::new("a").unwrap();
        let ab = LeaseName::new("a/b").unwrap();
        assert!(slot_key(&a, at(2)) > slot_key(&a, at(1)));
        assert!(slot_key(&a, at(100_000)) > slot_key(&a, at(3)));
        assert!(!slot_key(&ab, at(1)).as_str().starts_with(&slots_prefix(&a)));
    }
}
