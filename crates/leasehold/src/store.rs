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
    Backend, BackendError, Held, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, Mode, Owner, QueuedWaiter, Remedy, Token, WaitTopic, WaiterEnqueueParams, WaiterRemoveParams, host,
    limits, rules,
};
use leasehold_sqlite::{SqliteBackend, SqliteOptions};

use crate::identity::{self, Binding};
use crate::{Cancel, Error, Keeper, KeeperOptions, Result};

/// Where lease state lives, parsed from `sqlite://PATH`, `postgres://…`,
/// `postgresql://…` or `etcd://HOST:PORT[,HOST:PORT…][?prefix=/KEY/PREFIX]`
/// (with TLS and a user: [`EtcdSecurity`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    Postgres(String),
    /// An etcd cluster; every key under `prefix` (the backend's default
    /// when `None`), so that several deployments can share a cluster.
    Etcd {
        endpoints: Vec<String>,
        prefix: Option<String>,
        security: EtcdSecurity,
    },
    /// A store built from a backend of the caller's ([`Store::from_backend`]),
    /// named by the caller; [`Store::open`] cannot open it.
    Custom(String),
}

/// The environment variable an etcd password is read from when the URL
/// names a user and no `password-file`.
pub const ETCD_PASSWORD_VAR: &str = "LEASEHOLD_ETCD_PASSWORD";

/// TLS and authentication of an `etcd://` URL, in the names of etcdctl's
/// flags: `cacert=PATH` (or `cacert=system`), `cert=PATH`, `key=PATH`,
/// `user=NAME`, and `password-file=PATH`. TLS is on when any of the first
/// three is given (or an endpoint is written `https://`). A password is
/// never part of the URL: it is read from `password-file` or, without one,
/// from [`ETCD_PASSWORD_VAR`], when the store is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// The CA certificate(s) to trust (PEM); `system`: the system's store.
    pub cacert: Option<PathBuf>,
    /// A client certificate (PEM) and its key (PEM, unencrypted).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The etcd user to authenticate as.
    pub user: Option<String>,
    /// A file holding the user's password (one trailing newline is
    /// dropped).
    pub password_file: Option<PathBuf>,
}

