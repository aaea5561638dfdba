//! A throwaway Firestore emulator for tests: Google's emulator (`gcloud
//! emulators firestore start`) on a 127.0.0.1 free port, with its log and
//! gcloud's configuration in a temp dir, stopped by its process group.
//!
//! The emulator is three processes — gcloud (Python), the emulator's shell
//! script, and the Java server that listens — of which only the first is
//! this crate's child: each emulator runs in a process group of its own,
//! and every signal (stop, kill, pause) goes to the whole group, so no
//! Java server outlives its test nor keeps answering while "paused".
//!
//! A test reaches it by [`FirestoreEmulator::host`] (`127.0.0.1:PORT`, what
//! `FIRESTORE_EMULATOR_HOST` says), and gets a space of its own with
//! [`unique_project`]: the emulator keeps each project apart and makes any
//! project on first use. [`FirestoreEmulator::request`] speaks its REST API
//! (plain HTTP/1.1) for a test that looks at documents behind the store.
//!
//! gcloud runs with a fresh configuration directory and without prompts,
//! update checks or usage reports: it must not ask or reach the network.
//!
//! Without `gcloud` and `java` on PATH, or gcloud without its emulator
//! component, or with `firestore` in `LEASEHOLD_TEST_HIDE`, starting an
//! emulator ends the test as one that cannot run here: ignored with the
//! reason, or a failure under `CI=true`.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::process::Signal;

/// How to get the emulator, for the reasons a test cannot run.
const INSTALL: &str = "install the Google Cloud CLI with its cloud-firestore-emulator component \
                       (the Debian package google-cloud-cli-firestore-emulator, from Google's apt repository)";

/// How long the emulator may take to answer (a JVM starting on a loaded
/// two-core machine; it takes a few seconds when idle).
const START_LIMIT: Duration = Duration::from_secs(90);

/// Go on only where a Firestore emulator can be started: `gcloud` and
/// `java` on PATH, gcloud's `cloud-firestore-emulator` component
/// installed, and `firestore` not hidden (`LEASEHOLD_TEST_HIDE`).
pub fn need_firestore() {
    if crate::hidden("firestore") {
        crate::unavailable(format!(
            "no Firestore emulator (hidden by LEASEHOLD_TEST_HIDE); {INSTALL}"
        ));
    }
    crate::need_program("gcloud", "google-cloud-cli-firestore-emulator");
    crate::need_program("java", "default-jre-headless (Java 11 or later)");
    if emulator_script().is_none() {
        crate::unavailable(format!("gcloud has no cloud-firestore-emulator component; {INSTALL}"));
    }
}

/// The emulator's start script in gcloud's installation
/// (`SDK/platform/cloud-firestore-emulator/`, beside `SDK/bin/gcloud`), if
/// the component is there — checked without running gcloud, which would
/// offer to install it.
fn emulator_script() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let gcloud = std::env::split_paths(&path)
        .map(|dir| dir.join("gcloud"))
        .find(|p| p.is_file())?;
    let sdk = std::fs::canonicalize(gcloud).ok()?.parent()?.parent()?.to_path_buf();
    let script = sdk.join("platform/cloud-firestore-emulator/cloud_firestore_emulator");
    script.is_file().then_some(script)
}

static N: AtomicU32 = AtomicU32::new(0);

