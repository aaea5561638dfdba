//! Leader election under kill -9 (fault case 31): three candidates
//! (`faults-client candidate`, on `Store::campaign`), the leader killed
//! again and again, one observer (`leasehold --json leader NAME --observe`).
//!
//! Judged three ways, none with the code it judges: the history checker
//! (no leader acting after the next one's grant); the store's own history
//! read back (`leasehold --json history`: no grant issued while another
//! was live); the observer's lines against the grants the candidates
//! recorded (every leader seen, in order, none twice in a row).

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_faults::history::Recorded;
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::wait::wait_until;
use leasehold_testkit::{etcd, postgres};
use rustix::process::Signal;

use crate::common::{client, grants, history, history_path, judge, percentile};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case31_kill_9_of_the_leader_every_change_observed_no_two_leaders_at_once,
    case31_a_restarted_leader_takes_over_at_once_with_a_new_token,
    case31_on_postgres_kill_9_of_the_leader_every_change_observed,
    case31_on_etcd_kill_9_of_the_leader_every_change_observed,
];

const NAME: &str = "leader";

/// Long enough that only proof of death (not expiry) passes leadership on.
const TTL_MS: &str = "10000";

/// The store of a trial: the sandbox's SQLite file, or a server's URL.
fn store_of(sb: &Sandbox, store: Option<&str>) -> String {
    store.map_or_else(|| format!("sqlite://{}", sb.store_path().display()), str::to_owned)
}

fn candidate(sb: &Sandbox, store: Option<&str>, id: &str) -> Child {
    let store = store_of(sb, store);
    let history = history_path(sb).display().to_string();
    Command::new(client())
        .args(["candidate", &history, &store, NAME, id, TTL_MS])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn faults-client candidate")
}

/// The candidate id of a recorded grant (`ID.pidPID.tokenT`).
fn id_of(g: &Recorded) -> &str {
    g.grant.split('.').next().unwrap_or_default()
}

/// Wait for the `n`th recorded grant of the name (1-based).
fn nth_grant(sb: &Sandbox, n: usize, limit: Duration) -> Recorded {
    let mut found = None;
    wait_until(limit, || {
        found = grants(sb, NAME).into_iter().nth(n - 1);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no leader #{n} within {limit:?}"))
}

/// The observer: `leasehold --json leader NAME --observe`, its lines
/// collected by a thread as they come.
fn observe(sb: &Sandbox, store: Option<&str>) -> (Child, Arc<Mutex<Vec<serde_json::Value>>>) {
    let mut child = sb
        .cmd(&["--json", "leader", NAME, "--observe"])
        .env("LEASEHOLD_STORE", store_of(sb, store))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the observer");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let theirs = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let line = line.expect("the observer's output");
            let doc = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
            theirs.lock().unwrap().push(doc);
        }
    });
    (child, lines)
}

