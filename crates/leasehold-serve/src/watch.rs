//! The follower: one thread reads the store once per refresh and keeps
//! what every page, event stream and scrape needs — so ten open tabs and
//! a scraper cost the store one read per refresh, not one each.
//!
//! Each refresh it reads every name's state (`Store::list`), the queues'
//! counts, the schedules with their slot records (the newest
//! [`SLOTS_KEPT`] of each, read again only where something moved: see
//! `Follower::schedule`), and follows lease history from a cursor per
//! name: the names
//! whose state changed, then as many others as fit in a time budget, in
//! turn, so a quiet name's fence verdicts are seen too. The cursor is the
//! newest entries seen of the name; what lies after them in the store's
//! history is new, and counted. Counters so start at zero when `serve`
//! starts and only grow (a Prometheus counter may reset when the process
//! restarts) — they are never re-counted from what history still holds,
//! which the store prunes per name. Entries followed are also kept in
//! memory for `--retention`, so the timeline can reach back further than
//! the store keeps while `serve` runs.

#![allow(clippy::cast_precision_loss, reason = "rates from counts far below 2^52")]

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use leasehold::identity::{Liveness, Vantage};
use leasehold::schedule::{Kept, SLOTS_KEPT, Schedules, SlotOutcome, SlotRecord};
use leasehold::{
    Grant, GrantId, HistoryEntry, HistoryEvent, LeaseName, LeaseState, QueueStats, Store, Task, TaskState, Token,
};

/// Entries read to find a name's cursor; a name with more new entries
/// since the last visit is read again in full.
const FOLLOW_WINDOW: u32 = 32;
pub use leasehold::timeline::HISTORY_MAX;
/// Entries of the cursor compared to find where new ones start.
const CURSOR_LEN: usize = 16;
/// Running tasks read per queue (one per worker; more are not shown).
pub const RUNNING_MAX: u32 = 500;
/// Entries kept in memory per name, whatever the retention.
const MEMORY_PER_NAME: usize = 10_000;
/// Slot records read of a schedule whose state moved: the newest, enough
/// for every claim between two readings but a long outage of `serve`'s.
const SLOT_WINDOW: u32 = 32;

/// The events counted per name, in the order of the metrics.
pub const COUNTED: [HistoryEvent; 8] = [
    HistoryEvent::Granted,
    HistoryEvent::Reacquired,
    HistoryEvent::Released,
    HistoryEvent::Expired,
    HistoryEvent::FastTakeover,
    HistoryEvent::StaleRefused,
    HistoryEvent::FencePassed,
    HistoryEvent::FenceRefused,
];

/// Every outcome of a slot, in the order of [`ScheduleView::outcomes`]
/// and the metrics.
pub const OUTCOMES: [SlotOutcome; 9] = SlotOutcome::ALL;

/// Where `outcome` is in [`OUTCOMES`]; a match, so that an outcome added
/// to the library does not compile until it is counted.
fn outcome_index(outcome: SlotOutcome) -> usize {
    match outcome {
        SlotOutcome::Ran => 0,
        SlotOutcome::Failed => 1,
        SlotOutcome::Stopped => 2,
        SlotOutcome::Skipped => 3,
        SlotOutcome::Missed => 4,
        SlotOutcome::Enqueued => 5,
        SlotOutcome::Lost => 6,
        SlotOutcome::Claimed => 7,
        SlotOutcome::Running => 8,
    }
}

/// The window a rate per minute is measured over: never shown for less.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// How many things happened over how long a window this serve measured —
/// a rate only once the window covers a whole minute ([`Rate::per_minute`]),
/// never extrapolated from less.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub count: u64,
    /// The window measured: from the oldest reading kept to the newest.
    pub over: Duration,
}

impl Rate {
    /// Per minute over [`Rate::over`], when it covers at least
    /// [`RATE_WINDOW`].
    #[must_use]
    pub fn per_minute(&self) -> Option<f64> {
        (self.over >= RATE_WINDOW).then(|| self.count as f64 / (self.over.as_secs_f64() / 60.0))
    }
}

/// Readings of running totals over time, kept so that the oldest is the
/// newest one at least [`RATE_WINDOW`] old: the window measured is at
/// least a minute as soon as a minute has been watched, and never more
/// than a minute and one refresh.
#[derive(Debug, Clone, Default)]
pub struct Window {
    readings: VecDeque<(Instant, [u64; 2])>,
}

