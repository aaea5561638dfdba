//! The test support of leasehold: the runner of its test targets and how a
//! test says it cannot run here (this module), and what the tests start.
//!
//! # The modules
//!
//! - `postgres` (feature `postgres`, which brings the PostgreSQL client): a
//!   throwaway PostgreSQL server — plain, durable, TLS, or a primary with a
//!   synchronous standby.
//! - [`redis`]: a throwaway Redis server (durable or not, ACL users, TLS,
//!   replicas); [`resp`]: the kit's own small client of it.
//! - [`etcd`]: a throwaway etcd server (plain, mutual TLS, or TLS with
//!   users), and clusters of members.
//! - [`netns`]: a second test host, a network namespace to cut off and heal
//!   (partitions).
//! - [`pki`]: test certificates (a CA, server and client certificates).
//! - [`faketime`]: a program with its wall clock shifted.
//! - [`wait`]: polling with a bound; [`process`]: whether a pid runs, and
//!   cleaning up once the test process has exited; [`port`]: a free port.
//!
//! Servers are processes, listening on 127.0.0.1 (or a test network's
//! address) on free ports, with data in temp dirs, stopped by pid: a test
//! gets their URLs, endpoints, data directories and pids, and opens the
//! store under test itself — this crate depends on no store crate, so
//! every crate can dev-depend on it.
//!
//! # The rule
//!
//! A test that cannot run on this machine — a server (PostgreSQL, etcd,
//! Redis), a tool (`strace`, `sqlite3`, `faketime`, `openssl`, ...), root,
//! or a platform is missing — is reported as **ignored, with its reason**: on its
//! own line (``test wake::x ... ignored (no `etcd` on PATH ...)``), in the
//! count of the summary line, and once more under it, by reason. It never
//! counts as passed, and it never ends the test binary: every other test is
//! still run and reported. Under `CI=true` the same test **fails**, with the
//! same reason: CI provides everything.
//!
//! Plain libtest cannot ignore a test once it runs, so every test target
//! that has such tests is built with `harness = false` and runs here
//! (libtest-mimic: libtest's filters, `--list`, `--exact`, `--skip`,
//! `--test-threads`, `--include-ignored`, and its output).
//!
//! # Using it
//!
//! A test is a plain `fn()` (no `#[test]`). Each module lists its tests with
//! [`tests!`], and the target's `main` hands the lists to [`main`]:
//!
//! ```text
//! // tests/cli/lease.rs
//! pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
//!     acquire_prints_the_token,
//!     tokens_only_grow,
//! ];
//! // tests/cli/main.rs
//! fn main() {
//!     leasehold_testkit::main(&[lease::TESTS, lock::TESTS]);
//! }
//! ```
//!
//! A test function left out of its list is never used, which rustc's
//! `dead_code` lint reports and clippy's `-D warnings` (`.ci/run`) refuses.
//!
//! A test that finds something it needs missing calls [`unavailable`] with
//! the reason — or a helper that checks: [`need_root`], [`need_program`]; the
//! servers of this crate call it when theirs is not installed. That
//! ends the test (a panic carrying an [`Unavailable`]), and the runner
//! reports it. A test never returns early instead: that would be a pass.
//!
//! # The environment
//!
//! - `CI=true`: a test that cannot run fails, with its reason.
//! - `LEASEHOLD_TEST_HIDE=postgres,etcd,firestore,redis,root,strace`: act as
//!   if these were missing (`postgres`, `etcd`, `firestore`, `redis`,
//!   `root`, or a program [`need_program`] asks for), to see the rule at
//!   work without uninstalling anything.
//! - `LEASEHOLD_TEST_ROOT_LATER=FILE` (set by `scripts/test` when it is not
//!   root but has password-less sudo): a test that needs root is recorded in
//!   FILE and reported as ignored, left for the pass as root — not a
//!   failure under `CI=true`, since that pass runs it.
//! - `LEASEHOLD_TEST_ONLY=FILE` (that pass, through sudo): run only the
//!   tests FILE records for this test binary.
//! - `LEASEHOLD_SOAK=1`: the soak tier; the tests of that tier only
//!   ([`soak_only`]) are ignored in every other run, CI's included.