/// A project id no other test (nor another run) uses, valid as a real
/// Google Cloud project id too (6 to 30 lowercase letters, digits and
/// hyphens, starting with a letter): `lh-GROUP-TEST-PID-N`, the group and
/// test cut short to fit.
pub fn unique_project(group: &str, test: &str) -> String {
    let tail = format!("-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let mut stem: String = format!("lh-{group}-{test}")
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(30usize.saturating_sub(tail.len()))
        .collect();
    while stem.ends_with('-') {
        stem.pop();
    }
    format!("{stem}{tail}")
}

/// A collection-name prefix no other test (nor another run) uses, for
/// tests that share one project: `GROUP-TEST-PID-N` (letters, digits, `-`
/// and `_` kept, anything else `-`).
#[must_use]
pub fn unique_prefix(group: &str, test: &str) -> String {
    crate::unique_name(group, test)
}

/// The REST path of `project`'s documents in its default database
/// (`/v1/projects/P/databases/(default)/documents`); add `/COLLECTION/ID`.
#[must_use]
pub fn documents(project: &str) -> String {
    format!("/v1/projects/{project}/databases/(default)/documents")
}

/// One emulator: gcloud, its children, and the temp dir of its log and
/// configuration.
#[derive(Debug)]
pub struct FirestoreEmulator {
    port: u16,
    /// gcloud, the leader of the emulator's process group.
    child: Option<Child>,
    // Removed after the emulator stopped.
    dir: tempfile::TempDir,
}

impl FirestoreEmulator {
    /// Start an emulator and wait until its REST API answers.
    ///
    /// # Panics
    /// When it does not answer within 90 s (with its log's tail), or exits.
    #[must_use]
    pub fn start() -> Self {
        need_firestore();
        let dir = tempfile::tempdir().expect("temp dir for the Firestore emulator");
        let mut emulator = Self {
            port: 0,
            child: None,
            dir,
        };
        // The free port may be taken before the emulator binds it
        // (`port::free`): a start that fails on it tries another.
        for _ in 0..3 {
            emulator.port = crate::port::free();
            emulator.launch();
            match emulator.wait_ready() {
                Ready::Yes => return emulator,
                Ready::PortTaken => emulator.end(),
            }
        }
        panic!(
            "the Firestore emulator found its port taken three times; its log:\n{}",
            emulator.log_tail()
        );
    }

    /// `127.0.0.1:PORT`: what `FIRESTORE_EMULATOR_HOST` says.
    #[must_use]
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// gcloud's pid, which is also the id of the emulator's process group.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The emulator's running processes (its process group): gcloud, the
    /// start script and the Java server while it runs; none once stopped.
    #[must_use]
    pub fn processes(&self) -> Vec<u32> {
        self.pid().map(group_members).unwrap_or_default()
    }

    /// The pid of the Java server, the process that listens.
    #[must_use]
    pub fn java_pid(&self) -> Option<u32> {
        self.processes()
            .into_iter()
            .find(|&pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "java"))
    }

    /// Its temp dir (its log, gcloud's configuration and the emulator's
    /// data), removed once it stopped.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The emulator's log (gcloud's and the server's output).
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("emulator.log")
    }

    /// A REST call (`method` `path`, an optional JSON `body`) on this
    /// emulator, waiting up to 10 s for its answer: the status and body.
    ///
    /// # Panics
    /// When the emulator does not answer.
    #[must_use]
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(&self.host(), method, path, body, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{method} {path} on the Firestore emulator at {}: {e}", self.host()))
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("Firestore emulator log file");
        let child = Command::new("gcloud")
            .args(["emulators", "firestore", "start"])
            .arg(format!("--host-port={}", self.host()))
            // A configuration of its own (where the emulator keeps its
            // data too), nothing asked, nothing fetched or reported.
            .env("CLOUDSDK_CONFIG", self.dir.path().join("gcloud"))
            .env("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")
            .env("CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK", "1")
            .env("CLOUDSDK_CORE_DISABLE_USAGE_REPORTING", "true")
            .env("CLOUDSDK_CORE_CHECK_GCE_METADATA", "false")
            // Its own process group: signals reach the Java server too.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("Firestore emulator log file"))
            .stderr(log)
            .spawn()
            .expect("start gcloud emulators firestore");
        self.child = Some(child);
    }

    /// Wait until the REST API answers a read (a missing document is an
    /// answer), or the emulator exits.
    fn wait_ready(&mut self) -> Ready {
        let deadline = Instant::now() + START_LIMIT;
        let probe = format!("{}/leasehold-testkit/ready", documents("leasehold-testkit"));
        loop {
            if let Ok((200 | 404, _)) = http(&self.host(), "GET", &probe, None, Duration::from_secs(5)) {
                return Ready::Yes;
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let log = self.log_tail();
                if log.contains("BindException") || log.contains("Address already in use") {
                    return Ready::PortTaken;
                }
                panic!(
                    "the Firestore emulator on {} exited ({status}) before it answered; its log:\n{log}",
                    self.host()
                );
            }
            if Instant::now() >= deadline {
                let log = self.log_tail();
                self.end();
                panic!(
                    "the Firestore emulator on {} did not answer within {} s; its log:\n{log}",
                    self.host(),
                    START_LIMIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last 40 lines of its log.
    #[must_use]
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Send `signal` to the emulator's process group.
    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            let group = rustix::process::Pid::from_child(child);
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }

    /// Send `signal` to the group, then wait up to `wait` until gcloud is
    /// reaped, no process of its group runs and its port is closed.
    fn stop_with(&mut self, signal: Signal, wait: Duration) -> bool {
        let Some(pid) = self.pid() else {
            return true;
        };
        let port = self.port;
        self.signal(signal);
        // A paused emulator acts on TERM only once it runs again.
        self.signal(Signal::CONT);
        let gone = crate::wait::wait_until(wait, || {
            let reaped = self.child.as_mut().is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            // And its port closed: Java's first thread shows as a zombie
            // while its other threads still exit, the socket still open.
            reaped && group_members(pid).is_empty() && TcpStream::connect(("127.0.0.1", port)).is_err()
        });
        if gone.is_some() {
            self.child = None;
        }
        gone.is_some()
    }

    /// Stop it cleanly (SIGTERM to its group, then SIGKILL after 10 s):
    /// once this returns, no process of it runs and its port is closed.
    ///
    /// # Panics
    /// When a process of it survives SIGKILL.
    pub fn terminate(&mut self) {
        if !self.stop_with(Signal::TERM, Duration::from_secs(10)) {
            self.kill();
        }
    }

    /// SIGKILL to its whole group, as a crash.
    ///
    /// # Panics
    /// When a process of it survives SIGKILL.
    pub fn kill(&mut self) {
        assert!(
            self.stop_with(Signal::KILL, Duration::from_secs(10)),
            "a process of the Firestore emulator survived SIGKILL: {:?}",
            self.processes()
        );
    }

    /// Stop it however it goes, without a panic (drop, a failed start).
    fn end(&mut self) {
        if !self.stop_with(Signal::TERM, Duration::from_secs(5)) {
            self.stop_with(Signal::KILL, Duration::from_secs(5));
        }
    }

    /// Pause the whole emulator (SIGSTOP to its group): connections are
    /// still accepted by the kernel, but nothing answers.
    pub fn pause(&self) {
        self.signal(Signal::STOP);
    }

    /// Resume a paused emulator (SIGCONT to its group).
    pub fn resume(&self) {
        self.signal(Signal::CONT);
    }
}

enum Ready {
    Yes,
    /// Another process bound the port first.
    PortTaken,
}

impl Drop for FirestoreEmulator {
    fn drop(&mut self) {
        self.end();
    }
}

/// The running processes of process group `group` (zombies do not run).
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            // `pid (comm) state ppid pgrp ...`: the fields after the name.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.first().is_some_and(|&state| state != "Z") && fields.get(2) == Some(&group.to_string().as_str())
            })
        })
        .collect()
}

