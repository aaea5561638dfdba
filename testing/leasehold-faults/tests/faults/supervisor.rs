//! `leasehold run` paused or cut off from its store (fault cases 8, 9, 10,
//! 25), or killed with a tree that left the command's process group (41),
//! with the command writing to a fenced sink and logging its grant.

use std::time::{Duration, Instant};

use leasehold_faults::checker::Report;
use leasehold_faults::history::{self, Acts, Answer, GrantRecord, Recorded};
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::resource::FencedResource;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::process;
use leasehold_testkit::wait::wait_until;
use rustix::process::Signal;

use crate::common::{
    acquire_recorded, finish, grants, history, history_path, judge_sandbox, resource_path, spawn_holder,
    spawn_holder_acting, spawn_holder_with, starts,
};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case08_a_paused_holder_and_command_are_refused_and_stopped_on_resume,
    case09_a_paused_supervisor_leaves_its_command_fenced_off,
    case09_a_paused_command_keeps_its_lease_while_the_supervisor_renews,
    case10_an_unavailable_store_stops_the_command_before_the_lease_can_pass_on,
    case25_a_stopped_supervisor_still_has_its_command_stopped_before_the_lease_passes_on,
    case25_a_stopped_supervisor_has_a_command_deaf_to_sigterm_killed_before_the_lease_passes_on,
    case25_a_stopped_supervisor_and_guard_leave_the_command_to_the_fence,
    case25_everything_stopped_writes_late_and_is_refused_then_stopped,
    case25_a_stopped_worker_still_has_its_task_stopped_before_the_claim_passes_on,
    case41_kill_9_of_run_hands_the_lease_on_only_once_the_whole_tree_is_gone,
    case41_kill_9_of_the_guard_hands_the_lease_on_only_once_the_whole_tree_is_gone,
    case41_kill_9_of_run_and_its_guard_hands_the_lease_on_only_once_the_group_is_empty,
];

const TTL_MS: u64 = 1500;
const OPTIONS: &[&str] = &["--ttl", "1500ms", "--heartbeat", "250ms", "--grace", "300ms"];

/// Run `trials` trials, `parallel` at a time, each in its own sandbox.
pub(crate) fn parallel<T: Send + 'static>(trials: usize, parallel: usize, trial: fn(usize) -> T) -> Vec<T> {
    let mut out = Vec::new();
    for round in (0..trials).step_by(parallel) {
        let threads: Vec<_> = (round..trials.min(round + parallel))
            .map(|i| std::thread::spawn(move || trial(i)))
            .collect();
        out.extend(threads.into_iter().map(|t| t.join().unwrap()));
    }
    out
}

/// The first holder's command, once it recorded its grant of `name`: its
/// pid and its grant.
fn first_command(sb: &Sandbox, name: &str) -> (u32, Recorded) {
    wait_until(Duration::from_secs(20), || starts(sb, name) >= 1).expect("the command never started");
    let grant = grants(sb, name).swap_remove(0);
    (grant.pid().expect("recorded by a process"), grant)
}

