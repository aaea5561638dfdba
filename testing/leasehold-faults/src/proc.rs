//! Processes: the `leasehold` binary under test, a sandbox per trial, and
//! small helpers (signals, root, the boot clock).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

/// The `leasehold` binary: `$LEASEHOLD_BIN`, else the one cargo built next
/// to the running test (`target/<profile>/leasehold`; `cargo test
/// --workspace` builds it, with failpoints).
#[must_use]
pub fn leasehold_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("LEASEHOLD_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("leasehold");
    assert!(
        bin.exists(),
        "{} is missing: run the suite with `cargo test --workspace` (which builds it) or set LEASEHOLD_BIN",
        bin.display()
    );
    bin
}

/// Arm `point` (`OP/STEP[=ACTION]`) in the `leasehold` that `cmd` runs —
/// after checking, once per test process, that the binary has failpoints
/// at all: without them it ignores `LEASEHOLD_FAILPOINT`, and a case would
/// fail on a crash that never came, far from the cause. (`cargo test
/// --workspace` builds it with them; a narrower `cargo test -p
/// leasehold-cli` rebuilds it without.)
///
/// # Panics
/// When the binary was built without the `failpoints` feature.
pub fn arm_failpoint(cmd: &mut Command, point: &str) {
    static ARMABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let armable = *ARMABLE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let probe = Command::new(leasehold_bin())
            .args(["acquire", "failpoint-probe"])
            .env(
                "LEASEHOLD_STORE",
                format!("sqlite://{}", dir.path().join("probe.db").display()),
            )
            .env("LEASEHOLD_FAILPOINT", "acquire/begin=abort")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run leasehold");
        // Armed, the point aborts it; unarmed, it acquires and exits 0.
        std::os::unix::process::ExitStatusExt::signal(&probe) == Some(rustix::process::Signal::ABORT.as_raw())
    });
    assert!(
        armable,
        "{} was built without failpoints (LEASEHOLD_FAILPOINT is ignored): build it with `cargo build -p leasehold-cli --features failpoints`, or run the suite with `cargo test --workspace`",
        leasehold_bin().display()
    );
    cmd.env("LEASEHOLD_FAILPOINT", point);
}

/// The boot clock (`CLOCK_BOOTTIME`) in nanoseconds: shared by every
/// process of the host, and it keeps counting through suspend.
#[must_use]
pub fn boot_ns() -> u64 {
    leasehold::duration_nanos(leasehold::host::boot_clock())
}

