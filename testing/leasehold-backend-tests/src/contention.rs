//! Races of several clients of one store, for the stores whose tests can
//! open many clients at once (each test binary passes how to open one):
//! holdings that never overlap, a holder's renewals among a crowd of
//! waiters, a token bump while names are made. Checked on this process's
//! clock and the tokens the store answered, not on the store's own view.

use std::time::Duration;

use leasehold_backend::{Backend, LeaseAcquire, LeaseAcquireParams, Token, TokensBumpParams};

use crate::params;

/// Acquire `name` (free) with a 30 s TTL: its token.
pub fn acquire(store: &dyn Backend, name: &str) -> Token {
    let p = LeaseAcquireParams {
        ttl: Duration::from_secs(30),
        ..params::acquire(name)
    };
    match store.lease_acquire(&p).expect("acquire") {
        LeaseAcquire::Acquired(g) => g.token,
        LeaseAcquire::Held(h) => panic!("{name} is held: {h:?}"),
    }
}

/// Eight clients race for one name, each holding it briefly whenever it
/// gets it. The holdings, timed on this process's monotonic clock between
/// the grant's answer and the release's request, never overlap, and no
/// token is issued twice.
pub fn racing_clients_never_hold_one_name_at_once<B: Backend>(open: &(dyn Fn() -> B + Sync)) {
    let held_so_far = std::sync::atomic::AtomicUsize::new(0);
    let held: Vec<(Token, std::time::Instant, std::time::Instant)> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let store = open();
                    let mut mine = Vec::new();
                    // 3 s, or longer on a slow machine until 16 holdings.
                    let started = std::time::Instant::now();
                    while started.elapsed() < Duration::from_secs(3)
                        || (held_so_far.load(std::sync::atomic::Ordering::SeqCst) < 16
                            && started.elapsed() < Duration::from_secs(30))
                    {
                        let p = LeaseAcquireParams {
                            ttl: Duration::from_secs(30),
                            ..params::acquire("job")
                        };
                        if let LeaseAcquire::Acquired(g) = store.lease_acquire(&p).expect("acquire") {
                            let from = std::time::Instant::now();
                            std::thread::sleep(Duration::from_millis(2));
                            let to = std::time::Instant::now();
                            store.lease_release(&params::release("job", g.token)).expect("release");
                            mine.push((g.token, from, to));
                            held_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                    mine
                })
            })
            .collect();
        racers.into_iter().flat_map(|r| r.join().expect("racer")).collect()
    });
    assert!(
        held.len() >= 8,
        "only {} holdings in 3 s: the race shows little",
        held.len()
    );
    let mut tokens: Vec<Token> = held.iter().map(|h| h.0).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), held.len(), "a token was issued twice");
    let mut by_start = held.clone();
    by_start.sort_by_key(|h| h.1);
    for pair in by_start.windows(2) {
        assert!(
            pair[1].1 > pair[0].2,
            "token {} was held from before token {}'s holding ended",
            pair[1].0,
            pair[0].0
        );
    }
}

