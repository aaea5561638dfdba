//! The Redis store of leasehold: leases with fencing tokens on Redis 7.
//!
//! Each name is one document (a hash) changed by one Lua script per
//! commit, decided by the shared plans (`leasehold_backend::document`,
//! `lease`); the clock is the server's `TIME`; tokens come from the name's
//! newest token, which only grows (`--bump-tokens` raises a floor above
//! it); history is a list per name capped as every store caps it; waiters
//! are woken by pub/sub. `durability` says what the server's settings
//! allow (persistence, eviction, its role), and the store refuses to open
//! on settings that can lose acknowledged grants unless told
//! `durability=relaxed` — and refuses a write when they have changed so
//! since (they are read again with the read before every write). A replica
//! is refused always. See docs/REDIS.md.

mod kind;
pub use kind::KIND;

#[cfg(feature = "backend")]
mod durability;
#[cfg(feature = "backend")]
mod lease;
#[cfg(feature = "backend")]
mod records;
#[cfg(feature = "backend")]
mod resp;
#[cfg(feature = "backend")]
mod url;
#[cfg(feature = "backend")]
mod waiting;

#[cfg(feature = "backend")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "backend")]
use std::time::Duration;

#[cfg(feature = "backend")]
use leasehold_backend::document;
#[cfg(feature = "backend")]
use leasehold_backend::{
    Backend, BackendError, Behind, Capabilities, ErrorKind, HistoryEntry, LeaseAcquire, LeaseAcquireParams, LeaseFence,
    LeaseFenceParams, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LeaseRenewParams, LeaseState, StoreBackup, StoreBackupParams, StoreInfo, TokensBumpParams, TokensBumped, WaitTopic,
    WaiterEnqueueParams, WaiterRemoveParams, WaiterTicket,
};

#[cfg(feature = "backend")]
pub use crate::url::UrlError;
#[cfg(feature = "backend")]
pub use crate::url::{DEFAULT_PREFIX, PASSWORD_VAR, RedisUrl, STORE};

#[cfg(feature = "backend")]
use crate::durability::{Durability, Settings};
#[cfg(feature = "backend")]
use crate::resp::{Conn, Reply};

/// How long one request may take (connecting, sending, answering).
#[cfg(feature = "backend")]
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a write waits for its replicas (`wait=N`).
#[cfg(feature = "backend")]
const WAIT_REPLICAS: Duration = Duration::from_secs(5);

#[cfg(feature = "backend")]
#[derive(Debug)]
pub enum Error {
    Io(std::io::Error),
    /// An error reply: the server's words.
    Server(String),
    /// A key this code could not have written.
    Corrupt(String),
    /// Lost the race `document::MAX_ROUNDS` times in a row.
    Contended(String),
    /// Committed on the primary, not confirmed by `wait=N` replicas.
    Unreplicated {
        confirmed: i64,
        wanted: u32,
    },
    /// The server's settings, read with the read before a write, can lose
    /// it (`durability::Settings::refusal`): nothing was written.
    Refused {
        what: &'static str,
        reason: String,
    },
}

#[cfg(feature = "backend")]
impl From<durability::Refusal> for Error {
    fn from(r: durability::Refusal) -> Self {
        Error::Refused {
            what: r.what,
            reason: r.reason,
        }
    }
}

#[cfg(feature = "backend")]
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

#[cfg(feature = "backend")]
pub type Result<T> = std::result::Result<T, Error>;

/// A Lua script, sent once per connection's server by `SCRIPT LOAD` and
/// then called by its SHA1 (`EVALSHA`).
#[cfg(feature = "backend")]
#[derive(Debug)]
pub(crate) struct Script {
    source: &'static str,
}

#[cfg(feature = "backend")]
impl Script {
    pub(crate) const fn new(source: &'static str) -> Self {
        Self { source }
    }
}

/// The keys of one store, under its prefix.
#[cfg(feature = "backend")]
#[derive(Debug, Clone)]
struct Keys {
    prefix: String,
}