/// SIGSTOP the command outside a write of the resource: holding its lock,
/// it would block every other writer, which is not the property tested.
fn pause_outside_resource(sb: &Sandbox, cmd: u32) {
    loop {
        proc::signal(cmd, Signal::STOP);
        if !FencedResource::busy(&resource_path(sb)) {
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

/// The checker's verdict on the trial's history, plus what the trial saw.
fn trial_report(sb: &Sandbox, trial: usize, seen: Vec<String>) -> Report {
    let mut report = judge_sandbox(sb);
    for s in seen {
        report.push("trial", format!("trial {trial}: {s}"));
    }
    report
}

/// The figure of a group of trials: what the checker judged, and what it found.
fn conclude(case: u32, what: &str, reports: &[Report]) {
    let mut all = Report::new(format!("case {case}"));
    for r in reports {
        all.merge(r.clone());
    }
    let c = all.counts;
    figure(
        case,
        &format!(
            "{what}: {} trials, {} grants, {} writes ({} accepted, {} refused); stale writes accepted {} (fence went back {}, store gate {}); \
             holders acting after the next grant {}; other violations {}",
            reports.len(),
            c.grants,
            c.writes,
            c.accepted,
            c.refused,
            all.count("fence-went-back") + all.count("stale-pass"),
            all.count("fence-went-back"),
            all.count("stale-pass"),
            all.count("overlap"),
            all.total() - all.count("fence-went-back") - all.count("stale-pass") - all.count("overlap")
        ),
    );
    for r in reports {
        r.assert_clean();
    }
}

/// fault case 8: supervisor and command `SIGSTOPped` past 3×TTL while another
/// holder takes the lease and writes; SIGCONT (command first, so that it
/// writes before its supervisor can react): its late writes are refused,
/// and the supervisor sees the loss on its boot clock and stops it (75).
/// The guard, not paused here, usually ends the command at the window's
/// end already (SIGKILL ends a stopped process); case 25c pauses the guard
/// too, so that the late writes surely happen. The paused command acts
/// only through the fence (it is paused with its supervisor): the checker
/// judges the fence's answers, the tokens and the newcomer.
fn case08_a_paused_holder_and_command_are_refused_and_stopped_on_resume() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder_acting(&sb, "job", OPTIONS, 60_000, Acts::Fenced);
        let (cmd, _) = first_command(&sb, "job");
        proc::signal(sup.id(), Signal::STOP);
        pause_outside_resource(&sb, cmd);
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
        if process::alive(cmd) {
            seen.push("the command outlived its supervisor".into());
        }
        if starts(&sb, "job") != 2 {
            seen.push(format!(
                "{} grants recorded, not the two of the trial",
                starts(&sb, "job")
            ));
        }
        trial_report(&sb, trial, seen)
    });
    conclude(8, "supervisor and command paused", &reports);
}

/// fault case 9a: only the supervisor is `SIGSTOPped`. Its guard stops the
/// command at the window's end (case 25a measures by how much): the
/// command's activity ends before the newcomer's grant, no old-token
/// write is accepted after the newcomer's first, and on SIGCONT the
/// supervisor exits 75.
fn case09_a_paused_supervisor_leaves_its_command_fenced_off() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let (cmd, _) = first_command(&sb, "job");
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
        if process::alive(cmd) {
            seen.push("the command outlived its supervisor".into());
        }
        if starts(&sb, "job") != 2 {
            seen.push(format!(
                "{} grants recorded, not the two of the trial",
                starts(&sb, "job")
            ));
        }
        trial_report(&sb, trial, seen)
    });
    conclude(9, "(a) supervisor paused", &reports);
}