impl Window {
    /// Add the totals read at `at`; drop readings no longer needed.
    pub fn push(&mut self, at: Instant, totals: [u64; 2]) {
        self.readings.push_back((at, totals));
        while self.readings.len() > 2
            && self
                .readings
                .get(1)
                .is_some_and(|(t, _)| at.duration_since(*t) >= RATE_WINDOW)
        {
            self.readings.pop_front();
        }
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.readings.is_empty()
    }

    /// What happened to total `k` between the oldest and the newest reading.
    #[must_use]
    pub fn rate(&self, k: usize) -> Rate {
        match (self.readings.front(), self.readings.back()) {
            (Some((t0, a)), Some((t1, b))) => Rate {
                count: b[k].saturating_sub(a[k]),
                over: t1.duration_since(*t0),
            },
            _ => Rate {
                count: 0,
                over: Duration::ZERO,
            },
        }
    }
}

/// What one queue looks like now.
#[derive(Debug, Clone)]
pub struct QueueView {
    pub stats: QueueStats,
    /// The next task in claim order, if any is pending.
    pub next: Option<Task>,
    /// Running tasks (at most [`RUNNING_MAX`]).
    pub running: Vec<Task>,
    /// Running tasks whose claim is overdue for a heartbeat (less than
    /// half its TTL left) but not yet expired.
    pub late: u64,
    /// Running tasks whose claim has expired (the task comes back at its
    /// queue's next claim).
    pub expired: u64,
    /// Claims and completions this serve saw, and over what window.
    pub claims: Rate,
    pub completions: Rate,
}

impl QueueView {
    /// How long the next task to be claimed has been claimable.
    #[must_use]
    pub fn oldest_pending_age(&self, now: SystemTime) -> Option<Duration> {
        let next = self.next.as_ref()?;
        now.duration_since(next.available_at).ok()
    }
}

/// What one schedule looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleView {
    /// The schedule and its state.
    pub kept: Kept,
    /// Its slot records, newest first: the newest [`SLOTS_KEPT`], what the
    /// store keeps (it prunes older ones every few claims, so a few more
    /// may still be there; they are not read).
    pub slots: Vec<SlotRecord>,
}

impl ScheduleView {
    /// Slots per outcome among [`ScheduleView::slots`], in the order of
    /// [`OUTCOMES`]: a record of missed slots counts each slot it stands
    /// for.
    #[must_use]
    pub fn outcomes(&self) -> [u64; OUTCOMES.len()] {
        let mut counts = [0; OUTCOMES.len()];
        for r in &self.slots {
            counts[outcome_index(r.outcome)] += r.count;
        }
        counts
    }
}

/// One reading of the store.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was read (the countdowns subtract what passed since).
    pub read_at: Instant,
    pub wall: SystemTime,
    /// Every name, ordered by name.
    pub leases: Vec<LeaseState>,
    /// What this host can tell of each grant's holder, judged once per
    /// reading (by name and token; a grant not judged is `Unknown`).
    pub liveness: HashMap<(LeaseName, Token), Liveness>,
    /// `None`: the store has no queue (etcd).
    pub queues: Option<Vec<QueueView>>,
    /// Every schedule, ordered by name. `None`: the store keeps no
    /// schedules (no records).
    pub schedules: Option<Vec<ScheduleView>>,
    /// How long the reading took.
    pub took: Duration,
    /// The store could not be read (the previous reading is kept).
    pub error: Option<String>,
    /// Counts up at every reading that changed something.
    pub generation: u64,
}

impl Snapshot {
    fn empty(has_queue: bool, has_schedules: bool) -> Self {
        Self {
            read_at: Instant::now(),
            wall: SystemTime::now(),
            leases: Vec::new(),
            liveness: HashMap::new(),
            queues: has_queue.then(Vec::new),
            schedules: has_schedules.then(Vec::new),
            took: Duration::ZERO,
            error: None,
            generation: 0,
        }
    }

    /// A reading of nothing (pages drawn without the store).
    #[must_use]
    pub fn placeholder() -> Self {
        Self::empty(false, false)
    }

    /// Time left on a grant as of now (not as of the reading).
    #[must_use]
    pub fn remaining(&self, expires_in: Duration) -> Duration {
        expires_in.saturating_sub(self.read_at.elapsed())
    }

    /// What this host can tell of `grant`'s holder, as of the reading.
    #[must_use]
    pub fn liveness(&self, grant: &Grant) -> Liveness {
        self.liveness
            .get(&(grant.name.clone(), grant.token))
            .copied()
            .unwrap_or(Liveness::Unknown)
    }

    /// Whether `grant`'s holder is provably gone: the grant is takeable
    /// now, and never shown or counted as held by a live holder.
    #[must_use]
    pub fn dead(&self, grant: &Grant) -> bool {
        self.liveness(grant) == Liveness::Dead
    }

