//! `leasehold cron` under kill -9 (fault case 32): three daemons on one
//! store fire an `@every 200ms` schedule; every 3 s the process group of
//! the daemon that fired last is killed with SIGKILL and restarted. Two of
//! the three run with their wall clock moved by libfaketime — one an hour
//! ahead, one 5 s behind — as machines with wrong clocks do: slots are
//! timed by the store's clock, so neither fires a slot early, records
//! one in the future, nor writes off the others' slots. On
//! SQLite, PostgreSQL and etcd; a command each slot (run mode) and, where
//! the store has a queue, a task each slot (queue mode).
//!
//! Judged without the code it judges:
//! - **each slot fired at most once**: the command appends `start SLOT`
//!   to a file (`O_APPEND`) — two lines of one slot is a double fire; in
//!   queue mode the store's task ids name the slots;
//! - **no two commands at once**: each command runs under `flock -n` of
//!   one file (the kernel's lock, released when its process dies) and
//!   appends `overlap SLOT` if it finds it held — a killed daemon's command
//!   still running when the next slot's command started;
//! - **every slot accounted for**: each slot time on the 200 ms grid
//!   between the first and the last recorded is covered by exactly one of
//!   the schedule's slot records (`schedule show --json`), and each slot
//!   recorded as ran has its `start` line;
//! - **nothing in the future**: no record is of a slot later than this
//!   test's (unfaked) clock when the daemons were stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::{etcd, postgres};
use rustix::process::Signal;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case32_cron_on_sqlite_fires_each_slot_once_under_kill_9,
    case32_cron_on_sqlite_enqueues_each_slot_once_under_kill_9,
    case32_cron_on_postgres_fires_each_slot_once_under_kill_9,
    case32_cron_on_postgres_enqueues_each_slot_once_under_kill_9,
    case32_cron_on_etcd_fires_each_slot_once_under_kill_9,
];

const EVERY_MS: u64 = 200;
const NAME: &str = "tick";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Queue,
}

/// A daemon: the child (leader of its own process group) and the JSON
/// lines it printed.
struct Daemon {
    child: Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
}

/// The wall-clock offset (libfaketime) of the daemon in each of the three
/// places: an hour ahead, 5 s behind, right.
const SKEWS: [Option<&str>; 3] = [Some("+1h"), Some("-5s"), None];

fn start_daemon(sb: &Sandbox, store: &str, skew: Option<&str>) -> Daemon {
    let args = ["--json", "cron", NAME, "--refresh", "500ms"];
    let mut cmd = sb.cmd(&args);
    if let Some(offset) = skew {
        leasehold_testkit::faketime::preload(&mut cmd, offset);
    }
    let mut child = cmd
        .env("LEASEHOLD_STORE", store)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn leasehold cron");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let theirs = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if let Ok(doc) = serde_json::from_str(&line) {
                theirs.lock().unwrap().push(doc);
            }
        }
    });
    Daemon { child, lines }
}

/// The last slot a daemon claimed (its time), if any.
fn last_claim(d: &Daemon) -> Option<String> {
    d.lines
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|l| l["outcome"] == "claimed")
        .and_then(|l| l["slot"].as_str().map(str::to_owned))
}

fn ms_of(rfc3339: &str) -> u64 {
    let t = leasehold::parse_time_within(rfc3339, leasehold::limits::DELAY, std::time::SystemTime::now())
        .unwrap_or_else(|e| panic!("not a time: {rfc3339}: {e}"));
    u64::try_from(leasehold::unix_ms::to_ms(t)).expect("after the epoch")
}

