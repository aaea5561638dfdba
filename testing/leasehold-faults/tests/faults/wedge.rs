//! One process stopped inside its write transaction (fault case 30, issue
//! 22): a `leasehold run` stops itself with the `stop` failpoint at a step
//! inside its transaction — SQLite's `acquire/before-commit` or
//! `renew/before-commit` (holding SQLite's one write lock), and
//! `acquire/token` (after the grant's insert, before the commit) on
//! PostgreSQL and etcd — while three other `run` holders keep names of
//! their own on the same store.
//!
//! What must never happen to the user, checked from outside (exit codes,
//! messages, the history the commands and the test record — judged by the
//! checker —, `/proc`):
//!
//! - SQLite, where one stopped writer blocks every write: the other
//!   commands fail with a clear error that names the stopped process (its
//!   pid and "stopped") and says how to resume it; `doctor` says the same;
//!   the holders beside it stop their commands before their leases could
//!   pass on (exit 75) and their message names the locker — never "this
//!   process did not run", which is not what happened to them; the stopped
//!   `run` itself, resumed, starts no command under a grant whose window
//!   closed while it was stopped (or, stopped inside a renewal, had its
//!   command stopped in time by its guard) and says so; afterwards every
//!   name works again and no token was issued twice.
//! - PostgreSQL and etcd: the other names are not affected at all (their
//!   holders keep their leases, other commands succeed at once). The same
//!   name on PostgreSQL waits for the stopped session's locks: `lock_timeout`
//!   (5 s) and exit 69 with a clear error, until the server ends the
//!   session (`idle_in_transaction_session_timeout`, 60 s; checked in the
//!   soak tier) or the client resumes and commits. etcd holds nothing
//!   while a client is stopped: its transaction is one compare-and-swap,
//!   sent at commit, which fails on resume when the name moved on.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use leasehold_faults::checker::Report;
use leasehold_faults::history::{Acts, GrantRecord, Recorded};
use leasehold_faults::proc::{Sandbox, outcome, signal};
use leasehold_faults::tier::{self, figure};
use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;
use leasehold_testkit::{etcd, postgres};
use rustix::process::Signal;

use crate::common::{finish, grants, history, judge, record_acquired, resource_of, store_holder};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case30_a_writer_stopped_inside_its_sqlite_transaction_is_named_and_nothing_is_lost,
    case30_a_client_stopped_inside_its_postgres_transaction_holds_up_its_own_name_only,
    case30_a_client_stopped_inside_its_etcd_transaction_holds_up_nothing,
];

/// The holders beside the stopped one.
const VICTIMS: [&str; 3] = ["v1", "v2", "v3"];
/// Every `run` here: TTL 3 s (etcd's shortest lease is 2 s).
const TTL_MS: u64 = 3000;

/// [`store_holder`] on `store`, started, with `failpoint` armed if given.
fn holder(sb: &Sandbox, store: &str, name: &str, hold_ms: u64, failpoint: Option<&str>) -> Child {
    let mut cmd = store_holder(sb, &[], store, name, hold_ms);
    if let Some(point) = failpoint {
        leasehold_faults::proc::arm_failpoint(&mut cmd, point);
    }
    cmd.spawn().expect("spawn leasehold run")
}

fn holdings(sb: &Sandbox, name: &str) -> Vec<Recorded> {
    grants(sb, name)
}

/// Whether a command under `run` recorded a grant of `name` (the test's
/// own acquisitions are recorded too, as held by no process).
fn commands_started(sb: &Sandbox, name: &str) -> bool {
    holdings(sb, name).iter().any(|g| g.pid().is_some())
}

/// `leasehold ARGS...` on `store`: (exit code, stdout, stderr, how long).
fn leasehold(sb: &Sandbox, store: &str, args: &[&str]) -> (i32, String, String, Duration) {
    let began = Instant::now();
    let (code, out, err) = outcome(
        &sb.cmd(args)
            .env("LEASEHOLD_STORE", store)
            .output()
            .expect("run leasehold"),
    );
    (code, out, err, began.elapsed())
}