    /// Whether `state` has a grant whose holder is not provably gone.
    #[must_use]
    pub fn held(&self, state: &LeaseState) -> bool {
        state.grants.iter().any(|g| !self.dead(g))
    }

    #[must_use]
    pub fn lease(&self, name: &LeaseName) -> Option<&LeaseState> {
        self.leases
            .binary_search_by(|s| s.name.as_str().cmp(name.as_str()))
            .ok()
            .map(|i| &self.leases[i])
    }

    #[must_use]
    pub fn schedule(&self, name: &LeaseName) -> Option<&ScheduleView> {
        self.schedules.as_ref()?.iter().find(|v| &v.kept.schedule.name == name)
    }
}

/// Counters since `serve` started.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Per name, per event of [`COUNTED`], then takeovers after expiry (a
    /// grant given right after the previous one's expiry was recorded).
    pub events: BTreeMap<LeaseName, [u64; COUNTED.len() + 1]>,
    /// Per queue: claims seen (a lower bound, see docs/SERVE.md),
    /// completions, deaths.
    pub queues: BTreeMap<LeaseName, QueueCounters>,
    /// Entries that may have been missed: more new entries of a name
    /// arrived between two visits than the store keeps.
    pub history_gaps: u64,
    pub refreshes: u64,
    pub refresh_errors: u64,
    pub last_refresh: Duration,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct QueueCounters {
    pub claims: u64,
    pub completions: u64,
    pub deaths: u64,
}

/// A name's cursor and the entries followed since `serve` started.
#[derive(Debug, Default)]
struct Follow {
    /// The newest entries seen, oldest first.
    cursor: Vec<HistoryEntry>,
    /// Entries followed (not those already there at the first visit),
    /// oldest first, within the retention.
    kept: VecDeque<HistoryEntry>,
}

/// The state every request reads.
#[derive(Debug)]
pub struct Shared {
    snapshot: RwLock<Arc<Snapshot>>,
    changed: (Mutex<u64>, Condvar),
    counters: Mutex<Counters>,
    follows: Mutex<HashMap<LeaseName, Follow>>,
    /// When a grant was last seen live and how long it had left: the end
    /// of a grant that lapsed unrecorded.
    ends: Mutex<HashMap<(LeaseName, Token), SystemTime>>,
    pub has_queue: bool,
    /// The store keeps records, so schedules.
    pub has_schedules: bool,
    pub retention: Duration,
    pub refresh: Duration,
}

impl Shared {
    #[must_use]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().expect("snapshot lock"))
    }

    #[must_use]
    pub fn counters(&self) -> Counters {
        self.counters.lock().expect("counters lock").clone()
    }

    /// Wait until the generation passes `seen`, or `timeout`; the
    /// generation now.
    pub fn wait_change(&self, seen: u64, timeout: Duration) -> u64 {
        let (lock, cv) = &self.changed;
        let guard = lock.lock().expect("generation lock");
        let (guard, _) = cv
            .wait_timeout_while(guard, timeout, |g| *g <= seen)
            .expect("generation lock");
        *guard
    }

    /// Entries of `name` followed in memory that are older than `before`
    /// (the oldest the store still has), oldest first.
    #[must_use]
    pub fn kept_before(&self, name: &LeaseName, before: Option<SystemTime>) -> Vec<HistoryEntry> {
        let follows = self.follows.lock().expect("follows lock");
        follows.get(name).map_or_else(Vec::new, |f| {
            f.kept
                .iter()
                .filter(|e| before.is_none_or(|b| e.at < b))
                .cloned()
                .collect()
        })
    }

    /// Ends of grants seen to lapse.
    #[must_use]
    pub fn observed_ends(&self, name: &LeaseName) -> HashMap<Token, SystemTime> {
        self.ends
            .lock()
            .expect("ends lock")
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, t), at)| (*t, *at))
            .collect()
    }
}

/// Start the follower thread; it reads once before this returns, so the
/// first page is never empty for want of a reading.
#[must_use]
pub fn start(store: Arc<Store>, refresh: Duration, retention: Duration) -> Arc<Shared> {
    let has_queue = store.backend().tasks().is_some();
    let has_schedules = store.schedules().is_ok();
    let shared = Arc::new(Shared {
        snapshot: RwLock::new(Arc::new(Snapshot::empty(has_queue, has_schedules))),
        changed: (Mutex::new(0), Condvar::new()),
        counters: Mutex::new(Counters::default()),
        follows: Mutex::new(HashMap::new()),
        ends: Mutex::new(HashMap::new()),
        has_queue,
        has_schedules,
        retention,
        refresh,
    });
    let mut follower = Follower::new(store, Arc::clone(&shared));
    follower.tick();
    std::thread::Builder::new()
        .name("leasehold-serve-follow".into())
        .spawn(move || {
            loop {
                let started = Instant::now();
                follower.tick();
                // A slow store (10,000 names over a network) is read less
                // often rather than all the time.
                let took = started.elapsed();
                std::thread::sleep(refresh.max(took * 2).saturating_sub(took));
            }
        })
        .expect("cannot start the follower thread");
    shared
}