#[cfg(feature = "backend")]
impl Keys {
    fn name(&self, name: &LeaseName) -> String {
        format!("{}:name:{}", self.prefix, name.as_str())
    }
    fn history(&self, name: &LeaseName) -> String {
        format!("{}:history:{}", self.prefix, name.as_str())
    }
    fn channel(&self, name: &LeaseName) -> String {
        format!("{}:changed:{}", self.prefix, name.as_str())
    }
    /// The channel told when the waiter of `ticket` leaves `name`'s queue
    /// (a ticket has no colon: the last one ends the name).
    fn left(&self, name: &LeaseName, ticket: u64) -> String {
        format!("{}:left:{}:{ticket}", self.prefix, name.as_str())
    }
    fn names(&self) -> String {
        format!("{}:names", self.prefix)
    }
    fn floor(&self) -> String {
        format!("{}:floor", self.prefix)
    }
}

/// A Redis server as a leasehold store.
#[cfg(feature = "backend")]
#[derive(Debug)]
pub struct RedisBackend {
    url: RedisUrl,
    password: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    keys: Keys,
    /// Idle connections; a call takes one (or connects) and puts it back
    /// unless it failed.
    idle: Mutex<Vec<Conn>>,
    /// The scripts' SHA1s as the server named them (`SCRIPT LOAD`).
    shas: Mutex<Vec<(&'static str, String)>>,
    durability: Durability,
    /// The documents this handle last committed, by name, for the release
    /// of a grant to decide on without reading the name again
    /// (`lease::Committed`).
    committed: Mutex<std::collections::HashMap<String, lease::Committed>>,
    /// Which settings are read again before each write: all of them under
    /// `durability=strict`; under `relaxed` only the role (the rest is
    /// the risk accepted), and only if it could be read at open — a
    /// command the ACL refuses on every read would fill the server's
    /// `ACL LOG`.
    recheck: Recheck,
}

#[cfg(feature = "backend")]
#[derive(Debug, Clone, Copy)]
struct Recheck {
    config: bool,
    role: bool,
}

#[cfg(feature = "backend")]
impl RedisBackend {
    /// Connect, and read the server's persistence settings: refused on
    /// settings that can lose acknowledged writes unless `url.relaxed`.
    ///
    /// # Errors
    /// A password or TLS file that cannot be read, a server that cannot be
    /// reached or refuses the credentials, or weak durability.
    pub fn open(url: &RedisUrl) -> std::result::Result<Self, BackendError> {
        let label = Self::label(url);
        let password = match &url.password_file {
            Some(path) => Some(
                leasehold_backend::password_from_file(path)
                    .map_err(|reason| BackendError::invalid_url(&label, reason))?,
            ),
            None => std::env::var(PASSWORD_VAR).ok().filter(|p| !p.is_empty()),
        };
        let tls = url
            .tls
            .then(|| -> std::result::Result<_, leasehold_tls::TlsError> {
                let roots = leasehold_tls::roots("cacert", url.cacert.as_deref())?;
                let identity = match (&url.cert, &url.key) {
                    (Some(cert), Some(key)) => Some(leasehold_tls::identity(("cert", cert), ("key", key))?),
                    _ => None,
                };
                let config = leasehold_tls::client_config(roots, identity.as_ref(), &[])?;
                Ok(Arc::new(config))
            })
            .transpose()
            .map_err(|reason| BackendError::invalid_url(&label, reason))?;
        let backend = Self {
            url: url.clone(),
            password,
            tls,
            keys: Keys {
                prefix: url.prefix.clone(),
            },
            idle: Mutex::new(Vec::new()),
            shas: Mutex::new(Vec::new()),
            durability: Durability::unread(),
            committed: Mutex::new(std::collections::HashMap::new()),
            recheck: Recheck {
                config: true,
                role: true,
            },
        };
        let durability = Durability::read(&backend).map_err(|e| backend.error(e))?;
        if let Some(refusal) = durability.settings.refusal(url.relaxed) {
            return Err(backend.error(refusal.into()));
        }
        let recheck = Recheck {
            config: !url.relaxed,
            role: !url.relaxed || durability.settings.role.is_ok(),
        };
        Ok(Self {
            durability,
            recheck,
            ..backend
        })
    }

    /// The commands that read the settings checked before a write
    /// (`full`: all of them, as at open and for `doctor`).
    fn probes(&self, full: bool) -> Vec<&'static [&'static [u8]]> {
        let mut probes = Vec::new();
        if full || self.recheck.config {
            probes.push(durability::CONFIG_GET);
        }
        if full || self.recheck.role {
            probes.push(durability::ROLE);
        }
        probes
    }

