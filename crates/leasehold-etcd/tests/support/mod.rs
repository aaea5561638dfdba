//! A throwaway etcd for tests: a single node on 127.0.0.1 free ports with a
//! data directory in a temp dir, stopped by its pid (TERM, then KILL).
//! Plain by default; [`Security`] asks for TLS with certificates made at
//! test time (`openssl`, see `leasehold_backend_tests::pki`), client
//! certificates, and etcd's users and roles.
//!
//! Without an `etcd` binary the tests skip loudly — unless `CI=true`, where
//! a missing etcd is a failure (`.ci/run` installs it).

#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use leasehold_backend::Holder;
use leasehold_backend_tests::pki::Pki;
use leasehold_etcd::{EtcdBackend, EtcdOptions};

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

/// `Some(reason)` when tests must skip: no `etcd` binary outside CI.
/// Panics in CI, where a missing etcd must fail the run.
pub fn unavailable() -> Option<String> {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return None;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but there is no `etcd` on PATH: install the Debian package etcd-server"
    );
    Some("no `etcd` on PATH (install the Debian package etcd-server); CI=true makes this a failure".into())
}

/// Print a SKIP line that libtest does not capture.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {reason}");
}

/// Skip `test` loudly (true) when there is no etcd outside CI.
pub fn skip_without_etcd(test: &str) -> bool {
    match unavailable() {
        Some(reason) => {
            skip(test, &reason);
            true
        }
        None => false,
    }
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

/// A holder record for this test process.
pub fn holder(cmdline: &str) -> Holder {
    Holder {
        host: "etcd-test".into(),
        boot_id: "boot".into(),
        pid_ns: None,
        pid: std::process::id(),
        start_time: None,
        cmdline: cmdline.into(),
        pgid: None,
        bound: false,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port on 127.0.0.1")
        .port()
}

/// One etcd process and its data directory.
#[derive(Debug)]
pub struct EtcdServer {
    pub client_port: u16,
    peer_port: u16,
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
    pub fn start() -> Self {
        Self::start_with(Security::Plain, &[])
    }

    /// Start a new single-node cluster secured as asked, with extra server
    /// `flags`, and wait until it is healthy (and its users are made).
    pub fn start_with(security: Security, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        let pki = (security != Security::Plain).then(|| Pki::make(dir.path(), USER));
        let mut server = Self {
            client_port: free_port(),
            peer_port: free_port(),
            data: dir.path().join("data"),
            child: None,
            security,
            pki,
            flags: flags.iter().map(|&f| f.to_owned()).collect(),
            dir,
        };
        server.spawn();
        if security == Security::TlsAndPassword {
            server.add_users();
        }
        server
    }

    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// The certificates of a TLS server.
    pub fn pki(&self) -> &Pki {
        self.pki.as_ref().expect("a TLS server")
    }

    /// `etcdctl` on this server, with the test CA's client certificate on
    /// a TLS server (and no user: set up users before `auth enable`).
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
            let out = self.etcdctl().args(args).output().expect("run etcdctl");
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.data.with_extension("log")).expect("etcd log file");
        let mut etcd = Command::new("etcd");
        if let Some(pki) = &self.pki {
            etcd.arg("--cert-file").arg(pki.server_cert());
            etcd.arg("--key-file").arg(pki.server_key());
            if self.security == Security::MutualTls {
                etcd.arg("--trusted-ca-file").arg(pki.ca()).arg("--client-cert-auth");
            }
        }
        let child = etcd
            .args(&self.flags)
            .args(["--name", "t", "--data-dir"])
            .arg(&self.data)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args([
                "--initial-cluster",
                &format!("t={peer}"),
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
        self.wait_healthy();
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
        let out = self
            .etcdctl()
            .args(["snapshot", "save"])
            .arg(path)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stop the server, replace its data with the snapshot at `path`
    /// (`etcdctl snapshot restore`, as an operator restoring a backup), and
    /// start it again on the same ports.
    pub fn restore(&mut self, path: &Path) {
        self.kill9();
        std::fs::remove_dir_all(&self.data).expect("remove the lost data");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(path)
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--name", "t", "--initial-cluster", &format!("t={peer}")])
            .args(["--initial-advertise-peer-urls", &peer])
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl snapshot restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.spawn();
    }

    /// Start again on the same data directory and ports.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running etcd");
        self.spawn();
    }

    /// Pause / resume the whole server (a frozen cluster).
    pub fn stop(&mut self) {
        self.signal(rustix::process::Signal::STOP, Duration::ZERO);
    }

    pub fn cont(&mut self) {
        self.signal(rustix::process::Signal::CONT, Duration::ZERO);
    }

    /// A backend on this server under `prefix`.
    pub fn open(&self, prefix: &str) -> EtcdBackend {
        EtcdBackend::open(
            &[self.endpoint()],
            &EtcdOptions {
                prefix: prefix.to_owned(),
                ..EtcdOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("open the etcd store on {}: {e}", self.endpoint()))
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
        let me = std::process::id();
        // The temp dir too: its TempDir is never dropped either, and each
        // etcd data dir holds a 64 MB preallocated WAL.
        let dir = server.dir.path().display().to_string();
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
             kill -TERM {etcd} 2>/dev/null; sleep 3; kill -KILL {etcd} 2>/dev/null; \
             rm -rf '{dir}'; true"
        );
        #[allow(clippy::zombie_processes, reason = "the watchdog must outlive this process")]
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the etcd watchdog");
        server
    })
}
