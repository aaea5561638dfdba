//! The Firestore store: leases and fences on Google Cloud Firestore, with
//! the server's clock and tokens that only grow.
//!
//! - **One document per name** holds its grants, waiters, newest token and
//!   newest history entries (`layout`); every operation reads it, plans
//!   with the shared plans and commits it back under the precondition that
//!   it is unchanged (`lease`): one read and one write per acquire, renew
//!   or release, as seed 001's own transaction — the token counter is a
//!   field of the same document.
//! - **The clock is the server's**: decisions are taken at the `readTime`
//!   Firestore returns with the read (docs/FIRESTORE.md says what Google
//!   guarantees of it); no client clock enters a decision, so a skewed
//!   client cannot expire a live grant or keep a dead one.
//! - **Tokens** are a per-name counter in the name's document, which is
//!   never deleted; every grant writes the document under its
//!   precondition, so two grants of a name are ordered and the later one
//!   has the larger token. `migrate --bump-tokens` raises a floor in every
//!   name's document and in the store's, which new names start from.
//! - Waiters poll the name's document (every `POLL`): Firestore's change
//!   streams (listen) are gRPC-only.
//! - Records (what schedules are kept in) are documents whose update time
//!   is their version; a write's `not_after` is judged at the `readTime`
//!   of a read of its keys just before its commit (`records`).
//! - No task queue: the seam's default refuses it with `Unsupported`.
//! - The REST API over `ureq`, a blocking HTTP/1.1 client, on connections
//!   `http` opens (rustls, the `HTTPS_PROXY` tunnel of `proxy`) (`rest`):
//!   the emulator by `FIRESTORE_EMULATOR_HOST`, Google over TLS with
//!   Application Default Credentials (`access`).

mod kind;
pub use kind::KIND;

#[cfg(feature = "backend")]
mod access;
#[cfg(feature = "backend")]
pub mod auth;
#[cfg(feature = "backend")]
mod http;
#[cfg(feature = "backend")]
mod layout;
#[cfg(feature = "backend")]
mod lease;
#[cfg(feature = "backend")]
mod proxy;
#[cfg(feature = "backend")]
mod records;
#[cfg(feature = "backend")]
mod rest;
#[cfg(feature = "backend")]
mod url;

#[cfg(feature = "backend")]
use std::time::{Duration, Instant};

#[cfg(feature = "backend")]
use leasehold_backend::{
    Backend, BackendError, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, Record, RecordBackend, RecordKey, RecordListParams, RecordWrite, RecordWriteParams,
    StoreBackup, StoreBackupParams, StoreInfo, StoreTime, TokensBumpParams, TokensBumped, WaitTopic,
    WaiterEnqueueParams, WaiterRemoveParams, WaiterTicket, Watched,
};

#[cfg(feature = "backend")]
pub use layout::DEFAULT_PREFIX;
#[cfg(feature = "backend")]
pub use url::UrlError;
#[cfg(feature = "backend")]
pub use url::{EMULATOR_VAR, FirestoreUrl, STORE};

#[cfg(feature = "backend")]
use crate::layout::Layout;
#[cfg(feature = "backend")]
use crate::lease::Conn;
#[cfg(feature = "backend")]
use crate::rest::{Rest, ServerTime};

/// How often a waiter reads the name's document to see whether it
/// changed: each poll is one billed document read.
#[cfg(feature = "backend")]
pub const POLL: Duration = Duration::from_millis(500);

/// Where the requests go.
#[cfg(feature = "backend")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An emulator at HOST:PORT: plain HTTP, no credentials.
    Emulator(String),
    /// Google's `firestore.googleapis.com`, over TLS, with Application
    /// Default Credentials.
    Google,
}

/// How to open a Firestore store.
#[cfg(feature = "backend")]
#[derive(Debug, Clone)]
pub struct FirestoreOptions {
    pub project: String,
    pub database: String,
    /// The root collection of leasehold's documents.
    pub prefix: String,
    pub target: Target,
    /// How long one request may take (connecting, sending, answering).
    pub timeout: Duration,
}