/// Grants issued while another was live, judged from the store's history
/// alone (oldest first): a grant begins at `granted` and ends at the first
/// `released`, `expired` or `fast_takeover` of its token.
fn overlaps_in_store_history(sb: &Sandbox, store: Option<&str>) -> (usize, Vec<String>) {
    let out = sb
        .cmd(&["--json", "history", NAME, "--limit", "100000"])
        .env("LEASEHOLD_STORE", store_of(sb, store))
        .output()
        .expect("leasehold history");
    let (code, out, err) = proc::outcome(&out);
    assert_eq!(code, 0, "history: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("history --json");
    let mut entries = doc["history"].as_array().expect("entries").clone();
    entries.reverse();
    let mut live: Vec<u64> = Vec::new();
    let (mut granted, mut overlaps) = (0, Vec::new());
    for e in &entries {
        let token = e["token"].as_u64();
        match (e["event"].as_str(), token) {
            (Some("granted"), Some(t)) => {
                granted += 1;
                if !live.is_empty() {
                    overlaps.push(format!("token {t} granted while {live:?} live ({})", e["at"]));
                }
                live.push(t);
            }
            (Some("released" | "expired" | "fast_takeover"), Some(t)) => live.retain(|l| *l != t),
            _ => {}
        }
    }
    (granted, overlaps)
}

/// fault case 31: 50 kills (soak: 500) of the leader among three
/// candidates, each after it led for 0–300 ms; the killed one restarted
/// once the next leader is recorded.
fn case31_kill_9_of_the_leader_every_change_observed_no_two_leaders_at_once() {
    kills_of_the_leader(None, "SQLite", count(50, 500));
}

/// fault case 31 on PostgreSQL (its observer woken by LISTEN/NOTIFY).
fn case31_on_postgres_kill_9_of_the_leader_every_change_observed() {
    let server = postgres::Server::shared();
    let url = server.url(&postgres::Server::fresh_schema());
    kills_of_the_leader(Some(&url), "PostgreSQL", count(20, 200));
}

/// fault case 31 on etcd (its observer woken by a watch).
fn case31_on_etcd_kill_9_of_the_leader_every_change_observed() {
    etcd::need_etcd();
    let server = etcd::EtcdServer::start();
    let url = format!(
        "etcd://{}?prefix={}",
        server.endpoint(),
        etcd::unique_prefix("faults", "leader")
    );
    kills_of_the_leader(Some(&url), "etcd", count(20, 200));
}

/// `kills` kills of the leader of three candidates on `store` (`None`:
/// the sandbox's SQLite file).
fn kills_of_the_leader(store: Option<&str>, what: &str, kills: usize) {
    let sb = Sandbox::new();
    let mut rng = Rng::from_env("case 31");
    let mut history = history(&sb);
    if store.is_none() {
        let _ = sb.try_acquire("warm-up", "1s"); // create the store first
    }
    let (mut watcher, lines) = observe(&sb, store);
    // The candidates start once the observer watches (its first line, no
    // leader yet): "every change observed" is of changes made while it
    // watched. Started together, a first leader killed before a slow
    // observer's start was "missed" (a CI run under load, on PostgreSQL).
    let watching = wait_until(Duration::from_secs(30), || !lines.lock().unwrap().is_empty());
    assert!(watching.is_some(), "the observer printed nothing in 30 s");
    let mut candidates: Vec<(String, Child)> = (0..3)
        .map(|i| (format!("c{i}"), candidate(&sb, store, &format!("c{i}"))))
        .collect();
    let mut takeovers = Vec::new();
    for n in 1..=kills {
        let leader = nth_grant(&sb, n, Duration::from_secs(20));
        if n > 1 {
            takeovers.push(Duration::from_nanos(
                leader
                    .answered
                    .saturating_sub(grants(&sb, NAME)[n - 2].end.unwrap_or(0)),
            ));
        }
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        let i = candidates
            .iter()
            .position(|(id, _)| id == id_of(&leader))
            .expect("a candidate of ours");
        let pid = leader.pid().expect("a pid");
        assert_eq!(
            candidates[i].1.id(),
            pid,
            "leader #{n} is the live candidate {}",
            candidates[i].0
        );
        proc::signal(pid, Signal::KILL);
        // Its end is when the SIGKILL was sent: it runs no more of its own
        // code within microseconds of that. Taken after the wait, the end
        // counted the test thread's own delay as the leader's life, and a
        // successor that rightly took over from the dead leader (its
        // takeover needs it provably gone) was judged to overlap it (a CI
        // run under load: by 1 ms).
        let killed = boot_ns();
        let _ = candidates[i].1.wait();
        history.end(NAME, &leader.grant, killed).unwrap();
        // Restarted only once the next leader leads: a restart before
        // would take over from the dead one at once (case 31, restart).
        nth_grant(&sb, n + 1, Duration::from_secs(20));
        candidates[i].1 = candidate(&sb, store, &candidates[i].0);
    }
    let all = nth_grant(&sb, kills + 1, Duration::from_secs(20));
    // Let the observer catch up with the last leader, then stop it.
    let last = all.token;
    let seen_last = wait_until(Duration::from_secs(5), || {
        lines.lock().unwrap().last().and_then(|l| l["leader"]["token"].as_u64()) == last
    });
    for (_, child) in &mut candidates {
        proc::signal(child.id(), Signal::KILL);
        let _ = child.wait();
    }
    proc::signal(watcher.id(), Signal::TERM);
    let status = watcher.wait().unwrap();
    let recorded = grants(&sb, NAME);
    for g in recorded.iter().filter(|g| g.end.is_none()) {
        history.end(NAME, &g.grant, boot_ns()).unwrap();
    }

    let report = judge(&sb, &[]);
    let (store_grants, overlaps) = overlaps_in_store_history(&sb, store);
    let lines = lines.lock().unwrap().clone();
    let observed: Vec<Option<u64>> = lines.iter().map(|l| l["leader"]["token"].as_u64()).collect();
    let repeated = observed.windows(2).filter(|w| w[0] == w[1]).count();
    let observed_leaders: Vec<u64> = observed.iter().flatten().copied().collect();
    let led: Vec<u64> = recorded.iter().filter_map(|g| g.token).collect();
    figure(
        31,
        &format!(
            "{what}: {kills} kills of the leader of 3 candidates: {} leaders recorded, {} observed ({} lines, {repeated} repeated), {store_grants} grants in the store's history with {} overlapping; checker: {} violations in {} grants; takeover median {:?}, p99 {:?}",
            led.len(),
            observed_leaders.len(),
            lines.len(),
            overlaps.len(),
            report.total(),
            report.counts.grants,
            percentile(&mut takeovers.clone(), 50),
            percentile(&mut takeovers, 99),
        ),
    );
    assert!(status.success(), "the observer ended with {status} on SIGTERM");
    assert!(
        seen_last.is_some(),
        "the observer never saw the last leader {last:?}: {observed:?}"
    );
    report.assert_clean();
    assert!(
        overlaps.is_empty(),
        "leaders overlap in the store's history: {overlaps:?}"
    );
    assert_eq!(repeated, 0, "the same leader reported twice in a row: {observed:?}");
    assert_eq!(observed_leaders, led, "the observer missed or invented a leader");
    assert_eq!(store_grants, kills + 1, "every leadership is one grant");
}

/// fault case 31, restart: the only candidate killed while it leads and
/// restarted with its id leads again at once — taking over from its
/// provably dead predecessor with a new token (the old one's late writes
/// are fenced off), rather than after the TTL, and never by sharing the
/// old grant (an owner label never lets a second process act under a
/// grant: issue 39).
fn case31_a_restarted_leader_takes_over_at_once_with_a_new_token() {
    let trials = count(5, 50);
    let sb = Sandbox::new();
    let mut history = history(&sb);
    let mut child = candidate(&sb, None, "solo");
    let mut resumed = Vec::new();
    for n in 1..=trials {
        let leader = nth_grant(&sb, n, Duration::from_secs(20));
        assert_eq!(child.id(), leader.pid().expect("a pid"));
        proc::signal(child.id(), Signal::KILL);
        let _ = child.wait();
        history.end(NAME, &leader.grant, boot_ns()).unwrap();
        let restarted = Instant::now();
        child = candidate(&sb, None, "solo");
        let again = nth_grant(&sb, n + 1, Duration::from_secs(20));
        let took = restarted.elapsed();
        assert!(
            again.token > leader.token,
            "trial {n}: the restart shared the dead leader's grant (token {:?})",
            leader.token
        );
        assert!(
            took < Duration::from_secs(2),
            "trial {n}: led again after {took:?} (TTL {TTL_MS} ms)"
        );
        resumed.push(took);
    }
    proc::signal(child.id(), Signal::KILL);
    let _ = child.wait();
    let (code, out, _) = sb.run(&["--json", "history", NAME, "--limit", "1000"]);
    assert_eq!(code, 0);
    let taken_over = out.matches("\"fast_takeover\"").count();
    let reacquired = out.matches("\"reacquired\"").count();
    figure(
        31,
        &format!(
            "restart: {trials} of {trials} restarts led again with a new token ({taken_over} `fast_takeover` in the store's history), median {:?}, max {:?}",
            percentile(&mut resumed.clone(), 50),
            percentile(&mut resumed, 100)
        ),
    );
    assert_eq!((taken_over, reacquired), (trials, 0));
}
