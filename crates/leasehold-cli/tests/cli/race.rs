//! Process-level races: many `leasehold acquire` processes at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] =
    leasehold_testkit::tests![racing_processes_never_hold_an_exclusive_lease_together];

/// Each worker loops: acquire (waiting, or trying once); while holding, claim a marker directory
/// (mkdir is atomic: a second live holder would fail it); release.
/// Checked: never two holders at once, tokens unique, and tokens increase
/// in the order the (disjoint) holdings began.
fn racing_processes_never_hold_an_exclusive_lease_together() {
    const WORKERS: usize = 8;
    const ATTEMPTS: usize = 25;
    let env = Arc::new(Env::new());
    env.acquire(&["warm-up"]); // create the store before the stampede
    let marker = env.path().join("held-by");
    let log = Arc::new(Mutex::new(Vec::<(Instant, u64)>::new()));
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (env, marker, log, violations) = (env.clone(), marker.clone(), log.clone(), violations.clone());
            std::thread::spawn(move || {
                for _ in 0..ATTEMPTS {
                    // Half the workers queue (FIFO waiters), half try once.
                    let wait = if w % 2 == 0 { "--wait=60s" } else { "--wait=0s" };
                    let (code, out, err) = env.run(&["acquire", "race", "--ttl", "60s", wait]);
                    match code {
                        11 => continue,
                        0 => {}
                        _ => panic!("worker {w}: acquire exit {code}: {err}"),
                    }
                    let start = Instant::now();
                    let token: u64 = out.trim().parse().unwrap();
                    if std::fs::create_dir(&marker).is_err() {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("worker {w} got token {token} while another held it"));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    let _ = std::fs::remove_dir(&marker);
                    log.lock().unwrap().push((start, token));
                    let (code, _, err) = env.run(&["release", "race", "--token", &token.to_string()]);
                    assert_eq!(code, 0, "worker {w}: release of {token}: {err}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let violations = violations.lock().unwrap();
    assert!(violations.is_empty(), "{violations:#?}");
    let mut log = log.lock().unwrap().clone();
    assert!(!log.is_empty(), "no worker ever acquired");
    log.sort();
    let tokens: Vec<u64> = log.iter().map(|(_, t)| *t).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing in grant order: {tokens:?}"
    );
    eprintln!(
        "race: {WORKERS} processes x {ATTEMPTS} attempts: {} grants, 0 violations",
        tokens.len()
    );
}
