//! Real time, real processes and a real etcd: what the conformance suite
//! cannot test on a store whose clock it cannot move.
//!
//! - grants and waiter registrations expire on the server's clock;
//! - racing acquirers (each with its own connection) never overlap and
//!   never share a token;
//! - etcd killed -9 and restarted during 1,000 operations never reissues a
//!   token (fault case 12);
//! - a holder process paused with SIGSTOP past its TTL loses its grant, and
//!   its late fence is refused.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_backend::{
    Backend, FenceRefusal, HistoryEntry, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseFence, LeaseFenceParams,
    LeaseHistoryParams, LeaseName, LeaseReleaseParams, LeaseRenew, LeaseRenewParams, Mode, Owner, Token,
    WaiterEnqueueParams,
};
use leasehold_backend_tests::params;
use leasehold_testkit::etcd::{self, EtcdServer};

fn main() {
    // The paused holder (this binary, started again by its test) runs no
    // tests.
    if let (Ok(endpoint), Ok(prefix)) = (std::env::var("LH_HELPER_ENDPOINT"), std::env::var("LH_HELPER_PREFIX")) {
        paused_holder(endpoint, prefix);
        return;
    }
    leasehold_testkit::main(&[leasehold_testkit::tests![
        grants_and_waiters_expire_on_the_server_clock,
        renew_keeps_a_short_grant_alive_past_its_ttl,
        racing_acquirers_never_overlap_nor_share_a_token,
        kill9_and_restart_never_reissue_a_token,
        paused_holder_loses_its_grant_and_its_late_fence_is_refused,
        one_backend_serves_many_threads_at_once,
    ]]);
}

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).expect("valid name")
}

fn acquire_params(lease: &str, owner: &str, ttl: Duration) -> LeaseAcquireParams {
    LeaseAcquireParams {
        name: name(lease),
        owner: Owner {
            label: owner.into(),
            explicit: false,
        },
        mode: Mode::Exclusive,
        ttl,
        holder: params::this_process("faults"),
        ticket: None,
        waiter_ttl: Duration::from_secs(10),
        evict: Vec::new(),
        evict_waiters: Vec::new(),
        waiter_holder: None,
        reacquire_by_process: false,
    }
}

fn fence(b: &dyn Backend, lease: &str, token: Token) -> LeaseFence {
    b.lease_fence(&LeaseFenceParams {
        name: name(lease),
        token,
        grant: None,
        caller: "faults".into(),
    })
    .expect("fence")
}

fn history(b: &dyn Backend, lease: &str) -> Vec<HistoryEntry> {
    b.lease_history(&LeaseHistoryParams {
        name: name(lease),
        limit: 100,
    })
    .expect("history")
}

/// Poll `cond` until it holds or `limit` passes (etcd's lessor removes
/// expired leases in rounds of about 500 ms after their TTL).
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

