//! "Waiters are served FIFO: an acquirer is granted only if it is compatible
//! with the live grants *and* with every waiter ahead of it that could itself
//! be granted (so a waiting exclusive acquirer stops new shared grants). A
//! waiter registration expires unless refreshed, so a dead waiter leaves the
//! queue." An acquirer without a ticket stands behind every live waiter.

use std::time::{Duration, Instant};

use leasehold_backend::{
    Behind, HistoryEvent, Holder, LeaseAcquireParams, Mode, QueuedWaiter, WaitTopic, WaiterEnqueueParams,
    WaiterRefresh, WaiterRefreshParams, WaiterRemoveParams, WaiterTicket,
};

use crate::params::{self, SHARED};
use crate::{Case, Harness, tokens};

/// An acquirer of `job` with the given owner label, mode and ticket.
fn acquirer(owner: &str, mode: Mode, ticket: Option<WaiterTicket>) -> LeaseAcquireParams {
    LeaseAcquireParams {
        owner: params::implicit(owner),
        mode,
        ticket,
        ..params::acquire("job")
    }
}

fn short_waiter(mode: Mode) -> WaiterEnqueueParams {
    WaiterEnqueueParams {
        ttl: Duration::from_secs(10),
        ..params::enqueue("job", mode)
    }
}

/// Registered waiters are served in order, before any newcomer, even when
/// the name is free.
pub fn waiters_fifo_blocks_newcomers<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let a = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    let b = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    assert_ne!(a, b, "two registrations got one ticket");
    assert_eq!(t.state("job").waiters.len(), 2);
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);

    let held = t.held(&newcomer);
    assert_eq!(tokens(&held.grants), vec![x.token]);
    assert_eq!(held.waiters_ahead, 2, "a newcomer is behind every waiter");
    assert_eq!(held.ticket, None, "no ticket was given, none is returned");

    t.released(&params::release("job", x.token));
    let held = t.held(&newcomer);
    assert_eq!(held.grants, vec![], "no grant is live");
    assert_eq!(held.waiters_ahead, 2, "the free name is reserved for the waiters");

    let held = t.held(&acquirer("b", Mode::Exclusive, Some(b)));
    assert_eq!(held.waiters_ahead, 1, "b is behind a");
    assert_eq!(held.ticket, Some(b), "a live ticket is refreshed in place");

    let grant_a = t.granted(&acquirer("a", Mode::Exclusive, Some(a)));
    assert!(grant_a.token > x.token);
    assert_eq!(
        t.state("job").waiters.len(),
        1,
        "a granted waiter's registration must leave the queue, or it blocks the name after release"
    );

    t.released(&params::release("job", grant_a.token));
    let held = t.held(&newcomer);
    assert_eq!(held.waiters_ahead, 1, "b is still waiting");
    let grant_b = t.granted(&acquirer("b", Mode::Exclusive, Some(b)));
    assert_eq!(t.state("job").waiters.len(), 0);

    t.released(&params::release("job", grant_b.token));
    let grant = t.granted(&newcomer);
    assert!(grant.token > grant_b.token && grant_b.token > grant_a.token);
}

/// A waiting exclusive acquirer stops new shared grants (no writer
/// starvation), and gets the name once the readers are gone.
pub fn waiters_exclusive_waiter_blocks_new_shared<H: Harness>(t: &mut Case<H>) {
    let reader = t.granted(&acquirer("reader", SHARED, None));
    let writer = t.enqueue(&params::enqueue("job", Mode::Exclusive));

    let held = t.held(&acquirer("late reader", SHARED, None));
    assert_eq!(tokens(&held.grants), vec![reader.token]);
    assert_eq!(held.waiters_ahead, 1);

    let held = t.held(&acquirer("writer", Mode::Exclusive, Some(writer)));
    assert_eq!(tokens(&held.grants), vec![reader.token]);
    assert_eq!(held.waiters_ahead, 0);

    t.released(&params::release("job", reader.token));
    let grant = t.granted(&acquirer("writer", Mode::Exclusive, Some(writer)));
    assert_eq!(t.live("job"), vec![grant.token]);
}