pub mod docs;
pub mod etcd;
pub mod faketime;
pub mod firestore;
pub mod netns;
pub mod pki;
pub mod port;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod process;
pub mod redis;
pub mod resp;
pub mod wait;

use std::fmt;
use std::io::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Mutex, Once};

pub use libtest_mimic::Trial;
use libtest_mimic::{Arguments, Completion, Failed, FormatSetting};

/// A name no other test (nor another run) uses: `GROUP-TEST-PID-N`
/// (letters, digits, `-` and `_` kept, anything else `-`), for a
/// collection or key prefix on a server tests share.
#[must_use]
pub fn unique_name(group: &str, test: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name: String = format!("{group}-{test}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' })
        .collect();
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// One test of a target: where it was listed, its name, its body.
#[derive(Debug, Clone, Copy)]
pub struct Test {
    /// `module_path!()` of the list (`cli::lease`).
    pub module: &'static str,
    pub name: &'static str,
    pub run: fn(),
}

impl Test {
    /// The name libtest would give it: the module path without the crate's
    /// name (`lease::acquire_prints_the_token`), so filters stay the same.
    #[must_use]
    pub fn full_name(&self) -> String {
        match self.module.split_once("::") {
            Some((_, module)) => format!("{module}::{}", self.name),
            None => self.name.to_owned(),
        }
    }
}

/// The tests of this module, in a `const` for [`main`]:
/// `pub const TESTS: &[Test] = tests![a, b];`.
#[macro_export]
macro_rules! tests {
    ($($test:ident),* $(,)?) => {
        &[$($crate::Test { module: module_path!(), name: stringify!($test), run: $test }),*]
    };
}

/// Why a test cannot run here: the payload of the panic that ends it (see
/// the crate docs).
#[derive(Debug, Clone)]
pub struct Unavailable {
    reason: String,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Something this machine lacks: ignored, or a failure under `CI=true`.
    Missing,
    /// Root: as `Missing`, unless `scripts/test` runs it in its pass as root.
    Root,
    /// A test of the soak tier only: ignored in every other run.
    SoakTier,
}

impl Unavailable {
    /// End the running test with this reason.
    pub fn raise(self) -> ! {
        panic::panic_any(self)
    }

    /// How the runner reports `test`, ended by this.
    fn outcome(self, test: &str) -> Result<Completion, Failed> {
        let root_later = env_path("LEASEHOLD_TEST_ROOT_LATER");
        let reason = match (self.kind, root_later) {
            (Kind::Root, Some(file)) => {
                record_for_root(&file, test);
                format!("{}; left for the pass as root", self.reason)
            }
            (Kind::Missing | Kind::Root, _) if ci() => {
                return Err(format!("CI=true, and this test cannot run here: {}", self.reason).into());
            }
            // The soak tier's tests, and anything outside CI.
            _ => self.reason,
        };
        IGNORED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(reason.clone());
        Ok(Completion::ignored_with(reason))
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// End the running test: it cannot run here, for `reason` (what is missing
/// and how to get it). Ignored with that reason, or a failure under `CI=true`.
pub fn unavailable(reason: impl Into<String>) -> ! {
    Unavailable {
        reason: reason.into(),
        kind: Kind::Missing,
    }
    .raise()
}

/// Whether `CI=true`: everything a test needs must be here.
#[must_use]
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Whether `LEASEHOLD_TEST_HIDE` asks to act as if `what` were missing.
#[must_use]
pub fn hidden(what: &str) -> bool {
    std::env::var("LEASEHOLD_TEST_HIDE").is_ok_and(|list| list.split(',').any(|w| w.trim() == what))
}

/// Whether this test runs as root (and root is not hidden).
#[must_use]
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root() && !hidden("root")
}

/// Go on only as root; `why` says what needs it ("to mount a tmpfs").
pub fn need_root(why: &str) {
    if !is_root() {
        Unavailable {
            reason: format!("needs root: {why}"),
            kind: Kind::Root,
        }
        .raise();
    }
}

/// Go on only if `program` is on PATH; `package` is the Debian package that
/// has it.
pub fn need_program(program: &str, package: &str) {
    if hidden(program) {
        unavailable(format!(
            "no `{program}` (hidden by LEASEHOLD_TEST_HIDE); install the Debian package {package}"
        ));
    }
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(program))));
    if !found {
        unavailable(format!("no `{program}` on PATH; install the Debian package {package}"));
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Go on only in the soak tier (`LEASEHOLD_SOAK=1`, `scripts/soak`); in any
/// other run the test is ignored — CI's tier is not the soak tier.
pub fn soak_only() {
    if std::env::var("LEASEHOLD_SOAK").as_deref() != Ok("1") {
        Unavailable {
            reason: "a test of the soak tier (LEASEHOLD_SOAK=1, scripts/soak)".to_owned(),
            kind: Kind::SoakTier,
        }
        .raise();
    }
}

/// Run `f`, which may find something missing: its value, or why not. Any
/// other panic goes on.
pub fn probe<T>(f: impl FnOnce() -> T) -> Result<T, Unavailable> {
    quiet_unavailable_panics();
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Ok(value),
        Err(payload) => match payload.downcast::<Unavailable>() {
            Ok(missing) => Err(*missing),
            Err(other) => panic::resume_unwind(other),
        },
    }
}

/// A test named `name` for [`run`]: passed, failed (any panic), or ignored
/// with its reason when it raised an [`Unavailable`].
pub fn trial(name: impl Into<String>, body: impl FnOnce() + Send + 'static) -> Trial {
    let name = name.into();
    let test = name.clone();
    Trial::ignorable_test(name, move || match probe(body) {
        Ok(()) => Ok(Completion::Completed),
        Err(missing) => missing.outcome(&test),
    })
}

/// Run `groups` (each module's [`tests!`]) as this test binary, and exit.
pub fn main(groups: &[&[Test]]) -> ! {
    run(trials(groups))
}

/// As [`main`], `per_core` tests at once per core unless `--test-threads`
/// says otherwise: for a suite whose tests mostly wait — for TTLs to run
/// out, processes to start and die, servers to answer — and so left a
/// third of two cores idle at one test per core (the CLI suite: 208 s at
/// one per core, 162 s at two). Its bounds are generous, and a test that
/// must not share the machine with its kind takes its turn (the
/// thousand-slot tests). The fault suite stays at one per core: at two,
/// beside CI's background build, two of its timing-bound judgements
/// (case 31) turned out to count the test thread's own delays.
pub fn main_waiting(groups: &[&[Test]], per_core: usize) -> ! {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        args.test_threads = Some(cores * per_core);
    }
    run_with(&args, trials(groups))
}

