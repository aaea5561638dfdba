//! The loop of `leasehold cron`: fire the store's schedules, each slot
//! once across every daemon on every machine.
//!
//! One thread watches the schedules: it reads them every `refresh`, sleeps
//! until the next slot is due (plus this daemon's jitter for it), and then
//! claims it ([`Schedules::claim`](super::Schedules::claim): one compare-and-swap write; the daemon
//! that loses the race reads again and finds nothing due). A claimed slot
//! fires on a thread of its own:
//! - **run**: the command runs as `leasehold run` runs one
//!   ([`supervise::run_with`](crate::supervise::run_with)), under the lease named after the schedule,
//!   bound to this daemon — stopped before that lease can pass on, with
//!   `LEASEHOLD_TOKEN`, `LEASEHOLD_GRANT` and `LEASEHOLD_SLOT` (the slot's
//!   time, RFC 3339) in its environment. The lease is what keeps slots of
//!   one schedule from overlapping, across daemons: `--overlap skip` tries
//!   it once, `wait` waits for it (until the next slot is due, or the
//!   deadline), `stop-previous` waits while the daemon running the previous
//!   slot, which watches the schedule's state, stops its command.
//! - **enqueue**: the task is added with an id naming the slot
//!   ([`slot_task_id`](super::slot_task_id)), so it is one task whoever adds it.
//!
//! Before a claim, the daemon looks at the record of the schedule's last
//! fired slot: one still `claimed` or `running` whose daemon is provably
//! dead (a process of this host that is gone) is recorded as `lost` — or,
//! for an enqueue, its task is added (again: the same id) and it is
//! recorded as enqueued. A daemon on another host that stopped answering
//! cannot be proved dead from here; its slot's record keeps saying
//! `claimed` or `running` (its command, if any, was stopped before its
//! lease could pass on).

mod firing;
mod slots;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_backend::{Holder, LeaseName};

use self::slots::{Fire, add_tasks, claimed, settle_previous};
use super::clock::{SKEW_TOLD, StoreClock};
use super::plan::Watch;
use super::record::{Kept, SlotRecord};
use crate::identity::{self, Binding};
use crate::supervise::{GuardProgram, Stop, StopHandle};
use crate::{Cancel, Error, Result, Store, format_duration, format_time};

/// How `leasehold cron` runs.
#[derive(Debug, Clone)]
pub struct CronOptions {
    /// The guard program commands run under.
    pub guard: GuardProgram,
    /// How often the schedules are read again (added, paused, removed),
    /// and the store's clock with them.
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
    /// Something worth the log that is not a slot's record nor a failure:
    /// this host's clock off the store's, a schedule's state moved past
    /// its records, a record that could not be written.
    Told { name: Option<&'a LeaseName>, line: &'a str },
}

/// The longest sleep of the loop between looks at `cancel`.
const NAP: Duration = Duration::from_millis(50);

/// The longest gap between two rounds of the loop that still counts as
/// watching: a round that claims and starts a thousand slots takes seconds,
/// and a machine starting thousands of processes at one instant (two
/// stores' daemons on two cores, in CI) starves a daemon for more — busy,
/// not down. A longer gap (a daemon stopped, a machine suspended) is not
/// watching: the slots due in it are judged late, and `--catch-up`
/// decides. A `--deadline` bounds a slot's lateness either way.
const WATCH_GAP: Duration = Duration::from_secs(30);

/// The first wait of a schedule whose claim keeps meeting something it
/// cannot claim past, doubled at each try up to [`BACKOFF_MAX`]: never a
/// hot loop.
const BACKOFF: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

