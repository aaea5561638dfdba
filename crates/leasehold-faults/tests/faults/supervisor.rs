//! `leasehold run` paused or cut off from its store (FAULTS cases 8, 9, 10),
//! with the command writing to a fenced sink and logging its grant.

use std::time::{Duration, Instant};

use leasehold_faults::check::Report;
use leasehold_faults::grants;
use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::sink::FencedSink;
use leasehold_faults::tier::{count, figure};
use rustix::process::Signal;

use crate::common::{finish, spawn_holder, starts};

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
    options.extend_from_slice(&["--if-held", "wait", "--wait-timeout", "20s"]);
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

/// FAULTS 8: supervisor and command `SIGSTOPped` past 3×TTL while another
/// holder takes the lease and writes; SIGCONT (command first, so that it
/// writes before its supervisor can react): its late writes are refused,
/// and the supervisor sees the loss on its boot clock and stops it (75).
#[test]
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
        if code != 75 || !err.contains("before a renewal could be sent") {
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

/// FAULTS 9a: only the supervisor is `SIGSTOPped`; its command keeps writing.
/// After the new holder's first accepted write every old-token write is
/// refused; on SIGCONT the supervisor stops the command.
#[test]
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

/// FAULTS 9b: only the command is `SIGSTOPped` past 3×TTL; the supervisor
/// keeps renewing, so the lease stays and no one else gets it; the command
/// resumes writing with its (still current) token.
#[test]
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

/// FAULTS 10: the store is locked (an exclusive SQLite transaction held by
/// another process) for 2×TTL: the command must be gone before the
/// store could expire the grant — before `L − heartbeat + TTL`, where L is
/// when the lock was taken (the last renewal was sent after `L −
/// heartbeat`). Reports the minimum margin.
#[test]
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