/// Claims running at the last reading, and the done and dead counts.
type Seen = (HashSet<(LeaseName, Token)>, u64, u64);

struct Follower {
    store: Arc<Store>,
    shared: Arc<Shared>,
    /// Where the next sweep over quiet names starts.
    sweep: usize,
    /// Per queue: running claims seen last time, and the done/dead counts.
    queue_seen: HashMap<LeaseName, Seen>,
    /// Per queue: claims and completions over the last minute.
    rates: HashMap<LeaseName, Window>,
    /// When the previous reading was made (a queue first seen now was
    /// empty then: its first claims count from there).
    previous_reading: Option<Instant>,
    /// Each schedule as last read: what the next reading reuses.
    schedules_seen: HashMap<LeaseName, ScheduleView>,
    /// Grants whose holder was found provably gone.
    dead: HashSet<GrantId>,
    generation: u64,
    /// The first reading: every name is visited, and only to set its cursor.
    baseline: bool,
}

/// What of a state decides whether its history may have changed.
fn fingerprint(s: &LeaseState) -> (Token, usize, Vec<Token>) {
    (
        s.last_token,
        s.waiters.len(),
        s.grants.iter().map(|g| g.token).collect(),
    )
}

impl Follower {
    fn new(store: Arc<Store>, shared: Arc<Shared>) -> Self {
        Self {
            store,
            shared,
            sweep: 0,
            queue_seen: HashMap::new(),
            rates: HashMap::new(),
            previous_reading: None,
            schedules_seen: HashMap::new(),
            dead: HashSet::new(),
            generation: 0,
            baseline: true,
        }
    }

    fn tick(&mut self) {
        let started = Instant::now();
        let wall = SystemTime::now();
        let leases = match self.store.list(false) {
            Ok(l) => l,
            Err(e) => return self.failed(&e.to_string()),
        };
        let queues = if self.shared.has_queue {
            match self.queues() {
                Ok(q) => Some(q),
                Err(e) => return self.failed(&e.to_string()),
            }
        } else {
            None
        };
        let schedules = if self.shared.has_schedules {
            match self.schedules() {
                Ok(s) => Some(s),
                Err(e) => return self.failed(&e.to_string()),
            }
        } else {
            None
        };
        let previous = self.shared.snapshot();
        let liveness = judge(&leases, &mut self.dead);
        self.note_ends(&previous, &leases);
        let changed: Vec<LeaseName> = {
            let before: HashMap<&LeaseName, _> = previous.leases.iter().map(|s| (&s.name, fingerprint(s))).collect();
            leases
                .iter()
                .filter(|s| before.get(&s.name) != Some(&fingerprint(s)))
                .map(|s| s.name.clone())
                .collect()
        };
        // A holder found dead changes what the page shows, though nothing
        // in the store changed.
        let moved = !changed.is_empty()
            || liveness != previous.liveness
            || queues
                .as_ref()
                .map(|q| q.iter().map(|v| v.stats.clone()).collect::<Vec<_>>())
                != previous
                    .queues
                    .as_ref()
                    .map(|q| q.iter().map(|v| v.stats.clone()).collect::<Vec<_>>())
            || schedules != previous.schedules;
        self.follow(&leases, &changed, started);
        if moved || previous.error.is_some() {
            self.generation += 1;
        }
        let snapshot = Snapshot {
            read_at: started,
            wall,
            leases,
            liveness,
            queues,
            schedules,
            took: started.elapsed(),
            error: None,
            generation: self.generation,
        };
        self.publish(snapshot);
        let mut c = self.shared.counters.lock().expect("counters lock");
        c.refreshes += 1;
        c.last_refresh = started.elapsed();
    }

    fn failed(&mut self, error: &str) {
        let mut s = (*self.shared.snapshot()).clone();
        if s.error.as_deref() != Some(error) {
            self.generation += 1;
        }
        s.error = Some(error.to_owned());
        s.generation = self.generation;
        self.publish(s);
        self.shared.counters.lock().expect("counters lock").refresh_errors += 1;
    }