fn grants_and_waiters_expire_on_the_server_clock() {
    let b = support::open(etcd::shared(), &etcd::unique_prefix("faults", "expiry"));
    let ttl = Duration::from_secs(2);
    let LeaseAcquire::Acquired(first) = b.lease_acquire(&acquire_params("job", "a", ttl)).unwrap() else {
        panic!("a free name must be granted");
    };
    assert!(first.expires_in <= ttl, "{:?}", first.expires_in);
    let ticket = b
        .waiter_enqueue(&WaiterEnqueueParams {
            name: name("job"),
            mode: Mode::Exclusive,
            holder: params::this_process("faults"),
            ttl,
        })
        .unwrap();
    assert_eq!(b.lease_get(&name("job")).unwrap().unwrap().waiters.len(), 1);
    assert!(matches!(
        b.lease_acquire(&acquire_params("job", "b", ttl)).unwrap(),
        LeaseAcquire::Held(h) if h.waiters_ahead == 1
    ));

    // Live for most of its TTL...
    std::thread::sleep(Duration::from_millis(1200));
    assert!(matches!(fence(&b, "job", first.token), LeaseFence::Passed(_)));
    // ...and gone, with the waiter, a little after it.
    assert!(
        eventually(Duration::from_secs(5), || {
            let state = b.lease_get(&name("job")).unwrap().unwrap();
            state.grants.is_empty() && state.waiters.is_empty()
        }),
        "a 2 s grant and a 2 s waiter are still there 6 s later"
    );
    let _ = ticket;
    assert_eq!(
        fence(&b, "job", first.token),
        LeaseFence::Refused {
            newest: Some(first.token),
            reason: FenceRefusal::NotLive
        }
    );
    let LeaseAcquire::Acquired(second) = b.lease_acquire(&acquire_params("job", "b", ttl)).unwrap() else {
        panic!("an expired grant and waiter must not block");
    };
    assert!(second.token > first.token);
    assert_eq!(
        b.lease_renew(&LeaseRenewParams {
            name: name("job"),
            token: first.token,
            owner: None,
            grant: None,
            ttl,
        })
        .unwrap(),
        LeaseRenew::Lost(leasehold_backend::LostReason::Expired),
        "renew of a grant that expired and was replaced: the history says it expired (issue 22)"
    );
    let events: Vec<_> = history(&b, "job").iter().map(|e| (e.event, e.token)).collect();
    assert!(
        events.contains(&(HistoryEvent::Expired, Some(first.token))),
        "the expiry is recorded: {events:?}"
    );
}

fn renew_keeps_a_short_grant_alive_past_its_ttl() {
    let b = support::open(etcd::shared(), &etcd::unique_prefix("faults", "renew"));
    let ttl = Duration::from_secs(2);
    let LeaseAcquire::Acquired(g) = b.lease_acquire(&acquire_params("job", "a", ttl)).unwrap() else {
        panic!("granted");
    };
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(700));
        let renewed = b
            .lease_renew(&LeaseRenewParams {
                name: name("job"),
                token: g.token,
                owner: Some("a".into()),
                grant: None,
                ttl,
            })
            .unwrap();
        assert!(matches!(renewed, LeaseRenew::Renewed(r) if r.token == g.token));
    }
    assert!(
        matches!(fence(&b, "job", g.token), LeaseFence::Passed(_)),
        "2.8 s into a renewed 2 s grant"
    );
}

fn racing_acquirers_never_overlap_nor_share_a_token() {
    let server = etcd::shared();
    let prefix = etcd::unique_prefix("faults", "race");
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(20);
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let (inside, tokens, prefix) = (inside.clone(), tokens.clone(), prefix.clone());
            std::thread::spawn(move || {
                // Its own connection: an independent client of the cluster.
                let b = support::open(server, &prefix);
                let mut mine = 0;
                while mine < 15 && Instant::now() < deadline {
                    let p = acquire_params("job", &format!("racer-{i}"), Duration::from_secs(10));
                    if let LeaseAcquire::Acquired(g) = b.lease_acquire(&p).unwrap() {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two exclusive holders at once");
                        assert!(matches!(fence(&b, "job", g.token), LeaseFence::Passed(_)));
                        tokens.lock().unwrap().push(g.token);
                        inside.store(false, Ordering::SeqCst);
                        b.lease_release(&LeaseReleaseParams {
                            name: name("job"),
                            token: g.token,
                            owner: None,
                            grant: None,
                        })
                        .unwrap();
                        mine += 1;
                    }
                }
                mine
            })
        })
        .collect();
    let granted: u32 = threads.into_iter().map(|t| t.join().expect("racer")).sum();
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), granted as usize);
    assert!(granted >= 30, "only {granted} grants in 20 s");
    // Pushed while holding the name exclusively: the order of grants.
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing in grant order: {tokens:?}"
    );
}

