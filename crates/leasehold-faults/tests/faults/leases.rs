//! Leases under races, kills, rollbacks, clock jumps and pid reuse
//! (fault cases 1, 2, 3, 7, 13, 15).

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_faults::grants::{self, GrantLog};
use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::rng::Rng;
use leasehold_faults::sink::FencedSink;
use leasehold_faults::tier::{count, figure};
use rustix::process::Signal;

use crate::common::{percentile, spawn_holder};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case01_racing_exclusive_acquirers_never_overlap_and_tokens_only_grow,
    case02_shared_and_exclusive_never_overlap_and_writers_are_not_starved,
    case03_kill_9_of_the_holder_at_random_points_is_taken_over_at_once,
    case26_a_queued_waiter_takes_over_from_a_killed_holder_promptly,
    case07_a_rolled_back_store_reissues_tokens_and_the_sink_refuses_them,
    case13_wall_clock_jumps_neither_expire_nor_prolong_a_lease,
    case15_a_reused_pid_is_judged_by_start_time_and_never_signalled,
];

/// Workers (each a thread driving `leasehold acquire --wait` / `release`
/// processes) loop over `attempts`; every grant is logged by the thread in
/// the grant log before it is used and ended before the release.
/// Returns the grant log's report and the acquire latencies (exclusive, shared).
fn race(sb: &Arc<Sandbox>, modes: &[bool], attempts: usize) -> (grants::Holding, Vec<Duration>, Vec<Duration>) {
    let _ = sb.try_acquire("warm-up", "1s"); // create the store before the stampede
    let lat = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let threads: Vec<_> = modes
        .iter()
        .enumerate()
        .map(|(w, &exclusive)| {
            let (sb, lat) = (sb.clone(), lat.clone());
            std::thread::spawn(move || {
                let mut log = GrantLog::open(&sb.file("grants")).unwrap();
                let mut rng = Rng::new(w as u64);
                for _ in 0..attempts {
                    let mut args = vec!["acquire", "race", "--ttl", "60s", "--wait=120s"];
                    if !exclusive {
                        args.push("--shared");
                    }
                    let started = Instant::now();
                    let child = sb
                        .cmd(&args)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap();
                    let pid = child.id();
                    let (code, out, err) = proc::outcome(&child.wait_with_output().unwrap());
                    assert_eq!(code, 0, "worker {w}: acquire exit {code}: {err}");
                    let waited = started.elapsed();
                    let token: u64 = out.trim().parse().unwrap();
                    log.start(token, pid, exclusive).unwrap();
                    std::thread::sleep(Duration::from_micros(rng.below(2000)));
                    log.end(token, pid, exclusive).unwrap();
                    let (code, _, err) = sb.run(&["release", "race", "--token", &token.to_string()]);
                    assert_eq!(code, 0, "worker {w}: release of {token}: {err}");
                    let mut lat = lat.lock().unwrap();
                    if exclusive {
                        lat.0.push(waited);
                    } else {
                        lat.1.push(waited);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let lat = Arc::try_unwrap(lat).unwrap().into_inner().unwrap();
    let holdings = grants::read(&sb.file("grants")).unwrap();
    (holdings.last().cloned().unwrap(), lat.0, lat.1)
}

/// Background CPU load (stand-in for stress-ng, which is not installed):
/// one spinning thread per core until the returned flag is dropped.
fn cpu_load() -> Arc<()> {
    let alive = Arc::new(());
    for _ in 0..std::thread::available_parallelism().map_or(2, usize::from) {
        let weak = Arc::downgrade(&alive);
        std::thread::spawn(move || {
            while weak.strong_count() > 0 {
                std::hint::spin_loop();
            }
        });
    }
    alive
}

/// fault case 1: 16 processes × 625 attempts (CI: 4 × 10), short holds, CPU load.
fn case01_racing_exclusive_acquirers_never_overlap_and_tokens_only_grow() {
    let (workers, attempts) = (count(4, 16), count(10, 625));
    let sb = Arc::new(Sandbox::new());
    let load = cpu_load();
    let (_, mut lat, _) = race(&sb, &vec![true; workers], attempts);
    drop(load);
    let report = grants::check(&sb.file("grants")).unwrap();
    figure(
        1,
        &format!(
            "{} violations in {} grants ({workers} processes x {attempts}); p99 acquire latency {:?} (waiting included)",
            report.violations.len(),
            lat.len(),
            percentile(&mut lat, 99)
        ),
    );
    report.assert_clean();
    assert_eq!(lat.len(), workers * attempts);
    assert_eq!(proc::integrity(&sb.store_path()), "ok");
}

/// fault case 2: 12 shared + 4 exclusive processes (CI: 3 + 1).
fn case02_shared_and_exclusive_never_overlap_and_writers_are_not_starved() {
    let (shared, exclusive, attempts) = (count(3, 12), count(1, 4), count(8, 100));
    let sb = Arc::new(Sandbox::new());
    let mut modes = vec![false; shared];
    modes.extend(vec![true; exclusive]);
    let (_, mut excl, shared_lat) = race(&sb, &modes, attempts);
    let report = grants::check(&sb.file("grants")).unwrap();
    let max_wait = percentile(&mut excl, 100);
    figure(
        2,
        &format!(
            "{} overlaps in {} grants ({shared} shared + {exclusive} exclusive processes x {attempts}); max exclusive wait {max_wait:?}",
            report.violations.len(),
            excl.len() + shared_lat.len()
        ),
    );
    report.assert_clean();
    assert_eq!(excl.len(), exclusive * attempts, "an exclusive acquirer was starved");
}

/// fault case 3: `leasehold run` holding a lease (acquire, renewals, the command
/// writing to a fenced sink, release) is `SIGKILLed` at a random point; the
/// next acquirer must get the lease at once (the supervisor and the
/// command's group are provably gone) and at the latest within TTL + 1 s.
fn case03_kill_9_of_the_holder_at_random_points_is_taken_over_at_once() {
    const TTL: Duration = Duration::from_secs(2);
    let trials = count(8, 1000);
    let sb = Sandbox::new();
    let mut rng = Rng::from_env("case 3");
    let mut log = GrantLog::open(&sb.file("grants")).unwrap();
    let me = std::process::id();
    let mut takeovers = Vec::new();
    let mut late = Vec::new();
    for trial in 0..trials {
        let hold = rng.below(800);
        let mut child = spawn_holder(
            &sb,
            "job",
            &["--ttl", "2s", "--heartbeat", "300ms", "--grace", "500ms"],
            hold,
        );
        std::thread::sleep(Duration::from_millis(rng.below(1000)));
        proc::signal(child.id(), Signal::KILL);
        let _ = child.wait();
        let killed = Instant::now();
        let token = loop {
            if let Some(t) = sb.try_acquire("job", "60s") {
                break t;
            }
            assert!(
                killed.elapsed() < TTL + Duration::from_secs(5),
                "trial {trial}: never taken over"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = killed.elapsed();
        log.start(token, me, true).unwrap();
        if took > TTL + Duration::from_secs(1) {
            late.push(format!("trial {trial}: takeover after {took:?}"));
        }
        takeovers.push(took);
        log.end(token, me, true).unwrap();
        let (code, _, err) = sb.run(&["release", "job", "--token", &token.to_string()]);
        assert_eq!(code, 0, "{err}");
    }
    let mut report = grants::check(&sb.file("grants")).unwrap();
    report.merge(FencedSink::open(&sb.file("sink.db")).unwrap().check().unwrap());
    let integrity = proc::integrity(&sb.store_path());
    let max = percentile(&mut takeovers, 100);
    figure(
        3,
        &format!(
            "{} violations in {trials} kills ({} takeovers later than TTL+1s); max takeover {max:?}, median {:?}; integrity {integrity}",
            report.violations.len(),
            late.len(),
            percentile(&mut takeovers, 50)
        ),
    );
    report.assert_clean();
    assert!(late.is_empty(), "{late:#?}");
    assert_eq!(integrity, "ok");
}

/// fault case 26: a waiter already queued (`acquire --wait`) when the holder
/// (`leasehold run`) is `SIGKILLed` takes over as promptly as a fresh
/// acquire does: it checks the holders' proof of death at each of its
/// polls, not only when its place in the queue needs a refresh. Bounded
/// generously at 1.5 s (the holder's guard first has to stop the command;
/// its TTL is 10 s).
fn case26_a_queued_waiter_takes_over_from_a_killed_holder_promptly() {
    const BOUND: Duration = Duration::from_millis(1500);
    let trials = count(4, 200);
    let sb = Sandbox::new();
    let mut took = Vec::new();
    for trial in 0..trials {
        let mut holder = spawn_holder(
            &sb,
            "job",
            &["--ttl", "10s", "--heartbeat", "1s", "--grace", "200ms"],
            60_000,
        );
        proc::wait_until(Duration::from_secs(20), || crate::common::starts(&sb) > trial)
            .expect("the holder's command never started");
        let waiter = sb
            .cmd(&["acquire", "job", "--ttl", "60s", "--wait=20s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the waiter");
        // Let it queue: its first attempt is refused, then it waits.
        std::thread::sleep(Duration::from_millis(300));
        proc::signal(holder.id(), Signal::KILL);
        let _ = holder.wait();
        let killed = Instant::now();
        let (code, err) = crate::common::finish(waiter, Duration::from_secs(30));
        let elapsed = killed.elapsed();
        assert_eq!(code, 0, "trial {trial}: the waiter: {err}");
        took.push(elapsed);
        let token = sb.last_token("job").expect("a token");
        let (code, _, err) = sb.run(&["release", "job", "--token", &token.to_string()]);
        assert_eq!(code, 0, "{err}");
    }
    let max = percentile(&mut took, 100);
    figure(
        26,
        &format!(
            "a queued waiter took over from a killed holder in {:?} median, {max:?} at most, over {trials} kills",
            percentile(&mut took, 50)
        ),
    );
    assert!(
        max < BOUND,
        "the slowest takeover by a queued waiter took {max:?}: {took:?}"
    );
}

/// Copy the store aside or back (with its WAL files; no process has it open).
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (f, t) = (
            format!("{}{suffix}", from.display()),
            format!("{}{suffix}", to.display()),
        );
        if std::path::Path::new(&f).exists() {
            std::fs::copy(&f, &t).unwrap();
        } else {
            let _ = std::fs::remove_file(&t);
        }
    }
}

/// `acquire --json NAME`: the token and the grant's identity, or `None`
/// when held.
fn try_acquire_grant(sb: &Sandbox, name: &str, ttl: &str) -> Option<(u64, String)> {
    let (code, out, err) = sb.run(&["--json", "acquire", name, "--ttl", ttl]);
    match code {
        0 => {
            let grant: serde_json::Value = serde_json::from_str(&out).expect("acquire --json prints JSON");
            Some((
                grant["token"].as_u64().expect("a token"),
                grant["grant_id"].as_str().expect("a grant id").to_owned(),
            ))
        }
        11 => None,
        _ => panic!("acquire {name}: exit {code}: {err}"),
    }
}

/// fault case 7: the store is rolled back to an older copy (the stand-in for
/// lost durability) and so hands out tokens a second time. The fenced sink
/// (mark bound to its writer) refuses every reissued token; the grant log's
/// checker reports the rollback. So does `leasehold write --fence-token
/// --fence-grant`, whose record names the grant next to the token.
fn case07_a_rolled_back_store_reissues_tokens_and_the_sink_refuses_them() {
    const CYCLES: usize = 3;
    let rollbacks = count(4, 100);
    let sb = Sandbox::new();
    let snapshot = sb.file("snapshot.db");
    let mut sink = FencedSink::open(&sb.file("sink.db")).unwrap();
    let mut log = GrantLog::open(&sb.file("grants")).unwrap();
    let state = sb.file("state.txt");
    let (mut reissued, mut sink_accepted, mut file_accepted, mut grant_no) = (0, 0, 0, 0u32);
    let _ = sb.try_acquire("job", "1s");
    for _ in 0..rollbacks {
        copy_store(&sb.store_path(), &snapshot);
        let mut used = std::collections::HashSet::new();
        for phase in 0..2 {
            if phase == 1 {
                copy_store(&snapshot, &sb.store_path()); // the rollback
            }
            for _ in 0..CYCLES {
                let (token, grant) = loop {
                    if let Some(t) = try_acquire_grant(&sb, "job", "60s") {
                        break t;
                    }
                    // A grant restored by the rollback is still live: free it.
                    let t = sb.last_token("job").unwrap();
                    let _ = sb.run(&["release", "job", "--token", &t.to_string()]);
                };
                grant_no += 1;
                // Each grant is a distinct holder (pid field: the grant's number).
                log.start(token, grant_no, true).unwrap();
                let verdict = sink.write(token, &format!("grant {grant_no}"), "data").unwrap();
                let (code, _, _) = sb.run(&[
                    "write",
                    state.to_str().unwrap(),
                    "--fence-token",
                    &token.to_string(),
                    "--fence-grant",
                    &grant,
                ]);
                log.end(token, grant_no, true).unwrap();
                if phase == 0 {
                    used.insert(token);
                } else if used.contains(&token) {
                    reissued += 1;
                    if verdict == leasehold_faults::sink::Verdict::Accepted {
                        sink_accepted += 1;
                    }
                    if code == 0 {
                        file_accepted += 1;
                    }
                }
                let _ = sb.run(&["release", "job", "--token", &token.to_string()]);
            }
        }
    }
    let grants = grants::check(&sb.file("grants")).unwrap();
    let reported = grants.violations.iter().filter(|v| v.kind == "token-reissued").count();
    let sink_report = sink.check().unwrap();
    figure(
        7,
        &format!(
            "{sink_accepted} reissued tokens accepted by the fenced sink of {reissued} reissued in {rollbacks} rollbacks; \
             rollback reported by the grant-log checker {reported} times; \
             `leasehold write --fence-token --fence-grant` accepted {file_accepted}"
        ),
    );
    eprintln!("{grants}");
    assert!(
        reissued >= rollbacks,
        "the rollback did not make the store reissue tokens"
    );
    assert_eq!(sink_accepted, 0, "{sink_report}");
    assert_eq!(file_accepted, 0, "the fence record accepted a reissued token");
    sink_report.assert_clean();
    assert_eq!(reported, reissued, "every reissued token is reported");
}

/// Go on only where `faketime` runs (otherwise the case cannot run here).
fn need_faketime() {
    leasehold_testkit::need_program("faketime", "faketime");
    let runs = Command::new("faketime")
        .args(["-f", "+0", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        leasehold_testkit::unavailable("`faketime -f +0 true` fails here; reinstall the Debian package faketime");
    }
}

/// `leasehold ARGS` with the wall clock shifted by `offset` ("+0" for none).
fn faked(sb: &Sandbox, offset: &str, args: &[&str]) -> i32 {
    sb.cmd_via(&["faketime", "-f", offset], args)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

/// fault case 13: wall-clock jumps (+1 h, −10 min, +1 day) on the holder, the
/// contender, or both: no early takeover, and no lease outliving its TTL in
/// real time. 50 jumps per scenario (CI: 1); scenarios run in parallel.
fn case13_wall_clock_jumps_neither_expire_nor_prolong_a_lease() {
    need_faketime();
    let jumps = count(1, 50);
    let scenarios: Vec<(&str, &str, &str)> = ["+1h", "-10m", "+1d"]
        .iter()
        .flat_map(|j| [("holder", *j, "+0"), ("contender", "+0", *j), ("both", *j, *j)])
        .collect();
    let threads: Vec<_> = scenarios
        .into_iter()
        .map(|(who, holder, contender)| {
            std::thread::spawn(move || {
                let sb = Sandbox::new();
                let mut violations = Vec::new();
                for i in 0..jumps {
                    let name = format!("job{i}");
                    // The grant began between `before` and `after` (real
                    // time): judge "early" from the first, "outlived" from
                    // the second, so a slow start-up under load is not
                    // mistaken for either.
                    let before = Instant::now();
                    assert_eq!(faked(&sb, holder, &["acquire", &name, "--ttl", "1500ms"]), 0);
                    let after = Instant::now();
                    let early = faked(&sb, contender, &["acquire", &name, "--ttl", "1s"]);
                    if early != 11 && before.elapsed() < Duration::from_millis(1400) {
                        violations.push(format!("{who} {holder}/{contender}: taken over early (exit {early})"));
                    }
                    std::thread::sleep(Duration::from_millis(1800).saturating_sub(after.elapsed()));
                    let late = faked(&sb, contender, &["acquire", &name, "--ttl", "1s"]);
                    if late != 0 {
                        violations.push(format!("{who} {holder}/{contender}: outlived its TTL (exit {late})"));
                    }
                }
                violations
            })
        })
        .collect();
    let violations: Vec<String> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    figure(
        13,
        &format!(
            "{} violations in {jumps} jumps x 9 scenarios (+1h, -10m, +1d on holder, contender, both)",
            violations.len()
        ),
    );
    assert!(violations.is_empty(), "{violations:#?}");
}

/// fault case 15: a grant bound to a process whose pid is then handed to another
/// process (forced through `/proc/sys/kernel/ns_last_pid`): judged stale by
/// start time, and the process with the reused pid is never signalled.
fn case15_a_reused_pid_is_judged_by_start_time_and_never_signalled() {
    leasehold_testkit::need_root("to write /proc/sys/kernel/ns_last_pid");
    let trials = count(5, 200);
    let sb = Sandbox::new();
    let (mut misjudged, mut stray, mut reused) = (0, 0, 0);
    let mut attempts = 0;
    while reused < trials {
        attempts += 1;
        assert!(attempts < trials * 20, "could not force pid reuse");
        // Its own process group, so that the group the grant records empties with it.
        let mut first = Command::new("sleep").arg("60").process_group(0).spawn().unwrap();
        let pid = first.id();
        let name = format!("job{attempts}");
        let (code, _, err) = sb.run(&["acquire", &name, "--ttl", "60s", "--for-pid", &pid.to_string()]);
        assert_eq!(code, 0, "{err}");
        // While the bound process lives, the lease is held.
        if sb.try_acquire(&name, "60s").is_some() {
            misjudged += 1;
        }
        proc::signal(pid, Signal::KILL);
        let _ = first.wait();
        // Hand the pid to a process that records any signal it gets.
        let marker = sb.file(&format!("signalled{attempts}"));
        let script = format!(
            "trap 'echo TERM > {m}' TERM; trap 'echo INT > {m}' INT; trap 'echo HUP > {m}' HUP; while :; do sleep 0.05; done",
            m = marker.display()
        );
        set_last_pid(pid - 1);
        let mut second = Command::new("sh").args(["-c", &script]).spawn().unwrap();
        if second.id() != pid {
            let _ = second.kill();
            let _ = second.wait();
            continue; // another process took the pid first; try again
        }
        reused += 1;
        std::thread::sleep(Duration::from_millis(20)); // the traps are set
        match sb.try_acquire(&name, "60s") {
            Some(_) => {}
            None => misjudged += 1, // the reused pid was taken for the holder
        }
        std::thread::sleep(Duration::from_millis(100));
        if marker.exists() || !proc::alive(pid) {
            stray += 1;
        }
        let _ = second.kill();
        let _ = second.wait();
    }
    figure(
        15,
        &format!("{misjudged} misjudgements and {stray} stray signals in {reused} pid reuses ({attempts} attempts)"),
    );
    assert_eq!((misjudged, stray), (0, 0));
}

/// The next pid the kernel hands out in this namespace is `pid + 1`.
fn set_last_pid(pid: u32) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/kernel/ns_last_pid")
        .expect("open ns_last_pid");
    let _ = f.write_all(pid.to_string().as_bytes());
}
