//! Leader election on a lease: candidates campaign for a name
//! ([`Store::campaign`]) and the one holding its exclusive grant leads;
//! anyone may watch who leads ([`Store::observe`]).
//!
//! Nothing here is new storage: leadership is a grant taken with
//! [`Store::acquire_wait_and_keep`] (FIFO waiting, woken by the store's
//! notifications, cancellable) under an explicit owner — the candidate's
//! id — and kept by a [`Keeper`] (heartbeats, the trust window, loss pushed
//! to the holder).
//!
//! # States of a candidate
//!
//! ```text
//!   campaign ─► waiting ─┬─ granted ─► Leadership ─┬─ resign() / drop ─► released (the next candidate leads at once)
//!                        │                          └─ renewal refused, window closed ─► lost (final)
//!                        └─ cancelled ─► None
//! ```
//!
//! A candidate that never led cannot be told it stopped leading
//! (client-go #1187): [`Store::campaign`] returns a [`Leadership`] only once
//! the candidate leads, and only a `Leadership` carries loss
//! notifications — there is nothing to register a callback on before.
//!
//! # The candidate id
//!
//! Required, not defaulted: it must be *stable across restarts* (so a
//! restarted candidate is known as its predecessor: it leads again at
//! once, taking over with a new token, once its predecessor is provably
//! gone) and *unique among live candidates* (an owner label never lets two
//! live processes share one grant — [`rules::reacquires`](leasehold_backend::rules::reacquires) —
//! so a second live candidate under one id would only wait; a campaign
//! under an id whose grant's process may still run is refused at once,
//! `Error::CandidateInUse`). No default gives both: `host:pid`
//! changes on restart, and host + program name is the same for two copies
//! of a program on one host. The grant is bound to the campaigning
//! process, so a leader that dies is replaced at once by a candidate on
//! its host that can prove it dead, and after the TTL elsewhere.
//!
//! # Observing
//!
//! An [`Observer`] reads the name's state, reports it if the leader
//! differs from the last one reported, and waits for the store to
//! announce a change of the name (SQLite: its write-ahead log; PostgreSQL:
//! NOTIFY; etcd: a watch). Not every change is announced (an expiry never
//! is; a new grant is not on PostgreSQL and etcd), so it also reads the
//! store at least every [`StoreOptions::poll_interval`](crate::StoreOptions::poll_interval)
//! (default [`DEFAULT_POLL`](crate::DEFAULT_POLL), 100 ms) — and sooner,
//! backing off from 10 ms, just after a change, when the next one (a
//! waiting candidate taking over) is likely.
//!
//! A leader found already dead at a read is still reported once if it
//! was never reported (its grant is still there: it led, if briefly),
//! then as gone — so an observer woken late under load does not skip a
//! leader that died young (fault case 31 on etcd did, once, before). A
//! leader granted *and* taken over between two reads is not seen by the
//! observer; the name's history (`leasehold history`) has every grant.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use leasehold_backend::{Grant, LeaseName, Mode, Token, WaitTopic};

use crate::{AcquireOptions, Binding, Cancel, Keeper, KeeperOptions, Kept, Loss, LossHandle, Result, Store};

/// A campaign under an id whose grant is held by a process that may
/// still run: resuming it would make two leaders with one token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "candidate id {id:?} already leads {name} (token {token}, held by {holder}, expires in {}): ids must be unique among live candidates — give this candidate another id, or stop that process (a restarted candidate takes over once its predecessor is provably gone, or after the grant expires)",
    crate::format_duration(*expires_in)
)]
pub struct CandidateInUse {
    pub name: LeaseName,
    pub id: String,
    pub token: Token,
    /// Where the grant's process runs (host, pid, command).
    pub holder: String,
    pub expires_in: Duration,
}

/// How to campaign.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// This candidate's id: stable across its restarts, unique among live
    /// candidates (see the module docs). Becomes the grant's owner.
    pub id: String,
    /// The lease's TTL: how long a leader that stops renewing (on another
    /// host, or not provably dead) keeps others waiting. Within
    /// [`limits::TTL`](crate::limits::TTL).
    pub ttl: Duration,
}