    fn publish(&self, snapshot: Snapshot) {
        let generation = snapshot.generation;
        *self.shared.snapshot.write().expect("snapshot lock") = Arc::new(snapshot);
        let (lock, cv) = &self.shared.changed;
        *lock.lock().expect("generation lock") = generation;
        cv.notify_all();
    }

    /// Grants live last time and gone now: when they ended, if by their
    /// TTL (a release or takeover is in the history with its time).
    fn note_ends(&self, previous: &Snapshot, leases: &[LeaseState]) {
        let now: HashSet<(&LeaseName, Token)> = leases
            .iter()
            .flat_map(|s| s.grants.iter().map(move |g| (&s.name, g.token)))
            .collect();
        let mut ends = self.shared.ends.lock().expect("ends lock");
        for s in &previous.leases {
            for g in &s.grants {
                if !now.contains(&(&s.name, g.token)) {
                    let by_ttl = leasehold::later(previous.wall, g.expires_in);
                    ends.insert((s.name.clone(), g.token), by_ttl.min(SystemTime::now()));
                }
            }
        }
        let horizon = SystemTime::now().checked_sub(self.shared.retention);
        ends.retain(|_, at| horizon.is_none_or(|h| *at >= h));
        if ends.len() > 100_000 {
            ends.clear();
        }
    }

    /// Follow the changed names, then quiet ones in turn within a budget.
    fn follow(&mut self, leases: &[LeaseState], changed: &[LeaseName], started: Instant) {
        let budget = Duration::from_millis(100)
            .min(self.shared.refresh / 4)
            .max(Duration::from_millis(20));
        let mut visited: HashSet<&LeaseName> = HashSet::new();
        for name in changed {
            self.visit(name);
            visited.insert(name);
        }
        let n = leases.len();
        let mut done = 0;
        while done < n && (self.baseline || started.elapsed() < budget || done < 50) {
            let name = &leases[(self.sweep + done) % n].name;
            done += 1;
            if visited.insert(name) {
                self.visit(name);
            }
        }
        if n > 0 {
            self.sweep = (self.sweep + done) % n;
        }
        self.baseline = false;
    }

    fn visit(&mut self, name: &LeaseName) {
        // Names of the first reading are read from their newest entry on;
        // a name that appears later was born since, so all of its history
        // is new.
        let first = self.baseline && !self.shared.follows.lock().expect("follows lock").contains_key(name);
        let Ok(mut newest) = self.store.history(name, FOLLOW_WINDOW) else {
            return;
        };
        newest.reverse();
        let mut follows = self.shared.follows.lock().expect("follows lock");
        let follow = follows.entry(name.clone()).or_default();
        if first {
            follow.cursor = tail(&newest, CURSOR_LEN);
            return;
        }
        let full = newest.len() == FOLLOW_WINDOW as usize;
        let mut fresh = if follow.cursor.is_empty() && full {
            None
        } else {
            new_entries(&follow.cursor, &newest)
        };
        if fresh.is_none() && full {
            drop(follows);
            let Ok(mut all) = self.store.history(name, HISTORY_MAX) else {
                return;
            };
            all.reverse();
            follows = self.shared.follows.lock().expect("follows lock");
            let follow = follows.entry(name.clone()).or_default();
            let found = new_entries(&follow.cursor, &all);
            if found.is_none() {
                self.shared.counters.lock().expect("counters lock").history_gaps += 1;
            }
            newest = all;
            fresh = found;
        }
        let follow = follows.get_mut(name).expect("entry made above");
        let count = fresh.unwrap_or(newest.len());
        let new = &newest[newest.len() - count..];
        if new.is_empty() {
            return;
        }
        {
            let mut c = self.shared.counters.lock().expect("counters lock");
            let slot = c.events.entry(name.clone()).or_insert([0; COUNTED.len() + 1]);
            let first = newest.len() - count;
            for (i, e) in newest.iter().enumerate().skip(first) {
                if let Some(k) = COUNTED.iter().position(|k| *k == e.event) {
                    slot[k] += 1;
                }
                if i > 0 && leasehold::timeline::after_expiry(&newest[i - 1], e) {
                    slot[COUNTED.len()] += 1;
                }
            }
        }
        follow.kept.extend(new.iter().cloned());
        let horizon = SystemTime::now().checked_sub(self.shared.retention);
        while follow.kept.len() > MEMORY_PER_NAME
            || follow.kept.front().is_some_and(|e| horizon.is_some_and(|h| e.at < h))
        {
            follow.kept.pop_front();
        }
        follow.cursor = tail(&newest, CURSOR_LEN);
    }