/// Shared waiters ahead do not stop a shared newcomer that fits beside them
/// (here within a limit of 3 even counting the waiters as granted), but do
/// stop an exclusive one.
pub fn waiters_shared_waiters_admit_shared_newcomer<H: Harness>(t: &mut Case<H>) {
    let three = Mode::Shared { limit: Some(3) };
    let x = t.granted(&params::acquire("job"));
    let s1 = t.enqueue(&params::enqueue("job", three));
    let s2 = t.enqueue(&params::enqueue("job", three));
    t.released(&params::release("job", x.token));

    let writer = acquirer("writer", Mode::Exclusive, None);
    let held = t.held(&writer);
    assert_eq!(held.waiters_ahead, 2);

    let newcomer = t.granted(&acquirer("newcomer", three, None));
    let g1 = t.granted(&acquirer("s1", three, Some(s1)));
    let g2 = t.granted(&acquirer("s2", three, Some(s2)));
    assert_eq!(t.live("job"), vec![newcomer.token, g1.token, g2.token]);
    assert_eq!(t.state("job").waiters.len(), 0);

    let held = t.held(&acquirer("fourth", three, None));
    assert_eq!(held.grants.len(), 3, "limit 3");
    t.held(&writer);
}

/// A registration that is not refreshed expires and stops blocking.
pub fn waiters_registration_expires<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    t.enqueue(&short_waiter(Mode::Exclusive));
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);
    assert_eq!(t.held(&newcomer).waiters_ahead, 1);

    t.advance(Duration::from_secs(11));
    assert_eq!(t.state("job").waiters.len(), 0, "an expired waiter is still counted");
    let held = t.held(&newcomer);
    assert_eq!(held.waiters_ahead, 0, "an expired waiter is still ahead");
    assert_eq!(tokens(&held.grants), vec![x.token]);

    t.released(&params::release("job", x.token));
    t.granted(&newcomer);
}

/// A held acquisition with a live ticket refreshes the registration for
/// `waiter_ttl` and keeps its place.
pub fn waiters_refresh_keeps_place<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let a = t.enqueue(&short_waiter(Mode::Exclusive));
    let waiting = LeaseAcquireParams {
        waiter_ttl: Duration::from_secs(10),
        ..acquirer("a", Mode::Exclusive, Some(a))
    };

    t.advance(Duration::from_secs(6));
    let held = t.held(&waiting);
    assert_eq!(held.ticket, Some(a), "a live ticket is refreshed in place");
    assert_eq!(held.waiters_ahead, 0);

    // 12s after registering, 6s after the refresh.
    t.advance(Duration::from_secs(6));
    assert_eq!(
        t.state("job").waiters.len(),
        1,
        "the refresh did not extend the registration"
    );
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);
    assert_eq!(t.held(&newcomer).waiters_ahead, 1);

    t.released(&params::release("job", x.token));
    t.held(&newcomer);
    t.granted(&waiting);
}