type Sink = Arc<dyn Fn(&CronEvent<'_>) + Send + Sync>;

/// A command of a slot that runs now: its stop handle, once started.
#[derive(Default)]
struct Running {
    /// Ends its wait for the lease, or stops its command as soon as it
    /// starts (the daemon is shutting down).
    cancel: Cancel,
    handle: Mutex<Option<StopHandle>>,
    /// Fired as part of a backlog: later slots were due when it was
    /// claimed, or it was late (`--catch-up`).
    behind: AtomicBool,
    /// Stopped for the next slot (`stop-previous`).
    superseded: AtomicBool,
}

/// A schedule as the daemon keeps it between reads.
struct Watched {
    kept: Kept,
    /// Not tried again before this (a claim that met something it cannot
    /// claim past), and the wait after the next such try.
    backoff: Option<(Instant, Duration)>,
    /// Its claim was lost (another daemon claimed first, or it changed):
    /// not claimed again before the schedules are read again — at once,
    /// all in one listing, not a read per lost claim.
    stale: bool,
}

/// Run the daemon until `cancel`: then stop the commands it runs (SIGTERM,
/// then SIGKILL after their grace), record their slots, and return.
///
/// Every slot is timed by the store's clock ([`StoreClock`], read again
/// every `refresh`), never this host's: a daemon on a machine whose clock
/// is an hour off fires the same slots at the same instants as the others.
/// The slots due at one instant are claimed together
/// ([`Schedules::claim_many`](super::Schedules::claim_many)), each judged
/// at that instant — a daemon's own queue of claims never makes a slot
/// late.
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
    let mut d = Daemon {
        store,
        options,
        me: identity::holder(Binding::ThisProcess).map_err(Error::Process)?,
        // Every event is logged (and counted) here, then the caller's.
        sink: Arc::new(move |event: &CronEvent<'_>| {
            match event {
                CronEvent::Slot { name, record } => crate::telemetry::slot_recorded(name, record),
                CronEvent::Failed { name, error } => crate::telemetry::schedule_failed(*name, error),
                CronEvent::Told { name, line } => crate::telemetry::schedule_note(*name, line),
            }
            on_event(event);
        }),
        fires: Vec::new(),
        watched: Vec::new(),
        read_at: None,
        clock: None,
        last_tick: None,
        watching_since: None,
        skew_told: None,
        replaced: None,
    };
    while !cancel.is_cancelled() && d.replaced.is_none() {
        let tick = Instant::now();
        d.fires.retain(|(_, _, thread)| !thread.is_finished());
        if d.read_at.is_none_or(|at| at.elapsed() >= options.refresh) {
            d.refresh();
        }
        let Some(clock) = d.clock else {
            std::thread::sleep(NAP);
            continue;
        };
        d.watched_at(tick, &clock);
        let (due, mut wake) = d.due(&clock);
        if !due.is_empty() {
            let soon = d.claim(&due, &clock);
            wake = Some(wake.map_or(soon, |w| w.min(soon)));
        }
        let refresh_at = d.read_at.map_or_else(Instant::now, |at| at + options.refresh);
        let until = wake.map_or(refresh_at, |w| w.min(refresh_at));
        // Naps of at most 50 ms, so that a cancel is seen soon — but the
        // last one ends exactly when the slot is due: a daemon woken at the
        // slot's time fires it then, not up to a nap later.
        let nap = until.saturating_duration_since(Instant::now());
        std::thread::sleep(nap.min(NAP));
    }
    for (_, running, _) in &d.fires {
        running.cancel.cancel();
        if let Some(handle) = running.handle.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            handle.stop(Stop::Shutdown);
        }
    }
    for (_, _, thread) in d.fires {
        let _ = thread.join();
    }
    d.replaced.map_or(Ok(()), Err)
}

/// A running daemon's state.
struct Daemon<'a> {
    store: &'a Arc<Store>,
    options: &'a CronOptions,
    /// This daemon, as its slot records name it.
    me: Holder,
    sink: Sink,
    fires: Vec<(LeaseName, Arc<Running>, JoinHandle<()>)>,
    watched: Vec<Watched>,
    read_at: Option<Instant>,
    clock: Option<StoreClock>,
    /// The skew of this host's clock last told (ms), so that it is told
    /// once per change, not at every reading.
    skew_told: Option<i64>,
    /// When the loop last began a round, and since when (the store's
    /// time) it has run without a gap of more than [`WATCH_GAP`] or a
    /// failure of the store: a slot due since then was seen by a live
    /// daemon — on time, however long its claim then took ([`Watch`]).
    last_tick: Option<Instant>,
    watching_since: Option<SystemTime>,
    /// The store's file deleted or replaced under the daemon: it stops —
    /// every claim would fail, and a daemon started on the store now at
    /// the path fires the slots (DESIGN §3, a store's identity).
    replaced: Option<Error>,
}

