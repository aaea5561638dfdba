//! Opening a store (by URL: `url`), and the lease operations users call.
//!
//! What a grant means is decided here, above the backend seam: who counts
//! as provably dead (fast takeover), how a waiter keeps its place, which
//! process a grant is bound to.

pub mod id;
mod url;
mod waiting;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold_backend::{
    Backend, Grant, GrantId, Held, HistoryEntry, LeaseAcquireParams, LeaseFence, LeaseFenceParams, LeaseHistoryParams,
    LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams, LeaseState, Mode,
    Owner, QueuedWaiter, Token, limits,
};

use crate::identity::{self, Binding, Vantage};
use crate::{Cancel, Error, Keeper, KeeperOptions, Result};

pub use leasehold_stores::{built_in_schemes, built_in_stores, stores_with};
pub use url::{ChosenUrlError, STORE_VAR, StoreUrl};

/// How to open a store.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Open a SQLite store on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// The longest pause of a waiter between two reads of the store
    /// (`None`: [`DEFAULT_POLL`]; within [`limits::POLL_INTERVAL`]). A store
    /// that notifies (PostgreSQL) wakes waiters sooner; this bounds how late
    /// a missed notification, or an expiry (which no transaction
    /// announces), is noticed.
    pub poll_interval: Option<Duration>,
    /// Open only a store that exists: never create one (nor its
    /// directory) — for commands that only read, where a mistyped path
    /// must not become an empty store that says nobody holds anything.
    /// Stores on servers are unaffected.
    pub must_exist: bool,
}

/// The default longest pause of a waiter between two reads of the store.
pub const DEFAULT_POLL: Duration = Duration::from_millis(100);

/// What to ask for when acquiring.
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// Within [`limits::TTL`] (1 ms to a year); the store refuses others.
    pub ttl: Duration,
    /// An explicit owner label (scopes renew/release, makes re-acquisition
    /// idempotent). `None`: `host:pid`, informational.
    pub owner: Option<String>,
    pub mode: Mode,
    pub binding: Binding,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(60),
            owner: None,
            mode: Mode::Exclusive,
            binding: Binding::ThisProcess,
        }
    }
}

/// The outcome of an acquisition: contention is a value, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned once per call")]
pub enum Acquire {
    Acquired(leasehold_backend::Grant),
    Held(Held),
}

/// The outcome of [`Store::acquire_and_keep`]: the grant and its running
/// keeper, or who holds the name.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "returned once per call, like Acquire")]
pub enum Kept {
    Acquired(leasehold_backend::Grant, Keeper),
    Held(Held),
}

/// How long a waiter's place in the queue lasts without a refresh (a
/// waiter refreshes it every [`WAITER_REFRESH`]). A waiter that dies
/// leaves the queue after this at the latest; at once when an acquirer on
/// its host can prove it dead. 60 s, refreshed every 20 s — etcd's session
/// default and its keep-alive at a third: each refresh is a durable write
/// that wakes the waiters next in line, and 200 waiters refreshing every
/// 7.5 s (a 30 s registration) made 27 commits a second between them. A
/// dead waiter on another host holds the queue up no longer than a dead
/// holder of the default TTL does.
const WAITER_TTL: Duration = Duration::from_secs(60);

/// How often a waiter refreshes its place: a third of [`WAITER_TTL`], so
/// that two refreshes may fail (a store restarting) before it runs out.
const WAITER_REFRESH: Duration = Duration::from_secs(20);

/// Whether the process behind a waiter registration is provably gone,
/// seen from `here` (as [`Vantage::gone`] judges a holder; a registration
/// with no record of its process never is).
fn waiter_gone(here: &Vantage, w: &QueuedWaiter) -> bool {
    w.holder.as_ref().is_some_and(|h| here.gone(h))
}

/// An open store. `Send + Sync`: one `Arc<Store>` serves many threads
/// (a worker's, a keeper's), each call taking the backend's own locks.
#[derive(Debug)]
pub struct Store {
    url: StoreUrl,
    backend: Box<dyn Backend>,
    poll: Duration,
    /// Reports with a next claim from the threads sharing this store,
    /// committed together (`Store::task_complete_and_claim`).
    pub(crate) reports: crate::queue::GroupCommit,
}