    /// Every schedule with its slot records, each read as
    /// [`Follower::schedule`] says.
    fn schedules(&mut self) -> leasehold::Result<Vec<ScheduleView>> {
        let schedules = self.store.schedules()?;
        let mut seen = std::mem::take(&mut self.schedules_seen);
        let mut out = Vec::new();
        for kept in schedules.list()? {
            let before = seen.remove(&kept.schedule.name);
            out.push(Self::schedule(&schedules, kept, before)?);
        }
        // Removed schedules are forgotten with what was left in `seen`.
        self.schedules_seen = out.iter().map(|v| (v.kept.schedule.name.clone(), v.clone())).collect();
        Ok(out)
    }

    /// One schedule's slot records, reading no more than moved since
    /// `before` (its previous reading). A record changes only while it is
    /// open (claimed, running: its daemon reports, or proves the daemon
    /// dead); every other change — a claim, a pause, a resume, a removal —
    /// moves the schedule's state. So a schedule whose state did not move
    /// has only its open records read again; one whose state moved has its
    /// newest [`SLOT_WINDOW`] records read, which join the records held if
    /// they reach the newest of them (new records are newer than every
    /// old one), and all of them read again if not (more new records than
    /// the window, or the schedule removed and added again).
    fn schedule(
        schedules: &Schedules<'_>,
        kept: Kept,
        before: Option<ScheduleView>,
    ) -> leasehold::Result<ScheduleView> {
        let name = &kept.schedule.name;
        let mut slots = match before {
            Some(before) if before.kept.state == kept.state => before.slots,
            Some(before) => {
                let window = schedules.slots(name, SLOT_WINDOW)?;
                let joins = before
                    .slots
                    .first()
                    .is_some_and(|newest| window.iter().any(|r| r.slot == newest.slot));
                if window.len() < SLOT_WINDOW as usize {
                    // Fewer than asked for: the window is every record.
                    window
                } else if joins {
                    let oldest = window[window.len() - 1].slot;
                    let mut slots = window;
                    slots.extend(before.slots.into_iter().filter(|r| r.slot < oldest));
                    slots.truncate(SLOTS_KEPT as usize);
                    slots
                } else {
                    schedules.slots(name, SLOTS_KEPT)?
                }
            }
            None => schedules.slots(name, SLOTS_KEPT)?,
        };
        // Open records read again (those just read are too: one read each,
        // and few are open at once).
        let mut gone = Vec::new();
        for r in slots.iter_mut().filter(|r| r.outcome.is_open()) {
            match schedules.slot(name, r.slot)? {
                Some((fresh, _)) => *r = fresh,
                None => gone.push(r.slot),
            }
        }
        slots.retain(|r| !gone.contains(&r.slot));
        Ok(ScheduleView { kept, slots })
    }

    fn queues(&mut self) -> leasehold::Result<Vec<QueueView>> {
        let stats = self.store.task_stats(None)?;
        let now = Instant::now();
        let mut out = Vec::with_capacity(stats.len());
        for s in stats {
            let next = self.store.task_list(Some(&s.queue), Some(TaskState::Pending), 1)?.pop();
            let running = if s.running > 0 {
                self.store
                    .task_list(Some(&s.queue), Some(TaskState::Running), RUNNING_MAX)?
            } else {
                Vec::new()
            };
            let (mut late, mut expired) = (0, 0);
            for t in &running {
                match (t.lease_remaining, t.claim_ttl) {
                    (None, _) => expired += 1,
                    (Some(left), _) if left.is_zero() => expired += 1,
                    (Some(left), Some(ttl)) if left < ttl / 2 => late += 1,
                    _ => {}
                }
            }
            let claims: HashSet<(LeaseName, Token)> = running.iter().map(|t| (t.id.clone(), t.token)).collect();
            let mut counters = self.shared.counters.lock().expect("counters lock");
            let qc = counters.queues.entry(s.queue.clone()).or_default();
            // A queue that appears after the first reading was empty before.
            let fresh: Seen = (HashSet::new(), 0, 0);
            let before = self.queue_seen.get(&s.queue).or((!self.baseline).then_some(&fresh));
            if let Some((seen, done, dead)) = before {
                // A claim is seen running, or inferred from a task that
                // finished without being seen running: a lower bound.
                let started = claims.difference(seen).count() as u64;
                let ended = seen.difference(&claims).count() as u64;
                let finished_done = s.done.saturating_sub(*done);
                let finished_dead = s.dead.saturating_sub(*dead);
                qc.claims += started + (finished_done + finished_dead).saturating_sub(ended);
                qc.completions += finished_done;
                qc.deaths += finished_dead;
            }
            let totals = [qc.claims, qc.completions];
            drop(counters);
            self.queue_seen.insert(s.queue.clone(), (claims, s.done, s.dead));
            let window = self.rates.entry(s.queue.clone()).or_default();
            if window.is_empty() && !self.baseline {
                // A queue first seen after the first reading was empty at
                // the reading before: what it did since counts from there
                // (its first claims are in `_total`, so in its rate too).
                if let Some(before) = self.previous_reading {
                    window.push(before, [0, 0]);
                }
            }
            window.push(now, totals);
            out.push(QueueView {
                stats: s,
                next,
                running,
                late,
                expired,
                claims: window.rate(0),
                completions: window.rate(1),
            });
        }
        self.previous_reading = Some(now);
        Ok(out)
    }
}

