//! Waiting for a name: what one reading of the name tells an acquirer
//! ([`judge`]), and the wait loop ([`Store::acquire_wait`]).
//!
//! Idle waiters must cost next to nothing, however many there are (issue
//! 41: 50 waiters behind one holder took 68 % of a core, each re-proving
//! every other waiter's liveness through /proc at every wake-up). So:
//!
//! - A reading is judged lazily: the grants, then the waiters ahead in
//!   FIFO order, each proved alive or gone only until the first live one
//!   that blocks — what [`rules::admits`] would look at anyway. Behind one
//!   holder that is two proofs, whatever the length of the queue.
//! - Between readings a waiter watches only what blocks it — for its
//!   exit (`host::ExitWatch`), or, where it cannot, by proving it again
//!   through /proc every poll — without reading the store; it reads again
//!   when the store announces a change, when a blocking grant runs out
//!   (its `expires_in`), when a blocker exits or is proved gone, or when
//!   its registration needs a refresh.
//! - Only the waiters near the front (at most [`LISTENING`] admissions
//!   ahead of them) listen for the store's announcements; those further
//!   back sleep and read once when they wake. A commit wakes three
//!   waiters, not all of them. (With two listening, threads taking turns
//!   on one name found the third asleep at nearly every turn: a turn
//!   takes a few milliseconds, its first sleep ten.) The sleep starts at [`PARKED_FIRST`] and doubles while the
//!   queue stands still, up to [`PARKED_PER_PLACE`] per admission ahead
//!   (at most until the refresh); a reading that sees the queue move
//!   starts it again — a queue that turns over quickly (threads taking
//!   turns) is followed closely, an idle one costs a reading a second.
//! - A store that fails while waiting is asked again until the wait's end:
//!   a restart of the server is not the end of a wait (a `warn` says so).

use std::time::{Duration, Instant};

use leasehold_backend::{
    BackendError, Behind, ErrorKind, Grant, Held, Holder, LeaseAcquire, LeaseAcquireParams, LeaseName, Mode,
    QueuedWaiter, Token, WaitTopic, WaiterEnqueueParams, WaiterRefresh, WaiterRefreshParams, WaiterRemoveParams,
    WaiterTicket, limits, rules,
};
use leasehold_host as host;

use super::{Acquire, AcquireOptions, Store, WAITER_REFRESH, WAITER_TTL};
use crate::identity::{self, Binding, Vantage};
use crate::{Cancel, Error, Result};

/// A waiter with at most this many admissions ahead of it listens for
/// the store's announcements; one further back sleeps.
const LISTENING: usize = 2;

/// How long a waiter far back sleeps between readings, per admission
/// ahead of it: the tenth in line reads once a second.
pub(crate) const PARKED_PER_PLACE: Duration = Duration::from_millis(100);

/// How long a waiter far back that the store wakes when the waiter just
/// ahead of it leaves (`Backend::wait_behind`) waits at most between
/// readings, per admission ahead of it: only to find a waiter ahead that
/// died (which nobody listening proves gone once the queue moved past
/// those who listened).
const WATCHED_PER_PLACE: Duration = Duration::from_secs(1);

/// A waiter further back's first sleep, and its sleep after a reading
/// that saw the queue move.
const PARKED_FIRST: Duration = Duration::from_millis(10);

/// How long after a blocking grant's expiry a waiter reads again: the
/// store judges expiry by its own clock.
const EXPIRY_MARGIN: Duration = Duration::from_millis(5);

/// How many of the waiters ahead a reading between attempts tells who
/// waits for (`Backend::lease_waiting`): a waiter proves them in order
/// until the first live one that blocks, so more than a few are needed
/// only when several ahead died at once — those the next attempt, which
/// reads them all, proves.
const PROVED_AHEAD: usize = 8;

/// The longest pause between two attempts while the store fails.
const OUTAGE_RETRY: Duration = Duration::from_secs(2);

