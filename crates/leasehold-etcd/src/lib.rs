//! The etcd store: leases and fences on a consensus cluster.
//!
//! - A grant is a key attached to an etcd lease: the TTL runs on the
//!   server, and the grant is live exactly while that key exists. TTLs are
//!   whole seconds on etcd and are rounded up (never expiring a grant
//!   before the holder's own deadline). etcd may also extend a lease after
//!   a leader change; that only delays a takeover, it never shortens a grant.
//! - Every decision is one transaction guarded by compares (see `lease`);
//!   etcd commits it through Raft with the WAL fsynced before it answers,
//!   so a token is durable before it is returned.
//! - **Tokens are etcd revisions**: the token of a grant is the revision of
//!   the transaction that created it (the `create_revision` of its keys, and
//!   the new `mod_revision` of the name's token key). etcd's revision is one
//!   cluster-wide counter that every write transaction increments, that is
//!   persisted with every key and recovered from the log on restart, and
//!   that compaction never rewinds. Two grants of a name are made by two
//!   transactions that both write the name's guard key and so are ordered;
//!   the later one has the larger revision. Hence per name, tokens strictly
//!   increase across release, expiry, takeover, client reconnect and
//!   cluster restart, and are never reissued — even if an operator deletes
//!   leasehold's keys. (They are not consecutive: other writes use
//!   revisions too.) Only restoring an older snapshot of the cluster could
//!   rewind it, as for any store; `etcdutl snapshot restore
//!   --bump-revision` exists for that.
//! - Waiters are woken by an etcd watch on the name's keys (see `watch`):
//!   by a release or any other decision (a write of the name's guard key),
//!   and by the expiry of a grant itself — its etcd lease running out
//!   deletes its live marker, and that DELETE event wakes the waiters, with
//!   no writer involved (PostgreSQL's NOTIFY needs one). The topic's cursor
//!   is a revision, and each wait watches from the one after it, so no
//!   change is missed between a waiter's read and its wait.
//! - The clock is the server's, so a test `ClockSkew`
//!   cannot move it: `Capabilities::clock_skew` is false.
//! - The task queue is not implemented: the seam's defaults refuse with
//!   `Unsupported` ("use a sqlite:// or postgres:// store for tasks"). Claim
//!   order (priority, then available-at, then insertion) over tasks that
//!   become claimable as wall-clock time passes needs an ordered, filtered
//!   scan that etcd's key ranges serve only by reading past every
//!   not-yet-available task, and a claim's expiry (a lease running out) must
//!   also count an attempt and move the task back or to `dead`, which no
//!   etcd lease expiry does by itself. Doing both with transactions costs a
//!   scan per claim and a sweep by every writer — not an acceptable cost
//!   next to SQLite's and PostgreSQL's indexes, and not a weaker guarantee
//!   we would ship silently.
//! - Records (what schedules are kept in) are keys under `PREFIX/record/`,
//!   versioned by their `mod_revision`, a batch one transaction guarded by
//!   a compare per expectation (see `record`). Their clock, which etcd's
//!   protocol does not carry, is the members' HTTP `Date` (see `clock`).
//! - TLS (a CA, a client certificate) and etcd users: see `access`; how
//!   an `etcd://` URL asks for them: `url`.

mod kind;
pub use kind::KIND;

#[cfg(feature = "backend")]
mod access;
#[cfg(feature = "backend")]
mod clock;
#[cfg(feature = "backend")]
mod keys;
#[cfg(feature = "backend")]
mod lease;
#[cfg(feature = "backend")]
mod record;
#[cfg(feature = "backend")]
mod url;
#[cfg(feature = "backend")]
mod watch;

#[cfg(feature = "backend")]
use std::fmt;
#[cfg(feature = "backend")]
use std::future::Future;
#[cfg(feature = "backend")]
use std::sync::{Arc, RwLock};
#[cfg(feature = "backend")]
use std::time::{Duration, Instant};