impl Store {
    /// Open the store at `url`.
    ///
    /// # Errors
    /// [`Error::Store`] when the store cannot be opened (see
    /// [`BackendError`](crate::BackendError) for the kinds), or the URL names a store this build
    /// does not include; [`Error::InvalidInput`] for a poll interval out of
    /// [`limits::POLL_INTERVAL`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::{Store, StoreOptions, StoreUrl};
    /// let store = Store::open(&StoreUrl::sqlite(dir.path().join("l.db")), &StoreOptions::default())?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn open(url: &StoreUrl, options: &StoreOptions) -> Result<Self> {
        limits::POLL_INTERVAL.check(options.poll_interval.unwrap_or(DEFAULT_POLL))?;
        let backend = url.open_backend(options)?;
        Self::from_backend(url.clone(), backend, options)
    }

    /// A store over any [`Backend`] — a store of your own, or one of the
    /// backend crates opened with options [`Store::open`] does not offer —
    /// with every rule of the library above it (fast takeover, waiting,
    /// binding, limits). `url` names it in messages and to the commands it
    /// supervises (`LEASEHOLD_STORE`): [`StoreUrl::custom`] for a store no
    /// URL opens. Of `options`, only the poll interval applies here.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the poll interval is out of
    /// [`limits::POLL_INTERVAL`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::{Store, StoreOptions, StoreUrl};
    /// use leasehold_sqlite::{SqliteBackend, SqliteOptions};
    /// let backend = SqliteBackend::open(&dir.path().join("l.db"), SqliteOptions::default())?;
    /// let url = StoreUrl::custom("my store");
    /// let store = Store::from_backend(url, Box::new(backend), &StoreOptions::default())?;
    /// assert_eq!(store.url().to_string(), "my store");
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn from_backend(url: StoreUrl, backend: Box<dyn Backend>, options: &StoreOptions) -> Result<Self> {
        let poll = limits::POLL_INTERVAL.check(options.poll_interval.unwrap_or(DEFAULT_POLL))?;
        Ok(Self {
            url,
            backend,
            poll,
            reports: crate::queue::GroupCommit::default(),
        })
    }

    /// Open a SQLite store at `path` with default options.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_sqlite(path: &Path) -> Result<Self> {
        Self::open(&StoreUrl::sqlite(path), &StoreOptions::default())
    }

    #[must_use]
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The longest pause of a waiter between two reads of the store.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.poll
    }

    /// The backend behind the seam (for `doctor` and tests).
    #[must_use]
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    fn params(name: &LeaseName, options: &AcquireOptions) -> Result<LeaseAcquireParams> {
        let holder = identity::holder(options.binding).map_err(Error::Process)?;
        Ok(LeaseAcquireParams {
            name: name.clone(),
            owner: Owner {
                label: options.owner.clone().unwrap_or_else(identity::default_owner),
                explicit: options.owner.is_some(),
            },
            mode: options.mode,
            ttl: options.ttl,
            holder,
            ticket: None,
            waiter_ttl: WAITER_TTL,
            evict: Vec::new(),
            evict_waiters: Vec::new(),
            waiter_holder: None,
            // A registration on behalf of a process: registering it again
            // renews its grant. Not for `ThisProcess`, whose threads must
            // keep excluding one another.
            reacquire_by_process: matches!(options.binding, Binding::Process { .. }),
        })
    }

    /// One attempt, with fast takeover ([`Store::attempt_judged`]).
    fn attempt(&self, params: &mut LeaseAcquireParams) -> Result<Acquire> {
        self.attempt_sent(params).map(|(outcome, _)| outcome)
    }

    /// As [`Store::attempt`], with the boot-clock time the request that
    /// decided the outcome was sent.
    fn attempt_sent(&self, params: &mut LeaseAcquireParams) -> Result<(Acquire, Duration)> {
        let (outcome, sent, _) = self.attempt_judged(&Vantage::read(), params)?;
        Ok((outcome, sent))
    }

    /// Try once to acquire `name`.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails or refuses a TTL out of
    /// [`limits::TTL`] (a [`BackendError`](crate::BackendError) of kind [`crate::ErrorKind::InvalidInput`]); [`Error::Process`]
    /// when the binding names a process that cannot be read.
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::{Acquire, AcquireOptions, LeaseName, Store};
    /// let store = Store::open_sqlite(&dir.path().join("l.db"))?;
    /// let name = LeaseName::new("nightly-report").unwrap();
    /// match store.try_acquire(&name, &AcquireOptions::default())? {
    ///     Acquire::Acquired(grant) => println!("token {}", grant.token),
    ///     Acquire::Held(held) => println!("held by {}", held.grants[0].owner),
    /// }
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn try_acquire(&self, name: &LeaseName, options: &AcquireOptions) -> Result<Acquire> {
        let mut params = Self::params(name, options)?;
        self.attempt(&mut params)
    }

    /// Acquire `name`, waiting in FIFO order up to `timeout` (forever when
    /// `None`). `on_held` is called after each refused attempt, e.g. to show
    /// who holds it. Returns `Held` when the timeout passes, or when
    /// `cancel` is cancelled — seen before every poll, at most the poll
    /// interval apart: the wait then leaves the queue and returns `Held`
    /// as of its last attempt. (A grant that came before the wait saw the
    /// cancel is returned as granted: the caller decides what to do with
    /// it.)
    ///
    /// The place in the queue is the calling process's: it is taken over
    /// at once (by any acquirer on this host) when this process is
    /// provably gone, whatever the grant is bound to.
    ///
    /// # Errors
    /// As [`Store::try_acquire`]; [`Error::InvalidInput`] for a timeout out
    /// of [`limits::WAIT`].
    pub fn acquire_wait(
        &self,
        name: &LeaseName,
        options: &AcquireOptions,
        timeout: Option<Duration>,
        cancel: &Cancel,
        on_held: impl FnMut(&Held),
    ) -> Result<Acquire> {
        Ok(self.acquire_wait_sent(name, options, timeout, cancel, on_held)?.0)
    }

    /// Acquire `name` once and keep the grant: the boot clock is read just
    /// before the deciding request goes out, and a [`Keeper`] started from
    /// that send time (renewing with `keep.owner`; `keep.ttl` is normally
    /// `options.ttl`). Releasing stays the caller's: stop the keeper, then
    /// [`Store::release`].
    ///
    /// # Errors
    /// As [`Store::try_acquire`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use std::sync::Arc;
    /// use leasehold::{AcquireOptions, KeeperOptions, Kept, LeaseName, Store};
    /// let store = Arc::new(Store::open_sqlite(&dir.path().join("l.db"))?);
    /// let name = LeaseName::new("nightly-report").unwrap();
    /// let options = AcquireOptions::default();
    /// let Kept::Acquired(grant, keeper) = store.acquire_and_keep(&name, &options, KeeperOptions::new(options.ttl))? else {
    ///     panic!("held");
    /// };
    /// assert!(!keeper.handle().is_lost());
    /// keeper.stop();
    /// store.release(&grant)?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn acquire_and_keep(
        self: &Arc<Self>,
        name: &LeaseName,
        options: &AcquireOptions,
        keep: KeeperOptions,
    ) -> Result<Kept> {
        let mut params = Self::params(name, options)?;
        Ok(self.keep(self.attempt_sent(&mut params)?, keep))
    }

    /// As [`Store::acquire_and_keep`], waiting as [`Store::acquire_wait`]
    /// does; the keeper starts from the send time of the attempt that won.
    ///
    /// # Errors
    /// As [`Store::acquire_wait`].
    pub fn acquire_wait_and_keep(
        self: &Arc<Self>,
        name: &LeaseName,
        options: &AcquireOptions,
        timeout: Option<Duration>,
        cancel: &Cancel,
        on_held: impl FnMut(&Held),
        keep: KeeperOptions,
    ) -> Result<Kept> {
        Ok(self.keep(self.acquire_wait_sent(name, options, timeout, cancel, on_held)?, keep))
    }

    fn keep(self: &Arc<Self>, (outcome, sent): (Acquire, Duration), keep: KeeperOptions) -> Kept {
        match outcome {
            Acquire::Acquired(grant) => {
                let keeper = Keeper::start(self.clone(), &grant, sent, keep);
                Kept::Acquired(grant, keeper)
            }
            Acquire::Held(held) => Kept::Held(held),
        }
    }

    /// Extend `grant`, this caller's live grant, by `ttl` from now. It acts
    /// on that grant only: a store that lost data and issued its token
    /// again to someone else answers `Lost(OtherGrant)`.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails or refuses a TTL out of
    /// [`limits::TTL`]. A lost grant is `Ok(Lost)`.
    pub fn renew(&self, grant: &Grant, ttl: Duration) -> Result<LeaseRenew> {
        self.renew_by_token(&grant.name, grant.token, Self::owner_of(grant), Some(grant.id()), ttl)
    }

    /// End `grant`, this caller's live grant, at once (that grant only, as
    /// [`Store::renew`]).
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. A lost grant is `Ok(Lost)`.
    pub fn release(&self, grant: &Grant) -> Result<LeaseRelease> {
        self.release_by_token(&grant.name, grant.token, Self::owner_of(grant), Some(grant.id()))
    }

    /// The owner a holder names: its explicit one (which scopes renew and
    /// release), else none.
    fn owner_of(grant: &Grant) -> Option<&str> {
        grant.owner_explicit.then_some(grant.owner.as_str())
    }

    /// Extend the grant of `token` by `ttl` from now, for a caller that
    /// knows the token (a script given it by `leasehold acquire`) and
    /// maybe its grant id. Without `grant`, only a grant bound to no
    /// process is renewed ([`rules::scope_verdict`](leasehold_backend::rules::scope_verdict)).
    ///
    /// # Errors
    /// As [`Store::renew`].
    pub fn renew_by_token(
        &self,
        name: &LeaseName,
        token: Token,
        owner: Option<&str>,
        grant: Option<GrantId>,
        ttl: Duration,
    ) -> Result<LeaseRenew> {
        Ok(self.backend.lease_renew(&LeaseRenewParams {
            name: name.clone(),
            token,
            owner: owner.map(str::to_owned),
            grant,
            ttl,
        })?)
    }

    /// End the grant of `token` at once, as [`Store::renew_by_token`]
    /// renews it: without `grant`, only a grant bound to no process.
    ///
    /// # Errors
    /// As [`Store::release`].
    pub fn release_by_token(
        &self,
        name: &LeaseName,
        token: Token,
        owner: Option<&str>,
        grant: Option<GrantId>,
    ) -> Result<LeaseRelease> {
        let release = self.backend.lease_release(&LeaseReleaseParams {
            name: name.clone(),
            token,
            owner: owner.map(str::to_owned),
            grant,
        })?;
        crate::telemetry::released(name, token, &release);
        Ok(release)
    }

    /// Check that `fence` (a [`Token`], or a
    /// [`Fence`](crate::files::Fence) naming its grant too) may still write
    /// to what `name` protects. With a grant, the token's grant in the
    /// store must be that one: after a restore the store may hold the same
    /// token for another grant.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. A refusal is `Ok(Refused)`.
    pub fn fence(&self, name: &LeaseName, fence: impl Into<crate::files::Fence>) -> Result<LeaseFence> {
        let fence = fence.into();
        Ok(self.backend.lease_fence(&LeaseFenceParams {
            name: name.clone(),
            token: fence.token,
            grant: fence.grant,
            caller: identity::default_owner(),
        })?)
    }

    /// After restoring the store from an older copy: make every token issued
    /// from now on, for every name, exceed every token it may have issued
    /// before by more than `by` (`leasehold migrate --bump-tokens`; see
    /// [`TokensBumpParams`](crate::TokensBumpParams) for how large `by`
    /// must be, and README.md, "Restoring a store").
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails, or `by` is 0, above
    /// [`TokensBumpParams::MAX`](crate::TokensBumpParams::MAX) or would
    /// carry tokens past what a store can hold (kind `InvalidInput`).
    pub fn bump_tokens(&self, by: u64) -> Result<crate::TokensBumped> {
        Ok(self.backend.tokens_bump(&crate::TokensBumpParams { by })?)
    }

    /// Copy the whole store to `dest`, a new file in an existing directory:
    /// a consistent snapshot taken while other processes go on writing,
    /// durable when this returns, marked in the copy as a backup so that
    /// `leasehold doctor` tells it from a plain copy (`leasehold backup`;
    /// README.md, "Restoring a store"). A plain `cp` of a live store is not
    /// a backup: its latest commits may still be in its `-wal`.
    ///
    /// # Errors
    /// [`Error::Store`]: kind `InvalidInput` when something is at `dest`
    /// (a symbolic link included: never followed, never overwritten) or
    /// its directory does not exist; `DiskFull`, `ReadOnly`, `Permission`
    /// when the copy cannot be written there (nothing is left behind);
    /// `Unsupported` on PostgreSQL and etcd, whose own tools (`pg_dump`,
    /// `etcdctl snapshot save`) the message names.
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = leasehold::Store::open_sqlite(&dir.path().join("s.db"))?;
    /// let copy = store.backup(&dir.path().join("s.backup.db"))?;
    /// assert!(copy.bytes > 0);
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn backup(&self, dest: &Path) -> Result<crate::StoreBackup> {
        Ok(self
            .backend
            .store_backup(&crate::StoreBackupParams { dest: dest.to_owned() })?)
    }

    /// The state of one name (`None` if never granted). Waiters whose
    /// processes are provably gone are left out: the next acquire removes
    /// them (this only reads).
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn status(&self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let mut state = self.backend.lease_get(name)?;
        if let Some(state) = &mut state {
            let here = Vantage::read();
            state.waiters.retain(|w| !waiter_gone(&here, w));
        }
        Ok(state)
    }

    /// The state of every name; or, with `live_only`, of the names held by
    /// a holder not proven dead: grants whose TTL has run out, and grants
    /// whose process is provably gone (which the next acquire takes over),
    /// are left out. Waiters whose processes are provably gone are left
    /// out either way. Only reads: a proven-dead holder's grant stays in
    /// the store for that acquire to end, with its history entry.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn list(&self, live_only: bool) -> Result<Vec<LeaseState>> {
        let mut states = self.backend.lease_list(&LeaseListParams { live_only })?;
        let here = Vantage::read();
        for state in &mut states {
            state.waiters.retain(|w| !waiter_gone(&here, w));
        }
        if live_only {
            for state in &mut states {
                state.grants.retain(|g| !here.gone(&g.holder));
            }
            states.retain(|s| !s.grants.is_empty());
        }
        Ok(states)
    }

    /// The newest `limit` history entries of `name`, newest first.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn history(&self, name: &LeaseName, limit: u32) -> Result<Vec<HistoryEntry>> {
        Ok(self.backend.lease_history(&LeaseHistoryParams {
            name: name.clone(),
            limit,
        })?)
    }
}