/// "Keep a waiter's registration alive for another `params.ttl`, in its
/// place, without an attempt" (`Backend::waiter_refresh`), where the
/// store offers it: a place refreshed before each end outlives its TTL
/// several times over, still ahead of a waiter queued after it; a place
/// that is gone is said to be gone. A store that offers none says so and
/// changes nothing: the place runs out.
pub fn waiters_refresh_alone_keeps_place<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let ttl = t.expiry_ttl();
    let a = t.enqueue(&WaiterEnqueueParams {
        ttl,
        ..params::enqueue("job", Mode::Exclusive)
    });
    let long = Duration::from_secs(3600);
    let b = t.enqueue(&WaiterEnqueueParams {
        ttl: long,
        ..params::enqueue("job", Mode::Exclusive)
    });
    let refresh_for = |ticket, ttl| {
        t.backend()
            .waiter_refresh(&WaiterRefreshParams {
                name: params::name("job"),
                ticket,
                ttl,
            })
            .unwrap_or_else(|e| panic!("waiter_refresh: {e}"))
    };
    let refresh = |ticket| refresh_for(ticket, ttl);
    let offered = refresh(a);
    // Five times half the TTL (and more than the TTL and a real-time
    // store's expiry lag), refreshing at each.
    for _ in 0..5 {
        t.almost_expire();
        assert_eq!(refresh(a), offered, "a refresh of a live place changed its answer");
    }
    let queued: Vec<WaiterTicket> = t.state("job").waiters.iter().map(|w| w.ticket).collect();
    if offered == WaiterRefresh::NotOffered {
        assert_eq!(queued, vec![b], "a refresh the store does not offer kept the place");
        return;
    }
    assert_eq!(offered, WaiterRefresh::Refreshed);
    assert_eq!(queued, vec![a, b], "the refreshed place ran out, or moved");
    assert_eq!(refresh_for(b, long), WaiterRefresh::Refreshed, "b's place is live");
    t.released(&params::release("job", x.token));
    assert_eq!(t.held(&acquirer("b", Mode::Exclusive, Some(b))).waiters_ahead, 1);
    t.granted(&acquirer("a", Mode::Exclusive, Some(a)));
    assert_eq!(
        refresh(a),
        WaiterRefresh::Gone,
        "a place that left the queue was refreshed"
    );
}

/// "Block until `ahead`, the waiter just ahead, leaves the queue"
/// (`Backend::wait_behind`), where the store offers it: a waiter is woken
/// when the waiter it names leaves — here 300 ms in, well before its
/// wait's 10 s — not when a waiter further ahead does, and at once when
/// the one it names is not queued any more. A store that offers none says
/// so at once.
pub fn waiters_far_back_wait_for_the_waiter_just_ahead<H: Harness>(t: &mut Case<H>) {
    let name = params::name("job");
    t.granted(&params::acquire("job"));
    let first = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    let ahead = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    let b = t.backend();
    let remove = |ticket| {
        b.waiter_remove(&WaiterRemoveParams {
            name: name.clone(),
            ticket,
        })
        .unwrap_or_else(|e| panic!("waiter_remove: {e}"));
    };
    let wait = || {
        let topic = WaitTopic::lease(&name);
        let began = Instant::now();
        let woke = b
            .wait_behind(&topic, ahead, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("wait_behind: {e}"));
        (woke, began.elapsed())
    };
    let (woke, waited) = std::thread::scope(|s| {
        let waiter = s.spawn(wait);
        std::thread::sleep(Duration::from_millis(300));
        remove(first);
        std::thread::sleep(Duration::from_millis(300));
        remove(ahead);
        waiter.join().expect("the waiting thread")
    });
    if woke == Behind::NotOffered {
        assert!(waited < Duration::from_secs(1), "a wait not offered took {waited:?}");
        return;
    }
    assert_eq!(woke, Behind::Moved, "not woken by the waiter just ahead leaving");
    assert!(
        (Duration::from_millis(500)..Duration::from_secs(5)).contains(&waited),
        "woken after {waited:?}: by the waiter further ahead, or late"
    );
    let (woke, waited) = wait();
    assert_eq!(woke, Behind::Moved, "a waiter no longer queued is waited for");
    assert!(
        waited < Duration::from_secs(5),
        "a waiter no longer queued was waited for {waited:?}"
    );
}