fn case32(store: &str, mode: Mode, what: &str) {
    let slots = count(50, 1000);
    leasehold_testkit::faketime::need();
    let sb = Sandbox::new();
    let log = sb.file("slots.log");
    let lock = sb.file("run.lock");
    add_schedule(&sb, store, mode, &log, &lock);
    let (kills, claimed_twice) = drive(&sb, store, slots);
    let stopped_ms = u64::try_from(leasehold::unix_ms::to_ms(std::time::SystemTime::now())).expect("after the epoch");
    let (covered, outcomes) = recorded(&sb, store);
    let (Some(&first), Some(&last)) = (covered.keys().next(), covered.keys().next_back()) else {
        panic!("no slot recorded");
    };
    let grid: Vec<u64> = (first..=last).step_by(EVERY_MS as usize).collect();
    let missing: Vec<u64> = grid.iter().copied().filter(|t| !covered.contains_key(t)).collect();
    let twice_recorded: Vec<(u64, Vec<String>)> = covered
        .iter()
        .filter(|(_, o)| o.len() > 1)
        .map(|(t, o)| (*t, o.clone()))
        .collect();
    let (starts, overlaps) = fired(&sb, store, mode, &log);
    let fired_twice: Vec<u64> = starts.iter().filter(|(_, n)| **n > 1).map(|(t, _)| *t).collect();
    let fired_word = if mode == Mode::Run { "ran" } else { "enqueued" };
    let fired_unseen: Vec<u64> = covered
        .iter()
        .filter(|(t, o)| o.iter().any(|o| o == fired_word) && !starts.contains_key(t))
        .map(|(t, _)| *t)
        .collect();
    // The store keeps a schedule's newest 1,000 slot records: a slot
    // older than the oldest kept one was pruned, not left unrecorded.
    let not_recorded: Vec<u64> = starts
        .keys()
        .filter(|t| **t >= first && !covered.contains_key(t))
        .copied()
        .collect();
    let unique: BTreeSet<&u64> = starts.keys().collect();
    let future: Vec<u64> = covered.keys().copied().filter(|t| *t > stopped_ms).collect();
    figure(
        32,
        &format!(
            "{what}: 3 daemons (clocks +1h, -5s, right), @every 200ms, {kills} kills of the firing daemon's process group over {} slots: {} fired ({} distinct), outcomes {outcomes:?}; claimed twice {}, fired twice {}, slots missing from the records {}, recorded twice {}, commands overlapping {}, fired but unrecorded {}, recorded {fired_word} but not seen {}, recorded in the future {}",
            grid.len(),
            starts.values().sum::<usize>(),
            unique.len(),
            claimed_twice.len(),
            fired_twice.len(),
            missing.len(),
            twice_recorded.len(),
            overlaps.len(),
            not_recorded.len(),
            fired_unseen.len(),
            future.len(),
        ),
    );
    assert!(
        future.is_empty(),
        "{} slots recorded after the daemons stopped (in the store's future), the first {:?}",
        future.len(),
        &future[..future.len().min(5)]
    );
    assert!(kills > 0 || slots < 20, "no daemon was killed");
    assert!(
        claimed_twice.is_empty(),
        "slots claimed by two daemons: {claimed_twice:?}"
    );
    assert!(fired_twice.is_empty(), "slots fired twice: {fired_twice:?}");
    assert!(overlaps.is_empty(), "commands ran at once: {overlaps:?}");
    assert!(missing.is_empty(), "slots accounted for by no record: {missing:?}");
    assert!(twice_recorded.is_empty(), "slots recorded twice: {twice_recorded:?}");
    assert!(
        not_recorded.is_empty(),
        "slots fired without a record: {not_recorded:?}"
    );
    assert!(
        fired_unseen.is_empty(),
        "slots recorded as {fired_word} that did not fire: {fired_unseen:?}"
    );
    assert!(
        grid.len() * 10 >= slots * 8,
        "only {} slots recorded of about {slots}",
        grid.len()
    );
    // Most slots fire: a kill costs a slot or two (skipped while the dead
    // daemon's command is stopped, or lost with it), not more.
    let fired = outcomes.get(fired_word).copied().unwrap_or(0);
    assert!(
        fired as usize * 10 >= grid.len() * 7,
        "only {fired} of {} slots fired: {outcomes:?}",
        grid.len()
    );
}

