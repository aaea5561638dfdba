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
//! - The clock is the server's, so [`ClockSkew`](leasehold_backend::ClockSkew)
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

mod keys;
mod lease;
mod watch;

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};
use leasehold_backend::{
    Backend, BackendError, Capabilities, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew, LeaseRenewParams,
    LeaseState, StoreInfo, WaitTopic, WaiterEnqueueParams, WaiterRemoveParams, WaiterTicket, Watched,
};
use tokio::runtime::Runtime;

pub use keys::DEFAULT_PREFIX;
pub use leasehold_backend::plan::HISTORY_PER_NAME;

use crate::keys::Keys;
use crate::lease::Conn;

/// How to open an etcd store.
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
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// The etcd store.
pub struct EtcdBackend {
    endpoints: Vec<String>,
    keys: Keys,
    // The async runtime stays inside this backend: a current-thread runtime
    // that each blocking call drives with `block_on` (several threads may
    // call at once; tokio hands the driver from one to the next).
    rt: Runtime,
    client: Client,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connect to the cluster at `endpoints` (`host:port`, or URLs with
    /// `http://`), and check that it answers.
    ///
    /// # Errors
    /// [`BackendError::InvalidUrl`] for no endpoints or a prefix that is not
    /// absolute; [`BackendError::Unavailable`] when no endpoint answers
    /// within the timeouts.
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
        let invalid = |reason: &str| BackendError::InvalidUrl {
            url: format!("etcd://{}", endpoints.join(",")),
            reason: reason.to_owned(),
        };
        if endpoints.is_empty() || endpoints.iter().any(String::is_empty) {
            return Err(invalid("expected etcd://HOST:PORT[,HOST:PORT...]"));
        }
        if !options.prefix.starts_with('/') || options.prefix.trim_end_matches('/').is_empty() {
            return Err(invalid("the prefix must be an absolute key path like /myapp"));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BackendError::Unavailable {
                store: format!("etcd://{}", endpoints.join(",")),
                reason: format!("cannot start the I/O runtime: {e}"),
                hint: "check the process's limits (threads, file descriptors)".into(),
            })?;
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout)
            .with_keep_alive(Duration::from_secs(10), options.request_timeout);
        let keys = Keys::new(&options.prefix);
        let store = Self::label(endpoints, &keys);
        let client = rt
            .block_on(async {
                let mut client = Client::connect(endpoints, Some(connect)).await?;
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
            .map_err(|e| unavailable(&store, &e))?;
        Ok(Self {
            endpoints: endpoints.to_vec(),
            keys,
            rt,
            client,
        })
    }

    fn label(endpoints: &[String], keys: &Keys) -> String {
        format!("etcd://{}?prefix={}", endpoints.join(","), keys.prefix())
    }

    fn store(&self) -> String {
        Self::label(&self.endpoints, &self.keys)
    }

    /// Run one operation to completion on this backend's runtime.
    fn call<'s, T, F>(&'s self, f: impl FnOnce(Conn<'s>) -> F) -> Result<T, BackendError>
    where
        F: Future<Output = lease::Result<T>>,
    {
        let conn = Conn {
            client: self.client.clone(),
            keys: &self.keys,
        };
        self.rt.block_on(f(conn)).map_err(|e| match e {
            lease::Error::Etcd(e) => unavailable(&self.store(), &e),
            lease::Error::Corrupt(reason) => BackendError::Corrupt {
                store: self.store(),
                reason,
                hint: format!(
                    "inspect the keys with `etcdctl get --prefix {}`; leasehold left them as they are",
                    self.keys.prefix()
                ),
            },
            lease::Error::Contended(what) => BackendError::Unavailable {
                store: self.store(),
                reason: format!("{what} kept losing races with other clients"),
                hint: "retry; nothing was changed by this call".into(),
            },
        })
    }
}

fn unavailable(store: &str, e: &etcd_client::Error) -> BackendError {
    BackendError::Unavailable {
        store: store.to_owned(),
        reason: e.to_string(),
        hint: "check that the cluster is up and reachable (etcdctl --endpoints HOST:PORT endpoint health); \
               a call that failed this way was not reported as done"
            .into(),
    }
}

impl Backend for EtcdBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: false,
            host_local: false,
            reopenable: true,
        }
    }

    fn describe(&self) -> Result<StoreInfo, BackendError> {
        let status = self.call(|mut c| async move { Ok(c.client.status().await?) })?;
        let facts = vec![
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
        Ok(StoreInfo {
            kind: "etcd",
            location: self.store(),
            schema_version: None,
            facts,
            problems: Vec::new(),
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

    fn lease_get(&self, name: &LeaseName) -> Result<Option<LeaseState>, BackendError> {
        self.call(|mut c| async move { c.get(name).await })
    }

    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError> {
        self.call(|mut c| async move { c.list(params).await })
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError> {
        self.call(|mut c| async move { c.history(params).await })
    }

    /// An etcd watch on the name's keys (see `watch`): returns when a
    /// change that may unblock a waiter lands — a release, a grant's etcd
    /// lease running out, a waiter leaving — or after `timeout`. When the
    /// watch cannot be made or breaks, sleeps the rest of `timeout`. Queue
    /// topics sleep: etcd has no tasks.
    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        let timeout = timeout.min(leasehold_backend::limits::WAIT.max);
        let Watched::Lease(name) = topic.watched() else {
            std::thread::sleep(timeout);
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        let client = self.client.clone();
        let woken = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, watch::changed(client, &self.keys, name, topic)).await });
        if let Ok(Err(_)) = woken {
            // Not on the runtime: other threads' calls keep running.
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        }
        Ok(())
    }
}
