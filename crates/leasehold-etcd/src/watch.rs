//! Wake-ups by etcd watches.
//!
//! A waiter on a lease name watches that name's key range
//! (`PREFIX/lease/NAME/`, see `keys`) from the revision after the last one
//! it has examined, and wakes on an event that may unblock it:
//! - any write of the name's guard key (`v`): every transaction that
//!   changes a decision writes it (release, grant, takeover, expiry
//!   cleanup, waiters joining or leaving the queue);
//! - the DELETE of a live marker (`g/SLOT`): also when the grant's etcd
//!   lease runs out on the server, which writes no guard — so a waiter is
//!   woken by an expiry itself, not by the next writer or its own poll;
//! - the DELETE of a waiter key (`w/SLOT`): a waiter ahead left or its
//!   registration expired.
//!
//! Renewals (a live marker moved to a fresh etcd lease: PUTs of `g/` and
//! `r/`, no guard write) wake nobody.
//!
//! The waiter's [`WaitTopic`] cursor is the newest revision whose events it
//! has examined. Watching from the cursor + 1 replays every change made
//! since — including one made while the waiter was re-reading the store —
//! so none is missed. The first wait of a topic (cursor 0) cannot know what
//! revision the caller's read saw: it takes the current revision as the
//! cursor and returns at once, and the caller's next read is at that
//! revision or later. History compacted past the cursor also returns at
//! once (changes may have been missed: the caller re-reads).

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, ResponseHeader, WatchOptions, WatchStream, Watcher};
use leasehold_backend::{Behind, LeaseName, WaitTopic, WaiterTicket};
use tokio::time::Instant;

use crate::keys::Keys;

/// How long ending a watch may take past the wait's deadline: the cancel's
/// round trip to the server (see [`end`]).
pub const END_GRACE: Duration = Duration::from_secs(1);

/// Wait until an event on `name` may unblock a waiter, or until
/// `deadline`, advancing `topic`'s cursor. The watch is kept in `topic`
/// for the waiter's next wait ([`Open`]). `Err` when the watch cannot be
/// made or breaks (the caller then sleeps). Once the watch is made,
/// returns by `deadline` + [`END_GRACE`] at the latest.
pub async fn changed(
    mut client: Client,
    keys: &Keys,
    name: &LeaseName,
    topic: &WaitTopic,
    deadline: Instant,
) -> Result<(), etcd_client::Error> {
    let dir = keys.name_dir(name);
    let seen = i64::try_from(topic.cursor()).unwrap_or(i64::MAX);
    if seen == 0 {
        let resp = client
            .get(dir, Some(GetOptions::new().with_prefix().with_count_only()))
            .await?;
        set(topic, resp.header().map_or(1, ResponseHeader::revision));
        return Ok(());
    }
    // The watch this waiter kept from its last wait — it has examined
    // every event up to the cursor — or a new one from the revision after.
    let mut open = if let Some(open) = kept(topic, Target::Name) {
        open
    } else {
        let options = WatchOptions::new().with_prefix().with_start_revision(seen + 1);
        Open::new(client.watch(dir.clone(), Some(options)).await?, Target::Name)
    };
    let Some((_, stream)) = open.watch.as_mut() else {
        return Ok(());
    };
    let ended = until_ending(topic, deadline, examine(stream, &dir, topic)).await;
    match ended {
        // The server ended the watch (or the stream): nothing to cancel.
        Some(Ended::ByServer(result)) => {
            open.watch = None;
            result
        }
        // Woken, ending or out of time: a wait that ran its course. The
        // watch is kept for the waiter's next wait (reading a stream's
        // next message is cancel-safe: nothing is lost at the deadline).
        Some(Ended::Woken) | None => {
            *topic.kept() = Some(Box::new(open));
            Ok(())
        }
    }
}

