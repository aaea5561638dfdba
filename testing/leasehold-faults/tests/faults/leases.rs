//! Leases under races, kills, rollbacks, clock jumps and pid reuse
//! (fault cases 1, 2, 3, 7, 13, 15).

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_faults::checker::Report;
use leasehold_faults::history::{Acts, Answer, Attempt, Fence, GrantRecord};
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::resource::FencedResource;
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::process;
use leasehold_testkit::wait::wait_until;
use rustix::process::Signal;

use crate::common::{acquire_recorded, history, judge, judge_sandbox, percentile, record_acquired, spawn_holder};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case01_racing_exclusive_acquirers_never_overlap_and_tokens_only_grow,
    case02_shared_and_exclusive_never_overlap_and_writers_are_not_starved,
    case03_kill_9_of_the_holder_at_random_points_is_taken_over_at_once,
    case26_a_queued_waiter_takes_over_from_a_killed_holder_promptly,
    case26_a_newcomer_never_overtakes_a_queued_waiter,
    case07_a_rolled_back_store_reissues_tokens_and_the_fences_refuse_them,
    case13_wall_clock_jumps_neither_expire_nor_prolong_a_lease,
    case15_a_reused_pid_is_judged_by_start_time_and_never_signalled,
];

/// Workers (each a thread driving `leasehold acquire --wait` / `release`
/// processes) loop over `attempts`; every grant is recorded by the thread
/// in the history (asked for before the process started, answered after
/// it exited) and ended before the release. Returns the acquire latencies
/// (exclusive, shared).
fn race(sb: &Arc<Sandbox>, modes: &[bool], attempts: usize) -> (Vec<Duration>, Vec<Duration>) {
    let _ = sb.try_acquire("warm-up", "1s"); // create the store before the stampede
    let lat = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let threads: Vec<_> = modes
        .iter()
        .enumerate()
        .map(|(w, &exclusive)| {
            let (sb, lat) = (sb.clone(), lat.clone());
            std::thread::spawn(move || {
                let mut history = history(&sb);
                let mut rng = Rng::new(w as u64);
                let by = format!("thread:{w}");
                for _ in 0..attempts {
                    let mut args = vec!["--ttl", "60s", "--wait=120s"];
                    if !exclusive {
                        args.push("--shared");
                    }
                    let started = Instant::now();
                    let (token, grant) = acquire_recorded(&sb, &mut history, &by, "race", &args)
                        .unwrap_or_else(|| panic!("worker {w}: acquire --wait=120s found it held"));
                    let waited = started.elapsed();
                    std::thread::sleep(Duration::from_micros(rng.below(2000)));
                    history.end("race", &grant, boot_ns()).unwrap();
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
    Arc::try_unwrap(lat).unwrap().into_inner().unwrap()
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
    let (mut lat, _) = race(&sb, &vec![true; workers], attempts);
    drop(load);
    let report = judge(&sb, &[]);
    figure(
        1,
        &format!(
            "{} violations in {} grants ({workers} processes x {attempts}); p99 acquire latency {:?} (waiting included)",
            report.total(),
            report.counts.grants,
            percentile(&mut lat, 99)
        ),
    );
    report.assert_clean();
    assert_eq!(report.counts.grants, workers * attempts, "every grant was judged");
    assert_eq!(proc::integrity(&sb.store_path()), "ok");
}

/// fault case 2: 12 shared + 4 exclusive processes (CI: 3 + 1).
fn case02_shared_and_exclusive_never_overlap_and_writers_are_not_starved() {
    let (shared, exclusive, attempts) = (count(3, 12), count(1, 4), count(8, 100));
    let sb = Arc::new(Sandbox::new());
    let mut modes = vec![false; shared];
    modes.extend(vec![true; exclusive]);
    let (mut excl, shared_lat) = race(&sb, &modes, attempts);
    let report = judge(&sb, &[]);
    let max_wait = percentile(&mut excl, 100);
    figure(
        2,
        &format!(
            "{} violations in {} grants ({shared} shared + {exclusive} exclusive processes x {attempts}); max exclusive wait {max_wait:?}",
            report.total(),
            report.counts.grants
        ),
    );
    report.assert_clean();
    assert_eq!(
        report.counts.grants,
        excl.len() + shared_lat.len(),
        "every grant was judged"
    );
    assert_eq!(excl.len(), exclusive * attempts, "an exclusive acquirer was starved");
}

/// fault case 3: `leasehold run` holding a lease (acquire, renewals, the command
/// writing through leasehold's fence, release) is `SIGKILLed` at a random point; the
/// next acquirer must get the lease at once (the supervisor and the
/// command's group are provably gone) and at the latest within TTL + 1 s.
fn case03_kill_9_of_the_holder_at_random_points_is_taken_over_at_once() {
    const TTL: Duration = Duration::from_secs(2);
    let trials = count(8, 1000);
    let sb = Sandbox::new();
    let mut rng = Rng::from_env("case 3");
    let mut history = history(&sb);
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
        // The takeover, recorded as the test's own grant: the checker
        // judges that the killed holder's command ended before it.
        let (token, grant) = loop {
            if let Some(t) = acquire_recorded(&sb, &mut history, "test", "job", &["--ttl", "60s"]) {
                break t;
            }
            assert!(
                killed.elapsed() < TTL + Duration::from_secs(5),
                "trial {trial}: never taken over"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = killed.elapsed();
        if took > TTL + Duration::from_secs(1) {
            late.push(format!("trial {trial}: takeover after {took:?}"));
        }
        takeovers.push(took);
        history.end("job", &grant, boot_ns()).unwrap();
        let (code, _, err) = sb.run(&["release", "job", "--token", &token.to_string()]);
        assert_eq!(code, 0, "{err}");
    }
    let report = judge_sandbox(&sb);
    let integrity = proc::integrity(&sb.store_path());
    let max = percentile(&mut takeovers, 100);
    figure(
        3,
        &format!(
            "{} violations in {trials} kills ({} takeovers later than TTL+1s); max takeover {max:?}, median {:?}; integrity {integrity}",
            report.total(),
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
    let mut history = history(&sb);
    let mut took = Vec::new();
    for trial in 0..trials {
        let mut holder = spawn_holder(
            &sb,
            "job",
            &["--ttl", "10s", "--heartbeat", "1s", "--grace", "200ms"],
            60_000,
        );
        // Holders' commands and the waiters (below) both record grants.
        wait_until(Duration::from_secs(20), || {
            crate::common::starts(&sb, "job") > 2 * trial
        })
        .expect("the holder's command never started");
        let asked = boot_ns();
        // The premise: the waiter is queued — the store lists it — before the kill.
        let waiter = queued_waiter(&sb, trial);
        proc::signal(holder.id(), Signal::KILL);
        let _ = holder.wait();
        let killed = Instant::now();
        let out = waiter.wait_with_output().expect("the waiter's output");
        let answered = boot_ns();
        let elapsed = killed.elapsed();
        let (code, out, err) = proc::outcome(&out);
        assert_eq!(code, 0, "trial {trial}: the waiter: {err}");
        took.push(elapsed);
        let grant: serde_json::Value = serde_json::from_str(&out).expect("acquire --json prints JSON");
        let token = grant["token"].as_u64().expect("a token");
        let id = grant["grant_id"].as_str().expect("a grant id");
        history
            .grant(&GrantRecord {
                name: "job".into(),
                token: Some(token),
                grant: id.into(),
                exclusive: true,
                by: "waiter".into(),
                asked: Some(asked),
                answered,
                granted: None,
                acts: Acts::Own,
            })
            .unwrap();
        history.end("job", id, boot_ns()).unwrap();
        let (code, _, err) = sb.run(&["release", "job", "--token", &token.to_string()]);
        assert_eq!(code, 0, "{err}");
    }
    // The killed holders' commands ended before their waiters' grants;
    // tokens rose; every acknowledged write is in the resource.
    let report = judge_sandbox(&sb);
    report.assert_clean();
    assert_eq!(report.counts.grants, 2 * trials, "every grant was judged");
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

/// fault case 26b: the same, with the queued waiter `SIGSTOPped` before the
/// holder is killed, so that it cannot take its turn at once: a newcomer
/// asking then (after the holder's whole tree is dead and the name free)
/// is refused, held for the waiter ahead of it — FIFO, not "whoever asks
/// first once the name is free". Resumed, the waiter is granted the name.
fn case26_a_newcomer_never_overtakes_a_queued_waiter() {
    let trials = count(2, 50);
    let mut reports = Vec::new();
    for trial in 0..trials {
        let sb = Sandbox::new();
        let mut history = history(&sb);
        let mut holder = spawn_holder(
            &sb,
            "job",
            &["--ttl", "10s", "--heartbeat", "1s", "--grace", "200ms"],
            60_000,
        );
        wait_until(Duration::from_secs(20), || crate::common::starts(&sb, "job") == 1)
            .expect("the holder's command never started");
        let command = crate::common::grants(&sb, "job")[0].pid().expect("the command's pid");
        let asked = boot_ns();
        let waiter = queued_waiter(&sb, trial);
        proc::signal(waiter.id(), Signal::STOP);
        proc::signal(holder.id(), Signal::KILL);
        let _ = holder.wait();
        wait_until(Duration::from_secs(10), || !process::alive(command)).expect("the holder's command ends");
        let mut seen = Vec::new();
        if let Some((token, id)) = acquire_recorded(&sb, &mut history, "newcomer", "job", &["--ttl", "60s"]) {
            seen.push(format!(
                "trial {trial}: a newcomer was granted job (token {token}) ahead of the queued waiter"
            ));
            history.end("job", &id, boot_ns()).unwrap();
            let (code, _, err) = sb.run(&["release", "job", "--token", &token.to_string()]);
            assert_eq!(code, 0, "{err}");
        }
        proc::signal(waiter.id(), Signal::CONT);
        let out = waiter.wait_with_output().expect("the waiter's output");
        let answered = boot_ns();
        let (code, out, err) = proc::outcome(&out);
        assert_eq!(code, 0, "trial {trial}: the waiter: {err}");
        let (token, id) = record_acquired(&mut history, "job", &out, "waiter", asked, answered);
        history.end("job", &id, boot_ns()).unwrap();
        let token = token.expect("a token").to_string();
        let (code, _, err) = sb.run(&["release", "job", "--token", &token]);
        assert_eq!(code, 0, "{err}");
        let mut report = judge_sandbox(&sb);
        for s in seen {
            report.push("trial", s);
        }
        reports.push(report);
    }
    let mut all = Report::new("case 26b");
    for r in &reports {
        all.merge(r.clone());
    }
    figure(
        26,
        &format!(
            "(b) a newcomer asking while the queued waiter was stopped: refused in {} of {trials} trials; {} grants judged, {} violations",
            trials - all.count("trial"),
            all.counts.grants,
            all.total()
        ),
    );
    for r in &reports {
        r.assert_clean();
    }
}

/// `leasehold --json acquire job --ttl 60s --wait=20s`, once the store
/// lists it as waiting.
fn queued_waiter(sb: &Sandbox, trial: usize) -> std::process::Child {
    let waiter = sb
        .cmd(&["--json", "acquire", "job", "--ttl", "60s", "--wait=20s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the waiter");
    let queued = wait_until(Duration::from_secs(20), || waiter_listed(sb, "job", waiter.id()));
    assert!(
        queued.is_some(),
        "trial {trial}: the store never listed the waiter (pid {}) as waiting for job",
        waiter.id()
    );
    waiter
}

/// Whether the store (read directly, not through leasehold) lists `pid`
/// as a waiter for `name`.
fn waiter_listed(sb: &Sandbox, name: &str, pid: u32) -> bool {
    let Ok(conn) = rusqlite::Connection::open_with_flags(sb.store_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return false;
    };
    let Ok(mut stmt) = conn.prepare("SELECT holder FROM lease_waiter WHERE name = ?1") else {
        return false;
    };
    let Ok(rows) = stmt.query_map([name], |r| r.get::<_, String>(0)) else {
        return false;
    };
    rows.flatten()
        .filter_map(|h| serde_json::from_str::<serde_json::Value>(&h).ok())
        .any(|h| h["pid"].as_u64() == Some(u64::from(pid)))
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

/// `leasehold write FILE --fence-token TOKEN --fence-grant GRANT` with
/// `value` on its standard input, recorded in `history` as an attempt on
/// FILE's fence record: exit 0 accepted, 13 refused; anything else is a
/// failure the case reports (a write that always failed must not read as
/// "0 accepted").
fn cli_write(
    sb: &Sandbox,
    history: &mut leasehold_faults::history::History,
    file: &std::path::Path,
    name: &str,
    (token, grant): (u64, &str),
    value: &str,
) -> (Answer, i32, String) {
    let path = file.to_str().expect("a UTF-8 path");
    let attempt = Attempt {
        name,
        grant,
        token: Some(token),
        resource: path,
        fence: Fence::Record,
        value,
    };
    let (answer, (code, err)) = history
        .attempt(&attempt, || {
            let mut child = sb
                .cmd(&[
                    "write",
                    path,
                    "--fence-token",
                    &token.to_string(),
                    "--fence-grant",
                    grant,
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn leasehold write");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(value.as_bytes())
                .expect("feed leasehold write");
            let (code, _, err) = proc::outcome(&child.wait_with_output().expect("leasehold write"));
            (Answer::of_exit(code), (code, err))
        })
        .expect("record in the history");
    (answer, code, err)
}

/// fault case 7: the store is rolled back to an older copy (the stand-in for
/// lost durability) and so hands out tokens a second time. Two fences that
/// bind the grant to the token — the library's (`FencedFile` with the
/// grant, the resource the holders write) and `leasehold write
/// --fence-token --fence-grant` — are asked for every grant; the checker
/// must report every reissued token and find no fence that went back, no
/// refusal without a cause and nothing acknowledged lost. The premise is
/// asserted: the first grant of each token wrote through both fences, and
/// every refusal was a refusal (exit 13), not a failure.
fn case07_a_rolled_back_store_reissues_tokens_and_the_fences_refuse_them() {
    const CYCLES: usize = 3;
    let rollbacks = count(4, 100);
    let sb = Sandbox::new();
    let snapshot = sb.file("snapshot.db");
    let mut history = history(&sb);
    let resource = FencedResource::new(&crate::common::resource_path(&sb));
    let state = sb.file("state.txt");
    let (mut reissued, mut resource_accepted, mut file_accepted) = (0, 0, 0);
    let _ = sb.try_acquire("job", "1s");
    for round in 0..rollbacks {
        copy_store(&sb.store_path(), &snapshot);
        let mut used = std::collections::HashSet::new();
        for phase in 0..2 {
            if phase == 1 {
                copy_store(&snapshot, &sb.store_path()); // the rollback
            }
            for cycle in 0..CYCLES {
                let (token, grant) = loop {
                    if let Some(t) = acquire_recorded(&sb, &mut history, "test", "job", &["--ttl", "60s"]) {
                        break t;
                    }
                    // A grant restored by the rollback is still live: free it.
                    let t = sb.last_token("job").unwrap();
                    let _ = sb.run(&["release", "job", "--token", &t.to_string()]);
                };
                let fence = leasehold_faults::resource::Fence {
                    token: leasehold::Token(token),
                    grant: Some(grant.parse().expect("acquire --json prints a grant id")),
                };
                let value = format!("round{round}.phase{phase}.cycle{cycle}.token{token}");
                let (in_resource, _) = resource.write(&mut history, "job", &grant, fence, &value).unwrap();
                let (in_file, code, err) = cli_write(&sb, &mut history, &state, "job", (token, &grant), &value);
                history.end("job", &grant, boot_ns()).unwrap();
                assert!(
                    [0, 13].contains(&code),
                    "round {round}: `leasehold write --fence-token {token}` exited {code}, neither written (0) nor refused (13): {err}"
                );
                if phase == 0 {
                    assert_eq!(
                        (in_resource, in_file),
                        (Answer::Accepted, Answer::Accepted),
                        "round {round}: the first grant of token {token} could not write (resource, `leasehold write`): {err}"
                    );
                    used.insert(token);
                } else if used.contains(&token) {
                    reissued += 1;
                    resource_accepted += usize::from(in_resource == Answer::Accepted);
                    file_accepted += usize::from(in_file == Answer::Accepted);
                }
                let _ = sb.run(&["release", "job", "--token", &token.to_string()]);
            }
        }
    }
    let resource_path = crate::common::resource_path(&sb);
    let report = judge(&sb, &[&resource_path, &state]);
    let reported = report.count("token-reissued");
    figure(
        7,
        &format!(
            "{resource_accepted} of {reissued} reissued tokens (in {rollbacks} rollbacks) accepted by the library's fence, \
             {file_accepted} by `leasehold write --fence-token --fence-grant`; the checker reported {reported} reissued tokens \
             and {} other violations",
            report.total() - reported - report.count("token-order")
        ),
    );
    assert!(
        reissued >= rollbacks,
        "the rollback did not make the store reissue tokens"
    );
    // What the rollback must show (reissued tokens, out of real-time
    // order), and nothing else.
    assert_eq!(reported, reissued, "every reissued token is reported: {report}");
    let expected = |kind: &str| ["token-reissued", "token-order"].contains(&kind);
    let mut rest = Report::new(report.checked.clone());
    for v in report.violations.iter().filter(|v| !expected(v.kind)) {
        rest.push(v.kind, v.detail.clone());
    }
    rest.omitted = report.omitted.clone();
    rest.omitted.retain(|kind, _| !expected(kind));
    rest.assert_clean();
    assert_eq!(
        (resource_accepted, file_accepted),
        (0, 0),
        "a fence accepted a reissued token: {report}"
    );
}

/// `leasehold ARGS` with the wall clock shifted by `offset` ("+0" for none):
/// (exit code, stdout).
fn faked(sb: &Sandbox, offset: &str, args: &[&str]) -> (i32, String) {
    let mut cmd = sb.cmd(args);
    leasehold_testkit::faketime::preload(&mut cmd, offset);
    let out = cmd.stderr(Stdio::piped()).output().unwrap();
    let (code, out, err) = proc::outcome(&out);
    if code != 0 && code != 11 {
        // Neither granted nor held: what it (or faketime) said, for the
        // failure's report.
        eprintln!("{args:?} at {offset}: exit {code}: {out} {err}");
    }
    (code, out)
}

/// `leasehold --json acquire NAME --ttl TTL` under `offset`, recorded in
/// `history` when granted (the holder acting until `acts_until`, or at
/// once); the exit code.
fn faked_acquire(
    sb: &Sandbox,
    history: &mut leasehold_faults::history::History,
    offset: &str,
    (name, ttl): (&str, &str),
    by: &str,
    acts_until: Option<u64>,
) -> i32 {
    let asked = boot_ns();
    let (code, out) = faked(sb, offset, &["--json", "acquire", name, "--ttl", ttl]);
    let answered = boot_ns();
    if code == 0 {
        let (_, id) = record_acquired(history, name, &out, by, asked, answered);
        history.end(name, &id, acts_until.unwrap_or(answered)).unwrap();
    }
    code
}

/// fault case 13: wall-clock jumps (+1 h, −10 min, +1 day) on the holder, the
/// contender, or both: no early takeover, and no lease outliving its TTL in
/// real time. 50 jumps per scenario (CI: 1); scenarios run in parallel.
/// The holder (a 1.5 s grant) is recorded as acting until 1.4 s after it
/// asked — the end of its trust window — so a contender granted before
/// that is an overlap the checker reports; a lease that outlives its TTL
/// is a contender refused 1.8 s after the holder's acquire returned (its
/// grant was issued before that, however long the acquire took). The
/// premise is asserted: the first contender asked within the holder's
/// window.
fn case13_wall_clock_jumps_neither_expire_nor_prolong_a_lease() {
    clock_jumps(13, &["+1h", "-10m", "+1d"], Duration::from_millis(1500), Sandbox::new);
}

/// The trials of case 13 with the wall-clock `offsets` and the holder's
/// `ttl` (its window ends 100 ms before it, the late contender asks 300 ms
/// after it), each scenario in its own sandbox made by `sandbox` (case
/// 36: on Firestore).
pub(crate) fn clock_jumps(case: u32, offsets: &'static [&'static str], ttl: Duration, sandbox: fn() -> Sandbox) {
    leasehold_testkit::faketime::need();
    let jumps = count(1, 50);
    let ttl_ns = leasehold::duration_nanos(ttl);
    let scenarios: Vec<(&str, &str, &str)> = offsets
        .iter()
        .flat_map(|j| [("holder", *j, "+0"), ("contender", "+0", *j), ("both", *j, *j)])
        .collect();
    let n = scenarios.len();
    let threads: Vec<_> = scenarios
        .into_iter()
        .map(|(who, holder, contender)| {
            std::thread::spawn(move || {
                let sb = sandbox();
                let mut history = history(&sb);
                let mut outlived = Vec::new();
                let holder_ttl = format!("{}ms", ttl.as_millis());
                for i in 0..jumps {
                    let name = format!("job{i}");
                    let before = boot_ns();
                    let trusted_until = before + ttl_ns - 100_000_000;
                    let code = faked_acquire(
                        &sb,
                        &mut history,
                        holder,
                        (&name, &holder_ttl),
                        "holder",
                        Some(trusted_until),
                    );
                    assert_eq!(code, 0, "{who} {holder}/{contender}: the holder was not granted");
                    let issued_by = boot_ns();
                    assert!(
                        issued_by < trusted_until,
                        "{who} {holder}/{contender}: the premise: the holder's acquisition took {} ms, \
                         past its window: no contender could ask while its grant was surely live",
                        (issued_by - before) / 1_000_000
                    );
                    let early = faked_acquire(&sb, &mut history, contender, (&name, "1s"), "early-contender", None);
                    if early == 0 {
                        // Granted: the checker judges whether it came
                        // before the holder's window closed.
                        continue;
                    }
                    std::thread::sleep(Duration::from_nanos(
                        (issued_by + ttl_ns + 300_000_000).saturating_sub(boot_ns()),
                    ));
                    let late = faked_acquire(&sb, &mut history, contender, (&name, "1s"), "late-contender", None);
                    if late != 0 {
                        outlived.push(format!("{who} {holder}/{contender}: outlived its TTL (exit {late})"));
                    }
                }
                let report = judge(&sb, &[]);
                (report, outlived)
            })
        })
        .collect();
    let mut report = Report::new(format!("case {case}"));
    let mut outlived = Vec::new();
    for t in threads {
        let (r, o) = t.join().unwrap();
        report.merge(r);
        outlived.extend(o);
    }
    figure(
        case,
        &format!(
            "{} violations in {jumps} jumps x {n} scenarios ({} on holder, contender, both): {} early takeovers or other history violations in {} grants, {} leases outlived their TTL",
            report.total() + outlived.len(),
            offsets.join(", "),
            report.total(),
            report.counts.grants,
            outlived.len()
        ),
    );
    report.assert_clean();
    assert!(outlived.is_empty(), "{outlived:#?}");
    assert!(
        report.counts.grants >= jumps * n * 2,
        "every grant was judged: {report}"
    );
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
        if marker.exists() || !process::alive(pid) {
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
