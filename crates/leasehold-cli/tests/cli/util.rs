//! A sandbox per test: its own store, HOME and state directory, so tests
//! run in parallel and never touch the user's default store.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub struct Env {
    pub dir: TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn store_path(&self) -> PathBuf {
        self.path().join("state").join("leasehold.db")
    }

    pub fn store_url(&self) -> String {
        format!("sqlite://{}", self.store_path().display())
    }

    /// `leasehold ARGS...` with this sandbox's store.
    pub fn cmd(&self, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = assert_cmd::Command::new(bin());
        self.prepare(cmd.args(args));
        cmd
    }

    /// The same, as a std Command (for processes that run in the background).
    pub fn std_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        cmd.env("LEASEHOLD_STORE", self.store_url())
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("xdg"))
            .env_remove("LEASEHOLD_LOG");
        cmd
    }

    fn prepare<'a>(&self, cmd: &'a mut assert_cmd::Command) -> &'a mut assert_cmd::Command {
        cmd.env("LEASEHOLD_STORE", self.store_url())
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("xdg"))
            .env_remove("LEASEHOLD_LOG")
    }

    /// Run and return (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).output().expect("run leasehold");
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