/// The state letter of `pid` (field 3 of `/proc/PID/stat`), read here and
/// not with the code under test.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Wait until `pid` is stopped (`T`); false if it exited or never did.
fn stopped(pid: u32) -> bool {
    wait_until(Duration::from_secs(30), || matches!(state_of(pid), Some('T') | None)).is_some()
        && state_of(pid) == Some('T')
}

/// Whether `pid` holds an exclusive POSIX lock on byte 120 of `shm` (where
/// SQLite takes its write lock), as `/proc/locks` lists it — looked for
/// during a second: the kernel writes that list a page per read, each page
/// a snapshot of its own, so one read of a long, changing list can miss a
/// line.
fn holds_sqlite_write_lock(pid: u32, shm: &Path) -> bool {
    wait_until(Duration::from_secs(1), || listed_as_write_lock_holder(pid, shm)).is_some()
}

fn listed_as_write_lock_holder(pid: u32, shm: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = std::fs::metadata(shm).map(|m| m.ino()) else {
        return false;
    };
    std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks.lines().any(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END
            f.len() == 8
                && f[1] == "POSIX"
                && f[3] == "WRITE"
                && f[4] == pid.to_string()
                && f[5].rsplit(':').next() == Some(&ino.to_string())
                && f[6].parse::<u64>().is_ok_and(|s| s <= 120)
                && (f[7] == "EOF" || f[7].parse::<u64>().is_ok_and(|e| e >= 120))
        })
    })
}

/// Start the victims and wait until each one's command logged its grant.
fn start_victims(sb: &Sandbox, store: &str, hold_ms: u64) -> Vec<Child> {
    let victims: Vec<Child> = VICTIMS
        .iter()
        .map(|name| holder(sb, store, name, hold_ms, None))
        .collect();
    for name in VICTIMS {
        wait_until(Duration::from_secs(30), || !holdings(sb, name).is_empty())
            .unwrap_or_else(|| panic!("victim {name} never started its command"));
    }
    victims
}

/// The checker's verdict on the trial's history (every name: no token
/// reissued or out of order, no holder acting after the next grant or the
/// store's expiry of its grant, no fence going back, nothing acknowledged
/// lost), merged into `report`.
fn history_report(sb: &Sandbox, names: &[&str], report: &mut Report) {
    let resources: Vec<std::path::PathBuf> = names
        .iter()
        .map(|name| resource_of(sb, name))
        .filter(|r| r.exists())
        .collect();
    report.merge(judge(
        sb,
        &resources.iter().map(std::path::PathBuf::as_path).collect::<Vec<_>>(),
    ));
}

/// `leasehold --json acquire NAME ARGS...` on `store`, recorded in the
/// history as held by `by` (and ended at once) when granted: (exit code,
/// stdout, stderr, how long).
fn acquire_on(sb: &Sandbox, store: &str, name: &str, args: &[&str], by: &str) -> (i32, String, String, Duration) {
    let mut all = vec!["--json", "acquire", name];
    all.extend_from_slice(args);
    let asked = leasehold_faults::proc::boot_ns();
    let (code, out, err, took) = leasehold(sb, store, &all);
    let answered = leasehold_faults::proc::boot_ns();
    if code == 0 {
        let mut history = history(sb);
        let (_, id) = record_acquired(&mut history, name, &out, by, asked, answered);
        history.end(name, &id, answered).unwrap();
    }
    (code, out, err, took)
}

/// Acquire `name` once more after everything, recorded in the history —
/// asked for after every earlier grant was answered, so the checker
/// requires a token above all of theirs. It must be granted (exit 0).
fn granted_again(sb: &Sandbox, store: &str, name: &str, report: &mut Report) {
    let (code, out, err, _) = acquire_on(sb, store, name, &["--ttl", "3s", "--wait", "20s"], "afterwards");
    if code != 0 {
        report.push(
            "after",
            format!("acquire {name} afterwards: exit {code} ({out:?}), not granted: {err}"),
        );
    }
}

/// The stopped `run`, resumed, committed a grant it then did not use (it
/// named the token in its message): recorded, as held by no one acting, so
/// that the checker holds every later token above it.
fn record_unused_grant(sb: &Sandbox, name: &str, message: &str, asked: u64) {
    if let Some(token) = token_in(message) {
        history(sb)
            .grant(&GrantRecord {
                name: name.into(),
                token: Some(token),
                grant: "committed-while-stopped".into(),
                exclusive: true,
                by: "stopped-run".into(),
                asked: Some(asked),
                answered: leasehold_faults::proc::boot_ns(),
                granted: None,
                acts: Acts::Fenced,
            })
            .unwrap();
    }
}