#[must_use]
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Send `sig` to `pid`, ignoring a process that is already gone.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// A trial's own directory, store and HOME.
#[derive(Debug)]
pub struct Sandbox {
    pub dir: TempDir,
    bin: PathBuf,
    /// Another store than the sandbox's SQLite file (see [`Sandbox::on_store`]).
    store: Option<(String, Vec<(String, String)>)>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    #[must_use]
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            bin: leasehold_bin(),
            store: None,
        }
    }

    /// A sandbox whose commands use the store at `url` — with `env`, what
    /// reaching it takes (`FIRESTORE_EMULATOR_HOST`) — instead of a SQLite
    /// file of their own: the holders and helpers of the SQLite cases, on a
    /// server the case started. (What reads the SQLite file itself —
    /// [`Sandbox::store_path`], [`Sandbox::last_token`],
    /// [`Sandbox::integrity`] — has nothing to read in it.)
    #[must_use]
    pub fn on_store(url: &str, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Self {
            store: Some((url.to_owned(), env)),
            ..Self::new()
        }
    }

    /// The URL of the store its commands use (`LEASEHOLD_STORE`).
    #[must_use]
    pub fn store_url(&self) -> String {
        match &self.store {
            Some((url, _)) => url.clone(),
            None => format!("sqlite://{}", self.store_path().display()),
        }
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    #[must_use]
    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    #[must_use]
    pub fn store_path(&self) -> PathBuf {
        self.file("leasehold.db")
    }

    /// `leasehold ARGS...` on this sandbox's store, in its directory.
    #[must_use]
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_via(&[], args)
    }

    /// `WRAPPER... leasehold ARGS...` (e.g. `faketime -f +1h`), as [`Sandbox::cmd`].
    #[must_use]
    pub fn cmd_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(&self.bin);
                cmd
            }
            None => Command::new(&self.bin),
        };
        cmd.args(args)
            .current_dir(self.path())
            .env("LEASEHOLD_STORE", self.store_url())
            .envs(self.store.iter().flat_map(|(_, env)| env.iter().map(|(k, v)| (k, v))))
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.file("xdg"))
            .env_remove("LEASEHOLD_LOG")
            .env_remove("LEASEHOLD_FAILPOINT")
            .stdin(Stdio::null());
        cmd
    }

    /// Run to completion: (exit code, or -signal; stdout; stderr).
    #[must_use]
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        outcome(&self.cmd(args).output().expect("run leasehold"))
    }

    /// Acquire `name` exclusively with `ttl`; the token, or `None` when held.
    #[must_use]
    pub fn try_acquire(&self, name: &str, ttl: &str) -> Option<u64> {
        let (code, out, err) = self.run(&["acquire", name, "--ttl", ttl]);
        match code {
            0 => Some(out.trim().parse().expect("a token")),
            11 => None,
            _ => panic!("acquire {name}: exit {code}: {err}"),
        }
    }

    /// The store's integrity check (`ok` when sound).
    #[must_use]
    pub fn integrity(&self) -> String {
        integrity(&self.store_path())
    }

    /// The store's token counter of `name` (read directly, read-only).
    #[must_use]
    pub fn last_token(&self, name: &str) -> Option<u64> {
        let conn = rusqlite::Connection::open_with_flags(self.store_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open store");
        conn.query_row("SELECT last_token FROM lease_name WHERE name = ?1", [name], |r| {
            r.get::<_, i64>(0)
        })
        .ok()
        .map(|t| t as u64)
    }
}

/// `PRAGMA integrity_check` of a SQLite file, opened read-only.
#[must_use]
pub fn integrity(path: &Path) -> String {
    let conn = match rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) {
        Ok(c) => c,
        Err(e) => return format!("cannot open: {e}"),
    };
    conn.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .unwrap_or_else(|e| format!("check failed: {e}"))
}

/// (exit code — or minus the signal that killed it —, stdout, stderr).
#[must_use]
pub fn outcome(out: &Output) -> (i32, String, String) {
    use std::os::unix::process::ExitStatusExt as _;
    let code = out
        .status
        .code()
        .or_else(|| out.status.signal().map(|s| -s))
        .unwrap_or(i32::MIN);
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where `pid` and the processes under it are, for a test that gave up
/// waiting on it: each one's state, and every thread's backtrace from
/// `gdb` when it is installed (else each thread's kernel wait channel).
/// Read before the test kills it, so a hang that happens once in a CI run
/// says where it hung.
#[must_use]
pub fn whereabouts(pid: u32) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut pending = vec![pid];
    while let Some(pid) = pending.pop() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let _ = writeln!(out, "--- pid {pid}: {cmdline}\n    stat: {}", stat.trim());
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten();
        for task in tasks {
            let dir = task.path();
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            let _ = writeln!(
                out,
                "    thread {} {}: wchan {}",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan").trim()
            );
            pending.extend(
                read("children")
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
        let gdb = Command::new("gdb")
            .args(["-batch", "-nx", "-p", &pid.to_string(), "-ex", "thread apply all bt 20"])
            .stdin(Stdio::null())
            .output();
        if let Ok(gdb) = gdb {
            let text = String::from_utf8_lossy(&gdb.stdout);
            let frames: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("Thread ") || l.starts_with('#'))
                .collect();
            out.push_str(&frames.join("\n"));
            out.push('\n');
        }
    }
    out
}