impl CampaignOptions {
    /// Options for candidate `id` with a TTL of 15 s.
    #[must_use]
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ttl: Duration::from_secs(15),
        }
    }
}

/// This process leads `name`: the grant and its keeper. Dropping it
/// resigns.
#[derive(Debug)]
pub struct Leadership {
    store: Arc<Store>,
    grant: Grant,
    keeper: Option<Keeper>,
}

impl Leadership {
    /// Whether this process may act as the leader now: false once the
    /// grant is lost or its trust window has closed (checked now, not
    /// only when the keeper notices).
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.keeper.as_ref().is_some_and(|k| k.check().is_none())
    }

    /// The fencing token to pass to whatever the leader writes.
    #[must_use]
    pub fn token(&self) -> Token {
        self.grant.token
    }

    /// The grant, as acquired (for its [`GrantId`](crate::GrantId) in
    /// fences that keep one).
    #[must_use]
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Why leadership was lost, if it was.
    #[must_use]
    pub fn lost(&self) -> Option<Loss> {
        self.keeper.as_ref().and_then(Keeper::check)
    }

    /// Call `f` once when leadership is lost (at once if it already is),
    /// on a keeper thread: keep it short. Never called after
    /// [`Leadership::resign`].
    pub fn on_lost(&self, f: impl FnOnce(Loss) + Send + 'static) {
        if let Some(keeper) = &self.keeper {
            keeper.on_loss(f);
        }
    }

    /// A handle any thread can wait on for the loss.
    #[must_use]
    pub fn loss_handle(&self) -> Option<LossHandle> {
        self.keeper.as_ref().map(Keeper::handle)
    }

    /// Stop leading: stop renewing, then release, so the next candidate
    /// leads at once rather than after the TTL.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) when the release failed (the
    /// grant then expires by its TTL).
    pub fn resign(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        let Some(keeper) = self.keeper.take() else {
            return Ok(());
        };
        keeper.stop();
        self.store.release(&self.grant)?;
        Ok(())
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!(name = %self.grant.name, "cannot resign (the grant expires by its TTL): {e}");
        }
    }
}

/// Who leads a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The candidate's id.
    pub owner: String,
    pub token: Token,
    pub host: String,
    pub pid: u32,
    /// When the store granted it (wall clock, informational).
    pub since: SystemTime,
}

impl Leader {
    fn of(grant: &Grant) -> Self {
        Self {
            owner: grant.owner.clone(),
            token: grant.token,
            host: grant.holder.host.clone(),
            pid: grant.holder.pid,
            since: grant.acquired_at,
        }
    }
}

/// What an [`Observer`] reports: who leads `name` now (`None`: nobody).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    pub name: LeaseName,
    pub leader: Option<Leader>,
}

impl fmt::Display for LeaderChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.leader {
            None => write!(f, "{}: no leader", self.name),
            Some(l) => write!(
                f,
                "{}: led by {} (token {}, pid {} on {}, since {})",
                self.name,
                l.owner,
                l.token,
                l.pid,
                l.host,
                crate::format_time(l.since)
            ),
        }
    }
}

/// The leader changes of one name, from the current state on: an
/// iterator that blocks until the next change (or [`Observer::cancel`]
/// ends it). See the module docs for how soon a change is seen.
#[derive(Debug)]
pub struct Observer {
    store: Arc<Store>,
    name: LeaseName,
    topic: WaitTopic,
    /// The last change reported (`None` before the first report).
    last: Option<LeaderChange>,
    /// The newest leader's token reported so far.
    newest: Token,
    pause: Duration,
    cancel: Cancel,
}

/// The first pause after a change, doubling up to the store's poll interval.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

impl Observer {
    /// A handle that ends the iteration (and a [`Observer::next_timeout`]) at
    /// its next look, at most the poll interval later.
    #[must_use]
    pub fn cancel(&self) -> Cancel {
        self.cancel.clone()
    }

