//! Wake-ups by LISTEN/NOTIFY.
//!
//! Every transaction that may unblock a waiter sends `pg_notify(channel,
//! payload)` before it commits (PostgreSQL delivers it on commit, and never
//! for a rolled-back transaction). The channel is one per schema; the
//! payload names the lease (`lease:NAME`) or queue (`queue:NAME`).
//!
//! Each process that waits keeps one extra connection, opened on the first
//! wait, on which a listener thread runs `LISTEN` and counts notifications
//! into a fixed table of counters (a topic hashes to one of them, so memory
//! stays bounded however many names the schema has; two topics sharing a
//! counter only cause a spurious early wake-up, which callers tolerate).
//! A waiter's [`WaitTopic`] cursor remembers the counter it last saw, so a
//! notification that arrives while the waiter is re-reading the store wakes
//! its next wait at once. When the listening connection is lost, every
//! counter moves (notifications may have been missed) and the thread
//! reconnects with backoff; meanwhile waits just sleep their timeout.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use leasehold_backend::{WaitTopic, Watched};
use postgres::fallible_iterator::FallibleIterator as _;

/// Counters in the table; a power of two.
const BUCKETS: usize = 1024;
/// How often the listener thread checks whether its store is gone.
const TICK: Duration = Duration::from_millis(250);

/// The payload that names a topic.
pub(crate) fn payload(what: &Watched) -> String {
    match what {
        Watched::Lease(name) => format!("lease:{}", name.as_str()),
        Watched::Queue(queue) => format!("queue:{}", queue.as_str()),
    }
}

/// The notification channel of a schema: `leasehold.SCHEMA`, or a hash of
/// the schema name when that would exceed PostgreSQL's 63-byte identifiers.
pub(crate) fn channel(schema: &str) -> String {
    let name = format!("leasehold.{schema}");
    if name.len() <= 63 {
        name
    } else {
        format!("leasehold.{:016x}", fnv1a(schema.as_bytes()))
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn bucket(payload: &str) -> usize {
    (fnv1a(payload.as_bytes()) as usize) & (BUCKETS - 1)
}

#[derive(Debug)]
struct State {
    counters: Vec<u64>,
    /// Bumped whenever notifications may have been missed (connection
    /// lost); counts as a change of every topic.
    epoch: u64,
    /// The thread is running (started once per store).
    started: bool,
    /// The store was dropped: the thread exits.
    stop: bool,
}

impl State {
    /// The generation of a topic: moves on every notification for a topic
    /// of its bucket and every possible miss. Never 0 (the unset cursor).
    fn generation(&self, bucket: usize) -> u64 {
        self.counters[bucket] + self.epoch + 1
    }
}

/// The listener shared by a store and its thread.
#[derive(Debug)]
pub(crate) struct Notifier {
    state: Mutex<State>,
    changed: Condvar,
}

/// Opens the listening connection.
pub(crate) type Connect = Box<dyn Fn() -> Result<postgres::Client, postgres::Error> + Send>;

impl Notifier {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                counters: vec![0; BUCKETS],
                epoch: 0,
                started: false,
                stop: false,
            }),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tell the thread to exit (the store is being dropped).
    pub(crate) fn stop(&self) {
        self.lock().stop = true;
    }

    /// Wait for a change of `topic`, at most `timeout`. Starts the listener
    /// thread on first use (with `connect`, called on that thread).
    pub(crate) fn wait(
        self: &Arc<Self>,
        topic: &WaitTopic,
        timeout: Duration,
        channel: &str,
        connect: impl FnOnce() -> Connect,
    ) {
        let deadline = Instant::now() + timeout.min(leasehold_backend::limits::WAIT.max);
        let bucket = bucket(&payload(topic.watched()));
        let mut state = self.lock();
        if !state.started {
            state.started = true;
            let (weak, channel, connect) = (Arc::downgrade(self), channel.to_owned(), connect());
            let spawned = thread::Builder::new()
                .name("leasehold-listen".into())
                .spawn(move || listen(&weak, &channel, &*connect));
            if spawned.is_err() {
                // No thread: waits fall back to sleeping.
                state.started = false;
            }
        }
        let seen = state.generation(bucket);
        if topic.moved_to(seen) {
            return; // something happened since this waiter last looked
        }
        drop(state);
        let theirs = Arc::downgrade(self);
        topic.on_interrupt(Some(Box::new(move || {
            if let Some(notifier) = theirs.upgrade() {
                leasehold_backend::notify_all_under(&notifier.state, &notifier.changed);
            }
        })));
        let mut state = self.lock();
        loop {
            // Looked at before each wait: a change while the hook was set
            // is not missed.
            let now = state.generation(bucket);
            if now != seen {
                topic.set_cursor(now);
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || topic.ending() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(state);
        topic.on_interrupt(None);
    }
}

/// The listener thread: LISTEN, count notifications, reconnect when the
/// connection is lost; exit once the store is gone.
fn listen(notifier: &Weak<Notifier>, channel: &str, connect: &dyn Fn() -> Result<postgres::Client, postgres::Error>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(n) = notifier.upgrade() else { return };
        if n.lock().stop {
            return;
        }
        drop(n);
        let client = connect().and_then(|mut c| c.batch_execute(&format!("LISTEN \"{channel}\"")).map(|()| c));
        let Ok(mut client) = client else {
            thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
            continue;
        };
        backoff = Duration::from_millis(100);
        if let Some(n) = notifier.upgrade() {
            let mut state = n.lock();
            // Changes before LISTEN took effect were not seen: wake everyone
            // to re-read.
            state.epoch += 1;
            n.changed.notify_all();
        }
        loop {
            let mut failed = false;
            let mut got = None;
            // Publish each notification as it comes: the iterator ends only
            // after TICK without one.
            match client.notifications().timeout_iter(TICK).next() {
                Ok(Some(note)) if note.channel() == channel => got = Some(bucket(note.payload())),
                Ok(_) => {}
                Err(_) => failed = true,
            }
            failed |= client.is_closed();
            let Some(n) = notifier.upgrade() else { return };
            let mut state = n.lock();
            if state.stop {
                return;
            }
            if let Some(b) = got {
                state.counters[b] += 1;
            }
            if failed {
                // Notifications may have been missed while it was down.
                state.epoch += 1;
            }
            if failed || got.is_some() {
                n.changed.notify_all();
            }
            drop(state);
            if failed {
                break;
            }
        }
    }
}