#[cfg(feature = "backend")]
impl Default for FirestoreOptions {
    fn default() -> Self {
        Self {
            project: String::new(),
            database: "(default)".to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            target: Target::Google,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A Firestore database as a leasehold store.
#[cfg(feature = "backend")]
#[derive(Debug)]
pub struct FirestoreBackend {
    rest: Rest,
    layout: Layout,
    options: FirestoreOptions,
}

#[cfg(feature = "backend")]
impl FirestoreBackend {
    /// Open the store (no request is made: `describe` asks the server).
    pub fn open(options: &FirestoreOptions) -> Result<Self, BackendError> {
        let label = Self::label(options);
        if !url::prefix_ok(&options.prefix) {
            return Err(BackendError::new(
                ErrorKind::InvalidInput,
                label,
                format!("prefix {:?} is not a collection id leasehold uses", options.prefix),
            ));
        }
        let (endpoint, auth) = match &options.target {
            Target::Emulator(host) => {
                let (h, port) = host
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
                    .ok_or_else(|| {
                        BackendError::new(
                            ErrorKind::InvalidInput,
                            label.clone(),
                            format!("{}={host:?} is not HOST:PORT", url::EMULATOR_VAR),
                        )
                    })?;
                let endpoint = http::Endpoint {
                    host: h.trim_start_matches('[').trim_end_matches(']').to_owned(),
                    port,
                    tls: None,
                    proxy: None,
                };
                (endpoint, None)
            }
            Target::Google => {
                let refused = |kind, why: String| BackendError::new(kind, label.clone(), why);
                let tls = access::tls().map_err(|why| refused(ErrorKind::Unavailable, why.to_string()))?;
                let env = |var: &str| std::env::var(var).ok();
                let credentials = auth::discover(&env).map_err(|e| refused(ErrorKind::Auth, e.to_string()))?;
                let proxy = proxy::for_host(access::FIRESTORE_HOST, &env)
                    .map_err(|why| refused(ErrorKind::InvalidInput, why.to_string()))?;
                let endpoint = http::Endpoint {
                    host: access::FIRESTORE_HOST.to_owned(),
                    port: 443,
                    tls: Some(tls.clone()),
                    proxy,
                };
                let auth: Box<dyn rest::Authorizer> =
                    Box::new(access::GoogleAuth::new(credentials, tls, options.timeout));
                (endpoint, Some(auth))
            }
        };
        Ok(Self {
            rest: Rest {
                client: http::Client::new(endpoint, options.timeout),
                database: format!("projects/{}/databases/{}", options.project, options.database),
                auth,
            },
            layout: Layout::new(&options.prefix),
            options: options.clone(),
        })
    }

    fn label(o: &FirestoreOptions) -> String {
        let database = if o.database == "(default)" {
            String::new()
        } else {
            format!("/{}", o.database)
        };
        format!("firestore://{}{database}?prefix={}", o.project, o.prefix)
    }

    fn store(&self) -> String {
        Self::label(&self.options)
    }

    fn conn(&self) -> Conn<'_> {
        Conn {
            rest: &self.rest,
            layout: &self.layout,
        }
    }

    fn call<T>(&self, f: impl FnOnce(Conn<'_>) -> lease::Result<T>) -> Result<T, BackendError> {
        f(self.conn()).map_err(|e| self.error(e))
    }

    /// What a failure means for the user, and what to do.
    fn error(&self, e: lease::Error) -> BackendError {
        let store = self.store();
        let origin = self.rest.client.endpoint().origin();
        match e {
            lease::Error::Rest(rest::Error::Io(io)) => BackendError::new(
                ErrorKind::Unavailable,
                store,
                if io.kind() == std::io::ErrorKind::TimedOut {
                    format!("Firestore at {origin} did not answer: {io}")
                } else {
                    format!("cannot reach Firestore at {origin}: {io}")
                },
            )
            .hint(match self.options.target {
                Target::Emulator(_) => format!(
                    "is the emulator running there ({} names it)? `gcloud emulators firestore start --host-port=HOST:PORT`; a call that failed this way was not reported as done",
                    url::EMULATOR_VAR
                ),
                Target::Google => "check the network (behind a proxy: HTTPS_PROXY, docs/FIRESTORE.md); a call that failed this way was not reported as done".to_owned(),
            })
            .with_source(io),
            lease::Error::Rest(rest::Error::Status { code, status, message }) => {
                let kind = match (code, status.as_str()) {
                    (401 | 403, _) | (_, "PERMISSION_DENIED" | "UNAUTHENTICATED") => ErrorKind::Auth,
                    (429, _) | (_, "RESOURCE_EXHAUSTED") => ErrorKind::Busy,
                    (400, _) => ErrorKind::InvalidInput,
                    _ => ErrorKind::Unavailable,
                };
                BackendError::new(kind, store, format!("Firestore at {origin} answered {code} {status}: {message}"))
                    .hint("nothing was changed by a call that failed this way")
            }
            lease::Error::Rest(rest::Error::Auth(why)) => BackendError::new(ErrorKind::Auth, store, why),
            lease::Error::Rest(e @ (rest::Error::Unreadable(_) | rest::Error::Conflict)) => {
                BackendError::new(ErrorKind::Unavailable, store, e.to_string())
                    .hint(format!("is {origin} a Firestore server? nothing was changed"))
            }
            lease::Error::Corrupt(reason) => BackendError::new(ErrorKind::Corrupt, store, reason).hint(format!(
                "a document under the collection {:?} was not written by leasehold, or was changed by hand; leasehold left it as it is",
                self.layout.prefix()
            )),
            lease::Error::Contended(what) => BackendError::new(
                ErrorKind::Busy,
                store,
                format!("{what} kept losing races with other clients"),
            )
            .hint("retry; nothing was changed by this call"),
        }
    }
}

#[cfg(feature = "backend")]
impl Backend for FirestoreBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: false,
            host_local: false,
            reopenable: true,
        }
    }

    fn store_backup(&self, _: &StoreBackupParams) -> Result<StoreBackup, BackendError> {
        Err(BackendError::unsupported(
            self.store(),
            "a backup by leasehold",
            "use Firestore's own (`gcloud firestore export`, or point-in-time recovery), and after restoring one run \
             `leasehold migrate --bump-tokens N` (docs/FIRESTORE.md)",
        ))
    }

