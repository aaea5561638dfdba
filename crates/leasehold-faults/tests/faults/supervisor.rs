//! `leasehold run` paused or cut off from its store (fault cases 8, 9, 10),
//! with the command writing to a fenced sink and logging its grant.

use std::time::{Duration, Instant};

use leasehold_faults::check::Report;
use leasehold_faults::grants;
use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::sink::FencedSink;
use leasehold_faults::tier::{count, figure};
use rustix::process::Signal;

use crate::common::{finish, spawn_holder, starts};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case08_a_paused_holder_and_command_are_refused_and_stopped_on_resume,
    case09_a_paused_supervisor_leaves_its_command_fenced_off,
    case09_a_paused_command_keeps_its_lease_while_the_supervisor_renews,
    case10_an_unavailable_store_stops_the_command_before_the_lease_can_pass_on,
    case25_a_stopped_supervisor_still_has_its_command_stopped_before_the_lease_passes_on,
    case25_a_stopped_supervisor_and_guard_leave_the_command_to_the_fence,
    case25_everything_stopped_writes_late_and_is_refused_then_stopped,
    case25_a_stopped_worker_still_has_its_task_stopped_before_the_claim_passes_on,
];

const TTL_MS: u64 = 1500;
const HEARTBEAT_MS: u64 = 250;
const OPTIONS: &[&str] = &["--ttl", "1500ms", "--heartbeat", "250ms", "--grace", "300ms"];

/// Run `trials` trials, `parallel` at a time, each in its own sandbox.
fn parallel<T: Send + 'static>(trials: usize, parallel: usize, trial: fn(usize) -> T) -> Vec<T> {
    let mut out = Vec::new();
    for round in (0..trials).step_by(parallel) {
        let threads: Vec<_> = (round..trials.min(round + parallel))
            .map(|i| std::thread::spawn(move || trial(i)))
            .collect();
        out.extend(threads.into_iter().map(|t| t.join().unwrap()));
    }
    out
}

/// The first holder's command pid (from the grant log), once it started.
fn command_pid(sb: &Sandbox) -> u32 {
    proc::wait_until(Duration::from_secs(20), || starts(sb) >= 1).expect("the command never started");
    grants::read(&sb.file("grants")).unwrap()[0].pid
}

/// SIGSTOP the command outside a sink transaction: holding the sink's write
/// lock, it would block every other writer, which is not the property tested.
fn pause_outside_sink(sb: &Sandbox, cmd: u32) {
    loop {
        proc::signal(cmd, Signal::STOP);
        if !FencedSink::busy(&sb.file("sink.db")) {
            return;
        }
        proc::signal(cmd, Signal::CONT);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A second holder that waits for the lease, writes for 300 ms, and exits.
fn second_holder(sb: &Sandbox) -> (i32, String) {
    let mut options = OPTIONS.to_vec();
    options.extend_from_slice(&["--wait", "20s"]);
    finish(spawn_holder(sb, "job", &options, 300), Duration::from_secs(30))
}

/// The sink's check, plus what the trial saw, as one report.
fn sink_report(sb: &Sandbox, trial: usize, mut seen: Vec<String>) -> Report {
    let mut report = FencedSink::open(&sb.file("sink.db")).unwrap().check().unwrap();
    for s in seen.drain(..) {
        report.push("trial", format!("trial {trial}: {s}"));
    }
    report
}

/// fault case 8: supervisor and command `SIGSTOPped` past 3×TTL while another
/// holder takes the lease and writes; SIGCONT (command first, so that it
/// writes before its supervisor can react): its late writes are refused,
/// and the supervisor sees the loss on its boot clock and stops it (75).
/// The guard, not paused here, usually ends the command at the window's
/// end already (SIGKILL ends a stopped process); case 25c pauses the guard
/// too, so that the late writes surely happen.
fn case08_a_paused_holder_and_command_are_refused_and_stopped_on_resume() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let cmd = command_pid(&sb);
        proc::signal(sup.id(), Signal::STOP);
        pause_outside_sink(&sb, cmd);
        let paused = Instant::now();
        let mut seen = Vec::new();
        let (code, err) = second_holder(&sb);
        if code != 0 {
            seen.push(format!("the second holder exited {code}: {err}"));
        }
        std::thread::sleep(Duration::from_millis(3 * TTL_MS).saturating_sub(paused.elapsed()));
        proc::signal(cmd, Signal::CONT);
        std::thread::sleep(Duration::from_millis(20)); // it writes with its stale token
        proc::signal(sup.id(), Signal::CONT);
        let (code, err) = finish(sup, Duration::from_secs(10));
        if code != 75 || !err.contains("this process did not run for") {
            seen.push(format!(
                "supervisor exit {code}, not 75 with the boot-clock message: {err}"
            ));
        }
        if proc::alive(cmd) {
            seen.push("the command outlived its supervisor".into());
        }
        sink_report(&sb, trial, seen)
    });
    conclude(8, "stale writes accepted", &reports);
}