fn kill9_and_restart_never_reissue_a_token() {
    let mut server = EtcdServer::start();
    let endpoint = server.endpoint();
    let prefix = etcd::unique_prefix("faults", "kill9");
    let done = Arc::new(AtomicBool::new(false));
    // A client doing 1,000 operations while the server is killed under it.
    let worker = {
        let (done, prefix) = (done.clone(), prefix.clone());
        std::thread::spawn(move || {
            let open = || {
                leasehold_etcd::EtcdBackend::open(
                    std::slice::from_ref(&endpoint),
                    &leasehold_etcd::EtcdOptions {
                        prefix: prefix.clone(),
                        request_timeout: Duration::from_secs(2),
                        connect_timeout: Duration::from_secs(1),
                        ..leasehold_etcd::EtcdOptions::default()
                    },
                )
            };
            let mut b = open().expect("open");
            let names = ["a", "b", "c"];
            let mut last: HashMap<&str, Token> = HashMap::new();
            let mut held: HashMap<&str, Token> = HashMap::new();
            let (mut ok, mut failed) = (0u32, 0u32);
            for op in 0..1000usize {
                let n = names[op % names.len()];
                // Short TTLs: a grant whose answer was lost in a crash (an
                // ambiguous commit, reported as an error) ends by itself.
                let result = match held.remove(n) {
                    Some(token) => b
                        .lease_release(&LeaseReleaseParams {
                            name: name(n),
                            token,
                            owner: None,
                            grant: None,
                        })
                        .map(|_| ()),
                    None => b
                        .lease_acquire(&acquire_params(n, "k", Duration::from_secs(2)))
                        .map(|outcome| {
                            if let LeaseAcquire::Acquired(g) = outcome {
                                if let Some(prev) = last.get(n) {
                                    assert!(g.token > *prev, "{n}: token {} reissued or not above {prev}", g.token);
                                }
                                last.insert(n, g.token);
                                held.insert(n, g.token);
                            }
                        }),
                };
                if result.is_ok() {
                    ok += 1;
                } else {
                    failed += 1;
                    std::thread::sleep(Duration::from_millis(50));
                    if let Ok(reopened) = open() {
                        b = reopened;
                    }
                }
            }
            done.store(true, Ordering::SeqCst);
            (ok, failed, last)
        })
    };
    let started = Instant::now();
    let mut restarts = 0;
    while !done.load(Ordering::SeqCst) && restarts < 10 {
        std::thread::sleep(Duration::from_millis(700));
        server.kill9();
        server.restart();
        restarts += 1;
    }
    let (ok, failed, last) = worker.join().expect("the client thread failed");
    // Checked once the killing has stopped (a restart may have been under
    // way when the client finished), on a fresh connection.
    let b = leasehold_etcd::EtcdBackend::open(
        &[server.endpoint()],
        &leasehold_etcd::EtcdOptions {
            prefix: prefix.clone(),
            ..leasehold_etcd::EtcdOptions::default()
        },
    )
    .expect("open after the last restart");
    for (n, t) in &last {
        let state = b.lease_get(&name(n)).expect("get").expect("a granted name survives");
        assert!(state.last_token >= *t, "{n}: last_token {} below {t}", state.last_token);
    }
    let _ = std::io::stderr().write_all(
        format!(
            "kill9_and_restart: 1000 operations: {ok} ok, {failed} failed (server down), {restarts} kill -9 + restarts \
             under a running client, {:.1}s; newest tokens {last:?}\n",
            started.elapsed().as_secs_f64()
        )
        .as_bytes(),
    );
    assert!(
        restarts >= 3,
        "the client finished before the server was killed 3 times"
    );
    assert!(ok >= 500, "only {ok} of 1000 operations succeeded");
}