    fn describe(&self) -> Result<StoreInfo, BackendError> {
        let store_doc = self.rest.doc_name(&self.layout.store());
        let (mut docs, at) = self
            .rest
            .batch_get(std::slice::from_ref(&store_doc), None)
            .map_err(|e| self.error(e.into()))?;
        let store = lease::StoreDoc::of(docs.pop().flatten().as_ref());
        let target = match &self.options.target {
            Target::Emulator(host) => format!("the emulator at {host} ({})", url::EMULATOR_VAR),
            Target::Google => "firestore.googleapis.com".to_owned(),
        };
        let mut facts = vec![
            ("project".to_owned(), self.options.project.clone()),
            ("database".to_owned(), self.options.database.clone()),
            ("collection".to_owned(), self.layout.prefix().to_owned()),
            ("server".to_owned(), target),
            ("names".to_owned(), store.names.to_string()),
            ("token floor".to_owned(), store.floor.to_string()),
            ("server time".to_owned(), rest::format_time(at)),
        ];
        if let Some(auth) = &self.rest.auth {
            facts.push(("credentials".to_owned(), auth.describe()));
        }
        Ok(StoreInfo {
            kind: "firestore",
            location: self.store(),
            schema_version: None,
            facts,
            problems: Vec::new(),
            warnings: Vec::new(),
        })
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.call(|c| c.acquire(params))
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> Result<LeaseRenew, BackendError> {
        params.check()?;
        self.call(|c| c.renew(params))
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> Result<LeaseRelease, BackendError> {
        self.call(|c| c.release(params))
    }

    fn lease_fence(&self, params: &LeaseFenceParams) -> Result<LeaseFence, BackendError> {
        self.call(|c| c.fence(params))
    }

    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> Result<WaiterTicket, BackendError> {
        params.check()?;
        self.call(|c| c.waiter_enqueue(params))
    }

    fn waiter_remove(&self, p: &WaiterRemoveParams) -> Result<(), BackendError> {
        self.call(|c| c.waiter_remove(&p.name, p.ticket))
    }

    fn lease_get(&self, name: &LeaseName) -> Result<Option<LeaseState>, BackendError> {
        self.call(|c| c.get(name))
    }

    fn lease_list(&self, params: &LeaseListParams) -> Result<Vec<LeaseState>, BackendError> {
        self.call(|c| c.list(params))
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>, BackendError> {
        self.call(|c| c.history(params))
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> Result<TokensBumped, BackendError> {
        self.call(|c| c.tokens_bump(params))?
            .map_err(|refused| BackendError::tokens_bump_refused(self.store(), refused))
    }

    /// Polls the name's document every [`POLL`] and returns when its
    /// update time differs from the one this topic saw last (the topic's
    /// cursor, in µs), or after `timeout`. A grant's expiry writes
    /// nothing: a waiter learns of it when its own wait (bounded by the
    /// grant's expiry) ends. Queue topics sleep: no queue here.
    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> Result<(), BackendError> {
        let deadline = Instant::now() + timeout.min(leasehold_backend::limits::WAIT.max);
        let Watched::Lease(name) = topic.watched() else {
            topic.sleep(deadline.saturating_duration_since(Instant::now()));
            return Ok(());
        };
        loop {
            if topic.ending() {
                return Ok(());
            }
            let seen = self
                .conn()
                .version(name)
                .ok()
                .map(|v| v.as_deref().and_then(ServerTime::parse).map_or(0, |t| t.0 as u64));
            if seen.is_some_and(|version| topic.moved_to(version)) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            topic.sleep(left.min(POLL));
        }
    }

    fn records(&self) -> Option<&dyn RecordBackend> {
        Some(self)
    }
}

#[cfg(feature = "backend")]
impl RecordBackend for FirestoreBackend {
    fn record_get(&self, key: &RecordKey) -> Result<Option<Record>, BackendError> {
        self.call(|c| c.record_get(key))
    }

    fn record_list(&self, params: &RecordListParams) -> Result<Vec<Record>, BackendError> {
        params.check()?;
        self.call(|c| c.record_list(params))
    }

    fn record_write(&self, params: &RecordWriteParams) -> Result<RecordWrite, BackendError> {
        params.check()?;
        self.call(|c| c.record_write(params))
    }

    /// The server's `readTime` of a read, to the microsecond.
    fn record_clock(&self) -> Result<StoreTime, BackendError> {
        self.call(|c| c.record_clock())
            .map(|at| StoreTime::exactly(at.system_time()))
    }
}

/// Shared by the store's tests: open on an emulator.
#[cfg(feature = "backend")]
#[doc(hidden)]
pub fn open_emulator(host: &str, project: &str, prefix: &str) -> Result<FirestoreBackend, BackendError> {
    FirestoreBackend::open(&FirestoreOptions {
        project: project.to_owned(),
        prefix: prefix.to_owned(),
        target: Target::Emulator(host.to_owned()),
        ..FirestoreOptions::default()
    })
}