impl Daemon<'_> {
    /// A round of the loop began at `tick`: the daemon has watched since
    /// it began, or since this round when the last was too long ago (it
    /// was frozen, or starved: not watching).
    fn watched_at(&mut self, tick: Instant, clock: &StoreClock) {
        let unbroken = self
            .last_tick
            .is_some_and(|last| tick.duration_since(last) <= WATCH_GAP);
        if !unbroken || self.watching_since.is_none() {
            // The earliest the store's time may have been (etcd's reading
            // is uncertain by up to half a second at first): a slot due
            // that little before the daemon began watching was on time
            // when it began (ON_TIME is a second), so none is counted as
            // seen that a prompt claim would not have fired. The latest
            // would make a daemon started just before a mark, whose first
            // round reads a thousand schedules, find that mark's slots
            // late: seen in CI, a whole mark recorded missed on etcd.
            self.watching_since = Some(clock.at_instant(tick).checked_sub(clock.within()).unwrap_or(UNIX_EPOCH));
        }
        self.last_tick = Some(tick);
    }

    /// The store failed: what passes until it answers again was not
    /// watched (when it is back, those slots are late, and `--catch-up`
    /// decides).
    fn store_failed(&mut self, name: Option<&LeaseName>, error: Error) {
        self.watching_since = None;
        failed(&self.sink, &mut self.replaced, name, error);
    }

    /// Read the store's clock and the schedules again, and settle the
    /// slots of daemons that died.
    fn refresh(&mut self) {
        self.read_at = Some(Instant::now());
        match StoreClock::read(self.store) {
            Ok(reading) => {
                // Told when it first exceeds the bound, and again when it
                // has changed by as much since it was told.
                let skew = reading.skew_ms();
                let moved = self
                    .skew_told
                    .is_none_or(|told| u128::from(told.abs_diff(skew)) >= SKEW_TOLD.as_millis());
                if let Some(line) = reading.skew_told().filter(|_| moved) {
                    (self.sink)(&CronEvent::Told {
                        name: None,
                        line: &line,
                    });
                    self.skew_told = Some(skew);
                }
                self.clock = Some(reading);
            }
            Err(error) => self.store_failed(None, error),
        }
        let all = match self.store.schedules().and_then(|s| s.list()) {
            Ok(all) => all,
            Err(error) => return self.store_failed(None, error),
        };
        let only = &self.options.only;
        let mut fresh: Vec<Watched> = all
            .into_iter()
            .filter(|k| only.is_empty() || only.contains(&k.schedule.name))
            .map(|kept| {
                let backoff = self
                    .watched
                    .iter()
                    .find(|w| w.kept.schedule.name == kept.schedule.name)
                    .and_then(|w| w.backoff);
                Watched {
                    kept,
                    backoff,
                    stale: false,
                }
            })
            .collect();
        // Daemons claim in orders of their own, so that racing daemons
        // meet each other's claims late, not at once.
        fresh.sort_by_key(|w| order(&w.kept.schedule.name, &self.me));
        self.watched = fresh;
        // This host read once, to judge every schedule's last daemon.
        let here = identity::Vantage::read();
        for w in &self.watched {
            if let Err(error) = settle_previous(self.store, &w.kept, &here, &self.sink) {
                failed(&self.sink, &mut self.replaced, Some(&w.kept.schedule.name), error);
            }
        }
    }

    /// The schedules with a slot due now on the store's clock (by index),
    /// and when the next is due otherwise.
    fn due(&self, clock: &StoreClock) -> (Vec<usize>, Option<Instant>) {
        // The store's time that has surely passed: no slot after it is
        // claimed (no record for a slot in the store's future).
        let now = clock.earliest();
        let mut wake: Option<Instant> = None;
        let mut wake_at = |then: Instant| wake = Some(wake.map_or(then, |w: Instant| w.min(then)));
        let mut due = Vec::new();
        for (i, w) in self.watched.iter().enumerate() {
            let entry = &w.kept;
            if entry.schedule.paused || w.stale {
                continue;
            }
            if let Some((until, _)) = w.backoff
                && until > Instant::now()
            {
                wake_at(until);
                continue;
            }
            let Some(slot) = entry.schedule.spec.next_after(entry.accounted_until()) else {
                continue;
            };
            let at = slot + jitter(&entry.schedule.name, slot, entry.schedule.jitter, &self.me);
            if at > now {
                wake_at(clock.instant_of(at));
                continue;
            }
            // While this daemon works through a backlog (slots claimed
            // while later ones were due too, or late: `--catch-up`), each
            // slot waits for its run of the one before: one after another,
            // not all at once and then skipped as overlapping.
            let behind = self
                .fires
                .iter()
                .any(|(n, r, t)| *n == entry.schedule.name && r.behind.load(Ordering::SeqCst) && !t.is_finished());
            if behind {
                wake_at(Instant::now() + NAP / 5);
                continue;
            }
            due.push(i);
        }
        (due, wake)
    }

    /// Claim the due slots of `due` together, each judged at the store's
    /// time now, and fire those this daemon won; when to look again.
    fn claim(&mut self, due: &[usize], clock: &StoreClock) -> Instant {
        let watch = Watch {
            now: clock.earliest(),
            since: self.watching_since,
        };
        let claiming: Vec<&Kept> = due.iter().map(|&i| &self.watched[i].kept).collect();
        let claims = self
            .store
            .schedules()
            .and_then(|s| s.claim_many(&claiming, watch, &self.me, self.options.max_due));
        match claims {
            Ok(claims) => {
                let mut tasks = Vec::new();
                for (&i, claim) in due.iter().zip(claims) {
                    let w = &mut self.watched[i];
                    match claimed(self.store, self.options, w, claim, clock, &self.sink) {
                        Ok(Fire::Thread(running, thread)) => {
                            self.fires.push((w.kept.schedule.name.clone(), running, thread));
                        }
                        Ok(Fire::Task(task)) => tasks.push(*task),
                        Ok(Fire::Nothing) => {}
                        Err(error) => failed(&self.sink, &mut self.replaced, Some(&w.kept.schedule.name), error),
                    }
                }
                if let Err(error) = add_tasks(self.store, tasks, clock, &self.sink) {
                    failed(&self.sink, &mut self.replaced, None, error);
                }
                if self.watched.iter().any(|w| w.stale) {
                    self.read_at = None;
                }
                Instant::now()
            }
            Err(error) => {
                self.store_failed(None, error);
                // The store failed: tried again after a nap, not at once.
                Instant::now() + NAP
            }
        }
    }
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

/// Where `name` comes in this daemon's order of claims: a hash of both,
/// so each daemon starts somewhere else among slots due together.
fn order(name: &LeaseName, daemon: &Holder) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (name, &daemon.host, daemon.pid).hash(&mut h);
    h.finish()
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