/// What one reading of a name tells an acquirer of `mode`.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// Whether an attempt would be granted, as [`rules::admits`] judges
    /// with what is provably gone left out.
    pub admits: bool,
    /// Grants whose holders are provably gone: an attempt evicts them.
    pub evict: Vec<Token>,
    /// Waiters ahead, up to the first live one that blocks, that are
    /// provably gone: an attempt evicts them.
    pub evict_waiters: Vec<WaiterTicket>,
    /// The live holders of the grants and the first live waiter that keep
    /// the acquirer out: proved again between readings.
    pub blockers: Vec<Holder>,
    /// When the soonest-ending live grant runs out, as of the reading.
    pub expires_in: Option<Duration>,
    /// How many admissions come before the acquirer's among the waiters
    /// ahead (0: it goes in with the first of them, or alone), counted
    /// without proving anything.
    pub behind: usize,
    /// What says the queue moved between two readings: the live grants'
    /// tokens and the number of waiters ahead.
    pub place: (Vec<Token>, usize),
    /// The waiter just ahead of the acquirer, if any: a waiter far back
    /// waits for it to leave (`Backend::wait_behind`).
    pub just_ahead: Option<WaiterTicket>,
}

/// Judge a reading: `grants` live, `ahead` the waiters ahead of the
/// acquirer in FIFO order. Proves at most every grant and the waiters
/// ahead up to the first live one that does not fit (O(1) behind one
/// holder: the holder and the first waiter).
pub(crate) fn judge(here: &Vantage, grants: &[Grant], ahead: &[QueuedWaiter], mode: Mode) -> Judged {
    let mut judged = Judged::default();
    let mut live = Vec::with_capacity(grants.len());
    for g in grants {
        if here.gone(&g.holder) {
            judged.evict.push(g.token);
        } else {
            live.push(g.mode);
            judged.blockers.push(g.holder.clone());
            judged.expires_in = Some(judged.expires_in.map_or(g.expires_in, |e| e.min(g.expires_in)));
        }
    }
    // The waiters as `rules::admits` walks them: admitted one by one onto
    // the live grants until the first that does not fit, which blocks
    // everyone behind it. Each is proved before it counts.
    let mut considered = Vec::new();
    let mut admitted = live.clone();
    for w in ahead {
        if w.holder.as_ref().is_some_and(|h| here.gone(h)) {
            judged.evict_waiters.push(w.ticket);
            continue;
        }
        considered.push(w.mode);
        if !rules::compatible(&admitted, w.mode) {
            judged.blockers.extend(w.holder.clone());
            break;
        }
        admitted.push(w.mode);
    }
    judged.admits = rules::admits(live, considered, mode);
    if judged.admits {
        judged.blockers.clear();
        judged.expires_in = None;
    }
    judged.behind = admissions_ahead(ahead.iter().map(|w| w.mode), mode);
    judged.place = (grants.iter().map(|g| g.token).collect(), ahead.len());
    judged.just_ahead = ahead.last().map(|w| w.ticket);
    judged
}

/// How many admissions of the waiters `ahead` come before one of `mode`
/// behind them, with no grant left: each admission takes the waiters that
/// fit together, in order.
fn admissions_ahead(ahead: impl IntoIterator<Item = Mode>, mode: Mode) -> usize {
    let mut admissions = 0;
    let mut batch: Vec<Mode> = Vec::new();
    for m in ahead {
        if !batch.is_empty() && !rules::compatible(&batch, m) {
            admissions += 1;
            batch.clear();
        }
        batch.push(m);
    }
    if !batch.is_empty() && !rules::compatible(&batch, mode) {
        admissions += 1;
    }
    admissions
}

impl Store {
    /// One attempt, with fast takeover: if the store says held and some
    /// holders, or waiters ahead, are provably gone, ask again, evicting
    /// exactly those. Returns the outcome, the boot-clock time the request
    /// that decided it was sent (a keeper's window starts there), and, when
    /// held, the judgement of the reading it returned.
    pub(super) fn attempt_judged(
        &self,
        here: &Vantage,
        params: &mut LeaseAcquireParams,
    ) -> Result<(Acquire, Duration, Judged)> {
        params.evict.clear();
        params.evict_waiters.clear();
        let sent = host::boot_clock();
        let held = match self.backend.lease_acquire(params)? {
            LeaseAcquire::Acquired(g) => {
                crate::telemetry::granted(&g);
                return Ok((Acquire::Acquired(g), sent, Judged::default()));
            }
            LeaseAcquire::Held(held) => held,
        };
        params.ticket = held.ticket.or(params.ticket);
        let judged = judge(here, &held.grants, &held.ahead, params.mode);
        if judged.evict.is_empty() && judged.evict_waiters.is_empty() {
            return Ok((Acquire::Held(held), sent, judged));
        }
        params.evict.clone_from(&judged.evict);
        params.evict_waiters.clone_from(&judged.evict_waiters);
        let sent = host::boot_clock();
        Ok(match self.backend.lease_acquire(params)? {
            LeaseAcquire::Acquired(g) => {
                crate::telemetry::granted(&g);
                (Acquire::Acquired(g), sent, Judged::default())
            }
            LeaseAcquire::Held(held) => {
                params.ticket = held.ticket.or(params.ticket);
                let judged = judge(here, &held.grants, &held.ahead, params.mode);
                (Acquire::Held(held), sent, judged)
            }
        })
    }

