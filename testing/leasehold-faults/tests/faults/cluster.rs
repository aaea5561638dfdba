//! Many machines for real: a three-member etcd cluster that loses its
//! leader under load (case 27), and a holder cut off by a network
//! partition from the etcd majority (case 28) or from PostgreSQL (case 29). Clients are real processes:
//! `leasehold run` on an `etcd://` URL naming every member, running the
//! `faults-client` that records its grant in the trial's history and
//! writes through leasehold's fence to a resource of its name. The
//! history is judged by the checker (`leasehold_faults::checker`): tokens
//! never reissued and rising in the real-time order of the grants,
//! holdings never overlapping, no fence going back, the store's gate
//! passing no late writer, nothing acknowledged lost.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_faults::checker::Report;
use leasehold_faults::history::{Answer, Attempt, Fence, Recorded};

use leasehold_faults::proc::{Sandbox, boot_ns, outcome};
use leasehold_faults::tier;
use leasehold_testkit::netns::TestNet;
use leasehold_testkit::wait::wait_until;
use leasehold_testkit::{etcd, postgres};

use crate::common::{client, finish, grants, history, history_path, judge, record_acquired, resource_of, store_holder};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case27_etcd_cluster_losing_its_leader_never_reissues_nor_loses_a_grant,
    case28_a_holder_cut_off_from_the_etcd_majority_stops_before_the_other_side_is_granted,
    case29_a_holder_cut_off_from_postgres_stops_before_the_other_side_is_granted,
];

/// The TTL of every grant: etcd's shortest lease is 2 s.
const TTL: Duration = Duration::from_secs(3);

fn store_url(endpoints: &str, prefix: &str) -> String {
    format!("etcd://{endpoints}?prefix={prefix}")
}

/// Acquire `name` on `store` (waiting out a grant whose release was lost
/// with its answer), recorded in the history: asked for after every
/// other grant was answered, the checker requires its token to exceed
/// theirs — a grant reported and then lost by a rolled-back member would
/// show there.
pub(crate) fn acquire_after_all(sb: &Sandbox, store: &str, name: &str) {
    let mut history = history(sb);
    let asked = boot_ns();
    let out = sb
        .cmd(&["--json", "acquire", name, "--ttl", "3s", "--wait", "30s"])
        .env("LEASEHOLD_STORE", store)
        .output()
        .expect("run leasehold acquire");
    let answered = boot_ns();
    let (code, out, err) = outcome(&out);
    assert_eq!(code, 0, "acquire {name} after the run: {err}");
    let (_, id) = record_acquired(&mut history, name, &out, "after-all", asked, answered);
    history.end(name, &id, answered).unwrap();
}

/// `rounds` rounds of the three faults of case 27, 1.5 s apart: kill -9
/// of the leader, SIGSTOP of the leader past the TTL, restart of a
/// follower. How many of each were injected.
fn inject_leader_faults(cluster: &mut etcd::EtcdCluster, rounds: usize) -> BTreeMap<&'static str, usize> {
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    for round in 0..rounds * 3 {
        std::thread::sleep(Duration::from_millis(1500));
        let leader = cluster.wait_leader();
        let kind = match round % 3 {
            0 => {
                cluster.members[leader].kill9();
                std::thread::sleep(Duration::from_secs(1));
                cluster.members[leader].restart();
                "kill -9 of the leader"
            }
            1 => {
                cluster.members[leader].stop();
                std::thread::sleep(TTL + Duration::from_secs(1));
                cluster.members[leader].cont();
                "SIGSTOP of the leader for TTL + 1 s"
            }
            _ => {
                let follower = (leader + 1) % cluster.members.len();
                cluster.members[follower].terminate();
                std::thread::sleep(Duration::from_millis(500));
                cluster.members[follower].restart();
                "restart of a follower"
            }
        };
        *injected.entry(kind).or_default() += 1;
    }
    injected
}

