//! Opening a store by URL, and the lease operations users call.
//!
//! What a grant means is decided here, above the backend seam: who counts
//! as provably dead (fast takeover), how a waiter keeps its place, which
//! process a grant is bound to.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_backend::{
    Backend, BackendError, ClockSkew, Held, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Mode, Owner, Token, WaitTopic, WaiterEnqueueParams, WaiterRemoveParams, host, limits,
};
use leasehold_sqlite::{SqliteBackend, SqliteOptions};

use crate::identity::{self, Binding};
use crate::{Error, Keeper, KeeperOptions, Result};

/// Where lease state lives, parsed from `sqlite://PATH`, `postgres://…`,
/// `postgresql://…` or `etcd://HOST:PORT[,HOST:PORT…][?prefix=/KEY/PREFIX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    Postgres(String),
    /// An etcd cluster; every key under `prefix` (the backend's default
    /// when `None`), so that several deployments can share a cluster.
    Etcd {
        endpoints: Vec<String>,
        prefix: Option<String>,
    },
    /// A store built from a backend of the caller's ([`Store::from_backend`]),
    /// named by the caller; [`Store::open`] cannot open it.
    Custom(String),
}

impl StoreUrl {
    /// Parse a store URL.
    ///
    /// # Errors
    /// [`BackendError::InvalidUrl`] for an unknown scheme or an empty path.
    ///
    /// # Examples
    /// ```
    /// use leasehold::StoreUrl;
    /// assert_eq!(
    ///     StoreUrl::parse("sqlite:///var/lib/jobs.db").unwrap(),
    ///     StoreUrl::Sqlite("/var/lib/jobs.db".into())
    /// );
    /// assert!(StoreUrl::parse("redis://localhost").is_err());
    /// assert_eq!(
    ///     StoreUrl::parse("etcd://10.0.0.5:2379,10.0.0.6:2379?prefix=/myapp").unwrap(),
    ///     StoreUrl::Etcd {
    ///         endpoints: vec!["10.0.0.5:2379".into(), "10.0.0.6:2379".into()],
    ///         prefix: Some("/myapp".into()),
    ///     }
    /// );
    /// assert!(StoreUrl::parse("etcd://h:2379?prefix=myapp").is_err());
    /// assert!(StoreUrl::parse("etcd://h:2379?prefx=/a").is_err());
    /// ```
    pub fn parse(url: &str) -> std::result::Result<Self, BackendError> {
        let invalid = |reason: &str| BackendError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(
                "expected SCHEME://…, e.g. sqlite:///path/to/leasehold.db, postgres://host/db or etcd://host:2379",
            ));
        };
        match scheme {
            "sqlite" => {
                if rest.is_empty() {
                    return Err(invalid(
                        "the path is empty; write sqlite:///absolute/path.db or sqlite://relative.db",
                    ));
                }
                let path = match rest.strip_prefix("~/") {
                    Some(tail) => home_dir()
                        .ok_or_else(|| invalid("~ used but $HOME is not set"))?
                        .join(tail),
                    None => PathBuf::from(rest),
                };
                Ok(StoreUrl::Sqlite(path))
            }
            "postgres" | "postgresql" => Ok(StoreUrl::Postgres(url.to_owned())),
            "etcd" => {
                let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
                let endpoints: Vec<String> = hosts.trim_end_matches('/').split(',').map(str::to_owned).collect();
                if endpoints.iter().any(String::is_empty) {
                    return Err(invalid("expected etcd://HOST:PORT[,HOST:PORT...][?prefix=/myapp]"));
                }
                let mut prefix = None;
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    match pair.split_once('=') {
                        Some(("prefix", value)) if value.starts_with('/') && value.len() > 1 => {
                            prefix = Some(value.to_owned());
                        }
                        Some(("prefix", _)) => {
                            return Err(invalid("the prefix must be an absolute key path, e.g. ?prefix=/myapp"));
                        }
                        _ => {
                            return Err(invalid(&format!(
                                "unknown parameter {pair:?}; the only one is prefix=/KEY/PREFIX"
                            )));
                        }
                    }
                }
                Ok(StoreUrl::Etcd { endpoints, prefix })
            }
            other => Err(invalid(&format!(
                "unknown scheme {other:?}; use sqlite://, postgres:// or etcd://"
            ))),
        }
    }

    /// The embedded default: `$XDG_STATE_HOME/leasehold/leasehold.db`, or
    /// `~/.local/state/leasehold/leasehold.db` when it is unset.
    ///
    /// # Errors
    /// When neither `$XDG_STATE_HOME` nor `$HOME` is set.
    pub fn default_location() -> std::result::Result<Self, BackendError> {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home_dir().map(|h| h.join(".local/state")))
            .ok_or_else(|| BackendError::InvalidUrl {
                url: String::new(),
                reason: "neither $XDG_STATE_HOME nor $HOME is set, so there is no default store; pass --store sqlite:///path/to/leasehold.db".into(),
            })?;
        Ok(StoreUrl::Sqlite(state.join("leasehold").join("leasehold.db")))
    }
}