fn trials(groups: &[&[Test]]) -> Vec<Trial> {
    groups
        .iter()
        .flat_map(|group| group.iter())
        .map(|test| trial(test.full_name(), test.run))
        .collect()
}

/// Run `trials` (made by [`trial`], or ignored by design with
/// `with_ignored_flag`) with libtest's command line, and exit with its
/// status; then list the reasons of the tests ignored at run time.
pub fn run(trials: Vec<Trial>) -> ! {
    run_with(&Arguments::from_args(), trials)
}

fn run_with(args: &Arguments, trials: Vec<Trial>) -> ! {
    quiet_unavailable_panics();
    let trials = match env_path("LEASEHOLD_TEST_ONLY") {
        Some(file) => recorded_for_root(&file, trials),
        None => trials,
    };
    let conclusion = libtest_mimic::run(args, trials);
    if !args.list && !matches!(args.format, Some(FormatSetting::Json)) {
        print_reasons();
    }
    conclusion.exit()
}

/// The reasons of the tests ignored at run time.
static IGNORED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Under the summary line: how many tests were ignored for each reason.
fn print_reasons() {
    let mut reasons = IGNORED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if reasons.is_empty() {
        return;
    }
    reasons.sort();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ignored at run time, by reason:");
    for (reason, count) in counted(&reasons) {
        let _ = writeln!(out, "    {count} × {reason}");
    }
    let _ = writeln!(out);
}

