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

use etcd_client::{Client, EventType, GetOptions, ResponseHeader, WatchOptions};
use leasehold_backend::{LeaseName, WaitTopic};

use crate::keys::Keys;

/// Wait until an event on `name` may unblock a waiter, advancing `topic`'s
/// cursor. Runs until woken: the caller bounds it by its timeout. `Err`
/// when the watch cannot be made or breaks (the caller then sleeps).
pub async fn changed(
    mut client: Client,
    keys: &Keys,
    name: &LeaseName,
    topic: &WaitTopic,
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
    let options = WatchOptions::new().with_prefix().with_start_revision(seen + 1);
    // Both halves live until the wait ends; dropping them ends the watch.
    let (_watcher, mut stream) = client.watch(dir.clone(), Some(options)).await?;
    while let Some(resp) = stream.message().await? {
        if resp.compact_revision() != 0 {
            // Events after `seen` are gone: a change may have been missed.
            let now = resp.header().map_or(resp.compact_revision(), ResponseHeader::revision);
            set(topic, now.max(resp.compact_revision()));
            return Ok(());
        }
        if resp.canceled() {
            return Err(etcd_client::Error::WatchError(format!(
                "the server cancelled the watch: {}",
                resp.cancel_reason()
            )));
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
            return Ok(());
        }
    }
    Err(etcd_client::Error::WatchError("the watch stream ended".into()))
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
