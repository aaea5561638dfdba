//! A throwaway Redis for tests: Debian's `redis-server` on a 127.0.0.1 free
//! port (`bind 127.0.0.1`, `protected-mode yes`; and an address of a test
//! network if asked, [`RedisConfig::bind`]), started in the
//! foreground from a `redis.conf` this crate writes into the server's temp
//! dir — its data (`dump.rdb`, the AOF), its log and its configuration all
//! live there, and no other configuration file is read — and stopped by
//! its pid (TERM, then KILL).
//!
//! [`RedisConfig`] says how durable it is ([`Durability`]: an fsync before
//! each reply by default, as the store's durability check demands), whether
//! ACL users are on ([`USER`] may touch only keys under [`GRANTED`]), and
//! whether it speaks TLS only (`rediss://`, certificates made at test time
//! by [`pki`](crate::pki); Debian's build links OpenSSL). A server can be
//! a replica of another ([`RedisServer::start_replica_of`]), waited for
//! until in sync, and promoted.
//!
//! A server is a process: a test reaches it by [`RedisServer::url`] (its
//! store's client is the test's own to open). [`RedisServer::command`]
//! speaks through this crate's own RESP client ([`resp`](crate::resp)), for
//! the kit and for a test that looks behind the store.
//!
//! Without `redis-server` on PATH (or with `redis` in
//! `LEASEHOLD_TEST_HIDE`), starting a server ends the test as one that
//! cannot run here: ignored with the reason, or a failure under `CI=true`
//! (`scripts/test` installs it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::pki::Pki;
pub use crate::resp::{Connection, Reply};

/// What a write acknowledged before a crash (SIGKILL) is worth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// `appendonly yes`, `appendfsync always`: the AOF is fsynced before
    /// each reply, so an acknowledged write survives a crash of the machine.
    /// (`kill -9` alone cannot tell this from [`Durability::EverySec`]: the
    /// AOF is written before each reply either way, and the page cache
    /// outlives the process. `CONFIG GET appendfsync` can.)
    #[default]
    Always,
    /// `appendonly yes`, `appendfsync everysec`: up to a second of
    /// acknowledged writes may be lost to a machine crash (none to
    /// `kill -9`).
    EverySec,
    /// `appendonly no`, `save ""`: nothing is kept; a restart finds an
    /// empty server.
    None,
}

/// How a test server is set up; `RedisConfig::default()` is durable, plain
/// and open (no users).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisConfig {
    pub durability: Durability,
    /// ACL users: [`USER`] (password [`PASSWORD`]) may run every command
    /// (`+@all`: CONFIG, INFO and WAIT too) and use any pub/sub channel,
    /// but read and write only the keys under [`GRANTED`]; the default
    /// user, which this crate uses itself, has a password of its own, so a
    /// client that does not authenticate is refused (`NOAUTH`).
    pub acl: bool,
    /// TLS only (`port 0`, `tls-port`): the server's certificate is signed
    /// by the test CA ([`RedisServer::pki`]), clients need none
    /// (`tls-auth-clients no`).
    pub tls: bool,
    /// An address it listens on besides 127.0.0.1 — the host's end of a
    /// test network ([`TestNet::host_addr`](crate::netns::TestNet)), for
    /// clients in its namespace — which [`RedisServer::url`] then names.
    /// Protected mode is off then: it would refuse every client not on
    /// loopback (the network is private: no route leaves the machine).
    /// `None`: 127.0.0.1 only, protected.
    pub bind: Option<std::net::IpAddr>,
}

/// The ACL user of [`RedisConfig::acl`].
pub const USER: &str = "leasehold";
/// Its password: the space tests that a client quotes or escapes it.
pub const PASSWORD: &str = "correct horse";
/// The key prefix [`USER`] may read and write (`~granted:*`).
pub const GRANTED: &str = "granted:";
/// The default user's password under [`RedisConfig::acl`] (this crate's).
const ADMIN_PASSWORD: &str = "admin-secret";

/// How long a server may take to answer PING (a long AOF to load on a
/// loaded two-core machine; it takes milliseconds when idle).
const START_LIMIT: Duration = Duration::from_secs(30);

/// Go on only where a Redis server can be started: `redis-server` on PATH,
/// and `redis` not hidden (`LEASEHOLD_TEST_HIDE`).
pub fn need_redis() {
    if crate::hidden("redis") {
        crate::unavailable(
            "no `redis-server` (hidden by LEASEHOLD_TEST_HIDE); install the Debian package redis-server",
        );
    }
    crate::need_program("redis-server", "redis-server");
}