    /// End on `cancel` (e.g. one from [`Cancel::on_signals`]) instead of
    /// the observer's own.
    #[must_use]
    pub fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = cancel;
        self
    }

    /// Who leads now, read from the store (a holder provably dead leads
    /// no more: the next acquire takes its grant over).
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) when the store fails.
    pub fn current(&self) -> Result<Option<Leader>> {
        Ok(self.store.status(&self.name)?.and_then(|state| {
            state
                .grants
                .iter()
                .find(|g| g.mode.is_exclusive() && !crate::identity::provably_gone(&g.holder))
                .map(Leader::of)
        }))
    }

    /// Who leads, for the next report: as [`Observer::current`], except
    /// that a leader already dead when first read is still reported once
    /// (it led, if briefly, and its grant is still there: an observer
    /// woken late must not skip it), then as gone.
    fn leader_to_report(&mut self) -> Result<Option<Leader>> {
        let Some(state) = self.store.status(&self.name)? else {
            return Ok(None);
        };
        let first = self.last.is_none();
        let leader = state
            .grants
            .iter()
            .find(|g| {
                g.mode.is_exclusive()
                    && (!crate::identity::provably_gone(&g.holder) || (!first && g.token > self.newest))
            })
            .map(Leader::of);
        if first {
            // What was there before the observer began counts as seen.
            self.newest = state.grants.iter().map(|g| g.token).max().unwrap_or(Token(0));
        }
        Ok(leader)
    }

    /// The next change, waiting up to `timeout` (`Ok(None)`: none came, or
    /// the observer was cancelled). The first call reports the current
    /// state at once.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) when the store fails (the
    /// observer may be used again).
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<LeaderChange>> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(None);
            }
            let leader = self.leader_to_report()?;
            if self.last.as_ref().is_none_or(|last| last.leader != leader) {
                let change = LeaderChange {
                    name: self.name.clone(),
                    leader,
                };
                if let Some(l) = &change.leader {
                    self.newest = self.newest.max(l.token);
                }
                self.last = Some(change.clone());
                self.pause = FIRST_PAUSE;
                return Ok(Some(change));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.store
                .backend()
                .wait_for_change(&self.topic, self.pause.min(left))?;
            self.pause = (self.pause * 2).min(self.store.poll_interval());
        }
    }
}

impl Iterator for Observer {
    type Item = Result<LeaderChange>;

    /// The next change, blocking until it comes; `None` once cancelled.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(crate::limits::WAIT.max) {
                Ok(None) if self.cancel.is_cancelled() => return None,
                Ok(None) => {}
                other => return other.transpose(),
            }
        }
    }
}

