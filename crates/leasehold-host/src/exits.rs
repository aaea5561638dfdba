//! A watch of processes' exits ([`ExitWatch`]): what lets a waiter near
//! the front of a queue wait for the store's announcement in one piece
//! rather than in slices of its poll interval, each proving through /proc
//! that the processes keeping it out still live (issue 41: those slices,
//! ten wake-ups a second per listening waiter, were most of what idle
//! waiters cost). Linux: a pidfd per process, polled on a thread of the
//! watch's own. macOS: none here (a kqueue's `EVFILT_PROC` would do; not
//! written) — the caller proves by polling, as before.

/// A thread that waits for the first of some processes to exit, then
/// calls its callback once. Ended and joined when dropped.
#[derive(Debug)]
pub struct ExitWatch {
    /// Written to end the thread (Linux: an eventfd).
    #[cfg(target_os = "linux")]
    stop: Option<std::os::fd::OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExitWatch {
    /// Watch `processes` — each a pid and its start time as
    /// [`process_start`](super::process_start) reads it — and call
    /// `on_exit` once, on the watch's thread, when the first of them
    /// exits. A watch of no process never calls it.
    ///
    /// `None` when one of them cannot be watched: it is gone or has
    /// exited already (a zombie not yet reaped), its pid is another
    /// process now (the start time differs), or the platform has no such
    /// watch. The caller then proves them by polling.
    #[must_use]
    pub fn start(processes: &[(u32, u64)], on_exit: impl FnOnce() + Send + 'static) -> Option<Self> {
        if processes.is_empty() {
            return Some(Self {
                #[cfg(target_os = "linux")]
                stop: None,
                thread: None,
            });
        }
        Self::start_on_this_platform(processes, on_exit)
    }

    #[cfg(target_os = "linux")]
    fn start_on_this_platform(processes: &[(u32, u64)], on_exit: impl FnOnce() + Send + 'static) -> Option<Self> {
        use rustix::event::{EventfdFlags, eventfd};
        use rustix::process::{Pid, PidfdFlags, pidfd_open};

        let mut pidfds = Vec::with_capacity(processes.len());
        for &(pid, start) in processes {
            let fd = pidfd_open(Pid::from_raw(i32::try_from(pid).ok()?)?, PidfdFlags::empty()).ok()?;
            // Opened first, compared second: the pidfd is of the process
            // that started then, not of one that took its pid since.
            if super::process_start(pid).ok()? != start || readable(&[&fd], Some(0))? {
                return None;
            }
            pidfds.push(fd);
        }
        let stop = eventfd(0, EventfdFlags::CLOEXEC).ok()?;
        let theirs = stop.try_clone().ok()?;
        let thread = std::thread::Builder::new()
            .name("leasehold-exits".into())
            .spawn(move || {
                let mut fds: Vec<&std::os::fd::OwnedFd> = pidfds.iter().collect();
                fds.push(&theirs);
                let _ = readable(&fds, None);
                // Not stopped: an exit — or a poll that failed, told as an
                // exit would be (the caller then reads and proves).
                if readable(&[&theirs], Some(0)) != Some(true) {
                    on_exit();
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn start_on_this_platform(_: &[(u32, u64)], _: impl FnOnce() + Send + 'static) -> Option<Self> {
        None
    }
}

/// Whether any of `fds` is readable, waiting up to `timeout_ms` (`None`:
/// until one is); `None` when the poll fails other than by a signal.
#[cfg(target_os = "linux")]
fn readable(fds: &[&std::os::fd::OwnedFd], timeout_ms: Option<i64>) -> Option<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};

    let timeout = timeout_ms.map(|ms| Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    });
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(*fd, PollFlags::IN)).collect();
    loop {
        match poll(&mut polled, timeout.as_ref()) {
            Ok(n) => return Some(n > 0),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(stop) = &self.stop {
            let _ = rustix::io::write(stop, &1u64.to_ne_bytes());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn child() -> (std::process::Child, (u32, u64)) {
        let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        (child, (pid, super::super::process_start(pid).unwrap()))
    }

    #[test]
    fn an_exit_is_told_once_and_a_live_process_is_not() {
        let (mut a, watched_a) = child();
        let (mut b, watched_b) = child();
        let (told, heard) = mpsc::channel();
        let watch = ExitWatch::start(&[watched_a, watched_b], move || told.send(()).unwrap()).unwrap();
        assert!(
            heard.recv_timeout(Duration::from_millis(300)).is_err(),
            "told while both live"
        );
        b.kill().unwrap();
        heard
            .recv_timeout(Duration::from_secs(10))
            .expect("b's exit was not told");
        drop(watch);
        a.kill().unwrap();
        let _ = (a.wait(), b.wait());
    }

    #[test]
    fn what_cannot_be_watched_is_refused() {
        let (mut a, (pid, start)) = child();
        assert!(
            ExitWatch::start(&[(pid, start + 1)], || ()).is_none(),
            "another start time: a reused pid"
        );
        a.kill().unwrap();
        // A zombie: exited, not yet reaped — its /proc entry is still there.
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            ExitWatch::start(&[(pid, start)], || ()).is_none(),
            "a process that has exited"
        );
        a.wait().unwrap();
        assert!(
            ExitWatch::start(&[(pid, start)], || ()).is_none(),
            "a process that is gone"
        );
        assert!(ExitWatch::start(&[], || panic!("told with nothing watched")).is_some());
    }

    #[test]
    fn dropping_the_watch_ends_its_thread_without_telling() {
        let (mut a, watched) = child();
        let (told, heard) = mpsc::channel();
        drop(ExitWatch::start(&[watched], move || told.send(()).unwrap()).unwrap());
        assert!(heard.recv_timeout(Duration::from_millis(100)).is_err());
        a.kill().unwrap();
        a.wait().unwrap();
    }
}