impl EtcdSecurity {
    /// Take one query parameter of an etcd URL; `Err` says why the URL is
    /// refused, `Ok(false)` that the parameter is not one of these.
    fn set(&mut self, name: &str, value: &str) -> std::result::Result<bool, String> {
        let path = || {
            if value.is_empty() {
                Err(format!("{name}= needs a path: {name}=/path/to/file.pem"))
            } else {
                Ok(Some(PathBuf::from(value)))
            }
        };
        match name {
            "cacert" => self.cacert = path()?,
            "cert" => self.cert = path()?,
            "key" => self.key = path()?,
            "password-file" => self.password_file = path()?,
            "user" if value.contains(':') => return Err(Self::no_password_here()),
            "user" if value.is_empty() => return Err("user= needs an etcd user name".into()),
            "user" => self.user = Some(value.to_owned()),
            "password" => return Err(Self::no_password_here()),
            "insecure-skip-tls-verify" => {
                return Err(
                    "insecure-skip-tls-verify is not offered: an unverified connection is open to a man in the middle; pass cacert=PATH with the CA that signed the cluster's certificates".into(),
                );
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn no_password_here() -> String {
        format!(
            "a password is never taken from the URL (it would show in process lists, shell history and logs): \
             write it to a file only you can read and pass password-file=PATH, or set {ETCD_PASSWORD_VAR}"
        )
    }

    /// The URL's parameters for these settings, as `name=value`.
    fn params(&self) -> Vec<String> {
        let path = |name: &str, p: &Option<PathBuf>| p.as_ref().map(|p| format!("{name}={}", p.display()));
        [
            path("cacert", &self.cacert),
            path("cert", &self.cert),
            path("key", &self.key),
            self.user.as_ref().map(|u| format!("user={u}")),
            path("password-file", &self.password_file),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

impl StoreUrl {
    /// Parse a store URL.
    ///
    /// # Errors
    /// [`BackendError`] of kind [`crate::ErrorKind::InvalidInput`] for an unknown
    /// scheme or an empty path.
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
    ///         security: Default::default(),
    ///     }
    /// );
    /// assert!(StoreUrl::parse("etcd://h:2379?prefix=myapp").is_err());
    /// assert!(StoreUrl::parse("etcd://h:2379?prefx=/a").is_err());
    /// // TLS with a client certificate, and a user whose password is in a file:
    /// let url = StoreUrl::parse(
    ///     "etcd://h:2379?cacert=/etc/etcd/ca.pem&cert=/etc/etcd/me.pem&key=/etc/etcd/me.key\
    ///      &user=agent&password-file=/run/secrets/etcd",
    /// ).unwrap();
    /// assert!(matches!(url, StoreUrl::Etcd { security, .. } if security.user.as_deref() == Some("agent")));
    /// // ...but never a password in the URL itself.
    /// assert!(StoreUrl::parse("etcd://h:2379?user=agent&password=hunter2").is_err());
    /// assert!(StoreUrl::parse("etcd://h:2379?user=agent:hunter2").is_err());
    /// ```
    pub fn parse(url: &str) -> std::result::Result<Self, BackendError> {
        let invalid = |reason: &str| BackendError::invalid_url(redact_password(url), reason);
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
                let mut security = EtcdSecurity::default();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    match name {
                        "prefix" if value.starts_with('/') && value.len() > 1 => {
                            prefix = Some(value.to_owned());
                        }
                        "prefix" => {
                            return Err(invalid("the prefix must be an absolute key path, e.g. ?prefix=/myapp"));
                        }
                        _ => {
                            if !security.set(name, value).map_err(|reason| invalid(&reason))? {
                                // Only the name: a value could be a secret.
                                return Err(invalid(&format!(
                                    "unknown parameter {name:?}; the parameters are prefix=/KEY/PREFIX, cacert=PATH, cert=PATH, key=PATH, user=NAME and password-file=PATH"
                                )));
                            }
                        }
                    }
                }
                if security.password_file.is_some() && security.user.is_none() {
                    return Err(invalid(
                        "password-file=PATH needs user=NAME: the etcd user the password is for",
                    ));
                }
                Ok(StoreUrl::Etcd {
                    endpoints,
                    prefix,
                    security,
                })
            }
            other => Err(invalid(&format!(
                "unknown scheme {other:?}; use sqlite://, postgres:// or etcd://"
            ))),
        }
    }

    /// The URL for messages: as [`Display`](fmt::Display) shows it (which
    /// a child process can open again), with any password replaced by
    /// `***`.
    ///
    /// # Examples
    /// ```
    /// use leasehold::StoreUrl;
    /// let url = StoreUrl::parse("postgres://agent:s3cret@db/leases?sslmode=verify-full").unwrap();
    /// assert_eq!(url.redacted(), "postgres://agent:***@db/leases?sslmode=verify-full");
    /// ```
    #[must_use]
    pub fn redacted(&self) -> String {
        redact_password(&self.to_string())
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
            .ok_or_else(|| {
                BackendError::invalid_url(
                    String::new(),
                    "neither $XDG_STATE_HOME nor $HOME is set, so there is no default store",
                )
                .remedy(Remedy::AnotherStore)
            })?;
        Ok(StoreUrl::Sqlite(state.join("leasehold").join("leasehold.db")))
    }
}

/// The stores this build includes, by URL scheme (SQLite always; the
/// network stores, each with TLS, by cargo feature): what
/// `leasehold --version` reports.
pub const BUILT_IN_STORES: &[&str] = &[
    "sqlite",
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "etcd")]
    "etcd",
];

/// The error for a store this build does not include.
#[cfg(not(all(feature = "postgres", feature = "etcd")))]
fn not_built(url: &StoreUrl, what: &str) -> Error {
    BackendError::unsupported(
        url.redacted(),
        "this store",
        format!("this build of leasehold does not include {what}; use sqlite://PATH or another build"),
    )
    .into()
}

/// `url` with every password in it replaced by `***`: one in the
/// authority (`postgres://user:PASSWORD@host`), the value of a `password=`
/// parameter, and one after `user=NAME:`. (Refused in etcd URLs, accepted
/// in libpq's; never shown in either.)
fn redact_password(url: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) if userinfo.contains(':') => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                    format!("{scheme}://{user}:***@{host}{path}")
                }
                _ => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    let Some(query) = query else {
        return base;
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            Some(("user", value)) if value.contains(':') => {
                format!("user={}:***", value.split_once(':').map_or(value, |(user, _)| user))
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

/// The TLS an etcd URL asks for: on with any of `cacert`, `cert`, `key`.
#[cfg(feature = "etcd")]
fn etcd_tls(security: &EtcdSecurity) -> Option<leasehold_etcd::EtcdTls> {
    let EtcdSecurity { cacert, cert, key, .. } = security;
    (cacert.is_some() || cert.is_some() || key.is_some()).then(|| leasehold_etcd::EtcdTls {
        ca: cacert.clone().filter(|p| p.as_os_str() != "system"),
        cert: cert.clone(),
        key: key.clone(),
    })
}

/// The etcd user of the URL with its password, from `password-file` or
/// else from [`ETCD_PASSWORD_VAR`].
#[cfg(feature = "etcd")]
fn etcd_credentials(
    url: &StoreUrl,
    security: &EtcdSecurity,
) -> std::result::Result<Option<leasehold_etcd::EtcdCredentials>, BackendError> {
    let Some(user) = &security.user else {
        return Ok(None);
    };
    let invalid = |reason: String| BackendError::invalid_url(url.to_string(), reason);
    let password = match &security.password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                invalid(match e.kind() {
                    std::io::ErrorKind::NotFound => format!(
                        "password-file={}: no such file (a relative path is taken from the current directory)",
                        path.display()
                    ),
                    _ => format!("cannot read password-file={}: {e}", path.display()),
                })
            })?;
            let password = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
            if password.is_empty() {
                return Err(invalid(format!(
                    "password-file={} is empty: write the password of etcd user {user:?} to it",
                    path.display()
                )));
            }
            password.to_owned()
        }
        None => std::env::var(ETCD_PASSWORD_VAR)
            .ok()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                invalid(format!(
                    "user={user} needs a password: write it to a file only you can read and pass password-file=PATH, or set {ETCD_PASSWORD_VAR}"
                ))
            })?,
    };
    Ok(Some(leasehold_etcd::EtcdCredentials {
        user: user.clone(),
        password: leasehold_etcd::Password::new(password),
    }))
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
            StoreUrl::Etcd {
                endpoints,
                prefix,
                security,
            } => {
                write!(f, "etcd://{}", endpoints.join(","))?;
                let params: Vec<String> = prefix
                    .iter()
                    .map(|p| format!("prefix={p}"))
                    .chain(security.params())
                    .collect();
                if !params.is_empty() {
                    write!(f, "?{}", params.join("&"))?;
                }
                Ok(())
            }
        }
    }
}

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

