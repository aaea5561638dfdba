//! What a lease protects, as the fault cases use it: resources that ask
//! leasehold and record the answer — and decide nothing themselves.
//!
//! [`FencedResource`] is a state file written through the library's fence
//! (`leasehold::files::FencedFile` with a [`Fence`]: the token and, when
//! known, the grant): leasehold's fence record says accepted or refused;
//! the resource records the attempt before asking and the answer after
//! (`fence=record` in the history), each write carrying a value of its own
//! so that [`FencedResource::record_final`] can show what the file ends
//! with. Whether those answers were right is [`crate::checker`]'s to say.

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

pub use leasehold::files::Fence;
use leasehold::files::{FencedFile, FileError, WriteOptions};

use crate::history::{Answer, Attempt, History};

/// A state file fenced by leasehold, every attempt recorded.
#[derive(Debug)]
pub struct FencedResource {
    file: FencedFile,
    label: String,
}

impl FencedResource {
    /// The resource at `path` (its fence record beside it, `PATH.fence`).
    #[must_use]
    pub fn new(path: &Path) -> Self {
        Self {
            file: FencedFile::new(path),
            label: path.display().to_string(),
        }
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Write `value` for the holder of `grant` (its label in the history)
    /// of `name`, presenting `fence` to leasehold: recorded before, answered
    /// after. The answer, and the error when it failed.
    ///
    /// # Errors
    /// When the history cannot be written.
    pub fn write(
        &self,
        history: &mut History,
        name: &str,
        grant: &str,
        fence: Fence,
        value: &str,
    ) -> std::io::Result<(Answer, Option<String>)> {
        let attempt = Attempt {
            name,
            grant,
            token: Some(fence.token.0),
            resource: &self.label,
            fence: crate::history::Fence::Record,
            value,
        };
        history.attempt(&attempt, || {
            match self.file.write(fence, value.as_bytes(), &WriteOptions::default()) {
                Ok(()) => (Answer::Accepted, None),
                Err(FileError::StaleToken { .. } | FileError::ReissuedToken { .. }) => (Answer::Refused, None),
                Err(e) => (Answer::Failed, Some(e.to_string())),
            }
        })
    }

    /// Record what the file holds now, after everything (the checker
    /// compares it with the last acknowledged write).
    ///
    /// # Errors
    /// When the file cannot be read (other than missing) or the history written.
    pub fn record_final(&self, history: &mut History) -> std::io::Result<()> {
        let at = crate::proc::boot_ns();
        let value = match std::fs::read_to_string(self.file.path()) {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        history.read(&self.label, at, &value)
    }

    /// Whether some process is inside a write of the resource at `path`
    /// (holding its lock): a test pausing a writer must not pause it there,
    /// where it would block every other writer — not the property tested.
    #[must_use]
    pub fn busy(path: &Path) -> bool {
        let lock = lock_path(path);
        let Ok(file) = std::fs::File::open(&lock) else {
            return false;
        };
        match rustix::fs::flock(file.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            // Closing the file drops the lock at once.
            Ok(()) => false,
            Err(_) => true,
        }
    }
}

/// The lock leasehold takes beside a state file while writing it.
fn lock_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    p.into()
}

#[cfg(test)]
mod tests {
    use leasehold::{GrantId, Token};

    use super::*;

    /// The resource decides nothing: leasehold's fence refuses, the
    /// history says so, and the checker finds the answers consistent.
    #[test]
    fn attempts_are_recorded_with_leaseholds_answers() {
        let dir = tempfile::tempdir().unwrap();
        let history_path = dir.path().join("history");
        let mut history = History::open(&history_path).unwrap();
        let r = FencedResource::new(&dir.path().join("state"));
        let a = Fence {
            token: Token(5),
            grant: Some(GrantId(0xa)),
        };
        let b = Fence {
            token: Token(5),
            grant: Some(GrantId(0xb)),
        };
        assert_eq!(r.write(&mut history, "job", "a", a, "a1").unwrap().0, Answer::Accepted);
        // A token issued again to another grant: leasehold refuses it.
        assert_eq!(r.write(&mut history, "job", "b", b, "b1").unwrap().0, Answer::Refused);
        let lower = Fence::from(Token(4));
        assert_eq!(
            r.write(&mut history, "job", "c", lower, "c1").unwrap().0,
            Answer::Refused
        );
        assert!(!FencedResource::busy(r.path()));
        r.record_final(&mut history).unwrap();
        let report = crate::checker::check_file(&history_path).unwrap();
        report.assert_clean();
        assert_eq!((report.counts.accepted, report.counts.refused), (1, 2));
    }
}