/// The token `leasehold` named in a lost-lease message ("(token N)").
fn token_in(message: &str) -> Option<u64> {
    let (_, rest) = message.split_once("(token ")?;
    rest.split(')').next()?.parse().ok()
}

/// Where the stopped `run` stops itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inside {
    /// Its acquisition's transaction (after BEGIN IMMEDIATE, before
    /// COMMIT): no command of its own runs yet.
    Acquire,
    /// Its first renewal's transaction: its command runs.
    Renew,
}

/// What a SQLite trial measured, for the figure.
struct SqliteTrial {
    report: Report,
    /// How long `acquire` of another name took to fail.
    other_failed_after: Duration,
    /// The least margin, over the victims (and the stopped `run`'s own
    /// command, stopped inside a renewal), between a command's logged end
    /// and the earliest moment the store could expire its grant (ms).
    min_margin_ms: i64,
}

/// The stopped `run`, resumed, exits 75 saying why: its grant came too
/// late to start the command (which never ran), or it did not run for
/// longer than its window.
fn check_resumed_run(sb: &Sandbox, inside: Inside, code: i32, err: &str, report: &mut Report) {
    match inside {
        Inside::Acquire => {
            if code != 75 || !err.contains("before the command could start") || !err.contains("answered") {
                report.push(
                    "stopped run",
                    format!("exit {code}, not 75 saying its grant came too late to start: {err}"),
                );
            }
            if commands_started(sb, "wedge") {
                report.push("stopped run", "its command ran under a grant whose window had closed");
            }
        }
        Inside::Renew => {
            if code != 75 || !err.contains("this process did not run for") {
                report.push(
                    "stopped run",
                    format!("exit {code}, not 75 saying it did not run: {err}"),
                );
            }
        }
    }
}

fn sqlite_trial(inside: Inside) -> SqliteTrial {
    let sb = Sandbox::new();
    let store = format!("sqlite://{}", sb.store_path().display());
    let mut shm = sb.store_path().into_os_string();
    shm.push("-shm");
    let mut report = Report::new(format!("case 30, SQLite, stopped inside {inside:?}"));
    let victims = start_victims(&sb, &store, 60_000);
    let point = match inside {
        Inside::Acquire => "acquire/before-commit=stop",
        Inside::Renew => "renew/before-commit=stop",
    };
    let wedge_asked = leasehold_faults::proc::boot_ns();
    let wedge = holder(&sb, &store, "wedge", 60_000, Some(point));
    let pid = wedge.id();
    assert!(stopped(pid), "the `run` never stopped at {point}");
    if !holds_sqlite_write_lock(pid, Path::new(&shm)) {
        report.push(
            "setup",
            format!("pid {pid}, stopped at {point}, holds no write lock in /proc/locks"),
        );
    }
    let names_the_locker = |text: &str| {
        text.contains(&format!("pid {pid} (")) && text.contains("stopped") && !text.contains("did not run")
    };

    // Another command on another name: a clear error naming the stopper.
    let (code, _, err, other_failed_after) = leasehold(&sb, &store, &["acquire", "other", "--ttl", "10s"]);
    if code != 69 || !names_the_locker(&err) || !err.contains(&format!("kill -CONT {pid}")) {
        report.push(
            "other command",
            format!("acquire other: exit {code} after {other_failed_after:?}, not 69 naming pid {pid} stopped and how to resume it: {err}"),
        );
    }
    let (code, out, err, _) = leasehold(&sb, &store, &["doctor"]);
    let said = out.lines().find(|l| l.contains("write lock")).unwrap_or_default();
    if code != 1 || !said.starts_with("FAIL") || !names_the_locker(said) {
        report.push(
            "doctor",
            format!("doctor: exit {code}, write-lock line {said:?}: {out}{err}"),
        );
    }

    // The holders beside it: stopped in time (75), told who locked the store.
    let mut margins = Vec::new();
    for (name, victim) in VICTIMS.iter().zip(victims) {
        let (code, err) = finish(victim, Duration::from_secs(30));
        if code != 75 || !names_the_locker(&err) {
            report.push(
                "victim",
                format!("{name}: exit {code}, not 75 with a message naming pid {pid} stopped: {err}"),
            );
        }
        for blame in ["paused", "suspended"] {
            if err.contains(blame) {
                report.push("victim", format!("{name} blames a pause: {err}"));
            }
        }
        margins.push(command_ended_in_time(&sb, name, &mut report));
    }
    if inside == Inside::Renew {
        // Its guard stopped its command at the window's end (the renewal
        // that would move it is the one stopped inside its transaction).
        wait_until(Duration::from_secs(10), || {
            holdings(&sb, "wedge").first().is_some_and(|h| h.end.is_some())
        });
        margins.push(command_ended_in_time(&sb, "wedge", &mut report));
    }

    // Resumed, the stopped `run` finishes its transaction and stops.
    signal(pid, Signal::CONT);
    let (code, err) = finish(wedge, Duration::from_secs(30));
    check_resumed_run(&sb, inside, code, &err, &mut report);

    // Everything works again; no token was issued twice.
    if inside == Inside::Acquire {
        record_unused_grant(&sb, "wedge", &err, wedge_asked);
    }
    for name in VICTIMS {
        granted_again(&sb, &store, name, &mut report);
    }
    granted_again(&sb, &store, "wedge", &mut report);
    granted_again(&sb, &store, "other", &mut report);
    let mut names = VICTIMS.to_vec();
    names.push("wedge");
    history_report(&sb, &names, &mut report);
    let integrity = sb.integrity();
    if integrity != "ok" {
        report.push("integrity", integrity);
    }
    SqliteTrial {
        report,
        other_failed_after,
        min_margin_ms: margins.into_iter().min().unwrap_or(i64::MIN),
    }
}