    /// As [`Store::acquire_wait`], with the send time of the deciding request.
    pub(super) fn acquire_wait_sent(
        &self,
        name: &LeaseName,
        options: &AcquireOptions,
        timeout: Option<Duration>,
        cancel: &Cancel,
        mut on_held: impl FnMut(&Held),
    ) -> Result<(Acquire, Duration)> {
        if let Some(timeout) = timeout {
            limits::WAIT.check(timeout)?;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let here = Vantage::read();
        let mut params = Self::params(name, options)?;
        // First a plain attempt: no queue entry when it is free.
        let (mut last, mut sent) = match self.attempt_judged(&here, &mut params)? {
            (Acquire::Held(held), sent, _) if timeout != Some(Duration::ZERO) => (held, sent),
            (outcome, sent, _) => return Ok((outcome, sent)),
        };
        if let Some(g) = last.grants.iter().find(|g| here.encloses_this_process(&g.holder)) {
            return Err(Error::WaitsForItself {
                name: name.clone(),
                pid: g.holder.pid,
                cmdline: g.holder.cmdline.clone(),
            });
        }
        // The waiter is this process, whatever the grant will be bound to
        // (none for a bare `acquire --wait`): its death is what frees the
        // place in the queue.
        let waiter = identity::holder(Binding::ThisProcess).map_err(Error::Process)?;
        params.waiter_holder = Some(waiter.clone());
        let ticket = self.backend.waiter_enqueue(&WaiterEnqueueParams {
            name: name.clone(),
            mode: options.mode,
            holder: waiter,
            ttl: WAITER_TTL,
        })?;
        params.ticket = Some(ticket);
        let topic = std::sync::Arc::new(WaitTopic::lease(name));
        cancel.interrupts(&topic);
        let mut wait = Wait {
            store: self,
            here: &here,
            topic,
            name,
            mode: options.mode,
            deadline,
            cancel,
            outage: None,
            nap: (PARKED_FIRST, None),
            refreshed: Instant::now(),
            refresh_refused: false,
        };
        // What the last reading said; `None`: read before deciding.
        let mut judged: Option<Judged> = None;
        let outcome = loop {
            if cancel.is_cancelled() {
                break Ok((Acquire::Held(last), sent));
            }
            let place = params.ticket.unwrap_or(ticket);
            let mut now_judged = match judged.take() {
                Some(judged) => judged,
                None => match wait.outlast(wait.read(place)) {
                    Ok(Some(judged)) => judged,
                    Ok(None) => continue,
                    Err(e) => break Err(e),
                },
            };
            let now = Instant::now();
            let at_end = deadline.is_some_and(|d| now >= d);
            // A place the store would not refresh alone just now (a far-back
            // wait asked) is refreshed by the attempt below, not asked again.
            if !now_judged.admits && !at_end && now >= wait.refresh_due() && !wait.refresh_refused {
                let refreshed = wait.refresh(place);
                match wait.outlast(refreshed) {
                    Ok(Some(_)) => {}
                    Ok(None) => continue,
                    Err(e) => break Err(e),
                }
            }
            if now_judged.admits || now >= wait.refresh_due() || at_end {
                // Each attempt is a durable write (it refreshes this
                // waiter's place), so it is made only when the reading
                // says it would be granted, when the place needs a
                // refresh the store cannot make alone, and once at the end.
                (wait.refreshed, wait.refresh_refused) = (now, false);
                match wait.outlast(self.attempt_judged(&here, &mut params)) {
                    Ok(Some((Acquire::Acquired(g), sent, _))) => break Ok((Acquire::Acquired(g), sent)),
                    Ok(Some((Acquire::Held(held), at, again))) => {
                        on_held(&held);
                        (last, sent, now_judged) = (held, at, again);
                    }
                    Ok(None) => continue,
                    Err(e) => break Err(e),
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break Ok((Acquire::Held(last), sent));
                }
            }
            // When to read again whatever happens: at the wait's end, and
            // when a blocking grant runs out.
            let expiry = now_judged.expires_in.map(|e| now + e + EXPIRY_MARGIN);
            let read_at = [deadline, expiry].into_iter().flatten().min();
            let paused = wait.until_worth_reading(&now_judged, params.ticket.unwrap_or(ticket), read_at);
            if let Err(e) = wait.outlast(paused) {
                break Err(e);
            }
        };
        if !matches!(outcome, Ok((Acquire::Acquired(_), _)))
            && let Some(ticket) = params.ticket
        {
            // Best effort: an unremoved registration expires by itself.
            let _ = self.backend.waiter_remove(&WaiterRemoveParams {
                name: name.clone(),
                ticket,
            });
        }
        outcome
    }
}

/// One wait's state between readings.
struct Wait<'a> {
    store: &'a Store,
    here: &'a Vantage,
    /// Interrupted by the cancel ([`Cancel::interrupts`]).
    topic: std::sync::Arc<WaitTopic>,
    name: &'a LeaseName,
    mode: Mode,
    deadline: Option<Instant>,
    cancel: &'a Cancel,
    /// Since when the store has been failing, and how long the last pause was.
    outage: Option<(Instant, Duration)>,
    /// A waiter further back's next sleep, and the place it was last
    /// seen at.
    nap: (Duration, Option<(Vec<Token>, usize)>),
    /// When this waiter's place was last refreshed (by an attempt, or
    /// alone: [`Wait::refresh`]).
    refreshed: Instant,
    /// Whether the store's last answer to a refresh alone was that it
    /// did not refresh (the place is gone, or is to change): the next
    /// attempt refreshes or re-makes it.
    refresh_refused: bool,
}

