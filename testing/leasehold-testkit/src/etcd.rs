//! A throwaway etcd for tests: a single node on 127.0.0.1 free ports with a
//! data directory in a temp dir, stopped by its pid (TERM, then KILL).
//! Plain by default; [`Security`] asks for TLS with certificates made at
//! test time ([`pki`](crate::pki)), client certificates, and etcd's users
//! and roles. [`EtcdCluster`]: several members, each as above, on the
//! addresses the test gives (127.0.0.1, or the private addresses of a test
//! network, a member started inside a network namespace through a command
//! prefix such as `ip netns exec NS`: see [`netns`](crate::netns)).
//!
//! A server is a process: a test reaches it by [`EtcdServer::endpoint`]
//! (its store's client is the test's own to open).
//!
//! Without `etcd` and `etcdctl` on PATH (or with `etcd` in
//! `LEASEHOLD_TEST_HIDE`), starting a server ends the test as one that
//! cannot run here: the runner reports it as ignored with the reason, or as
//! a failure under `CI=true` (`.ci/run` installs both).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::pki::Pki;
use crate::process::succeed;

/// How a test server is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Security {
    /// Plain HTTP, no authentication.
    #[default]
    Plain,
    /// TLS with a certificate signed by the test CA, and only clients
    /// presenting a certificate that CA signed are let in
    /// (`--client-cert-auth --trusted-ca-file`); no etcd users.
    MutualTls,
    /// TLS (the server's certificate only) and etcd authentication on:
    /// user `root`, and user [`USER`] (password [`PASSWORD`]) whose role
    /// may read and write the keys under [`GRANTED`] only.
    TlsAndPassword,
}

/// The etcd user of [`Security::TlsAndPassword`].
pub const USER: &str = "leasehold";
/// Its password: a space and a trailing newline in its file test that only
/// the newline is dropped.
pub const PASSWORD: &str = "correct horse";
/// The key prefix [`USER`] may read and write.
pub const GRANTED: &str = "/granted/";
const ROOT_PASSWORD: &str = "root-secret";

/// Go on only where an etcd server can be started: `etcd` and `etcdctl`
/// on PATH, and `etcd` not hidden (`LEASEHOLD_TEST_HIDE`).
pub fn need_etcd() {
    crate::need_program("etcd", "etcd-server");
    crate::need_program("etcdctl", "etcd-client");
}