/// fault case 9a: only the supervisor is `SIGSTOPped`. Its guard stops the
/// command at the window's end (case 25a measures that it is in time);
/// whatever it wrote, no old-token write is accepted after the new
/// holder's first, and on SIGCONT the supervisor exits 75.
fn case09_a_paused_supervisor_leaves_its_command_fenced_off() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let cmd = command_pid(&sb);
        proc::signal(sup.id(), Signal::STOP);
        let mut seen = Vec::new();
        let (code, err) = second_holder(&sb);
        if code != 0 {
            seen.push(format!("the second holder exited {code}: {err}"));
        }
        proc::signal(sup.id(), Signal::CONT);
        let (code, err) = finish(sup, Duration::from_secs(10));
        if code != 75 {
            seen.push(format!("supervisor exit {code}, not 75: {err}"));
        }
        if proc::alive(cmd) {
            seen.push("the command outlived its supervisor".into());
        }
        sink_report(&sb, trial, seen)
    });
    conclude(9, "(supervisor paused) stale writes accepted", &reports);
}

/// fault case 9b: only the command is `SIGSTOPped` past 3×TTL; the supervisor
/// keeps renewing, so the lease stays and no one else gets it; the command
/// resumes writing with its (still current) token.
fn case09_a_paused_command_keeps_its_lease_while_the_supervisor_renews() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 3 * TTL_MS + 1500);
        let cmd = command_pid(&sb);
        pause_outside_sink(&sb, cmd);
        let paused = Instant::now();
        let mut seen = Vec::new();
        while paused.elapsed() < Duration::from_millis(3 * TTL_MS) {
            if sb.try_acquire("job", "1s").is_some() {
                seen.push(format!(
                    "taken over after {:?} while the supervisor renewed",
                    paused.elapsed()
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        proc::signal(cmd, Signal::CONT);
        let (code, err) = finish(sup, Duration::from_secs(20));
        if code != 0 {
            seen.push(format!("supervisor exit {code}: {err}"));
        }
        sink_report(&sb, trial, seen)
    });
    conclude(9, "(command paused) stale writes accepted or leases lost", &reports);
}

/// fault case 10: the store is locked (an exclusive SQLite transaction held by
/// another process) for 2×TTL: the command must be gone before the
/// store could expire the grant — before `L − heartbeat + TTL`, where L is
/// when the lock was taken (the last renewal was sent after `L −
/// heartbeat`). Reports the minimum margin.
fn case10_an_unavailable_store_stops_the_command_before_the_lease_can_pass_on() {
    let results = parallel(count(2, 100), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let _ = command_pid(&sb);
        let conn = rusqlite::Connection::open(sb.store_path()).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let locked_ns = proc::boot_ns();
        std::thread::sleep(Duration::from_millis(2 * TTL_MS));
        conn.execute_batch("ROLLBACK").unwrap();
        drop(conn);
        let (code, err) = finish(sup, Duration::from_secs(10));
        let mut seen = Vec::new();
        if code != 75 {
            seen.push(format!("supervisor exit {code}, not 75: {err}"));
        }
        let holding = grants::read(&sb.file("grants")).unwrap()[0].clone();
        let deadline = locked_ns - HEARTBEAT_MS * 1_000_000 + TTL_MS * 1_000_000;
        let margin_ms = if let Some(end) = holding.end_ns {
            (deadline as i64 - end as i64) / 1_000_000
        } else {
            seen.push("the command never logged its end (killed, not stopped?)".into());
            i64::MIN
        };
        if margin_ms < 0 {
            seen.push(format!(
                "the command was still running {} ms after the deadline",
                -margin_ms
            ));
        }
        (sink_report(&sb, trial, seen), margin_ms)
    });
    let in_time = results.iter().filter(|(r, _)| r.is_clean()).count();
    let min_margin = results.iter().map(|(_, m)| *m).min().unwrap_or(0);
    figure(
        10,
        &format!(
            "commands stopped in time: {in_time} of {}; minimum margin {min_margin} ms (SQLite store)",
            results.len()
        ),
    );
    for (r, _) in &results {
        r.assert_clean();
    }
}

fn conclude(case: u32, what: &str, reports: &[Report]) {
    let stale: usize = reports
        .iter()
        .flat_map(|r| &r.violations)
        .filter(|v| v.kind == "stale-accepted" || v.kind == "token-shared")
        .count();
    let other: usize = reports.iter().map(|r| r.violations.len()).sum::<usize>() - stale;
    figure(
        case,
        &format!("{what}: {stale} in {} trials; other violations {other}", reports.len()),
    );
    for r in reports {
        r.assert_clean();
    }
}