/// fault case 9b: only the command is `SIGSTOPped` past 3×TTL; the supervisor
/// keeps renewing, so the lease stays and no one else gets it (an
/// acquisition that succeeded is recorded, and the checker reports the
/// overlap); the command resumes writing with its (still current) token.
fn case09_a_paused_command_keeps_its_lease_while_the_supervisor_renews() {
    let reports = parallel(count(2, 200), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 3 * TTL_MS + 1500);
        let (cmd, _) = first_command(&sb, "job");
        pause_outside_resource(&sb, cmd);
        let paused = Instant::now();
        let mut seen = Vec::new();
        let mut history = history(&sb);
        let mut tries = 0;
        while paused.elapsed() < Duration::from_millis(3 * TTL_MS) {
            tries += 1;
            if let Some((_, grant)) = acquire_recorded(&sb, &mut history, "contender", "job", &["--ttl", "1s"]) {
                history.end("job", &grant, boot_ns()).unwrap();
                seen.push(format!(
                    "taken over after {:?} while the supervisor renewed",
                    paused.elapsed()
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if tries < 3 {
            seen.push(format!("only {tries} acquisitions tried while the command was paused"));
        }
        proc::signal(cmd, Signal::CONT);
        let (code, err) = finish(sup, Duration::from_secs(20));
        if code != 0 {
            seen.push(format!("supervisor exit {code}: {err}"));
        }
        trial_report(&sb, trial, seen)
    });
    conclude(9, "(b) command paused", &reports);
}

/// fault case 10: the store is locked (an exclusive SQLite transaction held
/// by another process) for 2×TTL: the command must be gone before the
/// store could expire the grant — its `expires_ns`, read inside the lock
/// (no renewal can move it then) and recorded in the history, where the
/// checker judges it against the command's last activity. Reports the
/// minimum margin.
fn case10_an_unavailable_store_stops_the_command_before_the_lease_can_pass_on() {
    let results = parallel(count(2, 100), 6, |trial| {
        let sb = Sandbox::new();
        let sup = spawn_holder(&sb, "job", OPTIONS, 60_000);
        let (_, grant) = first_command(&sb, "job");
        let conn = rusqlite::Connection::open(sb.store_path()).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let expires: i64 = conn
            .query_row(
                "SELECT expires_ns FROM lease_grant WHERE name = 'job' AND token = ?1",
                [grant.token.expect("a token") as i64],
                |r| r.get(0),
            )
            .expect("the grant's row");
        history(&sb).expires("job", &grant.grant, expires as u64).unwrap();
        std::thread::sleep(Duration::from_millis(2 * TTL_MS));
        conn.execute_batch("ROLLBACK").unwrap();
        drop(conn);
        let (code, err) = finish(sup, Duration::from_secs(10));
        let mut seen = Vec::new();
        if code != 75 {
            seen.push(format!("supervisor exit {code}, not 75: {err}"));
        }
        let end = grants(&sb, "job")[0].end;
        let margin_ms = end.map_or(i64::MIN, |end| (expires - end as i64) / 1_000_000);
        (trial_report(&sb, trial, seen), margin_ms)
    });
    let in_time = results.iter().filter(|(r, _)| r.is_clean()).count();
    let min_margin = results.iter().map(|(_, m)| *m).min().unwrap_or(0);
    figure(
        10,
        &format!(
            "commands stopped in time: {in_time} of {}; minimum margin {min_margin} ms before the store could expire the grant (SQLite store)",
            results.len()
        ),
    );
    for (r, _) in &results {
        r.assert_clean();
    }
}

/// One value read from the sandbox's SQLite store (read-only).
fn store_value(sb: &Sandbox, sql: &str) -> u64 {
    let conn = rusqlite::Connection::open_with_flags(sb.store_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open store");
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).expect(sql) as u64
}

/// Milliseconds from `b` to `a` (negative: `a` came first).
fn ms_after(a: u64, b: u64) -> i64 {
    (a as i64 - b as i64) / 1_000_000
}

/// A newcomer's grant or claim the test took itself (`OUTPUT` of a `--json`
/// command, asked for at `asked`), recorded with the moment the store
/// issued it on its own clock (`granted`: the SQLite store keeps expiry on
/// the boot clock, so a grant's moment is its expiry minus its TTL).
fn record_newcomer(sb: &Sandbox, name: &str, grant: &str, token: u64, (asked, answered, granted): (u64, u64, u64)) {
    let mut history = history(sb);
    history
        .grant(&GrantRecord {
            name: name.into(),
            token: Some(token),
            grant: grant.into(),
            exclusive: true,
            by: "newcomer".into(),
            asked: Some(asked),
            answered,
            granted: Some(granted),
            acts: Acts::Own,
        })
        .unwrap();
    history.end(name, grant, answered).unwrap();
}

/// What a case-25 trial saw.
pub(crate) struct StopTrial {
    /// The checker's report, and the trial's own observations.
    report: Report,
    /// The old command's last sign of life relative to the newcomer's
    /// grant (ms; negative = before it).
    last_ms: i64,
    /// (b), (c): how long the resumed guard took to stop the command.
    guard_stopped: Option<Duration>,
}

/// The figure of case `case`'s trials (25; 34 on Firestore), and their verdict.
pub(crate) fn conclude_stopped(case: u32, variant: &str, relative_to: &str, results: &[StopTrial]) {
    let clean = results.iter().filter(|t| t.report.is_clean()).count();
    let latest = results.iter().map(|t| t.last_ms).max().unwrap_or(0);
    let mut all = Report::new(format!("case {case}"));
    for t in results {
        all.merge(t.report.clone());
    }
    let guard = results
        .iter()
        .filter_map(|t| t.guard_stopped)
        .max()
        .map(|d| format!("; the resumed guard stopped the command within {} ms", d.as_millis()))
        .unwrap_or_default();
    figure(
        case,
        &format!(
            "{variant}: {clean} of {} trials clean ({} grants, {} writes: {} accepted, {} refused); latest sign of life of the old command {latest} ms after {relative_to}{guard}",
            results.len(),
            all.counts.grants,
            all.counts.writes,
            all.counts.accepted,
            all.counts.refused
        ),
    );
    for t in results {
        t.report.assert_clean();
    }
}

/// fault case 25a: only the `run` supervisor is `SIGSTOPped` (stopped, not dead:
/// its guard sees no EOF). The guard knows the trust window and stops the
/// command itself, at the moments `run` would: the command's activity must
/// end before a newcomer waiting for the lease is granted it — the
/// checker's `overlap`, against the grant's moment on the store's clock.
fn case25_a_stopped_supervisor_still_has_its_command_stopped_before_the_lease_passes_on() {
    let results = parallel(count(3, 100), 6, |trial| stopped_supervisor(trial, false));
    conclude_stopped(25, "(a) supervisor stopped alone", "the newcomer's grant", &results);
}

/// fault case 25e: 25a with a command that ignores SIGTERM and acts on: only
/// the guard's SIGKILL, `grace` after its SIGTERM, can end it before the
/// lease passes on (the supervisor, stopped, sends nothing). The premise is
/// asserted: the command recorded activity after the SIGTERM it ignored.
fn case25_a_stopped_supervisor_has_a_command_deaf_to_sigterm_killed_before_the_lease_passes_on() {
    let results = parallel(count(3, 100), 6, |trial| stopped_supervisor(trial, true));
    conclude_stopped(
        25,
        "(e) supervisor stopped, command deaf to SIGTERM",
        "the newcomer's grant",
        &results,
    );
}

/// One trial of case 25a, or with a `deaf` command of 25e.
fn stopped_supervisor(trial: usize, deaf: bool) -> StopTrial {
    let sb = Sandbox::new();
    let flags: &[&str] = if deaf { &["deaf"] } else { &[] };
    let sup = spawn_holder_with(&sb, "job", OPTIONS, 60_000, flags);
    let (cmd, old) = first_command(&sb, "job");
    proc::signal(sup.id(), Signal::STOP);
    let asked = boot_ns();
    let (code, out, err) = sb.run(&["--json", "acquire", "job", "--ttl", "60s", "--wait=20s"]);
    let answered = boot_ns();
    let alive_at_grant = process::alive(cmd);
    let mut seen = Vec::new();
    assert_eq!(code, 0, "the newcomer's acquire: {err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("acquire --json prints JSON");
    let token = json["token"].as_u64().expect("a token");
    let granted = store_value(
        &sb,
        &format!("SELECT expires_ns - ttl_ms * 1000000 FROM lease_grant WHERE name = 'job' AND token = {token}"),
    );
    let id = json["grant_id"].as_str().expect("a grant id");
    record_newcomer(&sb, "job", id, token, (asked, answered, granted));
    if alive_at_grant {
        seen.push("the command still ran when the newcomer's acquire returned".to_owned());
    }
    if deaf {
        // Dead (killed here if nothing else did), so its last recorded
        // action is its last: that is its end. The test cannot see the
        // moment of a SIGKILL, only what the command recorded before it.
        proc::signal(cmd, Signal::KILL);
        wait_until(Duration::from_secs(10), || !process::alive(cmd)).expect("the command dies of SIGKILL");
        let after_sigterm = actions_after_sigterm(&sb, &old.grant);
        assert!(
            after_sigterm > 0,
            "trial {trial}: the premise: the command recorded no activity after the SIGTERM it ignores"
        );
        let recorded = history::attempts_of(&history_path(&sb), &old.grant).expect("read the history");
        let last = recorded.last().map_or(old.answered, |(start, _)| *start);
        history(&sb).end("job", &old.grant, last).unwrap();
    }
    proc::signal(sup.id(), Signal::CONT);
    let (code, err) = finish(sup, Duration::from_secs(10));
    if code != 75 {
        seen.push(format!("supervisor exit {code}, not 75: {err}"));
    }
    let last = grants(&sb, "job")[0].end.unwrap_or(u64::MAX);
    StopTrial {
        report: trial_report(&sb, trial, seen),
        last_ms: ms_after(last, granted),
        guard_stopped: None,
    }
}

/// How many actions the holder of `grant` recorded after ignoring SIGTERM
/// (`faults-client hold ... deaf`).
fn actions_after_sigterm(sb: &Sandbox, grant: &str) -> usize {
    let text = std::fs::read_to_string(history_path(sb)).expect("the history");
    let grant = format!("grant={grant} ");
    text.lines()
        .filter(|l| l.starts_with("write ") && l.contains(&grant) && l.contains(" value=after-sigterm"))
        .count()
}

/// How long a resumed guard whose trust window closed while it was stopped
/// may take to stop the command: it looks at the boot clock at least every
/// 100 ms, so "at once", with five times that for a loaded machine. (A
/// window kept 2 s too long — a planted bug — still has over a second to
/// run at this point.)
const GUARD_RESUMED_STOPS_WITHIN: Duration = Duration::from_millis(500);

/// Cases 25b and 25c: the supervisor and its guard — and, with
/// `command_too`, the command — `SIGSTOPped` past the TTL while a newcomer
/// takes the lease and writes. Nothing unpaused can stop the command: it
/// acts only through the fence (after the newcomer's first write every
/// old-token write is refused). Resumed — the command first, so that it
/// writes with its stale token — the guard finds the window closed and
/// stops it at once (within [`GUARD_RESUMED_STOPS_WITHIN`], the
/// supervisor still stopped); `run` exits 75. The premise is asserted: the
/// old command did attempt a write after the newcomer's grant, refused.
/// The trial's store is `sb`'s (case 34 runs it on Firestore).
pub(crate) fn stopped_with_its_guard(sb: &Sandbox, trial: usize, command_too: bool) -> StopTrial {
    let sup = spawn_holder_acting(sb, "job", OPTIONS, 60_000, Acts::Fenced);
    let (cmd, old) = first_command(sb, "job");
    let guard = process::guard_of(sup.id());
    proc::signal(sup.id(), Signal::STOP);
    proc::signal(guard, Signal::STOP);
    if command_too {
        pause_outside_resource(sb, cmd);
    }
    let mut seen = Vec::new();
    let mut options = OPTIONS.to_vec();
    options.extend_from_slice(&["--wait", "20s"]);
    let newcomer = spawn_holder(sb, "job", &options, 300);
    // The newcomer is granted and its first write answered — accepted: the
    // fence's mark moved on.
    let attempts = |grant: &str| history::attempts_of(&history_path(sb), grant).expect("read the history");
    let answered = wait_until(Duration::from_secs(20), || {
        grants(sb, "job")
            .get(1)
            .is_some_and(|n| attempts(&n.grant).iter().any(|(_, a)| a.is_some()))
    });
    assert!(answered.is_some(), "trial {trial}: the newcomer never wrote");
    let newcomer_grant = grants(sb, "job").swap_remove(1);
    if attempts(&newcomer_grant.grant)
        .iter()
        .all(|(_, a)| *a != Some(Answer::Accepted))
    {
        seen.push(format!(
            "the newcomer's first write (token {:?}) was not accepted",
            newcomer_grant.token
        ));
    }
    let granted = newcomer_grant.answered;
    let late_attempts = || -> Vec<Option<Answer>> {
        attempts(&old.grant)
            .into_iter()
            .filter(|(start, _)| *start > granted)
            .map(|(_, answer)| answer)
            .collect()
    };
    if command_too {
        proc::signal(cmd, Signal::CONT);
        // It writes with its stale token (answered, refused) before its
        // guard can react.
        wait_until(Duration::from_secs(10), || late_attempts().iter().any(Option::is_some));
    }
    proc::signal(guard, Signal::CONT);
    // Its grace ran out long ago too: SIGTERM and SIGKILL go out together,
    // and the command may die without recording its end.
    let stopped_after = wait_until(GUARD_RESUMED_STOPS_WITHIN, || !process::alive(cmd));
    if stopped_after.is_none() {
        seen.push(format!(
            "the guard, resumed {} ms after the newcomer's grant (its window closed before it), had not stopped the command (pid {cmd}) {GUARD_RESUMED_STOPS_WITHIN:?} later",
            ms_after(boot_ns(), granted) - GUARD_RESUMED_STOPS_WITHIN.as_millis() as i64
        ));
    }
    let (code, err) = finish(newcomer, Duration::from_secs(30));
    if code != 0 {
        seen.push(format!("the newcomer exited {code}: {err}"));
    }
    proc::signal(sup.id(), Signal::CONT);
    let (code, err) = finish(sup, Duration::from_secs(10));
    if code != 75 {
        seen.push(format!("supervisor exit {code}, not 75: {err}"));
    }
    if process::alive(cmd) {
        seen.push("the command outlived its resumed supervisor".into());
    }
    let late = late_attempts();
    if !late.contains(&Some(Answer::Refused)) {
        seen.push(format!(
            "no write of the old command (token {:?}) after the newcomer's grant was refused: its late attempts were {late:?}",
            old.token
        ));
    }
    let last_write = attempts(&old.grant).last().map_or(0, |(start, _)| *start);
    let last = grants(sb, "job")[0].end.unwrap_or(0).max(last_write);
    StopTrial {
        report: trial_report(sb, trial, seen),
        last_ms: ms_after(last, granted),
        guard_stopped: stopped_after,
    }
}

/// fault case 25b: the supervisor and its guard stopped, the command runs
/// on (see [`stopped_with_its_guard`]).
fn case25_a_stopped_supervisor_and_guard_leave_the_command_to_the_fence() {
    let results = parallel(count(2, 100), 6, |trial| {
        stopped_with_its_guard(&Sandbox::new(), trial, false)
    });
    conclude_stopped(
        25,
        "(b) supervisor and guard stopped (fence only)",
        "the newcomer's grant",
        &results,
    );
}

/// fault case 25c: everything stopped, the command resumed first (see
/// [`stopped_with_its_guard`]).
fn case25_everything_stopped_writes_late_and_is_refused_then_stopped() {
    let results = parallel(count(2, 100), 6, |trial| {
        stopped_with_its_guard(&Sandbox::new(), trial, true)
    });
    conclude_stopped(
        25,
        "(c) everything stopped (fence only)",
        "the newcomer's grant",
        &results,
    );
}

/// fault case 25d: `leasehold work` alone `SIGSTOPped` while its task runs: the
/// task's guard stops the command before the claim can pass on, so a
/// newcomer's claim of the task (recorded with its moment on the store's
/// clock) comes after the command's last activity.
fn case25_a_stopped_worker_still_has_its_task_stopped_before_the_claim_passes_on() {
    let results = parallel(count(2, 100), 6, |trial| {
        let sb = Sandbox::new();
        let (code, _, err) = sb.run(&["task", "add", "q", "--id", "t", "--payload", "1"]);
        assert_eq!(code, 0, "task add: {err}");
        let (history_file, resource) = (history_path(&sb), resource_path(&sb));
        let worker = crate::common::asked_now(&mut sb.cmd(&[
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
            &history_file.display().to_string(),
            &resource.display().to_string(),
            "60000",
        ]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn leasehold work");
        let (cmd, _) = first_command(&sb, "q/t");
        proc::signal(worker.id(), Signal::STOP);
        let asked = boot_ns();
        let mut seen = Vec::new();
        let (out, alive_at_claim) = loop {
            let (code, out, err) = sb.run(&["task", "claim", "q", "--ttl", "60s"]);
            match code {
                0 => break (out, process::alive(cmd)),
                10 if boot_ns() - asked < 20_000_000_000 => std::thread::sleep(Duration::from_millis(20)),
                _ => panic!(
                    "the newcomer's claim: exit {code} after {} ms: {err}",
                    ms_after(boot_ns(), asked)
                ),
            }
        };
        let answered = boot_ns();
        let claimed = store_value(
            &sb,
            "SELECT lease_until_ns - ttl_ms * 1000000 FROM task WHERE queue = 'q' AND id = 't'",
        );
        let json: serde_json::Value = serde_json::from_str(&out).expect("task claim prints JSON");
        let token = json["token"].as_u64().expect("a token");
        record_newcomer(
            &sb,
            "q/t",
            &format!("claim{token}.newcomer"),
            token,
            (asked, answered, claimed),
        );
        if alive_at_claim {
            seen.push("the task's command still ran when the newcomer's claim returned".to_owned());
        }
        proc::signal(worker.id(), Signal::CONT);
        let (code, err) = finish(worker, Duration::from_secs(10));
        if code != 0 {
            seen.push(format!("work exit {code}: {err}"));
        }
        let last = grants(&sb, "q/t")[0].end.unwrap_or(u64::MAX);
        StopTrial {
            report: trial_report(&sb, trial, seen),
            last_ms: ms_after(last, claimed),
            guard_stopped: None,
        }
    });
    conclude_stopped(25, "(d) worker stopped alone", "the newcomer's claim", &results);
}

/// Case 41's lease: a TTL far beyond the trial, so that only a proof that
/// the tree is gone (or a release) hands the lease on; grace 1 s.
const TREE_OPTIONS: &[&str] = &["--ttl", "30s", "--heartbeat", "1s", "--grace", "1s"];

/// What case 41 kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TreeKill {
    /// `run` (the supervisor): its guard stops the tree.
    Supervisor,
    /// The guard: `run`, which adopted its orphans, stops the tree.
    Guard,
    /// Both, `run` first: nothing stops the command; it ends by itself.
    Both,
}

/// One trial of case 41: `run` of a command whose descendants leave its
/// process group — one in a session of its own (`setsid`) that ignores
/// SIGTERM, one under `timeout(1)` (a group of its own) that goes on for
/// 3 s after SIGTERM — all recording their activity for the grant
/// (`faults-client act`), beside the command itself (`faults-client hold`).
/// `kill` is killed with SIGKILL, and a newcomer waits for the lease at
/// once: its grant (on the store's clock) must come after the last
/// activity of every process of the old tree — the checker's `overlap`.
/// With `TreeKill::Both`, the command alone (deaf to SIGTERM, 4 s) runs
/// on in its group with nothing left to stop it; the newcomer must wait
/// until it has ended by itself.
fn tree_trial(trial: usize, kill: TreeKill) -> StopTrial {
    let sb = Sandbox::new();
    let (sup, old, tree) = spawn_tree(&sb, kill);
    let guard = process::guard_of(sup.id());
    let mut seen = Vec::new();
    match kill {
        TreeKill::Supervisor => proc::signal(sup.id(), Signal::KILL),
        TreeKill::Guard => proc::signal(guard, Signal::KILL),
        TreeKill::Both => {
            proc::signal(sup.id(), Signal::KILL);
            proc::signal(guard, Signal::KILL);
        }
    }
    let killed = boot_ns();
    // A killed `run` is reaped at once (its pid stays taken while it is a
    // zombie, as its parent's would be); its stderr, which the tree holds
    // open too, is read once the tree is gone.
    let mut sup = Some(sup);
    let killed_run = if kill == TreeKill::Guard {
        None
    } else {
        let mut run = sup.take().expect("run");
        let stderr = run.stderr.take();
        let status = run.wait().expect("reap run");
        Some((status, stderr))
    };
    if !tree.iter().any(|&pid| process::alive(pid)) {
        seen.push("the premise: the whole tree was gone at once".to_owned());
    }
    let granted = newcomer_waits(&sb, trial);
    end_the_tree(&tree, &mut seen);
    let recorded = history::attempts_of(&history_path(&sb), &old.grant).expect("read the history");
    let last_act = recorded.last().map_or(old.answered, |(start, _)| *start);
    history(&sb).end("job", &old.grant, last_act).unwrap();
    if kill != TreeKill::Both && actions_after_sigterm(&sb, &old.grant) == 0 {
        seen.push("the premise: no descendant acted after its SIGTERM".to_owned());
    }
    let (code, err) = match killed_run {
        Some((status, stderr)) => exit_of(status, stderr),
        None => finish(sup.take().expect("run"), Duration::from_secs(30)),
    };
    match kill {
        TreeKill::Guard if code != 1 || !err.contains("whole tree was stopped") => seen.push(format!(
            "run, its guard killed, exited {code}, not 1 saying the whole tree was stopped: {err}"
        )),
        TreeKill::Supervisor | TreeKill::Both if code != -9 && code != 137 => {
            seen.push(format!("run was killed, yet exited {code}: {err}"));
        }
        _ => {}
    }
    let last = grants(&sb, "job")[0].end.unwrap_or(u64::MAX).max(last_act);
    eprintln!(
        "case 41 ({kill:?}) trial {trial}: taken over {} ms after the kill",
        ms_after(granted, killed)
    );
    StopTrial {
        report: trial_report(&sb, trial, seen),
        last_ms: ms_after(last, granted),
        guard_stopped: None,
    }
}

/// Case 41's `run` and its tree, started: `run`, the command's grant, and
/// the pids of the tree (the command's last).
fn spawn_tree(sb: &Sandbox, kill: TreeKill) -> (std::process::Child, Recorded, Vec<u32>) {
    let (history_file, pids) = (history_path(sb), sb.file("tree-pids"));
    let (h, p, c) = (
        history_file.display().to_string(),
        pids.display().to_string(),
        crate::common::client(),
    );
    let script = if kill == TreeKill::Both {
        format!("exec '{c}' hold '{h}' '' 4000 deaf")
    } else {
        format!(
            "setsid '{c}' act '{h}' '{p}' deaf 60000 & \
             timeout 100 '{c}' act '{h}' '{p}' 3000 60000 & \
             exec '{c}' hold '{h}' '' 60000"
        )
    };
    let mut args = vec!["run", "job"];
    args.extend_from_slice(TREE_OPTIONS);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let sup = crate::common::asked_now(&mut sb.cmd(&args))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn leasehold run");
    let (cmd, old) = first_command(sb, "job");
    let descendants = |n: usize| {
        wait_until(Duration::from_secs(20), || {
            std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() >= n)
        })
        .expect("the descendants never started");
        std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .filter_map(|l| l.parse::<u32>().ok())
            .collect::<Vec<_>>()
    };
    let mut tree = if kill == TreeKill::Both {
        Vec::new()
    } else {
        descendants(2)
    };
    tree.push(cmd);
    (sup, old, tree)
}

/// A newcomer's `acquire --wait`, asked for at once, recorded with its
/// moment on the store's clock, which it returns.
fn newcomer_waits(sb: &Sandbox, trial: usize) -> u64 {
    let asked = boot_ns();
    let (code, out, err) = sb.run(&["--json", "acquire", "job", "--ttl", "60s", "--wait=45s"]);
    let answered = boot_ns();
    assert_eq!(code, 0, "trial {trial}: the newcomer's acquire: {err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("acquire --json prints JSON");
    let token = json["token"].as_u64().expect("a token");
    let granted = store_value(
        sb,
        &format!("SELECT expires_ns - ttl_ms * 1000000 FROM lease_grant WHERE name = 'job' AND token = {token}"),
    );
    let id = json["grant_id"].as_str().expect("a grant id");
    record_newcomer(sb, "job", id, token, (asked, answered, granted));
    granted
}

/// Wait for every process of `tree` to be gone; whatever a broken build
/// left running is ended here (and reported), so that its last recorded
/// action is its last.
fn end_the_tree(tree: &[u32], seen: &mut Vec<String>) {
    if wait_until(Duration::from_secs(15), || tree.iter().all(|&pid| !process::alive(pid))).is_none() {
        seen.push(format!(
            "processes of the old tree still ran 15 s after the newcomer's grant: {:?}",
            tree.iter().filter(|&&pid| process::alive(pid)).collect::<Vec<_>>()
        ));
        for &pid in tree {
            proc::signal(pid, Signal::KILL);
        }
        wait_until(Duration::from_secs(10), || tree.iter().all(|&pid| !process::alive(pid)));
    }
}

/// The exit code (`-N` for signal N) and stderr of a `run` reaped early.
fn exit_of(status: std::process::ExitStatus, stderr: Option<std::process::ChildStderr>) -> (i32, String) {
    use std::io::Read as _;
    use std::os::unix::process::ExitStatusExt as _;
    let mut err = String::new();
    if let Some(mut stderr) = stderr {
        let _ = stderr.read_to_string(&mut err);
    }
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| -s))
        .unwrap_or(i32::MIN);
    (code, err)
}

/// fault case 41a: kill -9 of `run` while its command's tree reaches
/// beyond the command's group (see [`tree_trial`]): the guard stops that
/// tree within the grace period, and the lease is handed on only after
/// (the grant records the guard, which lives as long as the tree).
fn case41_kill_9_of_run_hands_the_lease_on_only_once_the_whole_tree_is_gone() {
    let results = parallel(count(2, 50), 3, |trial| tree_trial(trial, TreeKill::Supervisor));
    conclude_stopped(41, "(a) kill -9 of run", "the newcomer's grant", &results);
}

/// fault case 41b: kill -9 of the guard (the OOM killer, a `pkill -9 -f`
/// of the command's line): `run`, a child subreaper, adopts what the guard
/// kept, stops it within the grace period and releases the lease only
/// then (exit 1, naming the dead guard).
fn case41_kill_9_of_the_guard_hands_the_lease_on_only_once_the_whole_tree_is_gone() {
    let results = parallel(count(2, 50), 3, |trial| tree_trial(trial, TreeKill::Guard));
    conclude_stopped(41, "(b) kill -9 of the guard", "the newcomer's grant", &results);
}

/// fault case 41c: kill -9 of `run` and then of its guard: nothing is left
/// to stop the command, which runs on in its group for 4 s; the grant's
/// process group must be empty before the lease is handed on.
fn case41_kill_9_of_run_and_its_guard_hands_the_lease_on_only_once_the_group_is_empty() {
    let results = parallel(count(2, 50), 3, |trial| tree_trial(trial, TreeKill::Both));
    conclude_stopped(41, "(c) kill -9 of run and its guard", "the newcomer's grant", &results);
}
