//! "Waiters are served FIFO: an acquirer is granted only if it is compatible
//! with the live grants *and* with every waiter ahead of it that could itself
//! be granted (so a waiting exclusive acquirer stops new shared grants). A
//! waiter registration expires unless refreshed, so a dead waiter leaves the
//! queue." An acquirer without a ticket stands behind every live waiter.

use std::time::Duration;

use leasehold_backend::{LeaseAcquireParams, Mode, WaiterEnqueueParams, WaiterTicket};

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
    assert_eq!(t.state("job").waiters, 2);
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
        t.state("job").waiters,
        1,
        "a granted waiter's registration must leave the queue, or it blocks the name after release"
    );

    t.released(&params::release("job", grant_a.token));
    let held = t.held(&newcomer);
    assert_eq!(held.waiters_ahead, 1, "b is still waiting");
    let grant_b = t.granted(&acquirer("b", Mode::Exclusive, Some(b)));
    assert_eq!(t.state("job").waiters, 0);

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
    assert_eq!(t.state("job").waiters, 0);

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
    assert_eq!(t.state("job").waiters, 0, "an expired waiter is still counted");
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
    assert_eq!(t.state("job").waiters, 1, "the refresh did not extend the registration");
    let newcomer = acquirer("newcomer", Mode::Exclusive, None);
    assert_eq!(t.held(&newcomer).waiters_ahead, 1);

    t.released(&params::release("job", x.token));
    t.held(&newcomer);
    t.granted(&waiting);
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
    assert_eq!(t.state("job").waiters, 2);

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
    assert_eq!(t.state("job").waiters, 0);
    assert_eq!(t.held(&newcomer).waiters_ahead, 0);

    t.released(&params::release("job", x.token));
    t.granted(&newcomer);
}