/// A wait for a change ends soon after its topic is woken (a blocker's
/// exit, seen by the waiter's own watch) or interrupted (a cancel), though
/// nothing changed in the store: a waiter near the front waits in one
/// piece, and only these end it early. A wake ends one wait; an interrupt
/// every later one too, at once.
pub fn waits_end_when_woken_or_interrupted<H: Harness>(t: &mut Case<H>) {
    let name = params::name("job");
    t.granted(&params::acquire("job"));
    let b = t.backend();
    let topic = WaitTopic::lease(&name);
    // A first wait may only learn where the store is (etcd, Redis).
    b.wait_for_change(&topic, Duration::from_millis(200))
        .unwrap_or_else(|e| panic!("wait_for_change: {e}"));
    let wait_then = |end: &dyn Fn(&WaitTopic)| {
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let began = Instant::now();
                b.wait_for_change(&topic, Duration::from_secs(20))
                    .unwrap_or_else(|e| panic!("wait_for_change: {e}"));
                began.elapsed()
            });
            std::thread::sleep(Duration::from_millis(300));
            end(&topic);
            waiter.join().expect("the waiting thread")
        })
    };
    let waited = wait_then(&WaitTopic::wake);
    assert!(waited < Duration::from_secs(5), "a woken wait took {waited:?}");
    assert!(topic.take_woken(), "the wake was not left for the waiter to clear");
    let waited = wait_then(&WaitTopic::interrupt);
    assert!(waited < Duration::from_secs(5), "an interrupted wait took {waited:?}");
    let began = Instant::now();
    b.wait_for_change(&topic, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("wait_for_change: {e}"));
    let waited = began.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "a wait after the interrupt took {waited:?}"
    );
}

/// Acquiring with an expired ticket while held re-makes the registration at
/// the back of the queue, with a new ticket.
pub fn waiters_expired_ticket_is_remade_at_back<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let a = t.enqueue(&short_waiter(Mode::Exclusive));
    t.advance(Duration::from_secs(11));
    let b = t.enqueue(&params::enqueue("job", Mode::Exclusive));

    let held = t.held(&acquirer("a", Mode::Exclusive, Some(a)));
    let remade = held
        .ticket
        .expect("a held acquirer with an expired ticket gets a new one");
    assert_ne!(remade, a, "the expired ticket was revived instead of re-made");
    assert_ne!(remade, b);
    assert_eq!(held.waiters_ahead, 1, "the re-made registration is behind b");
    assert_eq!(t.state("job").waiters.len(), 2);

    t.released(&params::release("job", x.token));
    let held = t.held(&acquirer("a", Mode::Exclusive, Some(remade)));
    assert_eq!(held.waiters_ahead, 1);
    assert_eq!(held.ticket, Some(remade));
    t.granted(&acquirer("b", Mode::Exclusive, Some(b)));
}

/// A waiter that gives up leaves the queue; removing an unknown or already
/// removed ticket is not an error.
pub fn waiters_remove_unblocks<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let a = t.enqueue(&params::enqueue("job", Mode::Exclusive));
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);
    assert_eq!(t.held(&newcomer).waiters_ahead, 1);

    t.remove("job", a);
    t.remove("job", a);
    t.remove("job", WaiterTicket(a.0.wrapping_add(1000)));
    t.remove("never-granted", a);
    assert_eq!(t.state("job").waiters.len(), 0);
    assert_eq!(t.held(&newcomer).waiters_ahead, 0);

    t.released(&params::release("job", x.token));
    t.granted(&newcomer);
}

/// A waiting process `pid` (the suite's holder, another pid).
fn waiting_process(pid: u32) -> Holder {
    Holder {
        pid,
        cmdline: format!("waiter {pid}"),
        ..params::holder()
    }
}

fn enqueue_as(mode: Mode, holder: &Holder) -> WaiterEnqueueParams {
    WaiterEnqueueParams {
        holder: holder.clone(),
        ..params::enqueue("job", mode)
    }
}