/// One redis-server process, its configuration and its temp dir.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    config: RedisConfig,
    /// The port of the primary, for a replica not yet promoted.
    primary: Option<u16>,
    pki: Option<Pki>,
    child: Option<Child>,
    // Removed after the server stopped.
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start a durable, plain, open server ([`RedisConfig::default`]).
    #[must_use]
    pub fn start() -> Self {
        Self::start_with(&RedisConfig::default())
    }

    /// Start a server ([`RedisServer::start`]) and run on it, word for
    /// word, the `ACL SETUSER` line of docs/REDIS.md — what a user is told
    /// to run: the server, and the user and password the line makes.
    ///
    /// # Panics
    /// When the page has no such line, or the server refuses it.
    #[must_use]
    pub fn start_with_documented_acl() -> (Self, String, String) {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/REDIS.md")).expect("REDIS.md");
        let line = page
            .lines()
            .find(|l| l.starts_with("ACL SETUSER "))
            .expect("docs/REDIS.md has an `ACL SETUSER` line");
        let words: Vec<&str> = line.split_whitespace().collect();
        let server = Self::start();
        server.command(&words).expect("the documented ACL line");
        let (user, password) = (words[2].to_owned(), words[4].trim_start_matches('>').to_owned());
        (server, user, password)
    }

    /// Start a server set up as `config` and wait until it answers PING.
    ///
    /// # Panics
    /// When it exits or does not answer within 30 s (with its log's tail).
    #[must_use]
    pub fn start_with(config: &RedisConfig) -> Self {
        Self::start_inner(*config, None)
    }

    /// Start a replica of `primary` (`replicaof`; it authenticates as the
    /// primary's default user), set up as `config`, and wait until it
    /// answers PING — not until it is in sync ([`RedisServer::wait_in_sync`]).
    ///
    /// # Panics
    /// As [`RedisServer::start_with`]; and for a TLS primary, which this
    /// kit does not replicate.
    #[must_use]
    pub fn start_replica_of(primary: &RedisServer, config: &RedisConfig) -> Self {
        assert!(!primary.config.tls, "this kit does not replicate a TLS primary");
        assert!(
            config.acl == primary.config.acl,
            "a replica authenticates with its own admin password: give it the primary's `acl`"
        );
        Self::start_inner(*config, Some(primary.port))
    }

    fn start_inner(config: RedisConfig, primary: Option<u16>) -> Self {
        need_redis();
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let pki = config.tls.then(|| Pki::make(dir.path(), USER));
        let mut server = Self {
            port: 0,
            config,
            primary,
            pki,
            child: None,
            dir,
        };
        // The free port may be taken before the server binds it
        // (`port::free`): a start that fails on it tries another.
        for _ in 0..3 {
            server.port = crate::port::free();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server found its port taken three times; its log:\n{}",
            server.log_tail()
        );
    }

    /// `redis://127.0.0.1:PORT` (the [`RedisConfig::bind`] address instead
    /// of 127.0.0.1 if it has one), or `rediss://` under TLS; no user in it.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.config.tls { "rediss" } else { "redis" };
        let host = self
            .config
            .bind
            .map_or_else(|| "127.0.0.1".to_owned(), |ip| ip.to_string());
        format!("{scheme}://{host}:{}", self.port)
    }

    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    #[must_use]
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Its temp dir: `redis.conf`, `redis.log`, the RDB file and the AOF
    /// directory (and the certificates of a TLS server).
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The certificates of a TLS server.
    #[must_use]
    pub fn pki(&self) -> &Pki {
        self.pki.as_ref().expect("a TLS server")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The last 40 lines of its log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `redis.conf`, written again at each start: the same settings, but a
    /// promoted replica is a replica no more.
    fn conf(&self) -> String {
        let dir = self.dir.path().display();
        // This crate's own client comes by 127.0.0.1 whatever else it binds.
        let (bind, protected) = match self.config.bind {
            Some(ip) => (format!("bind 127.0.0.1 {ip}"), "protected-mode no"),
            None => ("bind 127.0.0.1".to_owned(), "protected-mode yes"),
        };
        let mut lines = vec![
            bind,
            protected.to_owned(),
            "daemonize no".to_owned(),
            format!("dir \"{dir}\""),
            format!("logfile \"{dir}/redis.log\""),
            "dbfilename dump.rdb".to_owned(),
            "appendfilename appendonly.aof".to_owned(),
            "appenddirname appendonlydir".to_owned(),
            // DEBUG SLEEP: a server that stalls.
            "enable-debug-command local".to_owned(),
            // A replica's first sync at once, not after Redis's 5 s.
            "repl-diskless-sync-delay 0".to_owned(),
            // No RDB snapshots: what survives a crash is the AOF's alone.
            "save \"\"".to_owned(),
        ];
        let durability: &[&str] = match self.config.durability {
            Durability::Always => &["appendonly yes", "appendfsync always"],
            Durability::EverySec => &["appendonly yes", "appendfsync everysec"],
            Durability::None => &["appendonly no"],
        };
        lines.extend(durability.iter().map(|&l| l.to_owned()));
        match &self.pki {
            Some(pki) => lines.extend([
                "port 0".to_owned(),
                format!("tls-port {}", self.port),
                format!("tls-cert-file \"{}\"", pki.server_cert().display()),
                format!("tls-key-file \"{}\"", pki.server_key().display()),
                format!("tls-ca-cert-file \"{}\"", pki.ca().display()),
                "tls-auth-clients no".to_owned(),
            ]),
            None => lines.push(format!("port {}", self.port)),
        }
        if self.config.acl {
            lines.push(format!("user default on >{ADMIN_PASSWORD} ~* &* +@all"));
            lines.push(format!("user {USER} on \">{PASSWORD}\" ~{GRANTED}* &* +@all"));
        }
        if let Some(primary) = self.primary {
            lines.push(format!("replicaof 127.0.0.1 {primary}"));
            if self.config.acl {
                lines.push(format!("masterauth {ADMIN_PASSWORD}"));
            }
        }
        lines.join("\n") + "\n"
    }

    /// Start `redis-server redis.conf` and wait until it answers PING;
    /// false when it found its port taken.
    #[allow(
        clippy::disallowed_methods,
        reason = "a throwaway test server's configuration needs no atomic write"
    )]
    fn spawn(&mut self) -> bool {
        let conf = self.dir.path().join("redis.conf");
        std::fs::write(&conf, self.conf()).expect("write redis.conf");
        // Its output too (what it says before its log is open), appended.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("redis log file");
        let child = Command::new("redis-server")
            .arg(&conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("redis log file"))
            .stderr(log)
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if matches!(self.command(&["PING"]), Ok(Reply::Status(s)) if s == "PONG") {
                return true;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                let log = self.log_tail();
                if log.contains("Address already in use") {
                    return false;
                }
                panic!(
                    "redis-server on {} exited ({status}) before it answered; its log:\n{log}",
                    self.url()
                );
            }
            if Instant::now() >= deadline {
                self.stop();
                panic!(
                    "redis-server on {} did not answer PING within {} s; its log:\n{}",
                    self.url(),
                    START_LIMIT.as_secs(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Send `signal` by pid, again every 200 ms, until it is reaped or
    /// `wait` has passed: Redis refuses a SIGTERM while it writes its first
    /// AOF (a replica just synced, a server just started) and forgets it.
    fn signal(&mut self, signal: Signal, wait: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let pid = rustix::process::Pid::from_child(child);
        let deadline = Instant::now() + wait;
        loop {
            let _ = rustix::process::kill_process(pid, signal);
            let slice = Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now()));
            if crate::wait::wait_until(slice, || matches!(child.try_wait(), Ok(Some(_)))).is_some() {
                self.child = None;
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// kill -9, as a crash: what was not fsynced is lost.
    ///
    /// # Panics
    /// When it survives SIGKILL for 10 s.
    pub fn kill9(&mut self) {
        assert!(
            self.signal(Signal::KILL, Duration::from_secs(10)),
            "redis-server survived SIGKILL"
        );
    }

    /// Stop it cleanly (SIGTERM; SIGKILL after 10 s); also on drop.
    pub fn stop(&mut self) {
        if !self.signal(Signal::TERM, Duration::from_secs(10)) {
            self.signal(Signal::KILL, Duration::from_secs(10));
        }
    }

    /// Start it again (stopped cleanly first if it runs) on the same
    /// directory, port and configuration: it loads its AOF, if it has one.
    ///
    /// # Panics
    /// When it does not answer again (its port taken meanwhile, too).
    pub fn restart(&mut self) {
        self.restart_after(std::time::Duration::ZERO);
    }

    /// Stop the server, leave it down for `down`, start it again on the
    /// same port (an outage a client must notice).
    ///
    /// # Panics
    /// As [`RedisServer::restart`].
    pub fn restart_after(&mut self, down: std::time::Duration) {
        self.stop();
        std::thread::sleep(down);
        assert!(
            self.spawn(),
            "redis-server's port {} was taken while it was down",
            self.port
        );
    }

    /// `REPLICAOF NO ONE`: a replica becomes a primary (and stays one on
    /// restart).
    ///
    /// # Panics
    /// When the server refuses.
    pub fn promote(&mut self) {
        let reply = self.command(&["REPLICAOF", "NO", "ONE"]);
        assert_eq!(
            reply,
            Ok(Reply::Status("OK".to_owned())),
            "REPLICAOF NO ONE on {}",
            self.url()
        );
        self.primary = None;
    }

    /// Wait up to `limit` until this replica's link to `primary` is up and
    /// it has all the primary sent (`INFO replication`: `master_link_status:up`,
    /// its offset equal to the primary's).
    ///
    /// # Panics
    /// When it is not in sync by then, with both servers' `INFO replication`.
    pub fn wait_in_sync(&self, primary: &RedisServer, limit: Duration) {
        let info = |server: &RedisServer| match server.command(&["INFO", "replication"]) {
            Ok(Reply::Bulk(text)) => text,
            other => format!("{other:?}"),
        };
        let field = |text: &str, name: &str| -> Option<String> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(|v| v.trim().to_owned()))
        };
        let synced = crate::wait::wait_until(limit, || {
            let (mine, theirs) = (info(self), info(primary));
            field(&mine, "master_link_status").as_deref() == Some("up")
                && field(&mine, "slave_repl_offset").is_some()
                && field(&mine, "slave_repl_offset") == field(&theirs, "master_repl_offset")
        });
        assert!(
            synced.is_some(),
            "replica {} not in sync with {} after {limit:?}:\n{}\nprimary:\n{}",
            self.url(),
            primary.url(),
            info(self),
            info(primary)
        );
    }

    /// One command on a new connection (as the default user, under ACL):
    /// its reply, or an error reply (`NOPERM ...`) or I/O failure as text.
    ///
    /// # Errors
    /// When the server refuses the command, or cannot be reached.
    pub fn command(&self, args: &[&str]) -> Result<Reply, String> {
        self.connect()?.command(args)
    }

    /// One command as `user` with `password`, as [`RedisServer::command`].
    ///
    /// # Errors
    /// As [`RedisServer::command`], and when AUTH is refused.
    pub fn command_as(&self, user: &str, password: &str, args: &[&str]) -> Result<Reply, String> {
        self.connect_as(Some((user, password)))?.command(args)
    }

    /// A connection for several commands (WAIT counts the writes of its
    /// own connection), authenticated as the default user under ACL.
    ///
    /// # Errors
    /// When it cannot connect or authenticate.
    pub fn connect(&self) -> Result<Connection, String> {
        self.connect_as(self.config.acl.then_some(("default", ADMIN_PASSWORD)))
    }

    /// A connection authenticated as `auth` (user and password), or not.
    ///
    /// # Errors
    /// When it cannot connect or authenticate.
    pub fn connect_as(&self, auth: Option<(&str, &str)>) -> Result<Connection, String> {
        let mut connection = match &self.pki {
            None => Connection::plain(self.port),
            Some(pki) => Connection::tls(self.port, &pki.ca()),
        }?;
        if let Some((user, password)) = auth {
            connection.command(&["AUTH", user, password])?;
        }
        Ok(connection)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A key prefix no other test (nor another run) uses (the store's URL
/// takes letters, digits, `-`, `_` and `.`).
#[must_use]
pub fn unique_prefix(group: &str, test: &str) -> String {
    crate::unique_name(group, test)
}

/// One durable server shared by every test of a binary (each test under a
/// [`unique_prefix`]). Statics are never dropped, so a watchdog process
/// stops it by pid and removes its directory once the binary has exited.
#[must_use]
pub fn shared() -> &'static RedisServer {
    static SERVER: std::sync::OnceLock<RedisServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        let server = RedisServer::start();
        let pid = server.pid().expect("running");
        let dir = server.dir.path().display().to_string();
        crate::process::after_exit(&format!(
            "kill -TERM {pid} 2>/dev/null; sleep 2; kill -KILL {pid} 2>/dev/null; rm -rf '{dir}'"
        ));
        server
    })
}