/// Run as a child process by `paused_holder_loses_its_grant_and_its_late_fence_is_refused`:
/// acquire with a 2 s TTL, print the token, wait for a line on stdin, then
/// fence and renew and print both verdicts.
fn paused_holder(endpoint: String, prefix: String) {
    let b = leasehold_etcd::EtcdBackend::open(
        &[endpoint],
        &leasehold_etcd::EtcdOptions {
            prefix,
            ..leasehold_etcd::EtcdOptions::default()
        },
    )
    .expect("open");
    let LeaseAcquire::Acquired(g) = b
        .lease_acquire(&acquire_params("job", "paused", Duration::from_secs(2)))
        .expect("acquire")
    else {
        panic!("the helper must get the free name");
    };
    println!("token {}", g.token);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("wait for the parent");
    let verdict = match fence(&b, "job", g.token) {
        LeaseFence::Passed(_) => "passed".to_owned(),
        LeaseFence::Refused { newest, reason } => format!("refused {reason:?} newest {newest:?}"),
    };
    println!("fence {verdict}");
    let renew = b
        .lease_renew(&LeaseRenewParams {
            name: name("job"),
            token: g.token,
            owner: None,
            grant: None,
            ttl: Duration::from_secs(2),
        })
        .expect("renew");
    println!(
        "renew {}",
        if matches!(renew, LeaseRenew::Renewed(_)) {
            "renewed"
        } else {
            "lost"
        }
    );
}

fn paused_holder_loses_its_grant_and_its_late_fence_is_refused() {
    let server = etcd::shared();
    let prefix = etcd::unique_prefix("faults", "paused");
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .env("LH_HELPER_ENDPOINT", server.endpoint())
        .env("LH_HELPER_PREFIX", &prefix)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let token = loop {
        line.clear();
        assert!(out.read_line(&mut line).expect("read") > 0, "the holder exited early");
        if let Some(t) = line.trim().strip_prefix("token ") {
            break Token(t.parse().expect("a token"));
        }
    };
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP the holder");

    let b = support::open(server, &prefix);
    let successor = acquire_params("job", "successor", Duration::from_secs(30));
    let mut granted = None;
    assert!(
        eventually(Duration::from_secs(8), || {
            if let LeaseAcquire::Acquired(g) = b.lease_acquire(&successor).unwrap() {
                granted = Some(g);
            }
            granted.is_some()
        }),
        "the paused holder's 2 s grant never expired"
    );
    let new = granted.expect("granted");
    assert!(new.token > token);

    rustix::process::kill_process(pid, rustix::process::Signal::CONT).expect("SIGCONT");
    child
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("wake the holder");
    let mut verdicts = Vec::new();
    for l in out.lines() {
        let l = l.expect("read");
        if l.starts_with("fence ") || l.starts_with("renew ") {
            verdicts.push(l);
        }
    }
    assert!(child.wait().expect("wait").success(), "the holder failed");
    assert_eq!(
        verdicts,
        vec![
            format!("fence refused Superseded newest Some(Token({}))", new.token.0),
            "renew lost".to_owned(),
        ]
    );
    assert!(matches!(fence(&b, "job", new.token), LeaseFence::Passed(_)));
    let events: Vec<_> = history(&b, "job").iter().map(|e| (e.event, e.token)).collect();
    assert!(events.contains(&(HistoryEvent::Expired, Some(token))), "{events:?}");
    assert!(
        events.contains(&(HistoryEvent::FenceRefused, Some(token))),
        "{events:?}"
    );
}

/// One backend (one runtime, one connection) used by several threads at
/// once, as a library holder's keeper thread and its main thread do.
fn one_backend_serves_many_threads_at_once() {
    let b = Arc::new(support::open(etcd::shared(), &etcd::unique_prefix("faults", "threads")));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let b = b.clone();
            std::thread::spawn(move || {
                let lease = format!("job-{i}");
                let mut last = Token(0);
                for _ in 0..20 {
                    let LeaseAcquire::Acquired(g) = b
                        .lease_acquire(&acquire_params(&lease, "t", Duration::from_secs(10)))
                        .unwrap()
                    else {
                        panic!("{lease} is only used by this thread");
                    };
                    assert!(g.token > last);
                    last = g.token;
                    b.lease_release(&LeaseReleaseParams {
                        name: name(&lease),
                        token: g.token,
                        owner: None,
                        grant: None,
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread failed");
    }
}