/// "Each waiter is read with the process that waits": `lease_get`,
/// `lease_list` and a held acquisition's `ahead` report every live
/// registration with its ticket, mode and holder as registered, in FIFO
/// order; a registration re-made at the back records `waiter_holder` (the
/// waiting process), not the holder the grant would have.
pub fn waiters_are_read_with_the_waiting_process<H: Harness>(t: &mut Case<H>) {
    let three = Mode::Shared { limit: Some(3) };
    let (p1, p2) = (waiting_process(1001), waiting_process(1002));
    let x = t.granted(&params::acquire("job"));
    let a = t.enqueue(&enqueue_as(Mode::Exclusive, &p1));
    let b = t.enqueue(&enqueue_as(three, &p2));
    let expected = vec![
        QueuedWaiter {
            ticket: a,
            mode: Mode::Exclusive,
            holder: Some(p1.clone()),
        },
        QueuedWaiter {
            ticket: b,
            mode: three,
            holder: Some(p2.clone()),
        },
    ];
    assert_eq!(t.state("job").waiters, expected, "lease_get");
    assert_eq!(t.list(false)[0].waiters, expected, "lease_list");
    assert_eq!(t.list(true)[0].waiters, expected, "lease_list of live names");
    let held = t.held(&acquirer("newcomer", Mode::Exclusive, None));
    assert_eq!((held.waiters_ahead, &held.ahead), (2, &expected), "a newcomer's Held");
    let held = t.held(&acquirer("b", three, Some(b)));
    assert_eq!((held.waiters_ahead, &held.ahead[..]), (1, &expected[..1]), "b's Held");
    // A refresh for another TTL (etcd: a new etcd lease, the key rewritten)
    // keeps who waits.
    t.held(&LeaseAcquireParams {
        waiter_ttl: Duration::from_secs(20),
        ..acquirer("b", three, Some(b))
    });
    assert_eq!(t.state("job").waiters, expected, "after b's refresh");

    // a's registration is gone (removed here; to the plan a lapse is the
    // same): a asks again and is queued anew, recorded as the process that
    // waits.
    t.remove("job", a);
    let p3 = waiting_process(1003);
    let held = t.held(&LeaseAcquireParams {
        waiter_holder: Some(p3.clone()),
        ..acquirer("a", Mode::Exclusive, Some(a))
    });
    let remade = held
        .ticket
        .expect("a held acquirer with a lapsed ticket is queued anew");
    assert_eq!(held.ahead, expected[1..], "the re-made registration is behind b");
    let waiters = t.state("job").waiters;
    assert_eq!(waiters.len(), 2);
    assert_eq!(
        (waiters[1].ticket, waiters[1].holder.as_ref()),
        (remade, Some(&p3)),
        "a re-made registration must record the waiting process"
    );
    t.released(&params::release("job", x.token));
}

/// "What a waiter reads between its attempts: `lease_get` with only the
/// waiters ahead of `ticket`, of which only the first `proved` must say
/// who waits": the grants and counter as `lease_get` has them, the
/// waiters queued before the ticket in FIFO order with their modes, the
/// first `proved` with the process that waits, the others with it or
/// without; none for the first in line; nothing for a name never granted.
pub fn waiters_read_by_a_waiter_are_those_ahead_of_it<H: Harness>(t: &mut Case<H>) {
    let three = Mode::Shared { limit: Some(3) };
    let (p1, p2, p3) = (waiting_process(1001), waiting_process(1002), waiting_process(1003));
    let held = t.granted(&params::acquire("job"));
    let a = t.enqueue(&enqueue_as(Mode::Exclusive, &p1));
    let b = t.enqueue(&enqueue_as(three, &p2));
    let third = t.enqueue(&enqueue_as(Mode::Exclusive, &p3));
    let job = leasehold_backend::LeaseName::new("job").unwrap();
    let whole = t.state("job");
    let read = t
        .backend()
        .lease_waiting(&job, third, 1)
        .unwrap()
        .expect("a granted name");
    assert_eq!(
        (read.last_token, tokens(&read.grants)),
        (whole.last_token, vec![held.token])
    );
    let seen: Vec<_> = read.waiters.iter().map(|w| (w.ticket, w.mode)).collect();
    assert_eq!(
        seen,
        vec![(a, Mode::Exclusive), (b, three)],
        "the waiters ahead of the third, in order"
    );
    assert_eq!(
        read.waiters[0].holder.as_ref(),
        Some(&p1),
        "the first is proved: who waits"
    );
    assert!(
        read.waiters[1].holder.is_none() || read.waiters[1].holder.as_ref() == Some(&p2),
        "a waiter beyond those proved is read with who waits or without"
    );
    let first = t.backend().lease_waiting(&job, a, 8).unwrap().expect("a granted name");
    assert_eq!(first.waiters, vec![], "nobody is ahead of the first in line");
    let never = leasehold_backend::LeaseName::new("never-granted").unwrap();
    assert!(t.backend().lease_waiting(&never, a, 8).unwrap().is_none());
    t.released(&params::release("job", held.token));
}