/// The command of `name` recorded its end (it was stopped, not killed) and
/// is gone, before the store could expire its grant: the margin in ms.
/// The expiry is the store's own (`expires_ns` of the grant row, on the
/// boot clock the history uses too), read while the stopped writer still
/// holds the write lock — readers are not blocked, and nothing renewed it —
/// and recorded for the checker.
fn command_ended_in_time(sb: &Sandbox, name: &str, report: &mut Report) -> i64 {
    let Some(holding) = holdings(sb, name).into_iter().next() else {
        report.push("command", format!("{name}: no command recorded a grant"));
        return i64::MIN;
    };
    let store = rusqlite::Connection::open_with_flags(sb.store_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open the store read-only");
    let token = holding.token.expect("a token");
    let deadline_ns: i64 = match store.query_row(
        "SELECT expires_ns FROM lease_grant WHERE name = ?1 AND token = ?2",
        rusqlite::params![name, token as i64],
        |r| r.get(0),
    ) {
        Ok(ns) => ns,
        Err(e) => {
            // Nobody could write while the stopped writer held the lock:
            // say what the store says happened to the name instead.
            let said: Vec<String> = store
                .prepare("SELECT at_ms, event, token, detail FROM lease_history WHERE name = ?1 ORDER BY id")
                .and_then(|mut q| {
                    q.query_map([name], |r| {
                        Ok(format!(
                            "{} {} {:?} {}",
                            r.get::<_, i64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<i64>>(2)?,
                            r.get::<_, String>(3)?
                        ))
                    })?
                    .collect()
                })
                .unwrap_or_else(|e| vec![format!("history unreadable: {e}")]);
            report.push(
                "command",
                format!("{name}: its grant (token {token}) is not in the store ({e}); its history: {said:?}"),
            );
            return i64::MIN;
        }
    };
    // The checker judges the command's activity against it (`outlived`).
    history(sb)
        .expires(name, &holding.grant, deadline_ns as u64)
        .expect("record the expiry");
    let pid = holding.pid().expect("recorded by a process");
    if alive(pid) {
        report.push("command", format!("{name}: its command (pid {pid}) still runs"));
    }
    // A command that never recorded its end is the checker's `never-ended`.
    holding
        .end
        .map_or(i64::MIN, |end| (deadline_ns - end as i64) / 1_000_000)
}

/// fault case 30, SQLite: see the module docs. Stopped inside an
/// acquisition and inside a renewal, a trial each in the CI tier.
fn case30_a_writer_stopped_inside_its_sqlite_transaction_is_named_and_nothing_is_lost() {
    let rounds = tier::count(1, 10);
    let mut results: Vec<(Inside, SqliteTrial)> = Vec::new();
    for _ in 0..rounds {
        // One trial of each at a time: each runs five `leasehold run`s.
        results.extend(std::thread::scope(|s| {
            let handles: Vec<_> = [Inside::Acquire, Inside::Renew]
                .into_iter()
                .map(|inside| s.spawn(move || (inside, sqlite_trial(inside))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        }));
    }
    let clean = results.iter().filter(|(_, t)| t.report.is_clean()).count();
    let slowest = results
        .iter()
        .map(|(_, t)| t.other_failed_after)
        .max()
        .unwrap_or_default();
    let margin = results.iter().map(|(_, t)| t.min_margin_ms).min().unwrap_or(0);
    figure(
        30,
        &format!(
            "SQLite: {clean} of {} trials clean (stopped inside an acquisition and a renewal, 3 holders beside it each); other names' commands failed with the locker named after {:.1} s at most; commands stopped at least {margin} ms before their grants could expire",
            results.len(),
            slowest.as_secs_f64()
        ),
    );
    for (_, t) in &results {
        t.report.assert_clean();
    }
}

/// A network store's trial: the victims keep their leases, other names
/// work at once; `same_name` (given when the client stopped) checks what
/// the same name does meanwhile and returns its figure; the stopped
/// `run`'s exit codes allowed on resume.
fn network_trial(
    kind: &str,
    store: &str,
    same_name: impl FnOnce(&Sandbox, Instant, &mut Report) -> String,
    resumed_codes: &[i32],
) -> (Report, String) {
    let sb = Sandbox::new();
    let mut report = Report::new(format!("case 30, {kind}"));
    // Long enough to outlast the stop and the checks (victims exit 0).
    let hold_ms = tier::count(12_000, 90_000) as u64;
    let victims = start_victims(&sb, store, hold_ms);
    let wedge_asked = leasehold_faults::proc::boot_ns();
    let wedge = holder(&sb, store, "wedge", 60_000, Some("acquire/token=stop"));
    let pid = wedge.id();
    assert!(stopped(pid), "{kind}: the `run` never stopped at acquire/token");
    let stopped_at = Instant::now();

    let (code, _, err, took) = leasehold(&sb, store, &["acquire", "other", "--ttl", "10s"]);
    if code != 0 || took > Duration::from_secs(3) {
        report.push(
            "other command",
            format!("acquire other: exit {code} after {took:?}: {err}"),
        );
    }
    let same = same_name(&sb, stopped_at, &mut report);

    // Past two TTLs after the stop every victim still holds and runs.
    std::thread::sleep(Duration::from_millis(2 * TTL_MS).saturating_sub(stopped_at.elapsed()));
    for name in VICTIMS {
        match holdings(&sb, name).first() {
            Some(h) if h.end.is_none() && h.pid().is_some_and(alive) => {}
            other => report.push(
                "victim",
                format!("{name} lost its lease beside a stopped client: {other:?}"),
            ),
        }
    }
    signal(pid, Signal::CONT);
    let (code, err) = finish(wedge, Duration::from_secs(60));
    if !resumed_codes.contains(&code) {
        report.push(
            "stopped run",
            format!("resumed: exit {code}, not one of {resumed_codes:?}: {err}"),
        );
    }
    if commands_started(&sb, "wedge") {
        report.push("stopped run", "its command ran under a grant whose window had closed");
    }
    for (name, victim) in VICTIMS.iter().zip(victims) {
        let (code, err) = finish(victim, Duration::from_secs(120));
        if code != 0 {
            report.push("victim", format!("{name}: exit {code}: {err}"));
        }
    }
    record_unused_grant(&sb, "wedge", &err, wedge_asked);
    granted_again(&sb, store, "wedge", &mut report);
    let mut names = VICTIMS.to_vec();
    names.push("wedge");
    history_report(&sb, &names, &mut report);
    (report, same)
}

/// fault case 30, PostgreSQL: a client stopped inside its acquisition holds
/// the name's advisory lock and row locks in an open transaction. Other
/// names: unaffected. The same name: refused after `lock_timeout` (exit
/// 69) while it stays stopped; in the soak tier it stays stopped past the
/// server's `idle_in_transaction_session_timeout` (60 s), which ends its
/// session and frees the name.
fn case30_a_client_stopped_inside_its_postgres_transaction_holds_up_its_own_name_only() {
    let server = postgres::Server::start(false);
    let store = server.url(&postgres::Server::fresh_schema());
    let soak = tier::soak();
    let (report, same) = network_trial(
        "PostgreSQL",
        &store,
        |sb, stopped_at, report| {
            let sessions = |state: &str| -> i64 {
                server
                    .client()
                    .query_one("SELECT count(*) FROM pg_stat_activity WHERE state = $1", &[&state])
                    .expect("pg_stat_activity")
                    .get(0)
            };
            if sessions("idle in transaction") < 1 {
                report.push("setup", "no session idle in transaction: the client is not inside one");
            }
            let (code, _, err, took) = leasehold(sb, &store, &["acquire", "wedge", "--ttl", "10s"]);
            let mut said = format!(
                "the same name refused after {:.1} s with exit {code} ({})",
                took.as_secs_f64(),
                err.lines().next().unwrap_or_default()
            );
            if code != 69 || !err.contains("lock") {
                report.push("same name", format!("acquire wedge: exit {code} after {took:?}: {err}"));
            }
            if soak {
                // Past idle_in_transaction_session_timeout: the server ends
                // the stopped client's session, and the name is free.
                let freed = wait_until(Duration::from_secs(90), || {
                    acquire_on(sb, &store, "wedge", &["--ttl", "1s"], "same-name").0 == 0
                });
                match freed {
                    Some(_) => {
                        let after = stopped_at.elapsed().as_secs_f64();
                        let _ = write!(
                            said,
                            "; granted again {after:.0} s after the stop (the server ended the idle session)"
                        );
                    }
                    None => report.push("same name", "still refused 90 s after the stop"),
                }
            }
            said
        },
        // Resumed before the server ended its session: it commits, finds
        // its window closed and starts nothing (75). After (soak): its
        // connection is gone, the commit's outcome unknown (69).
        if soak { &[69] } else { &[75] },
    );
    figure(
        30,
        &format!(
            "PostgreSQL: other names unaffected (3 holders kept their leases, another name granted at once); {same}; {}",
            if report.is_clean() {
                "0 violations"
            } else {
                "VIOLATIONS"
            }
        ),
    );
    report.assert_clean();
}

/// fault case 30, etcd: a client stopped inside its acquisition has sent
/// nothing yet (the transaction is one compare-and-swap at commit), so
/// the same name is granted to another at once; resumed, the stopped
/// client's compare fails and it finds the name held (exit 11).
fn case30_a_client_stopped_inside_its_etcd_transaction_holds_up_nothing() {
    let server = etcd::shared();
    let store = format!(
        "etcd://{}?prefix={}",
        server.endpoint(),
        etcd::unique_prefix("faults", "wedge")
    );
    let (report, same) = network_trial(
        "etcd",
        &store,
        |sb, _stopped_at, report| {
            let (code, out, err, took) = acquire_on(sb, &store, "wedge", &["--ttl", "30s"], "same-name");
            if code != 0 {
                report.push("same name", format!("acquire wedge: exit {code} after {took:?}: {err}"));
            }
            let token = serde_json::from_str::<serde_json::Value>(&out)
                .ok()
                .and_then(|g| g["token"].as_u64())
                .map_or_else(|| "none".to_owned(), |t| t.to_string());
            format!(
                "the same name granted to another in {:.1} s (token {token})",
                took.as_secs_f64()
            )
        },
        &[11],
    );
    figure(
        30,
        &format!(
            "etcd: other names unaffected; {same}; {}",
            if report.is_clean() {
                "0 violations"
            } else {
                "VIOLATIONS"
            }
        ),
    );
    report.assert_clean();
}