#[cfg(feature = "backend")]
use etcd_client::{Client, ConnectOptions, GetOptions};
#[cfg(feature = "backend")]
use leasehold_backend::{
    Backend, BackendError, Behind, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Record, RecordBackend, RecordKey, RecordListParams, RecordWrite, RecordWriteParams,
    StoreBackup, StoreBackupParams, StoreInfo, StoreTime, TokensBumpParams, TokensBumped, WaitTopic,
    WaiterEnqueueParams, WaiterRefresh, WaiterRefreshParams, WaiterRemoveParams, WaiterTicket, Watched,
};
#[cfg(feature = "backend")]
use tokio::runtime::Runtime;

#[cfg(feature = "backend")]
pub use access::{EtcdCredentials, EtcdTls, Password};
#[cfg(feature = "backend")]
pub use keys::DEFAULT_PREFIX;
#[cfg(feature = "backend")]
pub use leasehold_backend::plan::HISTORY_PER_NAME;
#[cfg(feature = "backend")]
pub use url::{ETCD_PASSWORD_VAR, STORE};

#[cfg(feature = "backend")]
use crate::access::Access;
#[cfg(feature = "backend")]
use crate::keys::Keys;
#[cfg(feature = "backend")]
use crate::lease::Conn;

/// How to open an etcd store.
#[cfg(feature = "backend")]
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Every key lives under this prefix (several deployments can share a
    /// cluster with different prefixes). Default [`DEFAULT_PREFIX`].
    pub prefix: String,
    /// How long to wait for a connection to an endpoint.
    pub connect_timeout: Duration,
    /// How long one request may take before the store counts as
    /// unavailable.
    pub request_timeout: Duration,
    /// TLS; `None`: plain HTTP, unless an endpoint is written `https://`
    /// (then TLS with the system's roots).
    pub tls: Option<EtcdTls>,
    /// Authenticate as this etcd user (for a cluster with `auth enable`).
    pub credentials: Option<EtcdCredentials>,
}

#[cfg(feature = "backend")]
impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            tls: None,
            credentials: None,
        }
    }
}

/// The etcd store.
#[cfg(feature = "backend")]
pub struct EtcdBackend {
    endpoints: Vec<String>,
    keys: Keys,
    // The async runtime stays inside this backend: a current-thread runtime
    // that each blocking call drives with `block_on` (several threads may
    // call at once; tokio hands the driver from one to the next).
    rt: Runtime,
    /// The client, with a count of how often it was replaced: once etcd
    /// forgot its token, a new client (connection and token) takes its
    /// place — the first caller to notice replaces it, later ones use it.
    client: RwLock<(u64, Client)>,
    /// How clients are made (timeouts, TLS, the user).
    connect: ConnectOptions,
    access: Access,
    /// The token offset as last read (see `lease::OffsetCache`).
    offset: lease::OffsetCache,
    /// The etcd leases of waiter registrations (see `lease::WaiterLeases`).
    waiter_leases: lease::WaiterLeases,
    /// The cluster's clock, from its members' HTTP `Date` (see `clock`).
    clock: Arc<clock::DateClock>,
}

