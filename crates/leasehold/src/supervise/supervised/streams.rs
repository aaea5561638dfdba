//! A supervised command's streams: its stdin fed, its stdout and stderr
//! pumped — forwarded, collected or captured — and the stall watch that
//! stops a command that writes nothing.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::io::Errno;

use super::{Event, Output, Stop, Supervised, lock};
use crate::{Refusal, host};

#[derive(Debug, Default)]
pub(super) struct Collected {
    pub(super) stdout: Vec<u8>,
    pub(super) stdout_overflow: bool,
    pub(super) stderr_tail: Vec<u8>,
    pub(super) stderr: Vec<u8>,
}

impl<L: Refusal> Supervised<L> {
    /// Copy the command's stdout and stderr as `output` says, on one
    /// pooled thread (a blocked write to our own stdout or stderr must not
    /// hold up the event loop, which may have to stop the command).
    pub(super) fn pump_output(&mut self, activity: &Arc<AtomicU64>, out: Option<OwnedFd>, err: Option<OwnedFd>) {
        stamp(activity);
        if out.is_none() && err.is_none() {
            return;
        }
        let collect = match self.output {
            Output::Collect {
                stdout_limit,
                stderr_tail,
            } => Some((stdout_limit, stderr_tail)),
            _ => None,
        };
        let capture = self.output == Output::Capture;
        let (activity, collected) = (activity.clone(), self.collected.clone());
        self.pump = Some(crate::pool::spawn(move || {
            let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
            pump([out, err], &activity, |stream, chunk| {
                if capture {
                    let mut c = lock(&collected);
                    let whole = if stream == 0 { &mut c.stdout } else { &mut c.stderr };
                    whole.extend_from_slice(chunk);
                    return true;
                }
                if stream == 0 {
                    return match collect {
                        Some((limit, _)) => {
                            let mut c = lock(&collected);
                            let room = limit.saturating_sub(c.stdout.len());
                            c.stdout.extend_from_slice(&chunk[..chunk.len().min(room)]);
                            c.stdout_overflow |= chunk.len() > room;
                            true
                        }
                        None => stdout.write_all(chunk).and_then(|()| stdout.flush()).is_ok(),
                    };
                }
                if let Some((_, tail)) = collect {
                    let mut c = lock(&collected);
                    c.stderr_tail.extend_from_slice(chunk);
                    let excess = c.stderr_tail.len().saturating_sub(tail);
                    c.stderr_tail.drain(..excess);
                }
                stderr.write_all(chunk).and_then(|()| stderr.flush()).is_ok()
            });
        }));
    }
}

/// Write `bytes` to the command's stdin and close it. Up to a page fits
/// in a new pipe at once; more is written by a pooled thread, so that a command
/// that does not read its input cannot block us.
pub(super) fn feed(input: OwnedFd, bytes: Vec<u8>) {
    const PAGE: usize = 4096;
    if bytes.len() <= PAGE {
        let _ = rustix::io::write(&input, &bytes);
        return;
    }
    crate::pool::spawn(move || {
        let _ = std::fs::File::from(input).write_all(&bytes);
    });
}

pub(super) fn stamp(activity: &AtomicU64) {
    activity.store(crate::duration_nanos(host::boot_clock()), Ordering::SeqCst);
}

/// Copy the open `streams` chunk by chunk to `to` (with the stream's
/// index), stamping activity, until each has reached EOF or `to` said
/// stop for it.
pub(super) fn pump(streams: [Option<OwnedFd>; 2], activity: &AtomicU64, mut to: impl FnMut(usize, &[u8]) -> bool) {
    let mut streams = streams;
    let mut buf = [0u8; 8192];
    loop {
        let open: Vec<usize> = (0..streams.len()).filter(|i| streams[*i].is_some()).collect();
        if open.is_empty() {
            return;
        }
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .filter_map(|i| streams[*i].as_ref())
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        match poll(&mut fds, None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return,
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        for (i, ready) in open.into_iter().zip(ready) {
            let Some(fd) = streams[i].as_ref().filter(|_| ready) else {
                continue;
            };
            let keep = match rustix::io::read(fd, &mut buf) {
                Ok(0) => false,
                Ok(n) => {
                    stamp(activity);
                    to(i, &buf[..n])
                }
                Err(Errno::INTR | Errno::AGAIN) => true,
                Err(_) => false,
            };
            if !keep {
                streams[i] = None;
            }
        }
    }
}

pub(super) fn watch_stall<L: Refusal>(
    limit: Duration,
    progress: Option<PathBuf>,
    activity: Arc<AtomicU64>,
    tx: mpsc::Sender<Event<L>>,
) {
    thread::spawn(move || {
        let tick = (limit / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
        let mtime = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let mut seen = progress.as_ref().and_then(mtime);
        loop {
            thread::sleep(tick);
            if let Some(p) = &progress {
                let now = mtime(p);
                if now != seen {
                    seen = now;
                    stamp(&activity);
                }
            }
            let last = Duration::from_nanos(activity.load(Ordering::SeqCst));
            if host::boot_clock().saturating_sub(last) >= limit {
                let _ = tx.send(Event::Stop(Stop::Stalled(limit)));
                return;
            }
        }
    });
}
