//! Which program is the guard: [`GuardProgram`], how a supervisor starts
//! it, and [`GuardProgram::find`], the default lookup for a program that
//! does not configure one:
//!
//! 1. `$LEASEHOLD_GUARD`, the path of the guard program, when set;
//! 2. `leasehold-guard` in the directory of the current executable — or
//!    its parent, when that directory is Cargo's `deps` or `examples` (so
//!    tests and examples find the workspace's build) — which is where an
//!    installer puts it beside an interpreter too (a Python virtualenv's
//!    `bin/`);
//! 3. `leasehold-guard` on `$PATH`.
//!
//! [`GuardProgram::find_beside`] looks in a package's own directory
//! between the first two: where the Node.js package's platform package
//! puts its programs beside the native module (`leasehold-guard`, or the
//! `leasehold` command, which is its own guard: `leasehold __guard`).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::supervise::SuperviseError;

/// The word that makes a guard program act as the guard.
pub const GUARD_ARG: &str = "__guard";
/// The environment variable [`GuardProgram::find`] reads first.
pub const GUARD_ENV: &str = "LEASEHOLD_GUARD";
/// The guard program's file name ([`GuardProgram::find`]).
pub const GUARD_NAME: &str = "leasehold-guard";
/// The command's file name: it is its own guard ([`GuardProgram::find_beside`]).
const COMMAND_NAME: &str = "leasehold";
/// This build of the guard and its protocol: the version and a hash of
/// the library's sources (`build.rs`). A supervisor passes it to the guard
/// (`--build=`), and a guard of another build starts nothing
/// ([`SuperviseError::GuardOtherBuild`]).
pub const GUARD_BUILD: &str = env!("LEASEHOLD_GUARD_BUILD");

/// How a supervisor starts its guard: a program and leading arguments,
/// followed by `__guard` and the guard's own arguments; [`GuardProgram::find`]
/// is the default.
///
/// # Examples
/// ```
/// use leasehold::supervise::GuardProgram;
/// // A program that is its own guard (as `leasehold` is: `leasehold __guard ...`).
/// let guard = GuardProgram::new("/usr/bin/leasehold");
/// // One that needs leading arguments to get there.
/// let guard = GuardProgram::new("/usr/bin/python3").with_args(["-m", "myapp.guard"]);
/// assert_eq!(guard.to_string(), "/usr/bin/python3 -m myapp.guard __guard");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardProgram {
    program: PathBuf,
    args: Vec<OsString>,
    /// Started instead when this one is not this build's guard
    /// ([`GuardProgram::or_else`]).
    fallback: Option<Box<GuardProgram>>,
}

impl GuardProgram {
    /// The program at `program`, with no leading arguments.
    #[must_use]
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            fallback: None,
        }
    }

    /// Start `other` instead when this program turns out not to be this
    /// build's guard: it cannot be started, reports another build, or ends
    /// without reporting — before the command or its lease exist, so
    /// nothing is lost by the second start. `leasehold run` starts the
    /// small `leasehold-guard` beside it, and itself when that one is
    /// missing or of another build.
    #[must_use]
    pub fn or_else(mut self, other: GuardProgram) -> Self {
        self.fallback = Some(Box::new(other));
        self
    }

    /// The program to start when this one is not this build's guard.
    pub(crate) fn fallback(&self) -> Option<&GuardProgram> {
        self.fallback.as_deref()
    }

    /// Arguments that go before `__guard`.
    #[must_use]
    pub fn with_args<A: Into<OsString>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The default guard program: `$LEASEHOLD_GUARD`, else
    /// `leasehold-guard` beside the current executable (or one directory
    /// up from Cargo's `deps`/`examples`), else on `$PATH`.
    ///
    /// # Errors
    /// [`SuperviseError::GuardNotFound`], naming every place looked at.
    pub fn find() -> Result<Self, SuperviseError> {
        Self::find_in(None)
    }

    /// As [`GuardProgram::find`], looking in `dir` after `$LEASEHOLD_GUARD`:
    /// for `leasehold-guard`, then for `leasehold` (the command is its own
    /// guard) — the programs a package installs beside its native module
    /// (the Node.js package's addon), whatever program runs it.
    ///
    /// # Errors
    /// [`SuperviseError::GuardNotFound`], naming every place looked at.
    pub fn find_beside(dir: &Path) -> Result<Self, SuperviseError> {
        Self::find_in(Some(dir))
    }

    fn find_in(beside: Option<&Path>) -> Result<Self, SuperviseError> {
        let mut searched = Vec::new();
        if let Some(path) = std::env::var_os(GUARD_ENV).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            if is_program(&path) {
                return Ok(Self::new(path));
            }
            return Err(SuperviseError::GuardNotFound {
                searched: format!("${GUARD_ENV} is {}, which is not an executable file", path.display()),
            });
        }
        let mut candidates = Vec::new();
        if let Some(dir) = beside {
            // Either is started the same way: PROGRAM __guard ...
            candidates.extend([dir.join(GUARD_NAME), dir.join(COMMAND_NAME)]);
        }
        if let Some(dir) = std::env::current_exe().ok().as_deref().and_then(Path::parent) {
            candidates.push(dir.join(GUARD_NAME));
            if matches!(dir.file_name().and_then(OsStr::to_str), Some("deps" | "examples"))
                && let Some(up) = dir.parent()
            {
                candidates.push(up.join(GUARD_NAME));
            }
        }
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path).map(|dir| dir.join(GUARD_NAME)));
        }
        for candidate in candidates {
            if is_program(&candidate) {
                return Ok(Self::new(candidate));
            }
            searched.push(candidate.display().to_string());
        }
        Err(SuperviseError::GuardNotFound {
            searched: format!("${GUARD_ENV} is not set; looked at {}", searched.join(", ")),
        })
    }

    #[must_use]
    pub fn program(&self) -> &Path {
        &self.program
    }

    #[must_use]
    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// The command that starts the guard, before its own arguments.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .arg(GUARD_ARG)
            .arg(format!("--build={GUARD_BUILD}"));
        command
    }
}

impl fmt::Display for GuardProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.args {
            write!(f, " {}", arg.to_string_lossy())?;
        }
        write!(f, " {GUARD_ARG}")
    }
}

pub(super) fn is_program(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