#[cfg(feature = "backend")]
impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "backend")]
impl EtcdBackend {
    /// Connect to the cluster at `endpoints` (`host:port`, or URLs with
    /// `http://` or `https://`), with the TLS and user of `options`, and
    /// check that it answers.
    ///
    /// # Errors
    /// A [`BackendError`] whose [`kind`](BackendError::kind) says what
    /// happened, each with what to do:
    /// - [`ErrorKind::InvalidInput`]: no endpoints, a prefix that is not
    ///   absolute, a TLS file that is missing, unreadable or not what it
    ///   should be (named with its URL parameter), a `cert` without its
    ///   `key`, an `http://` endpoint with TLS asked for.
    /// - [`ErrorKind::Unavailable`]: no endpoint answers within the
    ///   timeouts.
    /// - [`ErrorKind::Auth`]: the cluster refuses this client (a
    ///   certificate not accepted either way, a wrong user or password, no
    ///   permission on the prefix).
    ///
    /// # Examples
    /// ```no_run
    /// use leasehold_etcd::{EtcdBackend, EtcdOptions};
    /// let store = EtcdBackend::open(
    ///     &["10.0.0.5:2379".to_owned(), "10.0.0.6:2379".to_owned()],
    ///     &EtcdOptions { prefix: "/myapp".into(), ..EtcdOptions::default() },
    /// )?;
    /// # Ok::<(), leasehold_backend::BackendError>(())
    /// ```
    pub fn open(endpoints: &[String], options: &EtcdOptions) -> Result<Self, BackendError> {
        let invalid = |reason: &str| BackendError::invalid_url(format!("etcd://{}", endpoints.join(",")), reason);
        if endpoints.is_empty() || endpoints.iter().any(String::is_empty) {
            return Err(invalid("expected etcd://HOST:PORT[,HOST:PORT...]"));
        }
        if !options.prefix.starts_with('/') || options.prefix.trim_end_matches('/').is_empty() {
            return Err(invalid("the prefix must be an absolute key path like /myapp"));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                BackendError::new(
                    ErrorKind::Unavailable,
                    format!("etcd://{}", endpoints.join(",")),
                    format!("cannot start the I/O runtime: {e}"),
                )
                .hint("check the process's limits (threads, file descriptors)")
                .with_source(e)
            })?;
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout)
            .with_keep_alive(Duration::from_secs(10), options.request_timeout);
        let (access, connect) = Access::new(endpoints, options.tls.as_ref(), options.credentials.as_ref(), connect)
            .map_err(|reason| invalid(&reason.to_string()))?;
        let keys = Keys::new(&options.prefix);
        let store = Self::label(endpoints, &keys);
        let client = rt
            .block_on(async {
                let mut client = Client::connect(endpoints, Some(connect.clone())).await?;
                // The connection is lazy: make one request so that an
                // unreachable cluster fails here, with the endpoints named.
                client
                    .get(
                        keys.leases(),
                        Some(GetOptions::new().with_prefix().with_keys_only().with_limit(1)),
                    )
                    .await?;
                Ok::<_, etcd_client::Error>(client)
            })
            .map_err(|e| Self::refused(&store, &access, keys.prefix(), endpoints, options, &e))?;
        let members = endpoints.iter().filter_map(|e| clock::Member::parse(e)).collect();
        let clock = Arc::new(clock::DateClock::new(
            members,
            access.http_tls(),
            options.request_timeout,
        ));
        Ok(Self {
            endpoints: endpoints.to_vec(),
            keys,
            rt,
            client: RwLock::new((0, client)),
            connect,
            access,
            offset: lease::OffsetCache::default(),
            waiter_leases: lease::WaiterLeases::default(),
            clock,
        })
    }

    /// The current client and its generation.
    fn client(&self) -> (u64, Client) {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A client with a fresh token, replacing the one of `generation` (or
    /// the one that already replaced it).
    async fn reconnect(&self, generation: u64) -> Result<Client, etcd_client::Error> {
        let (current, client) = self.client();
        if current != generation {
            return Ok(client);
        }
        // Not `set_client_auth` on the old client: it sends the forgotten
        // token along, and etcd refuses the authentication for it.
        let fresh = Client::connect(&self.endpoints, Some(self.connect.clone())).await?;
        let mut slot = self.client.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.0 == generation {
            *slot = (generation + 1, fresh);
        }
        Ok(slot.1.clone())
    }

    /// Why connecting failed, with what to do.
    fn refused(
        store: &str,
        access: &Access,
        prefix: &str,
        endpoints: &[String],
        options: &EtcdOptions,
        e: &etcd_client::Error,
    ) -> BackendError {
        // A refused client certificate shows only as a closed connection
        // here: ask the server ourselves (not after a timeout or a refused
        // TCP connection, where a probe would only wait or fail again).
        let closed = !["tcp connect error", "timed out", "timeout", "Timeout", "deadline"]
            .iter()
            .any(|m| format!("{e:?}").contains(m));
        let explained = access.refusal(e, prefix).or_else(|| {
            closed
                .then(|| access.probe(endpoints, options.connect_timeout))
                .flatten()
        });
        let kind = if explained.is_some() {
            ErrorKind::Auth
        } else {
            ErrorKind::Unavailable
        };
        let (reason, hint) = explained.unwrap_or_else(|| {
            let (reason, hint) = unreachable(e);
            if access.tls() {
                (reason, hint)
            } else {
                (
                    reason,
                    format!(
                        "{hint}; if the cluster serves TLS (https:// client URLs), add cacert=PATH (and cert=PATH&key=PATH if it wants client certificates), see docs/ETCD.md"
                    ),
                )
            }
        });
        BackendError::new(kind, store, reason).hint(hint)
    }

    /// The cluster's clock (see `clock`), or why it cannot be read.
    fn store_clock(&self) -> Result<StoreTime, BackendError> {
        self.clock.now().map_err(|unread| {
            BackendError::new(ErrorKind::Unavailable, self.store(), unread.to_string()).hint(
                "etcd's protocol carries no time, so leasehold reads the cluster's clock from the Date header of a member's \
                 HTTP answer to GET /version on its client URL (open to every client, also with authentication on): \
                 check that the endpoints are the members' client URLs and that nothing between (a gRPC-only proxy; \
                 HTTP moved to --listen-client-http-urls) keeps HTTP/1.1 from them; see docs/ETCD.md",
            )
        })
    }

    fn label(endpoints: &[String], keys: &Keys) -> String {
        format!("etcd://{}?prefix={}", endpoints.join(","), keys.prefix())
    }

    fn store(&self) -> String {
        Self::label(&self.endpoints, &self.keys)
    }

    /// Run one operation to completion on this backend's runtime; once
    /// more after authenticating again if etcd forgot the token (see
    /// `access`).
    fn call<'s, T, F>(&'s self, f: impl Fn(Conn<'s>) -> F) -> Result<T, BackendError>
    where
        F: Future<Output = lease::Result<T>>,
    {
        let conn = |client| Conn {
            client,
            keys: &self.keys,
            offset: &self.offset,
            waiter_leases: &self.waiter_leases,
        };
        let (generation, client) = self.client();
        let result = self.rt.block_on(async {
            match f(conn(client)).await {
                Err(lease::Error::Etcd(e)) if self.access.has_user() && access::token_expired(&e) => {
                    f(conn(self.reconnect(generation).await?)).await
                }
                result => result,
            }
        });
        result.map_err(|e| match e {
            lease::Error::Etcd(e) => unavailable(&self.store(), &self.access, self.keys.prefix(), e),
            lease::Error::Corrupt(reason) => BackendError::new(ErrorKind::Corrupt, self.store(), reason).hint(format!(
                "inspect the keys with `etcdctl get --prefix {}`; leasehold left them as they are",
                self.keys.prefix()
            )),
            lease::Error::Contended(what) => BackendError::new(
                ErrorKind::Busy,
                self.store(),
                format!("{what} kept losing races with other clients"),
            )
            .hint("retry; nothing was changed by this call"),
            lease::Error::TooLarge(what) => BackendError::new(
                ErrorKind::InvalidInput,
                self.store(),
                format!("{what} is larger than the cluster accepts in one request"),
            )
            .hint("write fewer or smaller records at once, or raise etcd's --max-request-bytes"),
        })
    }
}

#[cfg(feature = "backend")]
fn unavailable(store: &str, access: &Access, prefix: &str, e: etcd_client::Error) -> BackendError {
    let (kind, (reason, hint)) = match access.refusal(&e, prefix) {
        Some(refusal) => (ErrorKind::Auth, refusal),
        None => (ErrorKind::Unavailable, unreachable(&e)),
    };
    BackendError::new(kind, store, reason).hint(hint).with_source(e)
}

/// A failure that is not the cluster refusing this client.
#[cfg(feature = "backend")]
fn unreachable(e: &etcd_client::Error) -> (String, String) {
    (
        e.to_string(),
        "check that the cluster is up and reachable (etcdctl --endpoints HOST:PORT endpoint health); \
         a call that failed this way was not reported as done"
            .into(),
    )
}

#[cfg(feature = "backend")]
impl Backend for EtcdBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: false,
            host_local: false,
            reopenable: true,
        }
    }

    /// etcd's snapshot is the cluster's consistent copy (every key and
    /// its revision, which are the tokens): a copy of leasehold's keys
    /// alone could not be restored with their revisions.
    fn store_backup(&self, _: &StoreBackupParams) -> Result<StoreBackup, BackendError> {
        Err(BackendError::unsupported(
            self.store(),
            "a backup by leasehold",
            "use etcd's own: `etcdctl snapshot save FILE`, and after restoring one run \
             `leasehold migrate --bump-tokens N` (docs/ETCD.md, \"Restoring from a snapshot\")",
        ))
    }

    fn describe(&self) -> Result<StoreInfo, BackendError> {
        let status = self.call(|mut c| async move { Ok(c.client.status().await?) })?;
        let mut facts = vec![
            ("etcd version".to_owned(), status.version().to_owned()),
            ("key prefix".to_owned(), self.keys.prefix().to_owned()),
            ("leader member".to_owned(), format!("{:x}", status.leader())),
            ("raft term".to_owned(), status.raft_term().to_string()),
            ("database size".to_owned(), format!("{} bytes", status.db_size())),
            (
                "revision".to_owned(),
                status
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision)
                    .to_string(),
            ),
        ];
        facts.extend(self.access.facts());
        let mut warnings = Vec::new();
        match self.store_clock() {
            Ok(at) => facts.push((
                "clock".to_owned(),
                format!(
                    "the members' HTTP Date, {}",
                    clock::host_offset(at, leasehold_host::wall_clock())
                ),
            )),
            Err(e) => warnings.push((
                "clock".to_owned(),
                format!("{e}: schedules cannot be kept on this store"),
            )),
        }
        Ok(StoreInfo {
            kind: "etcd",
            location: self.store(),
            schema_version: None,
            facts,
            problems: Vec::new(),
            warnings,
        })
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.call(|mut c| async move { c.acquire(params).await })
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> Result<LeaseRenew, BackendError> {
        params.check()?;
        self.call(|mut c| async move { c.renew(params).await })
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> Result<LeaseRelease, BackendError> {
        self.call(|mut c| async move { c.release(params).await })
    }

    fn lease_fence(&self, params: &LeaseFenceParams) -> Result<LeaseFence, BackendError> {
        self.call(|mut c| async move { c.fence(params).await })
    }

    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> Result<WaiterTicket, BackendError> {
        params.check()?;
        self.call(|mut c| async move { c.waiter_enqueue(params).await })
    }

    fn waiter_remove(&self, p: &WaiterRemoveParams) -> Result<(), BackendError> {
        self.call(|mut c| async move { c.waiter_remove(&p.name, p.ticket).await })
    }

    fn waiter_refresh(&self, p: &WaiterRefreshParams) -> Result<WaiterRefresh, BackendError> {
        self.call(|mut c| async move { c.waiter_refresh(p).await })
    }

    /// A watch of the one key of the waiter just ahead (`watch::behind`).
    /// A watch that cannot be made: not offered this time — the waiter
    /// sleeps instead (a cancel wakes that sleep), and its next reading
    /// reports a store that is down.
    fn wait_behind(&self, topic: &WaitTopic, ahead: WaiterTicket, timeout: Duration) -> Result<Behind, BackendError> {
        let Watched::Lease(name) = topic.watched() else {
            return Ok(Behind::NotOffered);
        };
        let until = tokio::time::Instant::now() + timeout.min(leasehold_backend::limits::WAIT.max);
        let (_, client) = self.client();
        let waited = self.rt.block_on(async {
            let behind = watch::behind(client, &self.keys, name, ahead, topic, until);
            tokio::time::timeout_at(until + watch::END_GRACE, behind).await
        });
        Ok(match waited {
            Ok(Ok(behind)) => behind,
            Ok(Err(_)) | Err(_) => Behind::NotOffered,
        })
    }

    fn lease_get(&self, name: &LeaseName) -> Result<Option<LeaseState>, BackendError> {
        self.call(|mut c| async move { c.get(name).await })
    }

    fn lease_waiting(
        &self,
        name: &LeaseName,
        ticket: WaiterTicket,
        proved: usize,
    ) -> Result<Option<LeaseState>, BackendError> {
        self.call(|mut c| async move { c.waiting(name, ticket, proved).await })
    }

    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError> {
        self.call(|mut c| async move { c.list(params).await })
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError> {
        self.call(|mut c| async move { c.history(params).await })
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> Result<TokensBumped, BackendError> {
        self.call(|mut c| async move { c.tokens_bump(params).await })?
            .map_err(|refused| BackendError::tokens_bump_refused(self.store(), refused))
    }

    /// An etcd watch on the name's keys (see `watch`): returns when a
    /// change that may unblock a waiter lands — a release, a grant's etcd
    /// lease running out, a waiter leaving — or after `timeout`. When the
    /// watch cannot be made or breaks, sleeps the rest of `timeout`. Queue
    /// topics sleep: etcd has no tasks.
    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        let timeout = timeout.min(leasehold_backend::limits::WAIT.max);
        let Watched::Lease(name) = topic.watched() else {
            topic.sleep(timeout);
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        let (_, client) = self.client();
        let until = tokio::time::Instant::from_std(deadline);
        let woken = self.rt.block_on(async {
            // The watch itself ends by `until`; this bounds making it.
            let changed = watch::changed(client, &self.keys, name, topic, until);
            tokio::time::timeout_at(until + watch::END_GRACE, changed).await
        });
        if let Ok(Err(_)) = woken {
            // Not on the runtime: other threads' calls keep running.
            topic.sleep(deadline.saturating_duration_since(Instant::now()));
        }
        Ok(())
    }

    fn records(&self) -> Option<&dyn RecordBackend> {
        Some(self)
    }
}

#[cfg(feature = "backend")]
impl RecordBackend for EtcdBackend {
    fn record_get(&self, key: &RecordKey) -> Result<Option<Record>, BackendError> {
        self.call(|mut c| async move { c.record_get(key).await })
    }

    fn record_list(&self, params: &RecordListParams) -> Result<Vec<Record>, BackendError> {
        params.check()?;
        self.call(|mut c| async move { c.record_list(params).await })
    }

    /// etcd cannot compare time in a transaction: a write's `not_after` is
    /// judged on the estimate of the cluster's clock (see `clock`) just
    /// before the transaction is sent; it commits a round trip later.
    fn record_write(&self, params: &RecordWriteParams) -> Result<RecordWrite, BackendError> {
        params.check()?;
        if let Some(not_after) = params.not_after
            && let Some(late) = leasehold_backend::record::too_late(Some(not_after), self.store_clock()?.at)
        {
            return Ok(late);
        }
        self.call(|mut c| async move { c.record_write(params).await })
    }

    /// The members' HTTP `Date`, estimated to within half a second or
    /// better (see `clock`).
    fn record_clock(&self) -> Result<StoreTime, BackendError> {
        self.store_clock()
    }
}
