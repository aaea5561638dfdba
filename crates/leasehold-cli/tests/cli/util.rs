//! A sandbox per test: its own store, HOME and state directory, so tests
//! run in parallel and never touch the user's default store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_testkit::wait::wait_until;
use tempfile::TempDir;

/// The Google Cloud project of every Firestore sandbox (the emulator
/// takes any; each sandbox has a collection of its own).
pub const FIRESTORE_PROJECT: &str = "leasehold-cli";

pub struct Env {
    pub dir: TempDir,
    /// The store's URL, when not the sandbox's SQLite file.
    store: Option<String>,
    /// Variables every command gets besides the sandbox's (the emulator
    /// of a Firestore store).
    vars: Vec<(&'static str, String)>,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            store: None,
            vars: Vec::new(),
        }
    }

    /// A sandbox on a Firestore store of its own (a collection of its own
    /// on the test binary's emulator): the store's URL, and the emulator's
    /// address (`FIRESTORE_EMULATOR_HOST`) for every command.
    #[allow(dead_code, reason = "used by the test modules that run on every store")]
    pub fn firestore(test: &str) -> (Self, String) {
        let emulator = leasehold_testkit::firestore::shared();
        let prefix = leasehold_testkit::firestore::unique_prefix("cli", test);
        let env = Self {
            vars: vec![("FIRESTORE_EMULATOR_HOST", emulator.host())],
            ..Self::on(format!("firestore://{FIRESTORE_PROJECT}?prefix={prefix}"))
        };
        (env, prefix)
    }

    /// A sandbox on a Redis store of its own (a key prefix of its own on
    /// the test binary's shared server): the store's URL and the prefix.
    #[allow(dead_code, reason = "used by the test modules that run on every store")]
    pub fn redis(test: &str) -> (Self, String) {
        let server = leasehold_testkit::redis::shared();
        let prefix = leasehold_testkit::redis::unique_prefix("cli", test);
        (Self::on(format!("{}?prefix={prefix}", server.url())), prefix)
    }

    /// A sandbox whose commands use the store at `url` (a throwaway
    /// PostgreSQL or etcd server's).
    pub fn on(url: String) -> Self {
        Self {
            store: Some(url),
            ..Self::new()
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn store_path(&self) -> PathBuf {
        self.path().join("state").join("leasehold.db")
    }

    pub fn store_url(&self) -> String {
        if let Some(url) = &self.store {
            return url.clone();
        }
        format!("sqlite://{}", self.store_path().display())
    }

    /// `leasehold ARGS...` with this sandbox's store.
    pub fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = self.std_cmd(args);
        cmd.current_dir(self.path());
        assert_cmd::Command::from_std(cmd)
    }

    /// The same, as a std Command (for processes that run in the background).
    pub fn std_cmd(&self, args: &[&str]) -> Command {
        self.cmd_of(&bin(), args)
    }

    /// `PROGRAM ARGS...` with this sandbox's store: a `leasehold` binary
    /// installed elsewhere.
    pub fn cmd_of(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args);
        self.sandboxed(&mut cmd);
        cmd
    }

    /// `leasehold ARGS...` run to its end under `strace -f -y`, tracing
    /// the system calls `calls` (`fsync,pread64`, say): its exit code and
    /// the trace's lines, each call with the path of its descriptor.
    #[allow(dead_code, reason = "used by the test modules that count system calls")]
    pub fn traced(&self, calls: &str, args: &[&str]) -> (i32, Vec<String>) {
        let log = self.path().join("strace.out");
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-y", "-qq", "-e", &format!("trace={calls}"), "-o"])
            .arg(&log)
            .arg(bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let status = self.sandboxed(&mut cmd).status().expect("run leasehold under strace");
        let lines = std::fs::read_to_string(&log).expect("read the trace");
        (status.code().unwrap_or(-1), lines.lines().map(str::to_owned).collect())
    }

    /// The sandbox's variables on `cmd`.
    fn sandboxed<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("LEASEHOLD_STORE", self.store_url())
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("xdg"))
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .env_remove("LEASEHOLD_LOG")
    }

    /// Run and return (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_with(args, &[])
    }

    /// Run with `vars` added to the environment and return (exit code,
    /// stdout, stderr).
    pub fn run_with(&self, args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
        let mut cmd = self.cmd(args);
        cmd.envs(vars.iter().copied());
        let out = cmd.output().expect("run leasehold");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Acquire and return the token (panics unless exit 0).
    pub fn acquire(&self, args: &[&str]) -> u64 {
        let mut all = vec!["acquire"];
        all.extend_from_slice(args);
        let (code, out, err) = self.run(&all);
        assert_eq!(code, 0, "acquire {args:?} failed: {err}");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("acquire printed {out:?}, not a token"))
    }
}

pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("leasehold")
}

impl Env {
    /// Start `leasehold ARGS...` in the background, in the sandbox
    /// directory, with stdout and stderr captured.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.std_cmd(args)
            .current_dir(self.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn leasehold")
    }

    /// A file in the sandbox.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// Wait until the sandbox file `name` exists (a command's "I started").
    pub fn wait_for(&self, name: &str) {
        let path = self.file(name);
        wait_until(Duration::from_secs(20), || path.exists())
            .unwrap_or_else(|| panic!("{} did not appear", path.display()));
    }

    /// The pids written one per line into the sandbox file `name`.
    pub fn pids(&self, name: &str) -> Vec<u32> {
        std::fs::read_to_string(self.file(name))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

/// Wait for a child up to `limit`; kill it (and fail) if it does not exit.
pub fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    if wait_until(limit, || child.try_wait().expect("try_wait").is_some()).is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!(
            "leasehold did not exit within {limit:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Short leases for the fault tests: a TTL of 3 s renewed every 500 ms,
/// stopping at sent + 3 s − (0.5 s + 0.5 s) — a command whose lease is lost
/// is gone after one renewal, long before its TTL could have ended it.
pub const FAST: [&str; 6] = ["--ttl", "3s", "--heartbeat", "500ms", "--grace", "500ms"];

/// `VERB TARGET OPTIONS... -- sh -c SCRIPT`, the argument list of `run` and `lock` tests.
pub fn sh_args<'a>(verb: &'a str, target: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = vec![verb, target];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    args
}

/// How many times the threads of process `pid` have been switched out
/// (voluntarily or not), as /proc counts them.
pub fn switches(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read the waiter's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}