    /// The settings from the replies to `probes(full)`; one not asked is
    /// unknown (accepted by `durability=relaxed`, the only case).
    fn judge(&self, full: bool, replies: &[Reply]) -> Settings {
        let not_asked = Reply::Error("not read again under durability=relaxed".to_owned());
        let mut replies = replies.iter();
        let config = if full || self.recheck.config {
            replies.next()
        } else {
            None
        };
        let role = if full || self.recheck.role {
            replies.next()
        } else {
            None
        };
        Settings::parse(config.unwrap_or(&not_asked), role.unwrap_or(&not_asked))
    }

    /// The settings as they are now (one round trip): all of them when
    /// `full`, else those re-checked before a write.
    fn settings(&self, full: bool) -> Result<Settings> {
        let probes = self.probes(full);
        let replies: Vec<Reply> = self.with_conn(|conn| {
            for p in &probes {
                conn.queue(p)?;
            }
            conn.flush()?;
            Ok(probes.iter().map(|_| conn.read()).collect::<std::io::Result<_>>()?)
        })?;
        Ok(self.judge(full, &replies))
    }

    /// Why a write must not be made now (`Error::Refused`), from settings
    /// read with a read that came just before it.
    fn refusal(&self, settings: &Settings) -> Option<durability::Refusal> {
        settings.refusal(self.url.relaxed)
    }

    /// Refuse a write the server's settings, read now, could lose: for
    /// the writes not preceded by a read of their own (a floor raised, a
    /// record written). The lease writes check the settings read with
    /// the name (`lease::Read`), in the same round trip.
    fn check_settings(&self) -> Result<()> {
        match self.refusal(&self.settings(false)?) {
            Some(refusal) => Err(refusal.into()),
            None => Ok(()),
        }
    }

    fn label(url: &RedisUrl) -> String {
        let scheme = if url.tls { "rediss" } else { "redis" };
        let user = url.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
        format!(
            "{scheme}://{user}{}:{}/{}?prefix={}",
            url.host, url.port, url.db, url.prefix
        )
    }

    fn store(&self) -> String {
        Self::label(&self.url)
    }

    fn connect(&self) -> Result<Conn> {
        let mut conn = Conn::connect(&self.url.host, self.url.port, self.tls.as_ref(), TIMEOUT)?;
        if let Some(password) = &self.password {
            let mut args = vec!["AUTH".as_bytes()];
            if let Some(user) = &self.url.user {
                args.push(user.as_bytes());
            }
            args.push(password.as_bytes());
            ok(conn.call(&args)?)?;
        }
        if self.url.db != 0 {
            ok(conn.call(&[b"SELECT", self.url.db.to_string().as_bytes()])?)?;
        }
        Ok(conn)
    }