/// The identity of a holder's process, as far as liveness goes.
type Process<'a> = (&'a str, &'a str, Option<u64>, u32, Option<u64>, Option<u32>, bool);

/// What this host can tell of every grant's holder. A grant whose holder
/// was found dead stays dead (its pid is gone or reused: nothing brings it
/// back), so it is not judged again (`dead`: those grants, kept to the
/// ones still in the store); holders that are one process (the same pid,
/// start time and group) are judged once per reading.
fn judge(leases: &[LeaseState], dead: &mut HashSet<GrantId>) -> HashMap<(LeaseName, Token), Liveness> {
    let vantage = Vantage::read();
    let mut processes: HashMap<Process<'_>, Liveness> = HashMap::new();
    let mut out = HashMap::new();
    let mut still_dead = HashSet::new();
    for g in leases.iter().flat_map(|s| s.grants.iter()) {
        let id = g.id();
        let verdict = if dead.contains(&id) {
            Liveness::Dead
        } else {
            let h = &g.holder;
            let process = (
                h.host.as_str(),
                h.boot_id.as_str(),
                h.pid_ns,
                h.pid,
                h.start_time,
                h.pgid,
                h.bound,
            );
            *processes.entry(process).or_insert_with(|| vantage.liveness(h))
        };
        if verdict == Liveness::Dead {
            still_dead.insert(id);
        }
        out.insert((g.name.clone(), g.token), verdict);
    }
    *dead = still_dead;
    out
}

fn tail(entries: &[HistoryEntry], n: usize) -> Vec<HistoryEntry> {
    entries[entries.len().saturating_sub(n)..].to_vec()
}

/// How many of `newest` (oldest first) came after `cursor` (the newest
/// entries seen before, oldest first): the fewest for which what is left
/// ends with the cursor. `None` when the cursor is not among them (more
/// new entries than were read). A name with no history before has every
/// entry new.
fn new_entries(cursor: &[HistoryEntry], newest: &[HistoryEntry]) -> Option<usize> {
    if cursor.is_empty() {
        return Some(newest.len());
    }
    (0..newest.len()).find(|&fresh| {
        let old = &newest[..newest.len() - fresh];
        let m = cursor.len().min(old.len());
        m > 0 && old[old.len() - m..] == cursor[cursor.len() - m..]
    })
}

#[cfg(test)]
mod tests {
    use leasehold::schedule::Expect;

    use super::*;

    fn e(at: u64, event: HistoryEvent, token: u64) -> HistoryEntry {
        HistoryEntry {
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(at),
            event,
            token: Some(Token(token)),
            owner: None,
            detail: String::new(),
        }
    }

    /// A rate is never given for a window shorter than the minute it
    /// names, and once a minute is watched it is what happened over the
    /// window measured.
    #[test]
    fn a_rate_covers_a_whole_minute_or_is_not_given() {
        let start = Instant::now();
        let mut w = Window::default();
        let mut total = 0;
        for second in 0..=200u64 {
            let at = start + Duration::from_secs(second);
            w.push(at, [total, 0]);
            let rate = w.rate(0);
            // The checker: every reading pushed is one second apart and the
            // total grew by 2 a second, so over any window the count is
            // twice its length in seconds.
            assert_eq!(rate.count, 2 * rate.over.as_secs(), "at {second}s: {rate:?}");
            match rate.per_minute() {
                None => assert!(second < 60, "no rate after {second}s: {rate:?}"),
                Some(per_minute) => {
                    assert!(rate.over >= RATE_WINDOW, "a rate over {:?} at {second}s", rate.over);
                    assert!(rate.over <= RATE_WINDOW + Duration::from_secs(1), "{rate:?}");
                    assert!((per_minute - 120.0).abs() < 1e-9, "{per_minute}/min at {second}s");
                }
            }
            total += 2;
        }
    }