fn case27_etcd_cluster_losing_its_leader_never_reissues_nor_loses_a_grant() {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    const CLIENTS: usize = 8;
    let runs_per_client = tier::count(12, 250);
    // Rounds of the three faults: kill -9 of the leader, SIGSTOP of the
    // leader past the TTL, restart of a follower.
    let fault_rounds = tier::count(1, 12);
    let sb = Sandbox::new();
    let mut cluster = etcd::EtcdCluster::start(&[("127.0.0.1", &[]), ("127.0.0.1", &[]), ("127.0.0.1", &[])]);
    let store = store_url(&cluster.endpoints(), &etcd::unique_prefix("faults", "cluster"));

    let faults_over = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<BTreeMap<i32, usize>>> = Arc::default();
    let unexpected: Arc<Mutex<Vec<String>>> = Arc::default();
    let sb = Arc::new(sb);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (sb, store, faults_over, finished, outcomes, unexpected) = (
                sb.clone(),
                store.clone(),
                faults_over.clone(),
                finished.clone(),
                outcomes.clone(),
                unexpected.clone(),
            );
            std::thread::spawn(move || {
                let mut run = 0;
                // Keep the load on until every fault was injected.
                while run < runs_per_client || !faults_over.load(Ordering::SeqCst) {
                    let name = NAMES[(i + run) % NAMES.len()];
                    // Every fourth holding outlasts renewals (a third of
                    // the TTL apart), so faults also meet a renewing holder.
                    let hold_ms = if run % 4 == 0 { 2000 } else { 100 };
                    let child = store_holder(&sb, &[], &store, name, hold_ms)
                        .spawn()
                        .expect("spawn leasehold run");
                    let (code, err) = finish(child, Duration::from_secs(120));
                    *outcomes.lock().unwrap().entry(code).or_default() += 1;
                    // Done (0), held by another (11), unavailable (69), or
                    // stopped because the lease was lost (75): each a
                    // clear answer. Anything else is a violation.
                    if ![0, 11, 69, 75].contains(&code) {
                        unexpected
                            .lock()
                            .unwrap()
                            .push(format!("client {i}, run {run} on {name}: exit {code}: {err}"));
                    }
                    run += 1;
                }
                finished.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();

    let injected = inject_leader_faults(&mut cluster, fault_rounds);
    faults_over.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client thread failed");
    }
    assert_eq!(finished.load(Ordering::SeqCst), CLIENTS);
    cluster.wait_leader();

    let holdings: usize = NAMES.iter().map(|name| grants(&sb, name).len()).sum();
    // Never reported done and then lost: the store, after all the faults,
    // hands out a token above every token it granted (the checker judges).
    for name in NAMES {
        acquire_after_all(&sb, &store, name);
    }
    let resources: Vec<PathBuf> = NAMES
        .iter()
        .map(|name| resource_of(&sb, name))
        .filter(|r| r.exists())
        .collect();
    let mut report = judge(&sb, &resources.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    for v in unexpected.lock().unwrap().iter() {
        report.push("unclear-outcome", v.clone());
    }
    let (accepted, refused) = (report.counts.accepted, report.counts.refused);
    let outcomes = outcomes.lock().unwrap().clone();
    let runs: usize = outcomes.values().sum();
    // Each run that said done (0) had its command log a grant; the other
    // logged grants are runs stopped when the lease was lost (75; one
    // stopped before its command got to log is not counted). A run that
    // answered held (11) or unavailable (69) never ran its command.
    let done = outcomes.get(&0).copied().unwrap_or(0);
    let lost = outcomes.get(&75).copied().unwrap_or(0);
    if holdings == 0 || !(done..=done + lost).contains(&holdings) {
        report.push(
            "outcome-mismatch",
            format!("{holdings} grants logged, but {done} runs exited 0 and {lost} exited 75 ({outcomes:?})"),
        );
    }
    tier::figure(
        27,
        &format!(
            "{runs} runs by {CLIENTS} processes on 4 names (exit codes {outcomes:?}), {holdings} grants, \
             {accepted} writes accepted by leasehold's fence, {refused} refused; faults {injected:?}; {} violations",
            report.total()
        ),
    );
    report.assert_clean();
    assert!(
        outcomes.get(&0).copied().unwrap_or(0) >= CLIENTS,
        "too few runs completed under the faults: {outcomes:?}"
    );
}

/// Start the late side's holder inside the namespace, for a minute, and
/// wait for its command to record the grant: the holder, its grant, and how
/// many starts were tried again. A
/// start that found the store unavailable (69) or lost the lease before
/// its command logged anything (75) — the cluster still electing a
/// leader after the previous trial's heal — is tried again, up to 5 times.
fn start_late_holder(sb: &Sandbox, net: &TestNet, store: &str) -> (Child, Recorded, usize) {
    let mut answers = Vec::new();
    for _ in 0..5 {
        let mut late = store_holder(sb, &net.exec_prefix(), store, "job", 60_000)
            .spawn()
            .expect("spawn the late holder");
        let mut grant = None;
        let started = wait_until(Duration::from_secs(30), || {
            grant = grants(sb, "job").into_iter().next();
            grant.is_some() || late.try_wait().ok().flatten().is_some()
        });
        assert!(started.is_some(), "the late holder was not granted within 30 s");
        if let Some(grant) = grant {
            return (late, grant, answers.len());
        }
        let (code, err) = finish(late, Duration::from_secs(10));
        assert!([69, 75].contains(&code), "the late holder exited {code}: {err}");
        answers.push(format!("exit {code}: {err}"));
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("the late holder never got to log its grant: {answers:#?}");
}

/// `ip netns exec NS leasehold ARGS...` (or another program inside) until
/// it answers other than unavailable (69), for up to 60 s: its exit code.
/// (Programs that record their own attempts, as `faults-client write` does.)
fn inside_until_answered(net: &TestNet, sb: &Sandbox, store: &str, program: &[&str]) -> (i32, String) {
    let mut last = (69, String::new());
    wait_until(Duration::from_secs(60), || {
        let mut cmd = if let ["leasehold", args @ ..] = program {
            sb.cmd_via(&net.exec_prefix(), args)
        } else {
            let [ip, rest @ ..] = net.exec_prefix();
            let mut c = Command::new(ip);
            c.args(rest).args(program);
            c
        };
        let (code, _, err) = outcome(&cmd.env("LEASEHOLD_STORE", store).output().expect("run inside"));
        last = (code, err);
        code != 69
    });
    last
}

fn case28_a_holder_cut_off_from_the_etcd_majority_stops_before_the_other_side_is_granted() {
    etcd::need_etcd();
    let net = TestNet::for_case();
    // Two members on the host's side of the link, one inside the
    // namespace: cut, the namespace keeps a minority member only.
    let inside = net.exec_prefix();
    let cluster = etcd::EtcdCluster::start(&[
        (net.host_addr.as_str(), &[]),
        (net.host_addr.as_str(), &[]),
        (net.ns_addr.as_str(), &inside),
    ]);
    partition_trials(28, "etcd", &net, || {
        store_url(&cluster.endpoints(), &etcd::unique_prefix("faults", "partition"))
    });
}

fn case29_a_holder_cut_off_from_postgres_stops_before_the_other_side_is_granted() {
    let net = TestNet::for_case();
    // Listening on the host's end of the link only, letting in both ends.
    let server = postgres::Server::start_on(&net.host_addr, &net.cidr);
    partition_trials(29, "PostgreSQL", &net, || server.url(&postgres::Server::fresh_schema()));
}

/// The host's side tries to take "job" until granted (held: 11;
/// unavailable: 69): whether it was, and its last exit code and error.
fn take_from_the_other_side(sb: &Sandbox, store: &str) -> (bool, i32, String) {
    let mut granted = false;
    let (mut other_code, mut other_err) = (0, String::new());
    wait_until(Duration::from_secs(60), || {
        let child = store_holder(sb, &[], store, "job", 1000)
            .spawn()
            .expect("spawn the other holder");
        (other_code, other_err) = finish(child, Duration::from_secs(60));
        granted = other_code == 0;
        if !granted {
            std::thread::sleep(Duration::from_millis(200));
        }
        granted || ![11, 69].contains(&other_code)
    });
    (granted, other_code, other_err)
}

/// The late side, healed, tries the store's fence gate (recorded as an
/// attempt through it) and a fenced write (recorded by the client) with
/// its old grant: the exit code and error of each (both must be refused).
fn late_side_writes(net: &TestNet, sb: &Sandbox, store: &str, late_grant: &Recorded) -> ((i32, String), (i32, String)) {
    let late_token = late_grant.token.expect("a token");
    let attempt = Attempt {
        name: "job",
        grant: &late_grant.grant,
        token: Some(late_token),
        resource: "gate:job",
        fence: Fence::Store,
        value: "-",
    };
    let (_, fence) = history(sb)
        .attempt(&attempt, || {
            let (code, err) = inside_until_answered(
                net,
                sb,
                store,
                &[
                    "leasehold",
                    "fence",
                    "job",
                    "--token",
                    &late_token.to_string(),
                    "--grant",
                    &late_grant.grant,
                ],
            );
            (Answer::of_exit(code), (code, err))
        })
        .expect("record in the history");
    let resource = resource_of(sb, "job").display().to_string();
    let history_file = history_path(sb).display().to_string();
    let write = inside_until_answered(
        net,
        sb,
        store,
        &[
            client(),
            "write",
            &history_file,
            &resource,
            "job",
            &late_grant.grant,
            &late_token.to_string(),
            &late_grant.grant,
        ],
    );
    (fence, write)
}

/// Trials of a partition: a `run` holder inside the namespace is cut off
/// from the store (`store()`: a fresh store URL per trial) while the host's
/// side tries to take the lease. Its command must be stopped before the
/// host's side is granted, which must wait for the store's expiry; healed,
/// the late side's store fence and fenced write must be refused. Each
/// trial's history goes to the checker.
pub(crate) fn partition_trials(case: u32, store_kind: &str, net: &TestNet, mut store: impl FnMut() -> String) {
    let trials = tier::count(1, 20);
    let mut report = Report::new(format!("case {case}"));
    let (mut stopped_before, mut margins, mut after_cut) = (0, Vec::new(), Vec::new());
    let mut starts_retried = 0;
    for trial in 0..trials {
        let sb = Sandbox::new();
        let store = store();
        // The late side: a holder inside the namespace, for a minute.
        let (late, late_grant, retried) = start_late_holder(&sb, net, &store);
        let late_token = late_grant.token.expect("a token");
        starts_retried += retried;
        std::thread::sleep(Duration::from_millis(500));
        net.cut();
        let cut_ns = boot_ns();
        let (granted, other_code, other_err) = take_from_the_other_side(&sb, &store);
        // The late command's end is logged (it was stopped) before the
        // heal: a `run` blocked on a lost connection may need the heal to
        // notice, but its command must not.
        let ended = |sb: &Sandbox| {
            grants(sb, "job")
                .into_iter()
                .find(|g| g.grant == late_grant.grant)
                .and_then(|g| g.end)
        };
        wait_until(Duration::from_secs(30), || ended(&sb).is_some());
        net.heal();
        let (late_code, late_err) = finish(late, Duration::from_secs(120));
        assert!(
            granted,
            "trial {trial}: the other side was never granted (last exit {other_code}: {other_err})"
        );
        let ((fence_code, fence_err), (write_code, write_err)) = late_side_writes(net, &sb, &store, &late_grant);
        if fence_code != 13 || write_code != 13 {
            report.push(
                "late-write-not-refused",
                format!(
                    "trial {trial}: token {late_token}, healed: fence exit {fence_code} ({fence_err}), \
                     fenced write exit {write_code} ({write_err}); 13 (refused) expected for both"
                ),
            );
        }
        let resource = resource_of(&sb, "job");
        report.merge(judge(&sb, &[&resource]));
        let late_end = ended(&sb);
        let other_start = grants(&sb, "job")
            .iter()
            .find(|g| g.token > Some(late_token))
            .map(|g| g.answered);
        match (late_code, late_end, other_start) {
            (75, Some(end), Some(start)) if end < start => {
                stopped_before += 1;
                margins.push(Duration::from_nanos(start - end));
                let waited = Duration::from_nanos(start.saturating_sub(cut_ns));
                after_cut.push(waited);
                // Granted only after the store's expiry: the late grant
                // was renewed at most a third of the TTL before the cut.
                if waited < TTL * 2 / 3 {
                    report.push(
                        "granted-before-expiry",
                        format!("trial {trial}: granted {waited:?} after the cut, TTL {TTL:?}"),
                    );
                }
            }
            _ => report.push(
                "not-stopped-in-time",
                format!(
                    "trial {trial}: the late holder exited {late_code} ({late_err}), its command ended at {late_end:?}, \
                     the other side's began at {other_start:?} (boot clock ns)"
                ),
            ),
        }
    }
    let ms = |d: Option<&Duration>| d.map_or(0, Duration::as_millis);
    let min = ms(margins.iter().min());
    let (first, last) = (ms(after_cut.iter().min()), ms(after_cut.iter().max()));
    tier::figure(
        case,
        &format!(
            "{store_kind}: {stopped_before} of {trials} cut-off holders stopped (exit 75) before the other side's grant, \
             by {min} ms at least; the other side granted {first}..{last} ms after the cut (TTL {TTL:?}); \
             {starts_retried} late-side starts tried again (exit 69 or 75 before the grant was logged); {} violations",
            report.total()
        ),
    );
    report.assert_clean();
}