/// Each distinct item of sorted `items` with its count.
fn counted(items: &[String]) -> Vec<(&str, usize)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for item in items {
        match counts.last_mut() {
            Some((last, n)) if *last == item => *n += 1,
            _ => counts.push((item, 1)),
        }
    }
    counts
}

/// A panic that carries an [`Unavailable`] is no crash: the runner reports
/// it, so the panic hook says nothing of it.
fn quiet_unavailable_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Unavailable>() {
                default(info);
            }
        }));
    });
}

fn env_path(var: &str) -> Option<std::path::PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(Into::into)
}

/// This test binary and the directory it runs in (cargo runs each in its
/// package's): where a root-later file says a test belongs.
fn this_binary() -> (String, String) {
    let exe = std::env::current_exe().expect("the path of this test binary");
    let dir = std::env::current_dir().expect("the current directory");
    (exe.display().to_string(), dir.display().to_string())
}

/// Record `test` in `file` for the pass as root, as a line
/// `BINARY<TAB>DIRECTORY<TAB>TEST` (one short append: lines of parallel
/// tests and binaries never interleave).
fn record_for_root(file: &Path, test: &str) {
    let (exe, dir) = this_binary();
    let line = format!("{exe}\t{dir}\t{test}\n");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("record {test} in {} for the pass as root: {e}", file.display()));
}

/// The trials `file` records for this test binary (the pass as root).
fn recorded_for_root(file: &Path, trials: Vec<Trial>) -> Vec<Trial> {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("LEASEHOLD_TEST_ONLY: cannot read {}: {e}", file.display()));
    let (exe, dir) = this_binary();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| match line.splitn(3, '\t').collect::<Vec<_>>()[..] {
            [e, d, name] if e == exe && d == dir => Some(name),
            _ => None,
        })
        .collect();
    trials.into_iter().filter(|t| names.contains(&t.name())).collect()
}

/// A tmpfs mounted for one test (root only), unmounted and its directory
/// removed on drop: a small disk to fill, or to remount read-only. Where
/// none can be mounted the test ends as [`unavailable`] (a failure under
/// `CI=true`), never as passed.
#[derive(Debug)]
pub struct Tmpfs {
    dir: std::path::PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (`mount -o size=`, `64k`, `1m`), private to
    /// root, on a directory of its own under the system's temp directory.
    #[must_use]
    pub fn mount(size: &str) -> Self {
        use std::os::unix::fs::DirBuilderExt as _;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static MOUNTS: AtomicUsize = AtomicUsize::new(0);
        need_root("to mount a tmpfs");
        let dir = std::env::temp_dir().join(format!(
            "leasehold-tmpfs-{}-{}",
            std::process::id(),
            MOUNTS.fetch_add(1, Ordering::Relaxed)
        ));
        // A new directory (never one found there): nothing planted is followed.
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            unavailable(format!("cannot make {} for a tmpfs: {e}", dir.display()));
        }
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&dir)
            .output();
        let refused = match out {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            Err(e) => Some(format!("cannot run mount: {e}")),
        };
        if let Some(why) = refused {
            let _ = std::fs::remove_dir(&dir);
            unavailable(format!("cannot mount a tmpfs here: {why}"));
        }
        Self { dir }
    }

    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }

    /// `mount -o remount,HOW` (`ro`, `rw`).
    ///
    /// # Panics
    /// When the remount fails: the test cannot go on as written.
    pub fn remount(&self, how: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&self.dir)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "remount {how} of {}",
            self.dir.display()
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a process the test left behind may still have a file open.
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_drop_the_crate_and_keep_the_module() {
        let nested = Test {
            module: "cli::lease",
            name: "acquire",
            run: || {},
        };
        let top = Test {
            module: "readme",
            name: "examples_run",
            run: || {},
        };
        assert_eq!(
            (nested.full_name().as_str(), top.full_name().as_str()),
            ("lease::acquire", "examples_run")
        );
    }

    #[test]
    fn reasons_are_counted_once_each() {
        let reasons = ["a", "a", "b"].map(String::from);
        assert_eq!(counted(&reasons), [("a", 2), ("b", 1)]);
    }
}
