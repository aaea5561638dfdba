//! A watch that wakes when a file is written — how a waiter on the
//! embedded store hears another process commit without polling: every
//! commit appends to SQLite's write-ahead log (`write(2)`, not a mapping),
//! so a write there is the signal to read the store again.
//!
//! Linux: `inotify` (`IN_MODIFY`). macOS: a `kqueue` `EVFILT_VNODE` note
//! (`NOTE_WRITE | NOTE_EXTEND`) on a descriptor of each file. A watch may
//! wake for a write that changed nothing a waiter cares about, and can
//! miss nothing its caller cannot catch by reading again afterwards: it is
//! a hint to look, never the answer.

use std::io;
use std::path::Path;
use std::time::Duration;

/// Files being watched for writes (see the module docs).
#[derive(Debug)]
pub struct FileWatch(super::imp::FileWatch);

impl FileWatch {
    /// Watch each of `paths` that exists (at least one must).
    ///
    /// # Errors
    /// The platform's error when none of `paths` can be watched (all
    /// missing, out of watches or descriptors).
    pub fn new(paths: &[&Path]) -> io::Result<Self> {
        super::imp::FileWatch::new(paths).map(Self)
    }

    /// Wait up to `timeout` for a write to a watched file: `true` when one
    /// came (or may have), `false` when the time ran out.
    ///
    /// # Errors
    /// The platform's error from waiting (not from the time running out).
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        self.0.wait(timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_write_by_another_process_wakes_the_watch_and_silence_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("store.db-wal");
        std::fs::File::create(&wal).unwrap();
        let watch = FileWatch::new(&[&wal, &dir.path().join("missing")]).unwrap();
        let begun = Instant::now();
        assert!(!watch.wait(Duration::from_millis(50)).unwrap(), "nothing was written");
        assert!(begun.elapsed() >= Duration::from_millis(50));
        let writer = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("sleep 0.2; printf x >> '{}'", wal.display()))
            .spawn()
            .unwrap();
        let begun = Instant::now();
        assert!(watch.wait(Duration::from_secs(30)).unwrap(), "the write woke it");
        assert!(begun.elapsed() < Duration::from_secs(20));
        let _ = writer.wait_with_output();
        // One more write in this process wakes it too.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&wal)
            .unwrap()
            .write_all(b"y")
            .unwrap();
        assert!(watch.wait(Duration::from_secs(30)).unwrap());
        assert!(
            FileWatch::new(&[&dir.path().join("missing")]).is_err(),
            "nothing to watch"
        );
    }
}