/// A store shared between threads must stay shareable (every backend is
/// `Send + Sync` at the seam).
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Store>();
};

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::time::SystemTime;

    use super::*;
    use crate::lock::{self, LockError, LockOptions};
    use crate::{Available, NewTask, TaskState};

    fn refused<T: fmt::Debug>(outcome: Result<T>, limit: limits::Limit) {
        match outcome {
            Err(Error::InvalidInput(e)) => assert_eq!(e.limit, limit),
            Err(Error::Store(e)) if e.out_of_range().is_some() => {
                assert_eq!(e.out_of_range().map(|e| e.limit), Some(limit));
            }
            other => panic!("must be refused for {}: {other:?}", limit.what),
        }
    }

    /// Every duration a library caller passes is checked before anything
    /// is written: at the entry (waits, the poll interval) or by the store
    /// (TTLs, delays).
    #[test]
    fn durations_out_of_range_are_refused_at_the_library_entry() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::sqlite(dir.path().join("l.db"));
        for poll in [Duration::ZERO, limits::YEAR * 2] {
            let options = StoreOptions {
                poll_interval: Some(poll),
                ..StoreOptions::default()
            };
            refused(Store::open(&url, &options), limits::POLL_INTERVAL);
        }
        let store = Store::open(&url, &StoreOptions::default()).unwrap();
        let name = LeaseName::new("job").unwrap();
        let options = AcquireOptions {
            binding: Binding::Ttl,
            ..AcquireOptions::default()
        };
        refused(
            store.acquire_wait(&name, &options, Some(limits::YEAR * 2), &Cancel::new(), |_| {}),
            limits::WAIT,
        );
        let zero = AcquireOptions {
            ttl: Duration::ZERO,
            ..options.clone()
        };
        refused(store.try_acquire(&name, &zero), limits::TTL);
        assert_eq!(store.status(&name).unwrap(), None, "a refused call made a grant");

        let queue = LeaseName::new("q").unwrap();
        let mut late = NewTask::new(serde_json::json!(1));
        late.available = Available::At(SystemTime::now() + limits::CENTURY + limits::YEAR);
        refused(store.task_add(&queue, vec![late]), limits::DELAY);
        let mut late = NewTask::new(serde_json::json!(1));
        late.available = Available::After(limits::CENTURY + limits::YEAR);
        refused(store.task_add(&queue, vec![late]), limits::DELAY);
        store
            .task_add(&queue, vec![NewTask::new(serde_json::json!(2))])
            .unwrap();
        refused(store.task_claim(&queue, Duration::MAX, None), limits::TTL);
        let tasks = store.task_list(Some(&queue), None, 10).unwrap();
        assert_eq!(tasks.len(), 1, "the refused task was added");
        assert_eq!((tasks[0].state, tasks[0].attempts), (TaskState::Pending, 0));

        match lock::lock(dir.path(), LockOptions::default(), Some(Duration::MAX)) {
            Err(LockError::InvalidInput(e)) => assert_eq!(e.limit, limits::WAIT),
            other => panic!("lock with a timeout out of range: {other:?}"),
        }
    }
}