/// The error for a store this build does not include.
#[cfg(not(all(feature = "postgres", feature = "etcd")))]
fn not_built(url: &StoreUrl, what: &str) -> Error {
    BackendError::Unsupported {
        store: url.to_string(),
        what: "this store".into(),
        hint: format!("this build of leasehold does not include {what}; use sqlite://PATH or another build"),
    }
    .into()
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => f.write_str(url),
            StoreUrl::Custom(name) => f.write_str(name),
            StoreUrl::Etcd { endpoints, prefix } => {
                write!(f, "etcd://{}", endpoints.join(","))?;
                match prefix {
                    Some(prefix) => write!(f, "?prefix={prefix}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// How to open a store.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Open a SQLite store on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// Shift of the store's clock, for tests.
    pub skew: ClockSkew,
    /// The longest pause of a waiter between two reads of the store
    /// (`None`: [`DEFAULT_POLL`]; within [`limits::POLL_INTERVAL`]). A store
    /// that notifies (PostgreSQL) wakes waiters sooner; this bounds how late
    /// a missed notification, or an expiry (which no transaction
    /// announces), is noticed.
    pub poll_interval: Option<Duration>,
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

/// How long a waiter's place in the queue lasts without a refresh; a
/// waiter that dies leaves the queue after this.
const WAITER_TTL: Duration = Duration::from_secs(10);

/// An open store. `Send + Sync`: one `Arc<Store>` serves many threads
/// (a worker's, a keeper's), each call taking the backend's own locks.
#[derive(Debug)]
pub struct Store {
    url: StoreUrl,
    backend: Box<dyn Backend>,
    poll: Duration,
}

impl Store {
    /// Open the store at `url`.
    ///
    /// # Errors
    /// [`Error::Store`] when the store cannot be opened (see
    /// [`BackendError`] for the kinds), or the URL names a store this build
    /// does not include; [`Error::InvalidInput`] for a poll interval out of
    /// [`limits::POLL_INTERVAL`].
    ///
    /// # Examples
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use leasehold::{Store, StoreOptions, StoreUrl};
    /// let store = Store::open(&StoreUrl::Sqlite(dir.path().join("l.db")), &StoreOptions::default())?;
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn open(url: &StoreUrl, options: &StoreOptions) -> Result<Self> {
        limits::POLL_INTERVAL.check(options.poll_interval.unwrap_or(DEFAULT_POLL))?;
        let backend: Box<dyn Backend> = match url {
            StoreUrl::Sqlite(path) => Box::new(SqliteBackend::open(
                path,
                SqliteOptions {
                    allow_network_fs: options.allow_network_fs,
                    skew: options.skew.clone(),
                    ..SqliteOptions::default()
                },
            )?),
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(url) => Box::new(leasehold_postgres::PostgresBackend::open(
                url,
                leasehold_postgres::PostgresOptions {
                    skew: options.skew.clone(),
                    ..leasehold_postgres::PostgresOptions::default()
                },
            )?),
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => return Err(not_built(url, "the PostgreSQL store (cargo feature `postgres`)")),
            #[cfg(feature = "etcd")]
            StoreUrl::Etcd { endpoints, prefix } => {
                let defaults = leasehold_etcd::EtcdOptions::default();
                Box::new(leasehold_etcd::EtcdBackend::open(
                    endpoints,
                    &leasehold_etcd::EtcdOptions {
                        prefix: prefix.clone().unwrap_or(defaults.prefix.clone()),
                        ..defaults
                    },
                )?)
            }
            #[cfg(not(feature = "etcd"))]
            StoreUrl::Etcd { .. } => return Err(not_built(url, "the etcd store (cargo feature `etcd`)")),
            StoreUrl::Custom(_) => {
                return Err(BackendError::Unsupported {
                    store: url.to_string(),
                    what: "opening a store by a name of the caller's".into(),
                    hint: "build it with Store::from_backend".into(),
                }
                .into());
            }
        };
        Self::from_backend(url.clone(), backend, options)
    }

    /// A store over any [`Backend`] — a store of your own, or one of the
    /// backend crates opened with options [`Store::open`] does not offer —
    /// with every rule of the library above it (fast takeover, waiting,
    /// binding, limits). `url` names it in messages and to the commands it
    /// supervises (`LEASEHOLD_STORE`): [`StoreUrl::Custom`] for a store no
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
    /// let url = StoreUrl::Custom("my store".into());
    /// let store = Store::from_backend(url, Box::new(backend), &StoreOptions::default())?;
    /// assert_eq!(store.url().to_string(), "my store");
    /// # Ok::<(), leasehold::Error>(())
    /// ```
    pub fn from_backend(url: StoreUrl, backend: Box<dyn Backend>, options: &StoreOptions) -> Result<Self> {
        let poll = limits::POLL_INTERVAL.check(options.poll_interval.unwrap_or(DEFAULT_POLL))?;
        Ok(Self { url, backend, poll })
    }

    /// Open a SQLite store at `path` with default options.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_sqlite(path: &Path) -> Result<Self> {
        Self::open(&StoreUrl::Sqlite(path.to_path_buf()), &StoreOptions::default())
    }

    #[must_use]
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The backend behind the seam (for `doctor` and tests).
    #[must_use]
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    fn params(name: &LeaseName, options: &AcquireOptions) -> Result<LeaseAcquireParams> {
        let holder = identity::holder(options.binding).map_err(|e| Error::Process(e.to_string()))?;
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
            // A registration on behalf of a process: registering it again
            // renews its grant. Not for `ThisProcess`, whose threads must
            // keep excluding one another.
            reacquire_by_process: matches!(options.binding, Binding::Process { .. }),
        })
    }

    /// One attempt, with fast takeover: if the store says held and some
    /// holders are provably gone, ask again, evicting exactly those.
    fn attempt(&self, params: &mut LeaseAcquireParams) -> Result<Acquire> {
        Ok(self.attempt_sent(params)?.0)
    }

    /// As [`Store::attempt`], with the boot-clock time the request that
    /// decided the outcome was sent (a keeper's window starts there).
    fn attempt_sent(&self, params: &mut LeaseAcquireParams) -> Result<(Acquire, Duration)> {
        params.evict.clear();
        let sent = host::boot_clock();
        match self.backend.lease_acquire(params)? {
            LeaseAcquire::Acquired(g) => return Ok((Acquire::Acquired(g), sent)),
            LeaseAcquire::Held(held) => {
                params.ticket = held.ticket.or(params.ticket);
                params.evict = held
                    .grants
                    .iter()
                    .filter(|g| identity::provably_gone(&g.holder))
                    .map(|g| g.token)
                    .collect();
                if params.evict.is_empty() {
                    return Ok((Acquire::Held(held), sent));
                }
            }
        }
        let sent = host::boot_clock();
        Ok(match self.backend.lease_acquire(params)? {
            LeaseAcquire::Acquired(g) => (Acquire::Acquired(g), sent),
            LeaseAcquire::Held(held) => {
                params.ticket = held.ticket.or(params.ticket);
                (Acquire::Held(held), sent)
            }
        })
    }

    /// Try once to acquire `name`.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails or refuses a TTL out of
    /// [`limits::TTL`] ([`BackendError::InvalidInput`]); [`Error::Process`]
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
    /// who holds it. Returns `Held` when the timeout passes.
    ///
    /// # Errors
    /// As [`Store::try_acquire`]; [`Error::InvalidInput`] for a timeout out
    /// of [`limits::WAIT`].
    pub fn acquire_wait(
        &self,
        name: &LeaseName,
        options: &AcquireOptions,
        timeout: Option<Duration>,
        on_held: impl FnMut(&Held),
    ) -> Result<Acquire> {
        Ok(self.acquire_wait_sent(name, options, timeout, on_held)?.0)
    }

    /// As [`Store::acquire_wait`], with the send time of the deciding request.
    fn acquire_wait_sent(
        &self,
        name: &LeaseName,
        options: &AcquireOptions,
        timeout: Option<Duration>,
        mut on_held: impl FnMut(&Held),
    ) -> Result<(Acquire, Duration)> {
        if let Some(timeout) = timeout {
            limits::WAIT.check(timeout)?;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut params = Self::params(name, options)?;
        // First a plain attempt: no queue entry when it is free.
        let first = self.attempt_sent(&mut params)?;
        if matches!(first.0, Acquire::Acquired(_)) || timeout == Some(Duration::ZERO) {
            return Ok(first);
        }
        params.ticket = Some(self.backend.waiter_enqueue(&WaiterEnqueueParams {
            name: name.clone(),
            mode: options.mode,
            holder: params.holder.clone(),
            ttl: WAITER_TTL,
        })?);
        // Each attempt is a durable write (it refreshes our place in the
        // queue), so between attempts we poll with cheap reads and attempt
        // only when the name looks free, or when our registration needs a
        // refresh. Between reads we wait for the store to announce a change
        // of the name (PostgreSQL's NOTIFY, an etcd watch), at most the
        // backed-off pause: polling is the fallback, and the only way an
        // expiry is noticed on SQLite and PostgreSQL (etcd's watch sees the
        // grant's etcd lease run out).
        let topic = WaitTopic::lease(name);
        let mut pause = Duration::from_millis(10).min(self.poll);
        let mut last_attempt = Instant::now();
        let outcome = loop {
            let due = last_attempt.elapsed() >= WAITER_TTL / 4;
            // A grant whose holder is provably gone does not count: the
            // attempt evicts it, so a killed holder is taken over as soon
            // as a fresh acquire would, not at the next refresh.
            let looks_free = || -> Result<bool> {
                Ok(self.backend.lease_get(name)?.is_none_or(|state| {
                    state.grants.iter().all(|g| {
                        (!g.mode.is_exclusive() && !options.mode.is_exclusive()) || identity::provably_gone(&g.holder)
                    })
                }))
            };
            if due || looks_free()? {
                last_attempt = Instant::now();
                match self.attempt_sent(&mut params) {
                    Ok((Acquire::Acquired(g), sent)) => break Ok((Acquire::Acquired(g), sent)),
                    Ok((Acquire::Held(held), sent)) => {
                        on_held(&held);
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            break Ok((Acquire::Held(held), sent));
                        }
                    }
                    Err(e) => break Err(e),
                }
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                // Report the state as of a final attempt.
                break self.attempt_sent(&mut params);
            }
            let refresh = (WAITER_TTL / 4).saturating_sub(last_attempt.elapsed());
            let wait = deadline.map_or(pause, |d| pause.min(d.saturating_duration_since(Instant::now())));
            self.backend.wait_for_change(&topic, wait.min(refresh))?;
            pause = (pause * 2).min(self.poll);
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
    /// store.release(&name, grant.token, None)?;
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
        on_held: impl FnMut(&Held),
        keep: KeeperOptions,
    ) -> Result<Kept> {
        Ok(self.keep(self.acquire_wait_sent(name, options, timeout, on_held)?, keep))
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

    /// Extend a live grant by `ttl` from now.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails or refuses a TTL out of
    /// [`limits::TTL`]. A lost grant is `Ok(Lost)`.
    pub fn renew(&self, name: &LeaseName, token: Token, owner: Option<&str>, ttl: Duration) -> Result<LeaseRenew> {
        Ok(self.backend.lease_renew(&LeaseRenewParams {
            name: name.clone(),
            token,
            owner: owner.map(str::to_owned),
            ttl,
        })?)
    }

    /// End a live grant at once.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. A lost grant is `Ok(Lost)`.
    pub fn release(&self, name: &LeaseName, token: Token, owner: Option<&str>) -> Result<LeaseRelease> {
        Ok(self.backend.lease_release(&LeaseReleaseParams {
            name: name.clone(),
            token,
            owner: owner.map(str::to_owned),
        })?)
    }

    /// Check that `token` may still write to what `name` protects.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails. A refusal is `Ok(Refused)`.
    pub fn fence(&self, name: &LeaseName, token: Token) -> Result<LeaseFence> {
        Ok(self.backend.lease_fence(&LeaseFenceParams {
            name: name.clone(),
            token,
            caller: identity::default_owner(),
        })?)
    }

    /// The state of one name (`None` if never granted).
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn status(&self, name: &LeaseName) -> Result<Option<LeaseState>> {
        Ok(self.backend.lease_get(name)?)
    }

    /// The state of every name; or, with `live_only`, of the names held by
    /// a holder not proven dead: grants whose TTL has run out, and grants
    /// whose process is provably gone (which the next acquire takes over),
    /// are left out. Only reads: a proven-dead holder's grant stays in the
    /// store for that acquire to end, with its history entry.
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn list(&self, live_only: bool) -> Result<Vec<LeaseState>> {
        let mut states = self.backend.lease_list(&LeaseListParams { live_only })?;
        if live_only {
            for state in &mut states {
                state.grants.retain(|g| !identity::provably_gone(&g.holder));
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
    use std::time::SystemTime;

    use super::*;
    use crate::lock::{self, LockError, LockOptions};
    use crate::{Available, NewTask, TaskState};

    fn refused<T: fmt::Debug>(outcome: Result<T>, limit: limits::Limit) {
        match outcome {
            Err(Error::InvalidInput(e) | Error::Store(BackendError::InvalidInput(e))) => assert_eq!(e.limit, limit),
            other => panic!("must be refused for {}: {other:?}", limit.what),
        }
    }

    /// Every duration a library caller passes is checked before anything
    /// is written: at the entry (waits, the poll interval) or by the store
    /// (TTLs, delays).
    #[test]
    fn durations_out_of_range_are_refused_at_the_library_entry() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite(dir.path().join("l.db"));
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
            store.acquire_wait(&name, &options, Some(limits::YEAR * 2), |_| {}),
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