impl Store {
    /// Campaign for leadership of `name`: wait in FIFO order until this
    /// candidate leads, and keep leading (heartbeats) until the
    /// [`Leadership`] is resigned, dropped or lost. `None`: `cancel` ended
    /// the wait first. A restarted candidate whose predecessor's grant is
    /// still live takes over at once, with a new token, when its
    /// predecessor is provably gone (see the module docs on the id).
    ///
    /// # Errors
    /// As [`Store::acquire_wait`]: the store fails, or refuses a TTL out of
    /// [`limits::TTL`](crate::limits::TTL); [`Error::CandidateInUse`](crate::Error::CandidateInUse)
    /// when a grant under this id is held by a process that may still run.
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::sync::Arc;
    /// use leasehold::{Cancel, CampaignOptions, LeaseName, Store};
    /// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
    /// let name = LeaseName::new("scheduler").unwrap();
    /// let leadership = store.campaign(&name, &CampaignOptions::new("worker-1"), &Cancel::new())?.unwrap();
    /// assert!(leadership.is_leader());
    /// // ... lead, passing leadership.token() to what checks fences ...
    /// leadership.resign()?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn campaign(
        self: &Arc<Self>,
        name: &LeaseName,
        options: &CampaignOptions,
        cancel: &Cancel,
    ) -> Result<Option<Leadership>> {
        self.campaign_for(name, options, None, cancel)
    }

    /// As [`Store::campaign`], waiting at most `timeout` (`None`: as long
    /// as it takes; zero: one try, taking no place in the queue). `None`
    /// when it passed, or `cancel` ended the wait, first.
    ///
    /// # Errors
    /// As [`Store::campaign`]; a `timeout` out of
    /// [`limits::WAIT`](crate::limits::WAIT) is refused.
    pub fn campaign_for(
        self: &Arc<Self>,
        name: &LeaseName,
        options: &CampaignOptions,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Result<Option<Leadership>> {
        self.refuse_a_live_namesake(name, &options.id)?;
        let acquire = AcquireOptions {
            ttl: options.ttl,
            owner: Some(options.id.clone()),
            mode: Mode::Exclusive,
            binding: Binding::ThisProcess,
        };
        let keep = KeeperOptions::new(options.ttl);
        Ok(
            match self.acquire_wait_and_keep(name, &acquire, timeout, cancel, |_| {}, keep)? {
                Kept::Acquired(grant, keeper) => Some(Leadership {
                    store: self.clone(),
                    grant,
                    keeper: Some(keeper),
                }),
                Kept::Held(_) => None,
            },
        )
    }

    /// Refuse a campaign under `id` while a grant under it is held by a
    /// process that may still run: ids must be unique, and the store would
    /// only keep the second candidate waiting (an owner label never shares
    /// a grant between processes), so it is told at once. A restarted
    /// candidate takes over only from a predecessor that is provably gone
    /// (on this host); otherwise it waits for the grant to expire, or is
    /// told here that its id is taken.
    fn refuse_a_live_namesake(&self, name: &LeaseName, id: &str) -> Result<()> {
        let Some(state) = self.status(name)? else { return Ok(()) };
        let Some(g) = state.grants.iter().find(|g| g.owner_explicit && g.owner == id) else {
            return Ok(());
        };
        if crate::identity::liveness(&g.holder) == crate::identity::Liveness::Dead {
            return Ok(());
        }
        Err(crate::Error::CandidateInUse(Box::new(CandidateInUse {
            name: name.clone(),
            id: id.to_owned(),
            token: g.token,
            holder: g.holder.to_string(),
            expires_in: g.expires_in,
        })))
    }

    /// Watch who leads `name`: an iterator of [`LeaderChange`]s, the first
    /// the current state; never the same leader twice in a row (a new
    /// token is a new leader, even for the same candidate).
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{LeaseName, Store};
    /// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
    /// let mut observer = store.observe(&LeaseName::new("scheduler").unwrap());
    /// let now = observer.next_timeout(Duration::from_secs(1))?.unwrap();
    /// assert_eq!(now.leader, None);
    /// assert_eq!(now.to_string(), "scheduler: no leader");
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    #[must_use]
    pub fn observe(self: &Arc<Self>, name: &LeaseName) -> Observer {
        Observer {
            store: self.clone(),
            name: name.clone(),
            topic: WaitTopic::lease(name),
            last: None,
            newest: Token(0),
            pause: FIRST_PAUSE,
            cancel: Cancel::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;

    fn store(dir: &tempfile::TempDir) -> Arc<Store> {
        let url = crate::StoreUrl::sqlite(dir.path().join("l.db"));
        Arc::new(Store::open(&url, &StoreOptions::default()).unwrap())
    }

    fn options(id: &str) -> CampaignOptions {
        CampaignOptions {
            ttl: Duration::from_secs(5),
            ..CampaignOptions::new(id)
        }
    }

    fn next(observer: &mut Observer) -> Option<Leader> {
        observer
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("a change within 5 s")
            .leader
    }

    /// A second campaign under an id whose grant's process still runs
    /// (here: this very process) is refused, not handed the same grant:
    /// two leaders with one token. Once resigned, the id may lead again.
    #[test]
    fn a_live_namesake_is_refused_not_resumed() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let name = LeaseName::new("leader").unwrap();
        let first = store.campaign(&name, &options("a"), &Cancel::new()).unwrap().unwrap();
        let Err(e) = store.campaign(&name, &options("a"), &Cancel::new()) else {
            panic!("a second leader under id a")
        };
        assert!(
            matches!(&e, crate::Error::CandidateInUse(c) if c.token == first.token()),
            "{e}"
        );
        assert_eq!(e.kind(), crate::ErrorKind::Held);
        assert!(
            e.to_string()
                .starts_with("candidate id \"a\" already leads leader (token "),
            "{e}"
        );
        first.resign().unwrap();
        let again = store.campaign(&name, &options("a"), &Cancel::new()).unwrap().unwrap();
        assert!(again.is_leader());
    }

    /// The observer sees no leader, then each leader in turn as they
    /// resign, the next candidate leading at once, never one twice in a
    /// row; a cancelled campaign never leads.
    #[test]
    fn candidates_lead_in_turn_and_the_observer_sees_each() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let name = LeaseName::new("leader").unwrap();
        let mut observer = store.observe(&name);
        assert_eq!(next(&mut observer), None);
        let first = store.campaign(&name, &options("a"), &Cancel::new()).unwrap().unwrap();
        assert!(first.is_leader());
        let seen = next(&mut observer).expect("a leader");
        assert_eq!((seen.owner.as_str(), seen.token), ("a", first.token()));
        assert_eq!(observer.next_timeout(Duration::from_millis(300)).unwrap(), None);

        // b queues first, then c: b is next in line.
        let waiters = |n: usize| {
            let started = Instant::now();
            while store.status(&name).unwrap().map_or(0, |s| s.waiters.len()) < n {
                assert!(started.elapsed() < Duration::from_secs(5), "{n} waiters never queued");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let second = {
            let (store, name) = (store.clone(), name.clone());
            std::thread::spawn(move || store.campaign(&name, &options("b"), &Cancel::new()).unwrap().unwrap())
        };
        waiters(1);
        let cancel = Cancel::new();
        let waiting = {
            let (store, name, cancel) = (store.clone(), name.clone(), cancel.clone());
            std::thread::spawn(move || store.campaign(&name, &options("c"), &cancel).unwrap().is_some())
        };
        waiters(2);
        let first_token = first.token();
        first.resign().unwrap();
        let second = second.join().unwrap();
        assert!(second.token() > first_token);
        cancel.cancel();
        assert!(!waiting.join().unwrap(), "a cancelled candidate led");
        // Resigned and taken over at once: either straight to b, or via
        // "no leader" when the observer looked in between.
        let mut seen = next(&mut observer);
        if seen.is_none() {
            seen = next(&mut observer);
        }
        assert_eq!(seen.map(|l| (l.owner, l.token)), Some(("b".to_owned(), second.token())));
        drop(second);
        assert_eq!(next(&mut observer), None, "dropping resigns");
    }

    /// A campaign with a limit gives up when it passes (one try for
    /// zero), out of the queue, and never leads.
    #[test]
    fn a_campaign_with_a_limit_gives_up_out_of_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir);
        let name = LeaseName::new("leader").unwrap();
        let first = store.campaign(&name, &options("a"), &Cancel::new()).unwrap().unwrap();
        for limit in [Duration::ZERO, Duration::from_millis(200)] {
            let none = store
                .campaign_for(&name, &options("b"), Some(limit), &Cancel::new())
                .unwrap();
            assert!(none.is_none(), "b led while a did, after waiting {limit:?}");
            assert_eq!(store.status(&name).unwrap().unwrap().waiters.len(), 0);
        }
        first.resign().unwrap();
        let second = store
            .campaign_for(&name, &options("b"), Some(Duration::ZERO), &Cancel::new())
            .unwrap();
        assert!(second.is_some_and(|l| l.is_leader()));
    }

    #[test]
    fn a_change_reads_as_one_line() {
        let name = LeaseName::new("job").unwrap();
        let change = LeaderChange {
            name: name.clone(),
            leader: Some(Leader {
                owner: "w1".into(),
                token: Token(7),
                host: "h".into(),
                pid: 42,
                since: SystemTime::UNIX_EPOCH,
            }),
        };
        assert_eq!(
            change.to_string(),
            "job: led by w1 (token 7, pid 42 on h, since 1970-01-01T00:00:00.000Z)"
        );
        assert_eq!(LeaderChange { name, leader: None }.to_string(), "job: no leader");
    }
}