impl Wait<'_> {
    /// When this waiter's place needs its next refresh.
    fn refresh_due(&self) -> Instant {
        self.refreshed + WAITER_REFRESH
    }

    /// Refresh this waiter's place alone, where the store can do that
    /// cheaply (`Backend::waiter_refresh`): true when it did. Otherwise
    /// the caller makes an attempt, which refreshes it (and re-makes a
    /// place that expired).
    fn refresh(&mut self, ticket: WaiterTicket) -> Result<bool> {
        let refreshed = self.store.backend.waiter_refresh(&WaiterRefreshParams {
            name: self.name.clone(),
            ticket,
            ttl: WAITER_TTL,
        })? == WaiterRefresh::Refreshed;
        if refreshed {
            self.refreshed = Instant::now();
        }
        self.refresh_refused = !refreshed;
        Ok(refreshed)
    }

    /// Read the name and judge it for this waiter (`ticket`: its place).
    fn read(&self, ticket: WaiterTicket) -> Result<Judged> {
        let Some(state) = self.store.backend.lease_waiting(self.name, ticket, PROVED_AHEAD)? else {
            return Ok(Judged {
                admits: true,
                ..Judged::default()
            });
        };
        Ok(judge(self.here, &state.grants, &state.waiters, self.mode))
    }

    /// `Ok(None)` for a store that failed in a way that may pass (down,
    /// unreachable, busy) while the wait has time left: said once per
    /// outage, then the caller goes on after a pause. Other errors, and
    /// one that outlasts the wait, end it.
    fn outlast<T>(&mut self, result: Result<T>) -> Result<Option<T>> {
        match result {
            Ok(value) => {
                if let Some((since, _)) = self.outage.take() {
                    tracing::warn!(name = %self.name, "the store answers again after {}; still waiting", crate::format_duration(since.elapsed()));
                }
                Ok(Some(value))
            }
            Err(Error::Store(e)) if passing(&e) && self.deadline.is_none_or(|d| Instant::now() < d) => {
                let pause = match self.outage {
                    None => {
                        tracing::warn!(name = %self.name, "the store failed while waiting; asking again until the wait ends: {e}");
                        self.store.poll
                    }
                    Some((_, pause)) => (pause * 2).min(OUTAGE_RETRY),
                };
                self.outage = Some((self.outage.map_or_else(Instant::now, |(since, _)| since), pause));
                let left = self
                    .deadline
                    .map_or(pause, |d| d.saturating_duration_since(Instant::now()));
                self.cancel.sleep(pause.min(left));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Wait until a reading is worth making: the store announced a change
    /// (for a waiter next in line), a blocker is proved gone, `read_at`
    /// came, or the wait was cancelled.
    fn until_worth_reading(&mut self, judged: &Judged, ticket: WaiterTicket, read_at: Option<Instant>) -> Result<()> {
        // Held although the reading admits it (a race, or the store's
        // clock): read again after a poll.
        let read_at = if judged.admits {
            Some(read_at.map_or(Instant::now() + self.store.poll, |r| {
                r.min(Instant::now() + self.store.poll)
            }))
        } else {
            read_at
        };
        let due = |wait: &Self| read_at.map_or(wait.refresh_due(), |r| r.min(wait.refresh_due()));
        if judged.behind <= LISTENING {
            return self.listen(judged, due(self));
        }
        // Far back: no announcement can let this waiter in before those
        // ahead of it. Where the store wakes it when the waiter just ahead
        // leaves, it waits for that alone — the cancel interrupts it, and
        // its place is refreshed without a reading; elsewhere it sleeps,
        // further back longer.
        let place = u32::try_from(judged.behind).unwrap_or(u32::MAX);
        // Read now and then all the same: a waiter ahead that died leaves
        // its place only when its registration expires, unless one behind
        // it proves it gone.
        let backstop = Instant::now() + WATCHED_PER_PLACE.saturating_mul(place);
        loop {
            let until = due(self).min(backstop);
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.cancel.is_cancelled() {
                return Ok(());
            }
            let Some(ahead) = judged.just_ahead else { break };
            match self.store.backend.wait_behind(&self.topic, ahead, left)? {
                Behind::NotOffered => break,
                Behind::Moved => return Ok(()),
                Behind::Still => {
                    let now = Instant::now();
                    if self.cancel.is_cancelled() || now >= backstop || read_at.is_some_and(|r| now >= r) {
                        return Ok(());
                    }
                    // Only the place is due: refreshed alone, no reading —
                    // or, where the store cannot, by the attempt after one.
                    if now >= self.refresh_due() && !self.refresh(ticket)? {
                        return Ok(());
                    }
                }
            }
        }
        let (last, seen) = &self.nap;
        let nap = if seen.as_ref() == Some(&judged.place) {
            (*last * 2).min(PARKED_PER_PLACE.saturating_mul(place))
        } else {
            PARKED_FIRST
        };
        self.nap = (nap, Some(judged.place.clone()));
        self.cancel
            .sleep(nap.min(due(self).saturating_duration_since(Instant::now())));
        Ok(())
    }

    /// For a waiter near the front: wait for the store's announcement of
    /// a change, or for a blocker's exit, until `read_at`.
    ///
    /// The blockers this process can prove gone are watched for their
    /// exit (`host::ExitWatch`), which wakes the wait — as the cancel
    /// does — so the wait is one piece, with no wake-up while nothing
    /// happens. Where they cannot all be watched (a platform without the
    /// watch, a holder whose process exited but whose proof waits on its
    /// guard or group), the wait goes in slices of the poll interval,
    /// proving them through /proc after each.
    fn listen(&self, judged: &Judged, read_at: Instant) -> Result<()> {
        // A wake left by the last wait's watch, which is gone.
        self.topic.take_woken();
        // This process itself (threads sharing a store take turns) cannot
        // exit while it waits: nothing to watch.
        let provable: Vec<(u32, u64)> = judged
            .blockers
            .iter()
            .filter(|h| h.pid != std::process::id())
            .filter_map(|h| self.here.provable_process(h))
            .collect();
        let topic = std::sync::Arc::downgrade(&self.topic);
        let watch = host::ExitWatch::start(&provable, move || {
            if let Some(topic) = topic.upgrade() {
                topic.wake();
            }
        });
        let longest = if watch.is_some() {
            limits::WAIT.max
        } else {
            self.store.poll
        };
        loop {
            let left = read_at.saturating_duration_since(Instant::now());
            if left.is_zero() || self.cancel.is_cancelled() {
                return Ok(());
            }
            let slice = left.min(longest);
            let began = Instant::now();
            let cursor = self.topic.cursor();
            self.store.backend.wait_for_change(&self.topic, slice)?;
            // Woken before the slice ran out (an announcement, a blocker's
            // exit, the cancel), or the backend's cursor moved (a backend
            // that polls finds a change at the slice's end): read again.
            let changed = self.topic.take_woken() || began.elapsed() < slice || self.topic.cursor() != cursor;
            if changed || (watch.is_none() && judged.blockers.iter().any(|h| self.here.gone(h))) {
                return Ok(());
            }
        }
    }
}

/// Whether a store error may pass by itself while a waiter waits.
fn passing(e: &BackendError) -> bool {
    matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Busy)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use leasehold_backend::Holder;
    use proptest::prelude::*;

    use super::*;

    /// A live holder (this process) and one provably gone (a reaped child).
    fn holders() -> (Holder, Holder) {
        let alive = identity::holder(Binding::ThisProcess).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = identity::holder(Binding::Process {
            pid: child.id(),
            pgid: None,
            guard: None,
        })
        .unwrap_or_else(|_| Holder {
            pid: child.id(),
            ..alive.clone()
        });
        child.wait().unwrap();
        (alive, dead)
    }

    fn mode(code: u8) -> Mode {
        match code % 3 {
            0 => Mode::Exclusive,
            1 => Mode::Shared { limit: None },
            _ => Mode::Shared { limit: Some(2) },
        }
    }

    proptest! {
        /// The lazy judgement admits exactly what the plan's rule admits
        /// over the reading with everything provably gone left out (what
        /// an acquirer judged before, proving every entry), and evicts
        /// only what is provably gone.
        #[test]
        fn judging_lazily_admits_as_proving_everything_does(
            grants in proptest::collection::vec((any::<u8>(), any::<bool>()), 0..4),
            ahead in proptest::collection::vec((any::<u8>(), any::<bool>()), 0..8),
            mine in any::<u8>(),
        ) {
            let (alive, dead) = holders();
            let here = Vantage::read();
            let grants: Vec<Grant> = grants
                .iter()
                .enumerate()
                .map(|(i, &(m, live))| Grant {
                    name: LeaseName::new("n").unwrap(),
                    token: Token(i as u64 + 1),
                    owner: "o".into(),
                    owner_explicit: false,
                    mode: mode(m),
                    holder: if live { alive.clone() } else { dead.clone() },
                    acquired_at: SystemTime::now(),
                    ttl: Duration::from_secs(60),
                    expires_in: Duration::from_secs(30),
                })
                .collect();
            let ahead: Vec<QueuedWaiter> = ahead
                .iter()
                .enumerate()
                .map(|(i, &(m, live))| QueuedWaiter {
                    ticket: WaiterTicket(i as u64 + 1),
                    mode: mode(m),
                    holder: Some(if live { alive.clone() } else { dead.clone() }),
                })
                .collect();
            let judged = judge(&here, &grants, &ahead, mode(mine));
            let reference = rules::admits(
                grants.iter().filter(|g| g.holder == alive).map(|g| g.mode),
                ahead.iter().filter(|w| w.holder.as_ref() == Some(&alive)).map(|w| w.mode),
                mode(mine),
            );
            prop_assert_eq!(judged.admits, reference);
            for token in &judged.evict {
                prop_assert!(grants.iter().any(|g| g.token == *token && g.holder == dead));
            }
            for ticket in &judged.evict_waiters {
                prop_assert!(ahead.iter().any(|w| w.ticket == *ticket && w.holder.as_ref() == Some(&dead)));
            }
            prop_assert!(judged.blockers.iter().all(|h| *h == alive));
            prop_assert!(!judged.admits || judged.blockers.is_empty());
        }
    }

    #[test]
    fn admissions_ahead_count_the_batches_that_go_in_before() {
        let (x, s) = (Mode::Exclusive, Mode::Shared { limit: None });
        assert_eq!(admissions_ahead([], x), 0);
        assert_eq!(admissions_ahead([x], x), 1);
        assert_eq!(admissions_ahead([x, x, x], x), 3);
        assert_eq!(admissions_ahead([s, s, s], s), 0, "readers go in together");
        assert_eq!(admissions_ahead([s, s, s], x), 1);
        assert_eq!(admissions_ahead([x, s, s], s), 1);
        assert_eq!(admissions_ahead([s, x, s], s), 2);
    }
}