/// How long a waiter's place in the queue lasts without a refresh. A
/// waiter that dies leaves the queue after this at the latest; at once
/// when an acquirer on its host can prove it dead ([`waiter_gone`]).
const WAITER_TTL: Duration = Duration::from_secs(10);

/// Whether the process behind a waiter registration is provably gone (as
/// [`identity::provably_gone`] judges a holder; a registration with no
/// record of its process never is).
fn waiter_gone(w: &QueuedWaiter) -> bool {
    w.holder.as_ref().is_some_and(identity::provably_gone)
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
                    ..SqliteOptions::default()
                },
            )?),
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(url) => Box::new(leasehold_postgres::PostgresBackend::open(
                url,
                leasehold_postgres::PostgresOptions::default(),
            )?),
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => return Err(not_built(url, "the PostgreSQL store (cargo feature `postgres`)")),
            #[cfg(feature = "etcd")]
            StoreUrl::Etcd {
                endpoints,
                prefix,
                security,
            } => {
                let defaults = leasehold_etcd::EtcdOptions::default();
                Box::new(leasehold_etcd::EtcdBackend::open(
                    endpoints,
                    &leasehold_etcd::EtcdOptions {
                        prefix: prefix.clone().unwrap_or(defaults.prefix.clone()),
                        tls: etcd_tls(security),
                        credentials: etcd_credentials(url, security)?,
                        ..defaults
                    },
                )?)
            }
            #[cfg(not(feature = "etcd"))]
            StoreUrl::Etcd { .. } => return Err(not_built(url, "the etcd store (cargo feature `etcd`)")),
            StoreUrl::Custom(_) => {
                return Err(BackendError::unsupported(
                    url.to_string(),
                    "opening a store by a name of the caller's",
                    "build it with Store::from_backend",
                )
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

    /// One attempt, with fast takeover: if the store says held and some
    /// holders, or waiters ahead, are provably gone, ask again, evicting
    /// exactly those.
    fn attempt(&self, params: &mut LeaseAcquireParams) -> Result<Acquire> {
        Ok(self.attempt_sent(params)?.0)
    }

    /// As [`Store::attempt`], with the boot-clock time the request that
    /// decided the outcome was sent (a keeper's window starts there).
    fn attempt_sent(&self, params: &mut LeaseAcquireParams) -> Result<(Acquire, Duration)> {
        params.evict.clear();
        params.evict_waiters.clear();
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
                params.evict_waiters = held.ahead.iter().filter(|w| waiter_gone(w)).map(|w| w.ticket).collect();
                if params.evict.is_empty() && params.evict_waiters.is_empty() {
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
    /// [`limits::TTL`] (a [`BackendError`] of kind [`crate::ErrorKind::InvalidInput`]); [`Error::Process`]
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

    /// As [`Store::acquire_wait`], with the send time of the deciding request.
    fn acquire_wait_sent(
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
        let mut params = Self::params(name, options)?;
        // First a plain attempt: no queue entry when it is free.
        let first = self.attempt_sent(&mut params)?;
        let mut last = match first {
            (Acquire::Held(held), sent) if timeout != Some(Duration::ZERO) => (held, sent),
            first => return Ok(first),
        };
        // The waiter is this process, whatever the grant will be bound to
        // (none for a bare `acquire --wait`): its death is what frees the
        // place in the queue.
        let waiter = identity::holder(Binding::ThisProcess).map_err(Error::Process)?;
        params.waiter_holder = Some(waiter.clone());
        params.ticket = Some(self.backend.waiter_enqueue(&WaiterEnqueueParams {
            name: name.clone(),
            mode: options.mode,
            holder: waiter,
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
            if cancel.is_cancelled() {
                break Ok((Acquire::Held(last.0), last.1));
            }
            let due = last_attempt.elapsed() >= WAITER_TTL / 4;
            // Whether the attempt would be granted, judged from a cheap
            // read as the plan judges (`rules::admits`): grants and waiters
            // ahead of us whose processes are provably gone do not count —
            // the attempt evicts them — so a killed holder or waiter is
            // passed as soon as a fresh acquire would pass it, not at the
            // next refresh.
            let looks_free = || -> Result<bool> {
                let Some(state) = self.backend.lease_get(name)? else {
                    return Ok(true);
                };
                let mine = params
                    .ticket
                    .and_then(|t| state.waiters.iter().position(|w| w.ticket == t));
                let ahead = &state.waiters[..mine.unwrap_or(state.waiters.len())];
                Ok(rules::admits(
                    state
                        .grants
                        .iter()
                        .filter(|g| !identity::provably_gone(&g.holder))
                        .map(|g| g.mode),
                    ahead.iter().filter(|w| !waiter_gone(w)).map(|w| w.mode),
                    options.mode,
                ))
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
                        last = (held, sent);
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

    /// The state of one name (`None` if never granted). Waiters whose
    /// processes are provably gone are left out: the next acquire removes
    /// them (this only reads).
    ///
    /// # Errors
    /// [`Error::Store`] when the store fails.
    pub fn status(&self, name: &LeaseName) -> Result<Option<LeaseState>> {
        let mut state = self.backend.lease_get(name)?;
        if let Some(state) = &mut state {
            state.waiters.retain(|w| !waiter_gone(w));
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
        for state in &mut states {
            state.waiters.retain(|w| !waiter_gone(w));
        }
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
    use leasehold_backend::ErrorKind;
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

    fn invalid_reason(url: &str) -> (String, String) {
        match StoreUrl::parse(url) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => (e.store().to_owned(), e.reason().to_owned()),
            other => panic!("{url} must be refused: {other:?}"),
        }
    }

    #[test]
    fn etcd_tls_and_user_parameters_as_etcdctl_names_them() {
        let url = "etcd://a:2379,b:2379?prefix=/x&cacert=/ca.pem&cert=/me.pem&key=/me.key&user=agent&password-file=/pw";
        let parsed = StoreUrl::parse(url).unwrap();
        let StoreUrl::Etcd { security, .. } = &parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!(
            security,
            &EtcdSecurity {
                cacert: Some("/ca.pem".into()),
                cert: Some("/me.pem".into()),
                key: Some("/me.key".into()),
                user: Some("agent".into()),
                password_file: Some("/pw".into()),
            }
        );
        // Shown as given, and parsed back the same.
        assert_eq!(parsed.to_string(), url);
        assert_eq!(StoreUrl::parse(&parsed.to_string()).unwrap(), parsed);
        assert_eq!(StoreUrl::parse("etcd://h:1").unwrap().to_string(), "etcd://h:1");
    }

    #[test]
    fn an_etcd_password_is_never_taken_from_the_url_nor_shown() {
        for url in [
            "etcd://h:2379?user=agent&password=hunter2",
            "etcd://h:2379?password=hunter2&user=agent",
            "etcd://h:2379?user=agent:hunter2",
        ] {
            let (shown, reason) = invalid_reason(url);
            assert!(
                !shown.contains("hunter2") && !reason.contains("hunter2"),
                "{shown}: {reason}"
            );
            assert!(
                reason.contains("password-file=PATH") && reason.contains(ETCD_PASSWORD_VAR),
                "{reason}"
            );
        }
        let (_, reason) = invalid_reason("etcd://h:2379?password-file=/pw");
        assert!(reason.contains("needs user=NAME"), "{reason}");
        let (_, reason) = invalid_reason("etcd://h:2379?cacert=");
        assert!(reason.contains("cacert= needs a path"), "{reason}");
        let (_, reason) = invalid_reason("etcd://h:2379?insecure-skip-tls-verify=true");
        assert!(reason.contains("not offered"), "{reason}");
        let (_, reason) = invalid_reason("etcd://h:2379?token=s3cret");
        assert!(reason.contains("\"token\"") && !reason.contains("s3cret"), "{reason}");
    }

    #[test]
    fn passwords_are_redacted_for_messages() {
        for (url, shown) in [
            ("postgres://u:pw@h:5432/db?x=1", "postgres://u:***@h:5432/db?x=1"),
            ("postgresql://u:pw@h", "postgresql://u:***@h"),
            (
                "postgres://h/db?password=pw&sslmode=require",
                "postgres://h/db?password=***&sslmode=require",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("etcd://h:1?user=a:pw", "etcd://h:1?user=a:***"),
        ] {
            assert_eq!(redact_password(url), shown);
        }
        let parsed = StoreUrl::parse("postgres://u:pw@h/db").unwrap();
        assert_eq!(
            parsed.to_string(),
            "postgres://u:pw@h/db",
            "Display must round-trip for children"
        );
        assert_eq!(parsed.redacted(), "postgres://u:***@h/db");
    }

    #[cfg(feature = "etcd")]
    #[test]
    #[allow(clippy::disallowed_methods, reason = "a test's throwaway file needs no atomic write")]
    fn the_etcd_password_comes_from_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        let url = |query: &str| StoreUrl::parse(&format!("etcd://h:2379?{query}")).unwrap();
        let password = |url: &StoreUrl| {
            let StoreUrl::Etcd { security, .. } = url else {
                unreachable!()
            };
            etcd_credentials(url, security).map(|c| c.map(|c| (c.user, c.password)))
        };
        let pw = leasehold_etcd::Password::new;
        assert_eq!(password(&url("prefix=/a")).unwrap(), None);

        std::fs::write(&file, "correct horse \n").unwrap();
        let with_file = url(&format!("user=agent&password-file={}", file.display()));
        // One trailing newline is dropped, nothing else.
        assert_eq!(
            password(&with_file).unwrap(),
            Some(("agent".into(), pw("correct horse ")))
        );
        std::fs::write(&file, "\n").unwrap();
        match password(&with_file) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => assert!(e.reason().contains("is empty"), "{e}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&file).unwrap();
        match password(&with_file) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {
                let reason = e.reason();
                assert!(
                    reason.starts_with("password-file=") && reason.contains("no such file"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Without a file the password comes from the environment, which
        // this process cannot set safely: the CLI tests (tests/tls.rs)
        // pass it to the real binary.
    }
}