/// The guard of the `run` or `work` process `sup`: its child running
/// `leasehold __guard` (spawned from any of its threads).
fn guard_of(sup: u32) -> u32 {
    let tasks = std::fs::read_dir(format!("/proc/{sup}/task")).expect("the supervisor's threads");
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"__guard"))
        })
        .expect("the supervisor has a guard")
}

/// One value read from the sandbox's SQLite store (read-only).
fn store_value(sb: &Sandbox, sql: &str) -> u64 {
    let conn = rusqlite::Connection::open_with_flags(sb.store_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open store");
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).expect(sql) as u64
}

/// When the store granted `token` of `job`, on the boot clock: the SQLite
/// store keeps expiry as boot-clock nanoseconds, so a grant's moment is
/// `expires_ns - ttl`.
fn granted_ns(sb: &Sandbox, token: u64) -> u64 {
    store_value(
        sb,
        &format!("SELECT expires_ns - ttl_ms * 1000000 FROM lease_grant WHERE name = 'job' AND token = {token}"),
    )
}

/// The last sign of life of the command `pid` holding `token`: its last
/// sink write (accepted or refused) or its logged end.
fn last_seen_ns(sb: &Sandbox, token: u64, pid: u32) -> u64 {
    let writer = format!("pid {pid} token {token}");
    let audit = FencedSink::open(&sb.file("sink.db")).unwrap().audit().unwrap();
    let last_write = audit.iter().filter(|a| a.writer == writer).map(|a| a.at_ns).max();
    let end = grants::read(&sb.file("grants"))
        .unwrap()
        .iter()
        .filter(|h| h.token == token && h.pid == pid)
        .filter_map(|h| h.end_ns)
        .max();
    last_write.max(end).unwrap_or(0)
}

/// Milliseconds from `b` to `a` (negative: `a` came first).
fn ms_after(a: u64, b: u64) -> i64 {
    (a as i64 - b as i64) / 1_000_000
}

/// What a case-25 trial saw: violations, and the command's last sign of
/// life relative to the newcomer's grant (ms; negative = before it).
type StopTrial = (Report, i64);

fn conclude_stopped(variant: &str, relative_to: &str, results: &[StopTrial]) {
    let clean = results.iter().filter(|(r, _)| r.is_clean()).count();
    let latest = results.iter().map(|(_, ms)| *ms).max().unwrap_or(0);
    figure(
        25,
        &format!(
            "{variant}: {clean} of {} trials clean; latest sign of life of the old command {latest} ms after {relative_to}",
            results.len()
        ),
    );
    for (r, _) in results {
        r.assert_clean();
    }
}

/// fault case 25a: only the `run` supervisor is `SIGSTOPped` (stopped, not dead:
/// its guard sees no EOF). The guard knows the trust window and stops the
/// command itself, at the moments `run` would: the command must be gone
/// before a newcomer waiting for the lease is granted it.
fn case25_a_stopped_supervisor_still_has_its_command_stopped_before_the_lease_passes_on() {
    let results = parallel(count(3, 100), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let cmd = command_pid(&sb);
        let old = grants::read(&sb.file("grants")).unwrap()[0].token;
        proc::signal(sup.id(), Signal::STOP);
        let (code, out, err) = sb.run(&["acquire", "job", "--ttl", "60s", "--wait=20s"]);
        let alive_at_grant = proc::alive(cmd);
        let mut seen = Vec::new();
        assert_eq!(code, 0, "the newcomer's acquire: {err}");
        let granted = granted_ns(&sb, out.trim().parse().expect("a token"));
        let last = last_seen_ns(&sb, old, cmd);
        if alive_at_grant {
            seen.push("the command still ran when the newcomer's acquire returned".to_owned());
        }
        if last >= granted {
            seen.push(format!(
                "the command was seen {} ms after the newcomer's grant",
                ms_after(last, granted)
            ));
        }
        proc::signal(sup.id(), Signal::CONT);
        let (code, err) = finish(sup, Duration::from_secs(10));
        if code != 75 {
            seen.push(format!("supervisor exit {code}, not 75: {err}"));
        }
        (sink_report(&sb, trial, seen), ms_after(last, granted))
    });
    conclude_stopped("(a) supervisor stopped alone", "the newcomer's grant", &results);
}