/// A key prefix no other test (nor another run) uses: `/GROUP/TEST-PID-N`.
pub fn unique_prefix(group: &str, test: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "/{group}/{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One etcd process and its data directory.
#[derive(Debug)]
pub struct EtcdServer {
    /// The member's name in its cluster.
    name: String,
    /// The address it listens on (clients and peers).
    host: String,
    pub client_port: u16,
    peer_port: u16,
    /// `--initial-cluster` (`NAME=PEER-URL,...`) and its token.
    initial_cluster: String,
    cluster_token: String,
    /// What the `etcd` command runs under (e.g. `ip netns exec NS`).
    wrapper: Vec<String>,
    data: PathBuf,
    child: Option<Child>,
    security: Security,
    /// The certificates of a TLS server.
    pki: Option<Pki>,
    /// Extra command-line flags of the server.
    flags: Vec<String>,
    // Removed after the server stopped.
    dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Start a new single-node cluster and wait until it is healthy.
    #[must_use]
    pub fn start() -> Self {
        Self::start_with(Security::Plain, &[])
    }

    /// Start a new single-node cluster secured as asked, with extra server
    /// `flags`, and wait until it is healthy (and its users are made).
    #[must_use]
    pub fn start_with(security: Security, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        let pki = (security != Security::Plain).then(|| Pki::make(dir.path(), USER));
        let mut server = Self::member("t", "127.0.0.1", &[], dir);
        server.initial_cluster = format!("t={}", server.peer_url());
        server.security = security;
        server.pki = pki;
        server.flags = flags.iter().map(|&f| f.to_owned()).collect();
        server.spawn();
        if security == Security::TlsAndPassword {
            server.add_users();
        }
        server
    }

    /// A plain member not started yet (its cluster is set by the caller).
    fn member(name: &str, host: &str, wrapper: &[&str], dir: tempfile::TempDir) -> Self {
        need_etcd();
        Self {
            name: name.to_owned(),
            host: host.to_owned(),
            client_port: crate::port::free(),
            peer_port: crate::port::free(),
            initial_cluster: String::new(),
            cluster_token: format!("leasehold-test-{}", std::process::id()),
            wrapper: wrapper.iter().map(|&w| w.to_owned()).collect(),
            data: dir.path().join("data"),
            child: None,
            security: Security::Plain,
            pki: None,
            flags: Vec::new(),
            dir,
        }
    }

    fn peer_url(&self) -> String {
        format!("http://{}:{}", self.host, self.peer_port)
    }

    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.client_port)
    }

    /// The server's own count of gRPC calls of `method` (`Txn`, `Range`,
    /// `Watch`, ...) in its counter `metric` (`grpc_server_started_total`,
    /// `grpc_server_handled_total`: summed over its codes), from its
    /// /metrics on the client port (a plain server only). What a test
    /// counts there is what the server saw, whoever's code sent it.
    ///
    /// # Panics
    /// When the metrics cannot be read, or name no such method.
    #[must_use]
    pub fn grpc_count(&self, metric: &str, method: &str) -> u64 {
        use std::io::{Read as _, Write as _};
        let mut conn = std::net::TcpStream::connect(self.endpoint()).expect("connect to etcd's metrics");
        conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
            .expect("ask etcd for its metrics");
        let mut body = String::new();
        conn.read_to_string(&mut body).expect("read etcd's metrics");
        let method = format!("grpc_method=\"{method}\"");
        let counts: Vec<u64> = body
            .lines()
            .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&method))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(!counts.is_empty(), "no {metric} for {method} in etcd's metrics");
        counts.iter().sum()
    }

    /// The certificates of a TLS server.
    #[must_use]
    pub fn pki(&self) -> &Pki {
        self.pki.as_ref().expect("a TLS server")
    }

    /// `etcdctl` on this server, with the test CA's client certificate on
    /// a TLS server (and no user: set up users before `auth enable`).
    #[must_use]
    pub fn etcdctl(&self) -> Command {
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint(), "--command-timeout=5s"]);
        if let Some(pki) = &self.pki {
            c.arg("--cacert").arg(pki.ca());
            c.arg("--cert").arg(pki.client_cert());
            c.arg("--key").arg(pki.client_key());
        }
        c
    }

    /// Users and roles, then authentication on (etcd refuses to turn it
    /// on without a `root` user holding the `root` role).
    fn add_users(&self) {
        let steps: [&[&str]; 7] = [
            &[
                "user",
                "add",
                "root",
                "--interactive=false",
                "--new-user-password",
                ROOT_PASSWORD,
            ],
            &["user", "grant-role", "root", "root"],
            &["role", "add", USER],
            &["role", "grant-permission", USER, "--prefix=true", "readwrite", GRANTED],
            &[
                "user",
                "add",
                USER,
                "--interactive=false",
                "--new-user-password",
                PASSWORD,
            ],
            &["user", "grant-role", USER, USER],
            &["auth", "enable"],
        ];
        for args in steps {
            succeed(self.etcdctl().args(args));
        }
    }

    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) {
        self.launch();
        self.wait_healthy();
    }

    /// Start the process, without waiting: a cluster's member is healthy
    /// only once a majority of its members runs.
    fn launch(&mut self) {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://{}:{}", self.host, self.client_port);
        let peer = self.peer_url();
        // Appended: a restarted member's log follows its first life's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))
            .expect("etcd log file");
        let mut etcd = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg("etcd");
                c
            }
            None => Command::new("etcd"),
        };
        if let Some(pki) = &self.pki {
            etcd.arg("--cert-file").arg(pki.server_cert());
            etcd.arg("--key-file").arg(pki.server_key());
            if self.security == Security::MutualTls {
                etcd.arg("--trusted-ca-file").arg(pki.ca()).arg("--client-cert-auth");
            }
        }
        let child = etcd
            .args(&self.flags)
            .args(["--name", &self.name, "--data-dir"])
            .arg(&self.data)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            // Read on the first start only (a restart finds its data).
            .args([
                "--initial-cluster",
                &self.initial_cluster,
                "--initial-cluster-token",
                &self.cluster_token,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .etcdctl()
                .args(["--command-timeout=2s", "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            let log = std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "etcd on {} not healthy after 30s; its log:\n{log}",
                self.endpoint()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Send `signal` to the server by its pid, then reap it.
    fn signal(&mut self, signal: rustix::process::Signal, wait: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let pid = rustix::process::Pid::from_child(child);
        let _ = rustix::process::kill_process(pid, signal);
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                self.child = None;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// kill -9, as a crash.
    pub fn kill9(&mut self) {
        assert!(
            self.signal(rustix::process::Signal::KILL, Duration::from_secs(10)),
            "etcd survived SIGKILL"
        );
    }

    /// Save a snapshot of the cluster to `path` (`etcdctl snapshot save`).
    pub fn snapshot(&self, path: &Path) {
        succeed(self.etcdctl().args(["snapshot", "save"]).arg(path));
    }

    /// Stop the server, replace its data with the snapshot at `path`
    /// (`etcdctl snapshot restore`, as an operator restoring a backup), and
    /// start it again on the same ports.
    pub fn restore(&mut self, path: &Path) {
        self.kill9();
        std::fs::remove_dir_all(&self.data).expect("remove the lost data");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        succeed(
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(path)
                .arg("--data-dir")
                .arg(&self.data)
                .args(["--name", "t", "--initial-cluster", &format!("t={peer}")])
                .args(["--initial-advertise-peer-urls", &peer]),
        );
        self.spawn();
    }

    /// Start again on the same data directory and ports.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running etcd");
        self.spawn();
    }

    /// Stop it cleanly (SIGTERM), to be restarted.
    pub fn terminate(&mut self) {
        assert!(
            self.signal(rustix::process::Signal::TERM, Duration::from_secs(10)),
            "etcd did not stop within 10 s of SIGTERM"
        );
    }

    #[must_use]
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Pause / resume the whole server (a frozen cluster).
    pub fn stop(&mut self) {
        self.signal(rustix::process::Signal::STOP, Duration::ZERO);
    }

    pub fn cont(&mut self) {
        self.signal(rustix::process::Signal::CONT, Duration::ZERO);
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if !self.signal(rustix::process::Signal::TERM, Duration::from_secs(5)) {
            self.signal(rustix::process::Signal::KILL, Duration::from_secs(5));
        }
    }
}

/// One server shared by every test of a binary. Statics are never dropped,
/// so a watchdog process stops it (TERM, then KILL, by its pid) and removes
/// its directory once this test binary has exited.
#[must_use]
pub fn shared() -> &'static EtcdServer {
    shared_with(Security::Plain)
}

/// One server of each [`Security`] shared by every test of a binary, as
/// [`shared`].
pub fn shared_with(security: Security) -> &'static EtcdServer {
    static SERVERS: [OnceLock<EtcdServer>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    SERVERS[security as usize].get_or_init(|| {
        let server = EtcdServer::start_with(security, &[]);
        let etcd = server.pid().expect("running");
        // The temp dir too: its TempDir is never dropped either, and each
        // etcd data dir holds a 64 MB preallocated WAL.
        let dir = server.dir.path().display().to_string();
        crate::process::after_exit(&format!(
            "kill -TERM {etcd} 2>/dev/null; sleep 3; kill -KILL {etcd} 2>/dev/null; rm -rf '{dir}'"
        ));
        server
    })
}

/// Several etcd members forming one cluster (see the module docs); each is
/// stopped by its pid and its directory removed when the cluster is dropped.
#[derive(Debug)]
pub struct EtcdCluster {
    pub members: Vec<EtcdServer>,
}

impl EtcdCluster {
    /// A new plain cluster of one member per `(address, command prefix)`,
    /// once every member answers healthy.
    pub fn start(placement: &[(&str, &[&str])]) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let token = format!(
            "leasehold-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut members: Vec<EtcdServer> = placement
            .iter()
            .enumerate()
            .map(|(i, (host, wrapper))| {
                EtcdServer::member(
                    &format!("m{i}"),
                    host,
                    wrapper,
                    tempfile::tempdir().expect("temp dir for etcd"),
                )
            })
            .collect();
        let initial: Vec<String> = members.iter().map(|m| format!("{}={}", m.name, m.peer_url())).collect();
        for m in &mut members {
            m.initial_cluster = initial.join(",");
            m.cluster_token.clone_from(&token);
            m.launch();
        }
        for m in &members {
            m.wait_healthy();
        }
        Self { members }
    }

    /// Every member's `HOST:PORT`, comma-separated, as an `etcd://` URL lists them.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(EtcdServer::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that is the Raft leader, as the running
    /// members see it (`None` during an election).
    #[must_use]
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            if !m.running() {
                return false;
            }
            let Ok(out) = m
                .etcdctl()
                .args(["--command-timeout=2s", "endpoint", "status", "-w", "json"])
                .output()
            else {
                return false;
            };
            let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let status = &status[0]["Status"];
            status["header"]["member_id"]
                .as_u64()
                .is_some_and(|id| Some(id) == status["leader"].as_u64())
        })
    }

    /// Wait (up to 30 s) until some member is the leader; its index.
    #[allow(
        clippy::must_use_candidate,
        reason = "waiting for an elected leader is a use in itself"
    )]
    pub fn wait_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = self.leader() {
                return i;
            }
            assert!(Instant::now() < deadline, "no etcd leader elected within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