/// `wait`'s outcome, or `None` at `deadline` or when `topic` is
/// [ending](WaitTopic::ending) (before or during the wait).
async fn until_ending<T>(topic: &WaitTopic, deadline: Instant, wait: impl Future<Output = T>) -> Option<T> {
    let ending = std::sync::Arc::new(tokio::sync::Notify::new());
    let wake = ending.clone();
    topic.on_interrupt(Some(Box::new(move || wake.notify_one())));
    let outcome = if topic.ending() {
        None
    } else {
        tokio::select! {
            outcome = wait => Some(outcome),
            () = ending.notified() => None,
            () = tokio::time::sleep_until(deadline) => None,
        }
    };
    topic.on_interrupt(None);
    outcome
}

/// Wait, for a waiter far back, until `ahead` — the waiter just ahead of
/// it in `name`'s queue — leaves the queue (its key is deleted, or
/// written: a registration re-made), until `deadline`, or until `topic` is
/// interrupted. Only that one key is watched: a queue standing still sends
/// nothing, and a waiter leaving wakes the one behind it alone. `Moved` at
/// once when `ahead` is no longer queued. The watch is kept in `topic` for
/// the next wait on the same waiter. `Err` when the watch cannot be made
/// or breaks.
pub async fn behind(
    mut client: Client,
    keys: &Keys,
    name: &LeaseName,
    ahead: WaiterTicket,
    topic: &WaitTopic,
    deadline: Instant,
) -> Result<Behind, etcd_client::Error> {
    let mut open = if let Some(open) = kept(topic, Target::Ahead(ahead)) {
        open
    } else {
        let (waiters, options) = keys.waiter_of(name, ahead);
        let resp = client.get(waiters, Some(options.with_keys_only())).await?;
        let Some(key) = resp.kvs().first() else {
            return Ok(Behind::Moved);
        };
        // From the revision after the read: its leaving since is seen.
        let read = resp.header().map_or(1, ResponseHeader::revision);
        let options = WatchOptions::new().with_start_revision(read + 1);
        Open::new(client.watch(key.key(), Some(options)).await?, Target::Ahead(ahead))
    };
    let Some((_, stream)) = open.watch.as_mut() else {
        return Ok(Behind::Moved);
    };
    match until_ending(topic, deadline, stream.message()).await {
        // Out of time, or interrupted: the watch is kept (reading a
        // stream's next message is cancel-safe).
        None => {
            *topic.kept() = Some(Box::new(open));
            Ok(Behind::Still)
        }
        // Any event on that key, or the watch ended (compacted past its
        // start, cancelled): read again, and watch anew.
        Some(Ok(Some(resp))) if !resp.canceled() && resp.compact_revision() == 0 && resp.events().is_empty() => {
            // A progress notification: nothing happened.
            *topic.kept() = Some(Box::new(open));
            Ok(Behind::Still)
        }
        Some(Ok(_)) => {
            open.watch = None;
            Ok(Behind::Moved)
        }
        Some(Err(e)) => {
            open.watch = None;
            Err(e)
        }
    }
}

/// What a kept watch watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The name's keys ([`changed`]).
    Name,
    /// The key of the waiter of this ticket, just ahead ([`behind`]).
    Ahead(WaiterTicket),
}

/// The watch `topic` kept, if it watches `target`; one that watches
/// something else is ended (cleanly: see [`Open`]'s drop).
fn kept(topic: &WaitTopic, target: Target) -> Option<Open> {
    let open = topic.kept().take().and_then(|k| k.downcast::<Open>().ok())?;
    (open.target == target).then_some(*open)
}

/// A watch kept open between one waiter's waits, in its topic: a waiter
/// waits in slices of its poll interval (100 ms), and a watch made and
/// cancelled for each slice was two round trips and a server-side watcher
/// ten times a second per waiter. Ended cleanly (see [`end`]) when the
/// topic is dropped.
struct Open {
    watch: Option<(Watcher, WatchStream)>,
    target: Target,
    runtime: tokio::runtime::Handle,
}