/// Cases 25b and 25c: the supervisor and its guard — and, with
/// `command_too`, the command — `SIGSTOPped` past the TTL while a newcomer
/// holds and writes. Nothing unpaused can stop the command: only the sink
/// protects what it writes (after the newcomer's first write every
/// old-token write is refused). Resumed — the command first, so that it
/// writes with its stale token — the guard finds the window closed and
/// stops it at once; `run` exits 75.
fn stopped_with_its_guard(trial: usize, command_too: bool) -> StopTrial {
    let sb = Sandbox::new();
    let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
    let cmd = command_pid(&sb);
    let old = grants::read(&sb.file("grants")).unwrap()[0].token;
    let guard = guard_of(sup.id());
    proc::signal(sup.id(), Signal::STOP);
    proc::signal(guard, Signal::STOP);
    if command_too {
        pause_outside_sink(&sb, cmd);
    }
    let mut seen = Vec::new();
    let (code, err) = second_holder(&sb);
    if code != 0 {
        seen.push(format!("the second holder exited {code}: {err}"));
    }
    // The newcomer has released by now: its logged start stands in for
    // its grant (a little later than it).
    let granted = grants::read(&sb.file("grants")).unwrap()[1].start_ns;
    if command_too {
        proc::signal(cmd, Signal::CONT);
        std::thread::sleep(Duration::from_millis(20)); // it writes with its stale token
    }
    proc::signal(guard, Signal::CONT);
    proc::signal(sup.id(), Signal::CONT);
    let (code, err) = finish(sup, Duration::from_secs(10));
    if code != 75 {
        seen.push(format!("supervisor exit {code}, not 75: {err}"));
    }
    if proc::alive(cmd) {
        seen.push("the command outlived its resumed supervisor".into());
    }
    (
        sink_report(&sb, trial, seen),
        ms_after(last_seen_ns(&sb, old, cmd), granted),
    )
}

/// fault case 25b: the supervisor and its guard stopped, the command runs
/// on (see [`stopped_with_its_guard`]).
fn case25_a_stopped_supervisor_and_guard_leave_the_command_to_the_fence() {
    let results = parallel(count(2, 100), 6, |trial| stopped_with_its_guard(trial, false));
    conclude_stopped(
        "(b) supervisor and guard stopped (fence only)",
        "the newcomer's command started",
        &results,
    );
}

/// fault case 25c: everything stopped, the command resumed first (see
/// [`stopped_with_its_guard`]).
fn case25_everything_stopped_writes_late_and_is_refused_then_stopped() {
    let results = parallel(count(2, 100), 6, |trial| stopped_with_its_guard(trial, true));
    conclude_stopped(
        "(c) everything stopped (fence only)",
        "the newcomer's command started",
        &results,
    );
}

/// fault case 25d: `leasehold work` alone `SIGSTOPped` while its task runs: the
/// task's guard stops the command before the claim can pass on, so a
/// newcomer's claim of the task finds it gone.
fn case25_a_stopped_worker_still_has_its_task_stopped_before_the_claim_passes_on() {
    let results = parallel(count(2, 100), 6, |trial| {
        let sb = Sandbox::new();
        let (code, _, err) = sb.run(&["task", "add", "q", "--id", "t", "--payload", "1"]);
        assert_eq!(code, 0, "task add: {err}");
        let (log, sink) = (sb.file("grants"), sb.file("sink.db"));
        let worker = sb
            .cmd(&[
                "work",
                "q",
                "--ttl",
                "1500ms",
                "--heartbeat",
                "250ms",
                "--grace",
                "300ms",
                "--max-tasks",
                "1",
                "--",
                crate::common::client(),
                "hold",
                &log.display().to_string(),
                &sink.display().to_string(),
                "60000",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn leasehold work");
        let cmd = command_pid(&sb);
        let old = grants::read(&log).unwrap()[0].token;
        proc::signal(worker.id(), Signal::STOP);
        let begun = Instant::now();
        let mut seen = Vec::new();
        let alive_at_claim = loop {
            let (code, _, err) = sb.run(&["task", "claim", "q", "--ttl", "60s"]);
            match code {
                0 => break proc::alive(cmd),
                10 if begun.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(20)),
                _ => panic!("the newcomer's claim: exit {code} after {:?}: {err}", begun.elapsed()),
            }
        };
        let claimed = store_value(
            &sb,
            "SELECT lease_until_ns - ttl_ms * 1000000 FROM task WHERE queue = 'q' AND id = 't'",
        );
        let last = last_seen_ns(&sb, old, cmd);
        if alive_at_claim {
            seen.push("the task's command still ran when the newcomer's claim returned".to_owned());
        }
        if last >= claimed {
            seen.push(format!(
                "the task's command was seen {} ms after the newcomer's claim",
                ms_after(last, claimed)
            ));
        }
        proc::signal(worker.id(), Signal::CONT);
        let (code, err) = finish(worker, Duration::from_secs(10));
        if code != 0 {
            seen.push(format!("work exit {code}: {err}"));
        }
        (sink_report(&sb, trial, seen), ms_after(last, claimed))
    });
    conclude_stopped("(d) worker stopped alone", "the newcomer's claim", &results);
}