    /// Run `f` on a connection: an idle one, or a new one.
    fn with_conn<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut conn = match idle {
            Some(c) => c,
            None => self.connect()?,
        };
        let out = f(&mut conn);
        // A connection that failed in the middle of a reply is not reused.
        if !matches!(out, Err(Error::Io(_))) {
            self.idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(conn);
        }
        out
    }

    /// One command; an error reply is an error.
    fn call(&self, args: &[&str]) -> Result<Reply> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.with_conn(|c| ok(c.call(&args)?))
    }

    fn sha(&self, script: &Script, conn: &mut Conn, reload: bool) -> Result<String> {
        let mut shas = self.shas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !reload && let Some((_, sha)) = shas.iter().find(|(s, _)| std::ptr::eq(*s, script.source)) {
            return Ok(sha.clone());
        }
        let sha = ok(conn.call(&[b"SCRIPT", b"LOAD", script.source.as_bytes()])?)?
            .text()
            .map(str::to_owned)
            .ok_or_else(|| Error::Server("SCRIPT LOAD answered no SHA1".to_owned()))?;
        shas.retain(|(s, _)| !std::ptr::eq(*s, script.source));
        shas.push((script.source, sha.clone()));
        Ok(sha)
    }

    /// Call `script` once per entry of `calls` (its keys), all with `args`,
    /// pipelined: one round trip.
    fn eval_many<K: AsRef<[String]>>(&self, script: &Script, calls: &[K], args: &[&str]) -> Result<Vec<Reply>> {
        self.with_conn(|conn| self.eval_on(conn, script, calls, args))
    }

    /// As [`RedisBackend::eval_many`], with the commands that read the
    /// settings checked before a write sent first in the same round trip:
    /// the settings as judged, and the script's replies.
    fn eval_checked<K: AsRef<[String]>>(
        &self,
        script: &Script,
        calls: &[K],
        args: &[&str],
    ) -> Result<(Settings, Vec<Reply>)> {
        let probes = self.probes(false);
        self.with_conn(|conn| {
            // The script is loaded first, if it must be: its SHA1 goes in
            // the same batch as the probes.
            self.sha(script, conn, false)?;
            for p in &probes {
                conn.queue(p)?;
            }
            let replies = self.eval_sent(conn, script, calls, args, probes.len())?;
            let (settings, replies) = replies.split_at(probes.len());
            Ok((
                self.judge(false, settings),
                replies.iter().cloned().map(ok).collect::<Result<_>>()?,
            ))
        })
    }

    fn eval_on<K: AsRef<[String]>>(
        &self,
        conn: &mut Conn,
        script: &Script,
        calls: &[K],
        args: &[&str],
    ) -> Result<Vec<Reply>> {
        self.eval_sent(conn, script, calls, args, 0)?
            .into_iter()
            .map(ok)
            .collect()
    }

    /// Send `script` once per entry of `calls` and read the replies, after
    /// `sent` commands already sent on `conn` (their replies come first,
    /// as they are: not turned into errors).
    fn eval_sent<K: AsRef<[String]>>(
        &self,
        conn: &mut Conn,
        script: &Script,
        calls: &[K],
        args: &[&str],
        sent: usize,
    ) -> Result<Vec<Reply>> {
        let mut reload = false;
        let mut before = Vec::new();
        loop {
            let sha = self.sha(script, conn, reload)?;
            for keys in calls {
                let keys = keys.as_ref();
                let count = keys.len().to_string();
                let mut command: Vec<&[u8]> = vec![b"EVALSHA", sha.as_bytes(), count.as_bytes()];
                command.extend(keys.iter().map(String::as_bytes));
                command.extend(args.iter().map(|a| a.as_bytes()));
                conn.queue(&command)?;
            }
            conn.flush()?;
            if before.is_empty() {
                before = (0..sent).map(|_| conn.read()).collect::<std::io::Result<Vec<_>>>()?;
            }
            let replies = calls.iter().map(|_| conn.read()).collect::<std::io::Result<Vec<_>>>()?;
            // A server restarted (or `SCRIPT FLUSH`ed) forgot the script:
            // load it again, once.
            if !reload
                && replies
                    .iter()
                    .any(|r| matches!(r, Reply::Error(e) if e.starts_with("NOSCRIPT")))
            {
                reload = true;
                continue;
            }
            before.extend(replies);
            return Ok(before);
        }
    }

    fn eval(&self, script: &Script, keys: &[&str], args: &[&str]) -> Result<Reply> {
        let keys: Vec<String> = keys.iter().map(|&k| k.to_owned()).collect();
        let mut replies = self.eval_many(script, &[keys], args)?;
        Ok(replies.pop().unwrap_or(Reply::Nil))
    }

    /// Run `script` once, and when its reply says it wrote (`wrote`), with
    /// `wait=N` wait until N replicas have what it wrote (`WAIT`, on the
    /// same connection: it waits for that client's writes).
    fn eval_replicated(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        wrote: impl FnOnce(&Reply) -> bool,
    ) -> Result<Reply> {
        let keys: Vec<String> = keys.iter().map(|&k| k.to_owned()).collect();
        self.with_conn(|conn| {
            let reply = self.eval_on(conn, script, &[keys], args)?.pop().unwrap_or(Reply::Nil);
            let wanted = self.url.wait;
            if wanted > 0 && wrote(&reply) {
                let ms = WAIT_REPLICAS.as_millis().to_string();
                let confirmed = ok(conn.call(&[b"WAIT", wanted.to_string().as_bytes(), ms.as_bytes()])?)?
                    .int()
                    .unwrap_or(0);
                if confirmed < i64::from(wanted) {
                    return Err(Error::Unreplicated { confirmed, wanted });
                }
            }
            Ok(reply)
        })
    }

    /// What a failure means for the user, and what to do.
    fn error(&self, e: Error) -> BackendError {
        let store = self.store();
        let at = format!("{}:{}", self.url.host, self.url.port);
        match e {
            Error::Io(io) if leasehold_backend::is_timeout(&io) => BackendError::new(
                ErrorKind::Unavailable,
                store,
                format!("Redis at {at} did not answer: {}", leasehold_backend::timed_out(TIMEOUT)),
            )
            .hint("the server may be overloaded or stopped, or a firewall may drop the packets; a call that failed this way was not reported as done")
            .with_source(io),
            Error::Io(io) => match leasehold_tls::refusal(&io) {
                Some(refusal) => self.tls_error(refusal, &at).with_source(io),
                None => BackendError::new(ErrorKind::Unavailable, store, format!("cannot reach Redis at {at}: {io}"))
                    .hint("is redis-server running there? a call that failed this way was not reported as done")
                    .with_source(io),
            },
            Error::Server(words) => {
                let mut code = words.split_whitespace().next().unwrap_or_default();
                // A command inside a script that the ACL refuses answers
                // ERR, not NOPERM (Redis 7.0).
                if words.contains("The user executing the script can't") {
                    code = "NOPERM";
                }
                let (kind, hint) = match code {
                    "NOAUTH" | "WRONGPASS" | "NOPERM" => (
                        ErrorKind::Auth,
                        "check the user and the password (password-file=, or LEASEHOLD_REDIS_PASSWORD), and that the ACL gives the user what the `ACL SETUSER` line of docs/REDIS.md does (the commands inside the store's scripts count too)",
                    ),
                    "READONLY" => (ErrorKind::ReadOnly, "this server is a replica: point the URL at the primary"),
                    "BUSY" => (ErrorKind::Busy, "the server is running a long script; retry"),
                    "WRONGTYPE" => (
                        ErrorKind::Corrupt,
                        "a key under the store's prefix holds another type than leasehold writes there: another program uses the prefix; leasehold left it as it is (use another ?prefix=)",
                    ),
                    _ => (ErrorKind::Unavailable, "nothing was reported as done by a call that failed this way"),
                };
                BackendError::new(kind, store, format!("Redis at {at} answered: {words}")).hint(hint)
            }
            Error::Corrupt(reason) => BackendError::new(ErrorKind::Corrupt, store, reason).hint(format!(
                "a key under the prefix {:?} was not written by leasehold, or was changed by hand; leasehold left it as it is",
                self.keys.prefix
            )),
            Error::Contended(what) => BackendError::new(
                ErrorKind::Busy,
                store,
                format!("{what} kept losing races with other clients"),
            )
            .hint("retry; nothing was changed by this call"),
            Error::Unreplicated { confirmed, wanted } => BackendError::new(
                ErrorKind::Unavailable,
                store,
                format!(
                    "the change was made on the primary, but only {confirmed} of the {wanted} replicas asked for (wait={wanted}) confirmed it within {} s: it is not acknowledged",
                    WAIT_REPLICAS.as_secs()
                ),
            )
            .hint("check the replicas (`INFO replication`); a grant made this way is not used and expires with its TTL"),
            // Refused before anything was written; the reason says what to
            // set and how to accept the risk.
            Error::Refused { what, reason } => BackendError::unsupported(store, what, reason),
        }
    }

    /// A TLS handshake that failed: which certificate, and what to do.
    fn tls_error(&self, refusal: leasehold_tls::Refusal, at: &str) -> BackendError {
        use leasehold_tls::Refusal;
        let (kind, reason, hint) = match refusal {
            Refusal::ServerCertificate(why) => (
                ErrorKind::Auth,
                format!("TLS failed: the certificate of Redis at {at} was not accepted: {why}"),
                "pass cacert=PATH with the CA certificate that signed the server's (its tls-cert-file), which must name the host in the URL; see docs/REDIS.md".to_owned(),
            ),
            Refusal::ClientCertificate(why) => (
                ErrorKind::Auth,
                match &self.url.cert {
                    Some(cert) => format!("TLS failed: Redis at {at} refused the client certificate cert={} ({why})", cert.display()),
                    None => format!("TLS failed: Redis at {at} refused the connection without a client certificate ({why})"),
                },
                "the server (tls-auth-clients) takes client certificates signed by the CA of its tls-ca-cert-file: pass cert= and key= with one it issued; see docs/REDIS.md".to_owned(),
            ),
            Refusal::Other(why) => (
                ErrorKind::Unavailable,
                format!("TLS failed with Redis at {at}: {why}"),
                "check that the port is the server's tls-port; a call that failed this way was not reported as done".to_owned(),
            ),
        };
        BackendError::new(kind, self.store(), reason).hint(hint)
    }

    fn run<T>(&self, f: impl FnOnce() -> Result<T>) -> std::result::Result<T, BackendError> {
        f().map_err(|e| self.error(e))
    }

    /// Whether the user may not subscribe to its names' channels: the
    /// server's refusal (a subscription on a connection of its own, closed
    /// after).
    fn channel_refused(&self) -> Result<Option<String>> {
        let mut sub = self.connect()?;
        let channel = format!("{}:changed:", self.keys.prefix);
        Ok(match sub.call(&[b"SUBSCRIBE", channel.as_bytes()])? {
            Reply::Error(words) => Some(words),
            _ => None,
        })
    }
}