impl Open {
    fn new(watch: (Watcher, WatchStream), target: Target) -> Self {
        Self {
            watch: Some(watch),
            target,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some((mut watcher, mut stream)) = self.watch.take() {
            // On the runtime, by the next call that drives it; a runtime
            // already gone has closed the connection, and the watch with it.
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(END_GRACE, end(&mut watcher, &mut stream)).await;
            });
        }
    }
}

/// How reading a watch ended.
enum Ended {
    /// An event that may unblock a waiter: the watch is still live.
    Woken,
    /// The server cancelled the watch (history compacted past its start:
    /// `Ok`, the caller re-reads) or the stream broke.
    ByServer(Result<(), etcd_client::Error>),
}

/// Read the watch's responses until one may unblock a waiter.
async fn examine(stream: &mut WatchStream, dir: &str, topic: &WaitTopic) -> Ended {
    loop {
        let resp = match stream.message().await {
            Ok(Some(resp)) => resp,
            Ok(None) => return Ended::ByServer(Err(etcd_client::Error::WatchError("the watch stream ended".into()))),
            Err(e) => return Ended::ByServer(Err(e)),
        };
        if resp.compact_revision() != 0 {
            // Events after `seen` are gone: a change may have been missed.
            // (etcd cancels such a watch itself.)
            let now = resp.header().map_or(resp.compact_revision(), ResponseHeader::revision);
            set(topic, now.max(resp.compact_revision()));
            return Ended::ByServer(Ok(()));
        }
        if resp.canceled() {
            return Ended::ByServer(Err(etcd_client::Error::WatchError(format!(
                "the server cancelled the watch: {}",
                resp.cancel_reason()
            ))));
        }
        let mut newest = i64::try_from(topic.cursor()).unwrap_or(i64::MAX);
        let mut woken = false;
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            newest = newest.max(kv.mod_revision());
            let tail = kv.key().get(dir.len()..).unwrap_or_default();
            woken |= wakes(tail, event.event_type());
        }
        // Responses hold whole revisions: all of them are examined now.
        set(topic, newest);
        if woken {
            return Ended::Woken;
        }
    }
}

/// End the watch before its stream is dropped: cancel it and read on until
/// the server confirms. etcd keeps a watch stream open when the client
/// closes its side, so a dropped stream is reset (`RST_STREAM`) — and the
/// server's responses still on their way then arrive for a stream the
/// client has forgotten (h2 remembers 50 resets, for 1 s). h2 answers each
/// with a reset of its own and counts those for the connection's whole
/// life: at 1024 it closes the connection (GOAWAY
/// `too_many_internal_resets`) and every call on it fails. A crowd of 200
/// waiters in one process, dropping their watches mid-stream, got there in
/// seconds. A stream whose watch the server confirmed cancelled has
/// nothing more on its way.
async fn end(watcher: &mut Watcher, stream: &mut WatchStream) {
    if watcher.cancel().await.is_err() {
        return;
    }
    while let Ok(Some(resp)) = stream.message().await {
        if resp.canceled() {
            return;
        }
    }
}

/// Whether an event on the key `tail` (below the name's directory) may
/// unblock a waiter.
fn wakes(tail: &[u8], kind: EventType) -> bool {
    tail == b"v" || (kind == EventType::Delete && (tail.starts_with(b"g/") || tail.starts_with(b"w/")))
}

fn set(topic: &WaitTopic, revision: i64) {
    topic.set_cursor(u64::try_from(revision.max(1)).unwrap_or(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_writes_and_ended_grants_or_waiters_wake() {
        assert!(wakes(b"v", EventType::Put));
        assert!(wakes(b"g/00000000000000ab", EventType::Delete));
        assert!(wakes(b"w/00000000000000ab", EventType::Delete));
        // A renewal moves the live marker and rewrites the record.
        assert!(!wakes(b"g/00000000000000ab", EventType::Put));
        assert!(!wakes(b"r/00000000000000ab", EventType::Put));
        assert!(!wakes(b"t", EventType::Put));
    }
}