/// One HTTP/1.1 request to `host` (`127.0.0.1:PORT`) on a connection of
/// its own, closed after it; waits up to `timeout` to connect and for each
/// read. The status and the body.
///
/// # Errors
/// When it cannot connect, the answer is late, or it is no HTTP answer.
pub fn http(
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let addr: SocketAddr = host
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    // Read until the answer is whole: the emulator keeps the connection
    // open despite `Connection: close`, so its end is no end of stream.
    let mut answer = Vec::new();
    let mut buf = [0; 8192];
    loop {
        if let Some(whole) = parse_answer(&answer) {
            return Ok(whole);
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the answer ended early: {:?}", String::from_utf8_lossy(&answer)),
            ));
        }
        answer.extend_from_slice(&buf[..n]);
    }
}

/// The status and body of an HTTP/1.1 answer, once it is whole: its
/// `Content-Length` read, or its last chunk; `None` until then.
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let body = &answer[end + 4..];
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    if header("transfer-encoding") == Some("chunked") {
        let mut rest = body;
        let mut out = Vec::new();
        loop {
            let line = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = String::from_utf8_lossy(&rest[..line]);
            let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                // The empty line after the last chunk (no trailers).
                return rest.get(line + 2..)?.starts_with(b"\r\n").then(|| (status, text(&out)));
            }
            let chunk = rest.get(line + 2..line + 2 + size)?;
            out.extend_from_slice(chunk);
            rest = rest.get(line + 2 + size + 2..)?;
        }
    }
    // No length (and not chunked): a 204 or 304 has no body; anything
    // else would end with the connection, which this emulator never
    // does, so it is no answer this client reads.
    let length: usize = match header("content-length") {
        Some(n) => n.parse().ok()?,
        None if matches!(status, 204 | 304) => 0,
        None => return None,
    };
    Some((status, text(body.get(..length)?)))
}

/// One emulator shared by every test of a binary (each test in its own
/// [`unique_project`]). Statics are never dropped, so a watchdog process
/// stops its process group (TERM, then KILL) and removes its directory
/// once this test binary has exited.
#[must_use]
pub fn shared() -> &'static FirestoreEmulator {
    static EMULATOR: OnceLock<FirestoreEmulator> = OnceLock::new();
    EMULATOR.get_or_init(|| {
        let emulator = FirestoreEmulator::start();
        let group = emulator.pid().expect("running");
        let dir = emulator.dir.path().display().to_string();
        // CONT after TERM: a paused emulator acts on TERM only once it runs.
        crate::process::after_exit(&format!(
            "kill -TERM -{group} 2>/dev/null; kill -CONT -{group} 2>/dev/null; sleep 3; \
             kill -KILL -{group} 2>/dev/null; rm -rf '{dir}'"
        ));
        emulator
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_are_valid_google_cloud_project_ids() {
        for (group, test) in [
            ("faults", "cron"),
            ("a-very-long-group-name", "and_an_even_longer_test_name"),
            ("", ""),
            ("Ünïcode", "x.y/z"),
        ] {
            let id = unique_project(group, test);
            assert!((6..=30).contains(&id.len()), "{id}");
            assert!(id.starts_with(|c: char| c.is_ascii_lowercase()), "{id}");
            assert!(!id.ends_with('-'), "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{id}"
            );
        }
        assert_ne!(unique_project("g", "t"), unique_project("g", "t"));
    }

    #[test]
    fn answers_chunked_or_not_are_whole_only_at_their_end() {
        let plain = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}";
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n2\r\n\":\r\n0\r\n\r\n";
        assert_eq!(parse_answer(plain), Some((404, "{}".to_owned())));
        assert_eq!(parse_answer(chunked), Some((200, "{\"a\":".to_owned())));
        for whole in [&plain[..], &chunked[..]] {
            for cut in 0..whole.len() - 1 {
                assert_eq!(parse_answer(&whole[..cut]), None, "{cut}");
            }
        }
    }
}
