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
//! Without PostgreSQL installed the tests are skipped with a loud message,
//! unless `CI=true`, where that is a failure.

#![allow(dead_code, reason = "each test binary uses a part of the harness")]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug)]
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    durable: bool,
    tls: bool,
}

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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port on 127.0.0.1")
        .port()
}

/// Without PostgreSQL: fail under CI, otherwise skip every test of this
/// binary, loudly.
fn missing() -> ! {
    let message = "no PostgreSQL server binaries found (/usr/lib/postgresql/*/bin/initdb); \
                   install them with `apt-get install postgresql`";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: {message}");
    let _ = writeln!(
        std::io::stderr().lock(),
        "\n\nSKIP: every PostgreSQL test of {}: {message}\n",
        std::env::args().next().unwrap_or_default()
    );
    std::process::exit(0);
}

impl Server {
    /// The server shared by the tests of this binary (`fsync=off`: for
    /// tests that do not restart it).
    pub fn shared() -> &'static Server {
        static SHARED: OnceLock<Server> = OnceLock::new();
        SHARED.get_or_init(|| Server::start(false))
    }

    /// Start a new server; `durable` keeps fsync on (restart tests).
    pub fn start(durable: bool) -> Server {
        Self::start_with(durable, false)
    }

    /// Start a new server with `ssl=on` and a certificate for 127.0.0.1
    /// and localhost, signed by a CA made for it ([`Server::ca_cert`]).
    /// Needs the `openssl` command.
    pub fn start_tls() -> Server {
        Self::start_with(false, true)
    }

    fn start_with(durable: bool, tls: bool) -> Server {
        static N: AtomicU32 = AtomicU32::new(0);
        let Some(bin) = find_bin() else { missing() };
        let dir = std::env::temp_dir().join(format!(
            "leasehold-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir));
        }
        let mut server = Server {
            bin,
            dir,
            port: 0,
            as_postgres,
            durable,
            tls,
        };
        if tls {
            server.make_certificates();
        }
        run(server
            .pg("initdb")
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "-D"])
            .arg(server.data()));
        // A port found free may be taken before the server binds it: retry.
        for _ in 0..5 {
            server.port = free_port();
            if server.try_start() {
                server.watch();
                return server;
            }
        }
        panic!("PostgreSQL did not start; see {}", server.dir.join("log").display());
    }

    /// The CA certificate that signed a TLS server's certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a throwaway test fixture needs no atomic write"
    )]
    fn make_certificates(&self) {
        let d = &self.dir;
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the certificate extensions");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        for args in [
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=leasehold test CA",
                ],
            ]
            .concat(),
            &[
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
            ]
            .concat(),
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ][..]
                .to_vec(),
        ] {
            run(Command::new("openssl").args(args).current_dir(d));
        }
        if self.as_postgres {
            run(Command::new("chown")
                .arg("postgres:postgres")
                .arg(d.join("server.key"))
                .arg(d.join("server.crt")));
        }
        run(Command::new("chmod").arg("600").arg(d.join("server.key")));
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
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync={} -c max_connections=200{}",
                self.port,
                self.dir.display(),
                if self.durable { "on" } else { "off" },
                if self.tls {
                    format!(
                        " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
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
        // Run in the background of a shell that exits at once (waited for
        // below), so the watchdog outlives this process.
        let stop = format!(
            "(while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {runuser}'{pg_ctl}' -D '{data}' -m fast -w stop; rm -rf '{dir}') >/dev/null 2>&1 &",
            pid = std::process::id(),
            runuser = if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &stop])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("start the server's watchdog");
    }

    /// Stop the server at once, as a crash would (`-m immediate`: no
    /// checkpoint, clients cut off).
    pub fn crash(&self) {
        run(self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"]));
    }

    /// Start it again on the same port (crash recovery runs first).
    pub fn restart(&self) {
        assert!(
            self.try_start(),
            "PostgreSQL did not come back; see {}",
            self.dir.join("log").display()
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for the schema `schema` of database `postgres`.
    pub fn url(&self, schema: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?schema={schema}&connect_timeout=5",
            self.port
        )
    }

    /// A plain connection to database `postgres` as the superuser.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(
            &format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.port),
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
    pub fn bin(&self) -> &Path {
        &self.bin
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