/// "Drop the waiters listed in `params.evict_waiters` if still queued":
/// a waiter the caller proved dead leaves the queue in the same
/// transaction that judges the acquirer, so a newcomer behind a killed
/// waiter is granted a free name at once — and nothing else moves: no
/// history entry, the other waiters keep their places.
pub fn waiters_evicted_waiter_leaves_in_the_acquiring_transaction<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let dead = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1001)));
    t.released(&params::release("job", x.token));
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);
    let held = t.held(&newcomer);
    assert_eq!(held.waiters_ahead, 1, "the dead waiter still blocks until it is named");
    assert_eq!(held.ahead[0].ticket, dead);

    let grant = t.granted(&LeaseAcquireParams {
        evict_waiters: vec![dead],
        ..newcomer.clone()
    });
    assert_eq!(t.live("job"), vec![grant.token]);
    assert_eq!(t.state("job").waiters, vec![], "the evicted waiter is still queued");
    assert_eq!(
        t.events("job"),
        vec![
            (HistoryEvent::Granted, Some(grant.token)),
            (HistoryEvent::Released, Some(x.token)),
            (HistoryEvent::Granted, Some(x.token)),
        ],
        "evicting a waiter is not a history event (as a registration's expiry is not)"
    );

    // Held while the grant lives: the eviction is committed all the same,
    // and a live waiter behind the evicted one keeps its place.
    let dead = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1002)));
    let live = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1003)));
    let held = t.held(&LeaseAcquireParams {
        evict_waiters: vec![dead],
        ..newcomer
    });
    assert_eq!(tokens(&held.grants), vec![grant.token]);
    assert_eq!(held.waiters_ahead, 1);
    let left: Vec<WaiterTicket> = t.state("job").waiters.iter().map(|w| w.ticket).collect();
    assert_eq!(left, vec![live], "a refused acquisition did not commit its eviction");
}

/// An eviction names a registration, not a place: tickets no longer (or
/// never) queued remove nothing, and an acquirer's own ticket is never
/// removed by its own eviction list.
pub fn waiters_evict_only_removes_registrations_still_queued<H: Harness>(t: &mut Case<H>) {
    let x = t.granted(&params::acquire("job"));
    let gone = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1001)));
    t.remove("job", gone);
    let mine = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1002)));
    let other = t.enqueue(&enqueue_as(Mode::Exclusive, &waiting_process(1003)));
    let never = WaiterTicket(other.0.wrapping_add(1000));

    let held = t.held(&LeaseAcquireParams {
        evict_waiters: vec![gone, never, mine],
        ..acquirer("mine", Mode::Exclusive, Some(mine))
    });
    assert_eq!(
        held.ticket,
        Some(mine),
        "the acquirer's own registration was removed or re-made"
    );
    assert_eq!(held.waiters_ahead, 0);
    let queued: Vec<WaiterTicket> = t.state("job").waiters.iter().map(|w| w.ticket).collect();
    assert_eq!(queued, vec![mine, other]);

    t.released(&params::release("job", x.token));
    t.granted(&acquirer("mine", Mode::Exclusive, Some(mine)));
    let queued: Vec<WaiterTicket> = t.state("job").waiters.iter().map(|w| w.ticket).collect();
    assert_eq!(queued, vec![other]);
}
