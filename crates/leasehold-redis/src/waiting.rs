//! How a waiter waits on Redis: on the name's channel (every commit that
//! changes what waiters wait on publishes there), or on the channel of the
//! waiter just ahead of it, each subscription kept in the waiter's topic
//! for its next wait.

use std::time::{Duration, Instant};

use leasehold_backend::{Behind, LeaseName, WaitTopic, WaiterTicket, Watched};

use crate::resp::Conn;
use crate::{RedisBackend, Result, lease, ok};

impl RedisBackend {
    /// A subscription to the channel of the waiter just ahead
    /// (`RedisBackend::behind`). One that cannot be made or breaks: not
    /// offered this time — the waiter sleeps (a cancel wakes that sleep),
    /// and its next reading reports a store that is down.
    pub(crate) fn wait_behind_of(&self, topic: &WaitTopic, ahead: WaiterTicket, timeout: Duration) -> Behind {
        let Watched::Lease(name) = topic.watched() else {
            return Behind::NotOffered;
        };
        let deadline = Instant::now() + timeout.min(leasehold_backend::limits::WAIT.max);
        self.behind(topic, name, ahead, deadline).unwrap_or(Behind::NotOffered)
    }

    /// Subscribes to the name's channel (every commit that changes what
    /// waiters wait on publishes on it), then reads the name's version:
    /// returns when it differs from the one this topic saw last (its
    /// cursor), when a message arrives, or after `timeout`. The
    /// subscription is kept in the topic for the waiter's next wait. A
    /// grant's expiry writes nothing: a waiter learns of it when its own
    /// wait (bounded by the grant's expiry) ends. Queue topics sleep: no
    /// queue here.
    pub(crate) fn wait_for_change_of(&self, topic: &WaitTopic, timeout: Duration) {
        let deadline = Instant::now() + timeout.min(leasehold_backend::limits::WAIT.max);
        let Watched::Lease(name) = topic.watched() else {
            topic.sleep(deadline.saturating_duration_since(Instant::now()));
            return;
        };
        let waited = || -> Result<()> {
            // The subscription this waiter kept from its last wait: every
            // message since is in its socket, none is missed between two
            // waits. A listening waiter waits in slices of its poll
            // interval; a connection, a SUBSCRIBE and a read of the
            // version for each slice were most of what 200 idle waiters
            // cost.
            let kept = topic.kept().take().and_then(|k| k.downcast::<Conn>().ok());
            let mut sub = if let Some(sub) = kept {
                *sub
            } else {
                // A user without rights on the channel (`&PREFIX:*`;
                // Redis 7 gives none by default) gets NOPERM: its wait
                // is a poll, as on a store without notifications
                // (`doctor` says so).
                let sub = self.subscribed(&self.keys.channel(name))?;
                // Subscribed first, read second: a change after the
                // read is a message; one before it, a new version. A
                // first wait cannot know what version the caller's
                // reading saw: it returns at once, and the caller
                // reads again with the subscription in place.
                let version = self.version(name)?.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let first = topic.cursor() == 0;
                if topic.moved_to(version) || first {
                    *topic.kept() = Some(Box::new(sub));
                    return Ok(());
                }
                sub
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                // A broken subscription is dropped: the next wait makes a
                // new one — as is one whose wait was ended (its socket
                // may be shut).
                let Some(read) = next_unless_ending(topic, &mut sub, left) else {
                    return Ok(());
                };
                read?;
            }
            *topic.kept() = Some(Box::new(sub));
            Ok(())
        };
        // A failed wait is only a shorter one, after which the waiter reads
        // the store (its cursor moved): that read reports a store that is
        // down, and the waiter says so — a kept subscription broken by a
        // restart is otherwise a wait that ended quietly. The next wait
        // subscribes anew, as a first one.
        if waited().is_err() {
            topic.sleep(
                deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(500)),
            );
            topic.set_cursor(0);
        }
    }
}

/// A far-back waiter's subscription to the channel of the waiter just
/// ahead of it (`Keys::left`), kept in its topic between waits.
struct AheadSubscription {
    ahead: WaiterTicket,
    sub: Conn,
}

impl RedisBackend {
    /// A connection of its own, subscribed to `channel`.
    fn subscribed(&self, channel: &str) -> Result<Conn> {
        let mut sub = self.connect()?;
        ok(sub.call(&[b"SUBSCRIBE", channel.as_bytes()])?)?;
        Ok(sub)
    }

    /// `Backend::wait_behind`: subscribe to the channel of `ahead` (the
    /// commit that removes it from the queue publishes there), check it is
    /// still queued, wait for the message. A cancel shuts the socket down.
    fn behind(&self, topic: &WaitTopic, name: &LeaseName, ahead: WaiterTicket, deadline: Instant) -> Result<Behind> {
        let kept = topic.kept().take().and_then(|k| k.downcast::<AheadSubscription>().ok());
        let mut kept = match kept {
            Some(kept) if kept.ahead == ahead => *kept,
            _ => {
                let sub = self.subscribed(&self.keys.left(name, ahead.0))?;
                // Subscribed first, looked second: a leaving after this
                // is a message.
                let ticket = ahead.0.to_string();
                if self.eval(&lease::QUEUED, &[&self.keys.name(name)], &[&ticket])?.int() != Some(1) {
                    return Ok(Behind::Moved);
                }
                AheadSubscription { ahead, sub }
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            *topic.kept() = Some(Box::new(kept));
            return Ok(Behind::Still);
        }
        match next_unless_ending(topic, &mut kept.sub, left) {
            // Interrupted: the socket may be shut; the wait is over anyway.
            None => Ok(Behind::Still),
            Some(Ok(true)) => Ok(Behind::Moved),
            Some(Ok(false)) => {
                *topic.kept() = Some(Box::new(kept));
                Ok(Behind::Still)
            }
            Some(Err(e)) => Err(e.into()),
        }
    }
}

/// Wait up to `left` for `sub`'s next message (whether one came), unless
/// `topic` is [ending](WaitTopic::ending) before or during the wait:
/// then `None`, and the socket may have been shut down to end the read —
/// the subscription is not to be kept.
fn next_unless_ending(topic: &WaitTopic, sub: &mut Conn, left: Duration) -> Option<std::io::Result<bool>> {
    let socket = match sub.interrupter() {
        Ok(socket) => socket,
        Err(e) => return Some(Err(e)),
    };
    topic.on_interrupt(Some(Box::new(move || {
        let _ = socket.shutdown(std::net::Shutdown::Both);
    })));
    let read = (!topic.ending()).then(|| sub.next_message(left));
    topic.on_interrupt(None);
    if topic.ending() { None } else { read }
}
