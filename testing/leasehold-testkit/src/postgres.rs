//! A throwaway PostgreSQL for tests: `initdb` + `pg_ctl` from the Debian
//! packages (`/usr/lib/postgresql/*/bin`), on 127.0.0.1, on a free port, in
//! a temporary directory, with its socket there too — never the system's
//! instance. As root the server runs as the `postgres` user (`initdb`
//! refuses root), through `runuser -u postgres --`.
//!
//! Each test binary starts its own servers. A watchdog process started with
//! each server stops it (`pg_ctl stop -m fast`, which acts on that data
//! directory's postmaster only) and removes the directory once the test
//! binary has exited, however it exited.
//!
//! Without PostgreSQL installed (or with `postgres` in
//! `LEASEHOLD_TEST_HIDE`), starting a server ends the test as one that
//! cannot run here: the runner reports it as ignored with the reason, or as
//! a failure under `CI=true`.
//!
//! [`Server::start_on`] listens on another private address of the test
//! instead (a test network's, for clients in a network namespace: see
//! [`netns`](crate::netns)).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::pki::Pki;
use crate::process::succeed;

/// The role of a TLS server that logs in with its client certificate (the
/// certificate's common name).
pub const CERT_USER: &str = "leasehold";
/// A role of a TLS server that logs in with a client certificate, which no
/// test certificate names.
pub const OTHER_CERT_USER: &str = "not_in_any_certificate";
/// The role of a TLS server that logs in with [`PASSWORD`].
pub const PASSWORD_USER: &str = "with_password";
pub const PASSWORD: &str = "correct horse";

#[derive(Debug)]
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    /// The one address it listens on.
    host: String,
    port: u16,
    as_postgres: bool,
    durable: bool,
    tls: bool,
    /// More `-c` settings for the server (replication).
    settings: String,
}

/// The standby's name in `synchronous_standby_names` of its primary.
pub const STANDBY_NAME: &str = "standby1";

/// The newest `/usr/lib/postgresql/VERSION/bin` with an `initdb`.
fn find_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

const MISSING: &str =
    "no PostgreSQL server binaries at /usr/lib/postgresql/*/bin; install the Debian package postgresql";