/// An error reply as an error.
#[cfg(feature = "backend")]
fn ok(reply: Reply) -> Result<Reply> {
    match reply {
        Reply::Error(words) => Err(Error::Server(words)),
        other => Ok(other),
    }
}

#[cfg(feature = "backend")]
impl Backend for RedisBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            clock_skew: false,
            host_local: false,
            reopenable: true,
        }
    }

    fn store_backup(&self, _: &StoreBackupParams) -> std::result::Result<StoreBackup, BackendError> {
        Err(BackendError::unsupported(
            self.store(),
            "a backup by leasehold",
            "copy the server's AOF or RDB files (`BGSAVE`), and after restoring one run `leasehold migrate --bump-tokens N` (docs/REDIS.md)",
        ))
    }

    fn describe(&self) -> std::result::Result<StoreInfo, BackendError> {
        self.run(|| {
            let names = self.call(&["SCARD", &self.keys.names()])?.int().unwrap_or(0);
            let floor = self.floor_of(&self.call(&["GET", &self.keys.floor()])?)?;
            let mut facts = vec![
                ("server".to_owned(), format!("{}:{}", self.url.host, self.url.port)),
                ("database".to_owned(), self.url.db.to_string()),
                ("prefix".to_owned(), self.keys.prefix.clone()),
                ("names".to_owned(), names.to_string()),
                ("token floor".to_owned(), floor.to_string()),
            ];
            // The settings as they are now, not as at open: a write is
            // judged on them.
            let now = Durability {
                settings: self.settings(true)?,
                ..self.durability.clone()
            };
            facts.extend(now.facts(self.url.wait));
            let mut warnings = Vec::new();
            let mut problems = Vec::new();
            // Each risk on its own line: under `relaxed` accepted (a
            // warning); otherwise a write would be refused (a problem:
            // they changed since the store was opened).
            for (what, risk) in now.settings.risks() {
                if self.url.relaxed {
                    warnings.push((what.to_owned(), format!("{risk} (opened with durability=relaxed)")));
                } else {
                    problems.push((
                        what.to_owned(),
                        format!("{risk}: every write is refused. {}", Settings::remedy()),
                    ));
                }
            }
            if let Some(refusal) = now.settings.not_the_primary(self.url.relaxed) {
                problems.push(("role".to_owned(), refusal.reason));
            } else if now.settings.role.is_err() {
                warnings.push((
                    "role".to_owned(),
                    "the server's role could not be read: it may be a replica (opened with durability=relaxed)".to_owned(),
                ));
            }
            if let Some(short) = now.replicas_short(self.url.wait) {
                problems.push(("replicas".to_owned(), short));
            }
            if let Some(refused) = self.channel_refused()? {
                warnings.push((
                    "waking".to_owned(),
                    format!(
                        "the user may not subscribe to {} ({refused}): commits publish nothing and waiters poll instead of being woken; give it `&{}:*` (docs/REDIS.md)",
                        self.keys.channel(&LeaseName::new("NAME").unwrap_or_else(|_| unreachable!())),
                        self.keys.prefix
                    ),
                ));
            }
            Ok(StoreInfo {
                kind: "redis",
                location: self.store(),
                schema_version: None,
                facts,
                problems,
                warnings,
            })
        })
    }

    fn lease_acquire(&self, params: &LeaseAcquireParams) -> std::result::Result<LeaseAcquire, BackendError> {
        params.check()?;
        self.run(|| document::acquire(self, params))
    }

    fn lease_renew(&self, params: &LeaseRenewParams) -> std::result::Result<LeaseRenew, BackendError> {
        params.check()?;
        self.run(|| document::renew(self, params))
    }

    fn lease_release(&self, params: &LeaseReleaseParams) -> std::result::Result<LeaseRelease, BackendError> {
        self.run(|| document::release(self, params))
    }

    fn lease_fence(&self, params: &LeaseFenceParams) -> std::result::Result<LeaseFence, BackendError> {
        self.run(|| document::fence(self, params))
    }

    fn waiter_enqueue(&self, params: &WaiterEnqueueParams) -> std::result::Result<WaiterTicket, BackendError> {
        params.check()?;
        self.run(|| document::waiter_enqueue(self, params))
    }

    fn waiter_remove(&self, p: &WaiterRemoveParams) -> std::result::Result<(), BackendError> {
        self.run(|| document::waiter_remove(self, &p.name, p.ticket))
    }

    fn lease_get(&self, name: &LeaseName) -> std::result::Result<Option<LeaseState>, BackendError> {
        self.run(|| Ok(self.snapshot_for(name, lease::Purpose::Show)?.lease_state(name)))
    }

    fn lease_list(&self, params: &LeaseListParams) -> std::result::Result<Vec<LeaseState>, BackendError> {
        self.run(|| self.list(params))
    }

    fn lease_history(&self, params: &LeaseHistoryParams) -> std::result::Result<Vec<HistoryEntry>, BackendError> {
        self.run(|| self.history(params))
    }

    fn tokens_bump(&self, params: &TokensBumpParams) -> std::result::Result<TokensBumped, BackendError> {
        self.run(|| self.tokens_bump(params))?
            .map_err(|refused| BackendError::tokens_bump_refused(self.store(), refused))
    }

    fn records(&self) -> Option<&dyn leasehold_backend::RecordBackend> {
        Some(self)
    }

    /// The waits (`waiting.rs`): on the channel of the waiter just ahead,
    /// or on the name's, each subscription kept for the waiter's next wait.
    fn wait_behind(
        &self,
        topic: &WaitTopic,
        ahead: WaiterTicket,
        timeout: Duration,
    ) -> std::result::Result<Behind, BackendError> {
        Ok(self.wait_behind_of(topic, ahead, timeout))
    }

    fn wait_for_change(&self, topic: &WaitTopic, timeout: Duration) -> std::result::Result<(), BackendError> {
        self.wait_for_change_of(topic, timeout);
        Ok(())
    }
}

#[cfg(feature = "backend")]
impl leasehold_backend::RecordBackend for RedisBackend {
    fn record_get(
        &self,
        key: &leasehold_backend::RecordKey,
    ) -> std::result::Result<Option<leasehold_backend::Record>, BackendError> {
        self.run(|| self.record_get(key))
    }

    fn record_list(
        &self,
        params: &leasehold_backend::RecordListParams,
    ) -> std::result::Result<Vec<leasehold_backend::Record>, BackendError> {
        params.check()?;
        self.run(|| self.record_list(params))
    }

    fn record_write(
        &self,
        params: &leasehold_backend::RecordWriteParams,
    ) -> std::result::Result<leasehold_backend::RecordWrite, BackendError> {
        params.check()?;
        self.run(|| self.record_write(params))
    }

    /// The server's `TIME`, to the microsecond.
    fn record_clock(&self) -> std::result::Result<leasehold_backend::StoreTime, BackendError> {
        self.run(|| self.record_clock())
            .map(leasehold_backend::StoreTime::exactly)
    }
}