/// Three daemons for `slots` slots, the firing one's process group
/// killed every 3 s and restarted; the kills, and the slots two daemons
/// each said they claimed.
fn drive(sb: &Sandbox, store: &str, slots: usize) -> (usize, Vec<String>) {
    let mut daemons: Vec<Daemon> = SKEWS.iter().map(|skew| start_daemon(sb, store, *skew)).collect();
    let started = Instant::now();
    let length = Duration::from_millis(EVERY_MS * slots as u64);
    let mut kills = 0;
    // What every daemon ever started printed (the killed ones' too).
    let mut told: Vec<Arc<Mutex<Vec<serde_json::Value>>>> = Vec::new();
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_secs(3).min(length.saturating_sub(started.elapsed())));
        if started.elapsed() >= length {
            break;
        }
        // The daemon that claimed the newest slot: the one firing now.
        let firing = (0..daemons.len())
            .filter_map(|i| last_claim(&daemons[i]).map(|slot| (slot, i)))
            .max()
            .map(|(_, i)| i);
        let Some(i) = firing else { continue };
        let pid = daemons[i].child.id();
        // The whole process group: the daemon and everything in it.
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
            Signal::KILL,
        );
        let _ = daemons[i].child.wait();
        kills += 1;
        let dead = std::mem::replace(&mut daemons[i], start_daemon(sb, store, SKEWS[i]));
        told.push(dead.lines);
    }
    for d in &mut daemons {
        proc::signal(d.child.id(), Signal::TERM);
    }
    for d in &mut daemons {
        let status = d.child.wait().unwrap();
        assert!(status.success(), "a daemon ended with {status} on SIGTERM");
    }
    told.extend(daemons.iter().map(|d| d.lines.clone()));
    // Slots two daemons each said they claimed: the claim itself doubled,
    // whatever the lease or the task id then caught.
    let mut claims: BTreeMap<String, usize> = BTreeMap::new();
    for lines in &told {
        for l in lines.lock().unwrap().iter().filter(|l| l["outcome"] == "claimed") {
            *claims
                .entry(l["slot"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
    }
    let claimed_twice: Vec<&String> = claims.iter().filter(|(_, n)| **n > 1).map(|(s, _)| s).collect();
    // Let the last commands' lines land (a killed daemon's command is
    // stopped by its guard within its grace).
    std::thread::sleep(Duration::from_millis(500));

    (kills, claimed_twice.into_iter().cloned().collect())
}

/// The schedule's records: slot (ms) → the outcomes recorded for it, each
/// record spread over the grid; and the slots per outcome.
fn recorded(sb: &Sandbox, store: &str) -> (BTreeMap<u64, Vec<String>>, BTreeMap<String, u64>) {
    let out = sb
        .cmd(&["--json", "schedule", "show", NAME, "-n", "1000"])
        .env("LEASEHOLD_STORE", store)
        .output()
        .expect("schedule show");
    let (code, out, err) = proc::outcome(&out);
    assert_eq!(code, 0, "schedule show: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("schedule show --json");
    let records = doc["slots"].as_array().expect("slots").clone();
    // slot (ms) -> outcome, each record's slots spread over the grid.
    let mut covered: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for r in &records {
        let (first, through) = (
            ms_of(r["slot"].as_str().unwrap()),
            ms_of(r["through"].as_str().unwrap()),
        );
        let outcome = r["outcome"].as_str().unwrap().to_owned();
        *outcomes.entry(outcome.clone()).or_default() += r["count"].as_u64().unwrap();
        let mut t = first;
        while t <= through {
            covered.entry(t).or_default().push(outcome.clone());
            t += EVERY_MS;
        }
    }
    (covered, outcomes)
}

/// What fired, from outside the store: slot (ms) → starts (run: the start
/// lines; queue: the tasks), and the slots whose command found another
/// running.
fn fired(sb: &Sandbox, store: &str, mode: Mode, log: &std::path::Path) -> (BTreeMap<u64, usize>, Vec<String>) {
    let mut starts: BTreeMap<u64, usize> = BTreeMap::new();
    let mut overlaps = Vec::new();
    match mode {
        Mode::Run => {
            for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
                let mut words = line.split_whitespace();
                match (words.next(), words.next()) {
                    (Some("start"), Some(slot)) => *starts.entry(ms_of(slot)).or_default() += 1,
                    (Some("overlap"), Some(slot)) => overlaps.push(slot.to_owned()),
                    _ => {}
                }
            }
        }
        Mode::Queue => {
            let out = sb
                .cmd(&["--json", "task", "list", "q", "--limit", "100000"])
                .env("LEASEHOLD_STORE", store)
                .output()
                .expect("task list");
            let (code, out, err) = proc::outcome(&out);
            assert_eq!(code, 0, "task list: {err}");
            let doc: serde_json::Value = serde_json::from_str(&out).expect("task list --json");
            for task in doc["tasks"].as_array().expect("tasks") {
                let id = task["id"].as_str().unwrap();
                let slot = id.strip_prefix("tick@").unwrap_or_else(|| panic!("a task id {id}"));
                *starts.entry(ms_of(slot)).or_default() += 1;
            }
        }
    }
    (starts, overlaps)
}

/// The schedule of the case: a command under `flock -n` that records its
/// start and end (run), or a task (queue), every 200 ms.
fn add_schedule(sb: &Sandbox, store: &str, mode: Mode, log: &std::path::Path, lock: &std::path::Path) {
    let add = |extra: &[&str]| {
        let mut args = vec![
            "schedule",
            "add",
            NAME,
            "--cron",
            "@every 200ms",
            "--ttl",
            "3s",
            "--overlap",
            "skip",
        ];
        args.extend_from_slice(extra);
        let out = sb
            .cmd(&args)
            .env("LEASEHOLD_STORE", store)
            .output()
            .expect("schedule add");
        let (code, _, err) = proc::outcome(&out);
        assert_eq!(code, 0, "schedule add: {err}");
    };
    let script = format!(
        "flock -n {lock} sh -c 'echo \"start $LEASEHOLD_SLOT $LEASEHOLD_TOKEN\" >> {log}; sleep 0.1; echo \"end $LEASEHOLD_SLOT\" >> {log}' || echo \"overlap $LEASEHOLD_SLOT\" >> {log}",
        lock = lock.display(),
        log = log.display()
    );
    match mode {
        Mode::Run => add(&["--", "sh", "-c", &script]),
        Mode::Queue => add(&["--queue", "q", "--payload", "{}"]),
    }
}

fn sqlite_url(sb_store: &std::path::Path) -> String {
    format!("sqlite://{}", sb_store.display())
}

/// fault case 32 on SQLite, run mode.
fn case32_cron_on_sqlite_fires_each_slot_once_under_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    case32(&sqlite_url(&dir.path().join("cron.db")), Mode::Run, "SQLite, run");
}

/// fault case 32 on SQLite, queue mode.
fn case32_cron_on_sqlite_enqueues_each_slot_once_under_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    case32(&sqlite_url(&dir.path().join("cron.db")), Mode::Queue, "SQLite, queue");
}

/// fault case 32 on PostgreSQL, run mode.
fn case32_cron_on_postgres_fires_each_slot_once_under_kill_9() {
    let server = postgres::Server::shared();
    case32(
        &server.url(&postgres::Server::fresh_schema()),
        Mode::Run,
        "PostgreSQL, run",
    );
}

/// fault case 32 on PostgreSQL, queue mode.
fn case32_cron_on_postgres_enqueues_each_slot_once_under_kill_9() {
    let server = postgres::Server::shared();
    case32(
        &server.url(&postgres::Server::fresh_schema()),
        Mode::Queue,
        "PostgreSQL, queue",
    );
}

/// fault case 32 on etcd, run mode (etcd has no queue: queue mode does not
/// apply there; `schedule add --queue` on etcd is refused at its first slot).
fn case32_cron_on_etcd_fires_each_slot_once_under_kill_9() {
    etcd::need_etcd();
    let server = etcd::EtcdServer::start();
    let store = format!(
        "etcd://{}?prefix={}",
        server.endpoint(),
        etcd::unique_prefix("faults", "cron")
    );
    case32(&store, Mode::Run, "etcd, run");
}