/// Thirty waiters keep their places in the queue of a held name (each asks
/// again every 500 ms — a waiter's poll — with a 10 s registration like
/// the library's waiters') while the holder renews every 100 ms for 8 s:
/// every renewal lands and no waiter is granted; the slowest renewal is
/// printed. Before waiters stopped writing at every ask and holders
/// stopped backing off like acquirers, a renewal took 11 s among 40
/// waiters (Python's crowd test), and with 80 waiters asking every 100 ms
/// the holder lost its grant to a waiter here. The emulator's speed
/// under this machine's load is too uneven for a time bound: the write a
/// waiter no longer makes is checked by `a_waiter_asking_again_early_writes_nothing`.
pub fn a_crowd_of_waiters_never_holds_up_the_holders_renewals<B: Backend>(open: &(dyn Fn() -> B + Sync)) {
    const WAITERS: usize = 30;
    let holder = open();
    let token = acquire(&holder, "job");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let slowest = std::thread::scope(|s| {
        for _ in 0..WAITERS {
            s.spawn(|| {
                let store = open();
                let enqueue = params::enqueue("job", leasehold_backend::Mode::Exclusive);
                let mut ticket = Some(store.waiter_enqueue(&enqueue).expect("queue"));
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let p = LeaseAcquireParams {
                        ticket,
                        waiter_ttl: Duration::from_secs(10),
                        waiter_holder: Some(params::holder()),
                        ..params::acquire("job")
                    };
                    match store.lease_acquire(&p).expect("acquire") {
                        LeaseAcquire::Held(h) => ticket = h.ticket,
                        LeaseAcquire::Acquired(g) => panic!("a waiter was granted {g:?} while the holder renews"),
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
        }
        let mut slowest = Duration::ZERO;
        let until = std::time::Instant::now() + Duration::from_secs(8);
        while std::time::Instant::now() < until {
            let asked = std::time::Instant::now();
            let renewed = holder.lease_renew(&params::renew("job", token)).expect("renew");
            assert!(
                matches!(renewed, leasehold_backend::LeaseRenew::Renewed(_)),
                "{renewed:?}"
            );
            slowest = slowest.max(asked.elapsed());
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        slowest
    });
    // No bound on the time beyond the grant's: on the emulator that is
    // the machine's load as much as the store's.
    eprintln!("slowest renewal among {WAITERS} waiters: {slowest:?}");
}

/// Names exist before the bump; four clients make new names and take
/// tokens while it runs. Every token taken after the bump returned is
/// above its floor; per name, tokens only grow.
pub fn a_bump_raises_every_token_after_it_while_names_are_made<B: Backend>(open: &(dyn Fn() -> B + Sync)) {
    let store = open();
    for n in 0..5 {
        for _ in 0..3 {
            let t = acquire(&store, &format!("old-{n}"));
            store
                .lease_release(&params::release(&format!("old-{n}"), t))
                .expect("release");
        }
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let (bumped, after, made) = std::thread::scope(|s| {
        let makers: Vec<_> = (0..4)
            .map(|w| {
                let done = &done;
                s.spawn(move || {
                    let store = open();
                    let mut taken = Vec::new();
                    let mut i = 0;
                    while !done.load(std::sync::atomic::Ordering::SeqCst) || i < 3 {
                        let started = std::time::Instant::now();
                        let name = format!("new-{w}-{i}");
                        let t = acquire(&store, &name);
                        store.lease_release(&params::release(&name, t)).expect("release");
                        // Each maker its own old name: never held by another.
                        let old = format!("old-{w}");
                        let t2 = acquire(&store, &old);
                        store.lease_release(&params::release(&old, t2)).expect("release");
                        taken.push((started, name, t, old, t2));
                        i += 1;
                    }
                    taken
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let bumped = store.tokens_bump(&TokensBumpParams { by: 1000 }).expect("bump");
        let after = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let made: Vec<_> = makers.into_iter().flat_map(|m| m.join().expect("maker")).collect();
        (bumped, after, made)
    });
    let mut checked = 0;
    let mut per_name: std::collections::BTreeMap<String, Vec<Token>> = std::collections::BTreeMap::new();
    for (at, new, t, old, t2) in made {
        per_name.entry(new).or_default().push(t);
        per_name.entry(old).or_default().push(t2);
        // Asked for after the bump returned (the pair began after).
        if at > after + Duration::from_millis(100) {
            assert!(
                t > bumped.floor && t2 > bumped.floor,
                "token {t} / {t2} after a bump to {:?}",
                bumped.floor
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no grant was asked for after the bump: the test shows nothing"
    );
    let t = acquire(&store, "fresh-after");
    assert!(
        t > bumped.floor,
        "a name made after the bump got {t}, floor {:?}",
        bumped.floor
    );
    // One client's tokens of each name grow; across clients, every token
    // of a name is distinct.
    for (name, tokens) in &per_name {
        let mut sorted = tokens.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), tokens.len(), "{name}: a token issued twice: {tokens:?}");
    }
}