    /// However a schedule's records changed between two readings — an
    /// open record reported, more new records than the window, a few, the
    /// schedule removed and added again — the reading that follows holds
    /// what a full read of the store holds (the checker: `slots` of every
    /// record kept, sharing nothing with how the follower joins readings).
    #[test]
    fn a_schedule_read_again_holds_what_the_store_holds() {
        use leasehold::schedule::{Action, Schedule, ScheduleSpec, SlotClaim};

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_sqlite(&dir.path().join("s.db")).unwrap();
        let schedules = store.schedules().unwrap();
        let name = LeaseName::new("hourly").unwrap();
        // `add` dates a schedule by the store's clock: its slots are the
        // whole hours after now; hour 1 is the first.
        let this_hour = schedules
            .now()
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 3600
            * 3600;
        let hour = |h: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(this_hour + h * 3600);
        let add = || {
            let command = Action::Run {
                command: vec!["true".into()],
            };
            let schedule = Schedule::new(
                name.clone(),
                ScheduleSpec::parse("@every 1h", None).unwrap(),
                command,
                hour(0),
            );
            schedules.add(&schedule, false).unwrap();
        };
        let daemon = leasehold::identity::holder(leasehold::Binding::ThisProcess).unwrap();
        let kept = || schedules.get(&name).unwrap().unwrap();
        // Claim the slots at hours `from..to`, each on time; every one but
        // the last reported as ran (the last stays claimed: open).
        let claim = |from: u64, to: u64| {
            for h in from..to {
                let now = hour(h) + Duration::from_millis(5);
                let SlotClaim::Claimed {
                    fired: Some(mut fired), ..
                } = schedules.claim(&kept(), now, &daemon, 1000).unwrap()
                else {
                    panic!("hour {h} not claimed")
                };
                if h + 1 < to {
                    fired.outcome = SlotOutcome::Ran;
                    assert!(schedules.report(&name, &fired, Expect::Anything).unwrap());
                }
            }
        };
        let check = |view: &ScheduleView, step: &str| {
            assert_eq!(view.kept, kept(), "{step}");
            assert_eq!(view.slots, schedules.slots(&name, SLOTS_KEPT).unwrap(), "{step}");
        };

        add();
        claim(1, 4);
        let view = Follower::schedule(&schedules, kept(), None).unwrap();
        check(&view, "first reading");
        assert_eq!(view.slots.len(), 3);

        claim(4, 4 + u64::from(SLOT_WINDOW) + 8);
        let view = Follower::schedule(&schedules, kept(), Some(view)).unwrap();
        check(&view, "more new records than the window");

        claim(44, 47);
        let view = Follower::schedule(&schedules, kept(), Some(view)).unwrap();
        check(&view, "a few new records");
        assert_eq!(view.slots.len(), 46);

        // The open record reported: the state does not move.
        let (mut open, _) = schedules.slot(&name, hour(46)).unwrap().unwrap();
        open.outcome = SlotOutcome::Failed;
        let state = kept().state;
        assert!(schedules.report(&name, &open, Expect::Anything).unwrap());
        assert_eq!(kept().state, state);
        let view = Follower::schedule(&schedules, kept(), Some(view)).unwrap();
        check(&view, "an open record reported");
        assert_eq!(view.slots[0].outcome, SlotOutcome::Failed);

        // Removed and added again: its records went with it.
        assert!(schedules.remove(&name).unwrap());
        add();
        let view = Follower::schedule(&schedules, kept(), Some(view)).unwrap();
        check(&view, "removed and added again");
        assert!(view.slots.is_empty());
        assert!(schedules.remove(&name).unwrap());
        add();
        claim(50, 52);
        let view = Follower::schedule(&schedules, kept(), Some(view)).unwrap();
        check(&view, "removed, added and claimed again");
        // Hours 1 to 49 missed (one record), 50 ran, 51 claimed.
        assert_eq!(view.slots.len(), 3);
    }

    #[test]
    fn the_cursor_finds_what_is_new() {
        let g = |t| e(t, HistoryEvent::Granted, t);
        let old = vec![g(1), g(2), g(3)];
        assert_eq!(new_entries(&old, &[g(1), g(2), g(3)]), Some(0));
        assert_eq!(
            new_entries(&old, &[g(2), g(3), g(4), g(5)]),
            Some(2),
            "pruned at the front"
        );
        assert_eq!(new_entries(&old, &[g(4), g(5)]), None, "the cursor is gone");
        assert_eq!(new_entries(&[], &[g(4)]), Some(1));
        // Identical entries (same millisecond) after the cursor still count.
        let f = || e(9, HistoryEvent::FencePassed, 3);
        assert_eq!(new_entries(&[g(3), f()], &[g(3), f(), f(), f()]), Some(2));
    }
}