impl Server {
    /// The server shared by the tests of this binary (`fsync=off`: for
    /// tests that do not restart it).
    pub fn shared() -> &'static Server {
        static SHARED: OnceLock<Server> = OnceLock::new();
        SHARED.get_or_init(|| Server::start(false))
    }

    /// Start a new server; `durable` keeps fsync on (restart tests).
    #[must_use]
    pub fn start(durable: bool) -> Server {
        Self::start_with(durable, false, "127.0.0.1", None)
    }

    /// Start a new server (`fsync=off`) listening on `host` only, letting
    /// in (`trust`, as postgres) the clients of `clients` (CIDR) as well.
    #[must_use]
    pub fn start_on(host: &str, clients: &str) -> Server {
        Self::start_with(false, false, host, Some(clients))
    }

    /// Start a new server with `ssl=on` and a certificate for 127.0.0.1
    /// and localhost, signed by a CA made for it ([`Server::pki`]), which
    /// it also trusts for client certificates. Role [`CERT_USER`] logs in
    /// over TLS with a client certificate that CA signed, and
    /// [`PASSWORD_USER`] over TLS with [`PASSWORD`]; `postgres` needs
    /// nothing. Needs the `openssl` command.
    #[must_use]
    pub fn start_tls() -> Server {
        Self::start_with(false, true, "127.0.0.1", None)
    }

    fn start_with(durable: bool, tls: bool, host: &str, clients: Option<&str>) -> Server {
        static N: AtomicU32 = AtomicU32::new(0);
        if crate::hidden("postgres") {
            crate::unavailable(
                "no PostgreSQL server binaries (hidden by LEASEHOLD_TEST_HIDE); install the Debian package postgresql",
            );
        }
        let Some(bin) = find_bin() else {
            crate::unavailable(MISSING)
        };
        let dir = std::env::temp_dir().join(format!(
            "leasehold-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        // Whoever this process is (LEASEHOLD_TEST_HIDE=root hides root from
        // the tests, not from initdb, which refuses it).
        let as_postgres = rustix::process::geteuid().is_root();
        if as_postgres {
            succeed(Command::new("chown").arg("postgres:postgres").arg(&dir));
        }
        let mut server = Server {
            bin,
            dir,
            host: host.to_owned(),
            port: 0,
            as_postgres,
            durable,
            tls,
            settings: String::new(),
        };
        if tls {
            server.make_certificates();
        }
        succeed(
            server
                .pg("initdb")
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "-D"])
                .arg(server.data()),
        );
        if tls {
            server.authenticate_over_tls();
        }
        if let Some(clients) = clients {
            server.let_in(clients);
        }
        // A port found free may be taken before the server binds it: retry.
        for _ in 0..5 {
            server.port = crate::port::free();
            if server.try_start() {
                server.watch();
                if tls {
                    server.add_roles();
                }
                return server;
            }
        }
        panic!("PostgreSQL did not start; see {}", server.dir.join("log").display());
    }

    /// A durable primary whose commits wait for a synchronous streaming
    /// standby ([`STANDBY_NAME`]), and that standby: a base backup of the
    /// primary (`pg_basebackup -R`), streaming from it on its own port.
    /// Returns once the primary reports the standby as `sync`.
    #[must_use]
    pub fn start_replicated() -> (Server, Server) {
        let primary = Self::start(true);
        let mut client = primary.client();
        // One statement each: ALTER SYSTEM refuses a transaction block.
        for sql in [
            format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            client
                .batch_execute(&sql)
                .expect("make the primary's commits synchronous");
        }
        let mut standby = Server {
            bin: primary.bin.clone(),
            dir: std::env::temp_dir().join(format!(
                "{}-standby",
                primary.dir.file_name().unwrap().to_string_lossy()
            )),
            host: primary.host.clone(),
            port: 0,
            as_postgres: primary.as_postgres,
            durable: true,
            tls: false,
            settings: " -c hot_standby=on".into(),
        };
        let _ = std::fs::remove_dir_all(&standby.dir);
        std::fs::create_dir_all(&standby.dir).expect("create the standby's directory");
        if standby.as_postgres {
            succeed(Command::new("chown").arg("postgres:postgres").arg(&standby.dir));
        }
        succeed(
            standby
                .pg("pg_basebackup")
                .args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", "postgres"])
                .args(["-X", "stream", "-R", "--no-sync", "-D"])
                .arg(standby.data()),
        );
        // -R wrote primary_conninfo; name the standby for
        // synchronous_standby_names (the later line wins). Once promoted it
        // has no standby of its own, so it must not wait for one (the copied
        // setting would block every commit: safe, but not available).
        let conninfo = format!(
            "\nprimary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}'\n\
             synchronous_standby_names = ''\n",
            primary.port
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(standby.data().join("postgresql.auto.conf"))
            .and_then(|mut f| f.write_all(conninfo.as_bytes()))
            .expect("name the standby in postgresql.auto.conf");
        for _ in 0..5 {
            standby.port = crate::port::free();
            if standby.try_start() {
                standby.watch();
                break;
            }
        }
        assert!(
            standby.port != 0 && standby.is_up(),
            "the standby did not start; see {}",
            standby.dir.join("log").display()
        );
        let mut primary_client = primary.client();
        let synced = (0..200).any(|_| {
            let sync = primary_client
                .query_opt(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync'",
                    &[&STANDBY_NAME],
                )
                .expect("read pg_stat_replication")
                .is_some();
            if !sync {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            sync
        });
        assert!(
            synced,
            "the standby never became synchronous; see {}",
            standby.dir.join("log").display()
        );
        (primary, standby)
    }

    fn is_up(&self) -> bool {
        self.pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("status")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Kill the server's postmaster with SIGKILL, as a machine that dies
    /// would (its backends notice and exit).
    pub fn kill(&self) {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).expect("read postmaster.pid");
        let pid = pid
            .lines()
            .next()
            .expect("postmaster.pid names the pid")
            .trim()
            .to_owned();
        succeed(Command::new("kill").args(["-KILL", &pid]));
    }

    /// Promote a standby to a primary, and wait until it is one.
    pub fn promote(&self) {
        succeed(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-w", "-t", "60", "promote"]),
        );
    }

    /// The certificates of a TLS server (made by `openssl` at start).
    #[must_use]
    pub fn pki(&self) -> Pki {
        assert!(self.tls, "not a TLS server");
        Pki::from_dir(&self.dir)
    }

    /// Certificates for the server, readable by it, and roles for the
    /// tests of client authentication (see [`Server::start_tls`]).
    fn make_certificates(&self) {
        let pki = Pki::make(&self.dir, CERT_USER);
        if self.as_postgres {
            succeed(
                Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(pki.server_key())
                    .arg(pki.server_cert())
                    .arg(pki.ca()),
            );
        }
    }

    /// Client authentication over TLS, ahead of initdb's `trust` lines
    /// (the first matching line of `pg_hba.conf` decides): [`CERT_USER`] by
    /// certificate only, [`PASSWORD_USER`] by password only, neither
    /// without TLS.
    #[allow(
        clippy::disallowed_methods,
        reason = "a throwaway test fixture needs no atomic write"
    )]
    fn authenticate_over_tls(&self) {
        let hba = self.data().join("pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        let ours = format!(
            "hostssl all {CERT_USER},{OTHER_CERT_USER} 127.0.0.1/32 cert\n\
             hostssl all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n\
             host all {CERT_USER},{OTHER_CERT_USER},{PASSWORD_USER} 127.0.0.1/32 reject\n"
        );
        std::fs::write(&hba, ours + &rest).expect("write pg_hba.conf");
    }

    /// `trust` for the clients of `clients` (CIDR), after initdb's lines.
    #[allow(
        clippy::disallowed_methods,
        reason = "a throwaway test fixture needs no atomic write"
    )]
    fn let_in(&self, clients: &str) {
        let hba = self.data().join("pg_hba.conf");
        let lines = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        std::fs::write(&hba, format!("{lines}host all all {clients} trust\n")).expect("write pg_hba.conf");
    }

    /// The roles of [`Server::authenticate_over_tls`], allowed to create
    /// their schemas in database `postgres`.
    fn add_roles(&self) {
        self.client()
            .batch_execute(&format!(
                "CREATE ROLE {CERT_USER} LOGIN; CREATE ROLE {OTHER_CERT_USER} LOGIN; \
                 CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'; \
                 GRANT CREATE ON DATABASE postgres TO {CERT_USER}, {PASSWORD_USER};"
            ))
            .expect("create the test roles");
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command of the server's binaries, as the postgres user when root.
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn try_start(&self) -> bool {
        self.pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-c listen_addresses={} -p {} -k {} -c fsync={} -c max_connections=200{}{}",
                self.host,
                self.port,
                self.dir.display(),
                if self.durable { "on" } else { "off" },
                self.settings,
                if self.tls {
                    format!(
                        " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key -c ssl_ca_file={0}/ca.crt",
                        self.dir.display()
                    )
                } else {
                    String::new()
                }
            ))
            .arg("start")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stop the server once this test binary has exited.
    fn watch(&self) {
        crate::process::after_exit(&format!(
            "{runuser}'{pg_ctl}' -D '{data}' -m fast -w stop; rm -rf '{dir}'",
            runuser = if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.display(),
        ));
    }

    /// Stop the server at once, as a crash would (`-m immediate`: no
    /// checkpoint, clients cut off).
    pub fn crash(&self) {
        succeed(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"]),
        );
    }

    /// Start it again on the same port (crash recovery runs first).
    pub fn restart(&self) {
        assert!(
            self.try_start(),
            "PostgreSQL did not come back; see {}",
            self.dir.join("log").display()
        );
    }

    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for the schema `schema` of database `postgres`.
    #[must_use]
    pub fn url(&self, schema: &str) -> String {
        format!(
            "postgres://postgres@{}:{}/postgres?schema={schema}&connect_timeout=5",
            self.host, self.port
        )
    }

    /// A plain connection to database `postgres` as the superuser.
    #[must_use]
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(
            &format!("host={} port={} user=postgres dbname=postgres", self.host, self.port),
            postgres::NoTls,
        )
        .expect("connect to the test server")
    }

    /// A schema name no other test of this run uses.
    pub fn fresh_schema() -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        format!("t{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
    }

    /// A path to pgbench and friends.
    #[must_use]
    pub fn bin(&self) -> &Path {
        &self.bin
    }
}
