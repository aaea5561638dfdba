//! The Redis store under the faults that apply to it (cases 37–40): the
//! server killed with kill -9 under racing `leasehold run` holders and
//! started again on its append-only file, with `appendfsync always` (37)
//! and `everysec` (38); the primary killed after its replica's link was
//! cut, and the replica promoted (39); a holder cut off from the server by
//! a network partition (40, as 28 and 29). The servers are the test kit's
//! (`leasehold_testkit::redis`), one per case (a trial, for 39); the
//! racers are case 33's (`firestore::Racers`), the holders and helpers
//! those of the SQLite cases, on a sandbox whose commands use the
//! `redis://` URL (`Sandbox::on_store`). Every history goes to the checker,
//! which knows nothing of Redis: tokens never reissued and rising in the
//! real-time order of the grants — so a grant acknowledged and then lost
//! shows as a later grant with a token not above it — and holdings never
//! overlapping.
//!
//! The cases run one at a time, beside Firestore's too
//! (`firestore::one_at_a_time`): eight racers starting processes in a loop
//! beside another case's would test a two-core machine's scheduler.
//!
//! What Redis changes: a grant is committed by one script on one server,
//! durable only as its persistence settings make it (the store refuses
//! those that can lose an acknowledged write unless `durability=relaxed`),
//! and a replica has a write only once `WAIT` said so (`?wait=N`).

use std::sync::Arc;
use std::time::Duration;

use leasehold_faults::checker::Report;
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::netns::TestNet;
use leasehold_testkit::redis::{Durability, RedisConfig, RedisServer, Reply};
use leasehold_testkit::wait::wait_until;
use rustix::process::Signal;

use crate::cluster::{acquire_after_all, partition_trials};
use crate::common::{grants, judge, percentile, resource_of};
use crate::firestore::{Racers, one_at_a_time};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case37_redis_kill_9_of_the_server_under_racing_holders_never_reissues_a_token,
    case38_redis_kill_9_under_everysec_loses_nothing_and_is_refused_unless_relaxed,
    case39_redis_a_promoted_replica_has_every_grant_acknowledged_with_wait,
    case40_redis_a_holder_cut_off_from_redis_stops_before_the_other_side_is_granted,
];

/// The TTL of the holders `common::store_holder` starts.
const TTL: Duration = Duration::from_secs(3);

/// How many `run`s race for the name.
pub(crate) const RACERS: usize = 8;

/// A racer's clear answers where the store goes away: done (0), held (11),
/// unavailable (69: asked while the server was down, or its answer lost
/// with it), stopped when its lease was lost (75).
pub(crate) const ANSWERS: &[i32] = &[0, 11, 69, 75];

/// A server set up with `durability` (on 127.0.0.1).
pub(crate) fn server(durability: Durability) -> RedisServer {
    RedisServer::start_with(&RedisConfig {
        durability,
        ..RedisConfig::default()
    })
}

/// Wait for the next grant of `job` (up to 30 s), then a random 0–1.2 s
/// more: a random point of the racing (of a holding, mostly).
pub(crate) fn a_random_point_of_the_racing(sb: &Sandbox, rng: &mut Rng) {
    let before = grants(sb, "job").len();
    wait_until(Duration::from_secs(30), || grants(sb, "job").len() > before).expect("no grant within 30 s");
    std::thread::sleep(Duration::from_millis(rng.below(1200)));
}

/// The first grant of `job` answered after `since` (boot clock), waited for
/// up to `limit`: when it was answered.
fn next_grant_after(sb: &Sandbox, since: u64, limit: Duration) -> Option<u64> {
    let next = || grants(sb, "job").into_iter().map(|g| g.answered).find(|a| *a > since);
    wait_until(limit, || next().is_some())?;
    next()
}

/// Eight racers on `store` (a URL of `server`), the server killed with
/// kill -9 at random points of the racing `kills` times, each time started
/// again on its AOF after 0–0.5 s, the racing going on. Every kill must be
/// followed by a grant within TTL + 10 s of it; afterwards the name is
/// granted above every earlier token. The checker's report (the runs
/// without a clear answer in it) and a summary for the figure.
fn racing_through_kills_of_the_server(case: u32, server: &mut RedisServer, store: &str) -> (Report, String) {
    let kills = count(6, 50);
    let sb = Arc::new(Sandbox::on_store(store, &[]));
    let mut rng = Rng::from_env(&format!("case {case}"));
    let racers = Racers::start(&sb, store, RACERS, &mut rng, ANSWERS);
    let mut regranted = Vec::new();
    for kill in 0..kills {
        a_random_point_of_the_racing(&sb, &mut rng);
        server.kill9();
        let killed = boot_ns();
        std::thread::sleep(Duration::from_millis(rng.below(500)));
        server.restart();
        let next = next_grant_after(&sb, killed, TTL + Duration::from_secs(10));
        let next = next.unwrap_or_else(|| panic!("kill {kill}: no grant within TTL + 10 s of the restart"));
        regranted.push(Duration::from_nanos(next - killed));
    }
    let (outcomes, unexpected) = racers.stop();
    acquire_after_all(&sb, store, "job");
    let mut report = judge(&sb, &[&resource_of(&sb, "job")]);
    for v in unexpected {
        report.push("unclear-outcome", v);
    }
    let summary = format!(
        "{} runs by {RACERS} racers on one name (exit codes {outcomes:?}); redis-server killed with kill -9 {kills} times \
         and restarted on its AOF, the name granted again {:?} median, {:?} at most after the kill; {} grants, \
         {} writes accepted by leasehold's fence, {} refused; {} tokens reissued, {} out of real-time order, \
         {} overlapping holdings; {} violations",
        outcomes.values().sum::<usize>(),
        percentile(&mut regranted, 50),
        percentile(&mut regranted, 100),
        report.counts.grants,
        report.counts.accepted,
        report.counts.refused,
        report.count("token-reissued"),
        report.count("token-order"),
        report.count("overlap"),
        report.total()
    );
    (report, summary)
}

/// fault case 37: eight `leasehold run` processes race for one name on
/// Redis with `appendfsync always` (holding 1.5 s or 0.2 s; a refused or
/// unavailable one tries again within 0.1 s) while the test kills
/// redis-server with kill -9 at a random point of the racing and starts
/// it again on its AOF, six times (50 in the soak tier); the racing
/// goes on. The checker: no token reissued, every grant's token above
/// those of the grants answered before it was asked for (a grant
/// acknowledged and lost would be reissued or out of order), no two
/// holders at once, the fence never going back; afterwards the name is
/// granted above every earlier token.
fn case37_redis_kill_9_of_the_server_under_racing_holders_never_reissues_a_token() {
    let _alone = one_at_a_time();
    let mut server = server(Durability::Always);
    let store = server.url();
    let (report, summary) = racing_through_kills_of_the_server(37, &mut server, &store);
    figure(37, &format!("appendfsync always: {summary}"));
    report.assert_clean();
}

/// fault case 38: case 37 with `appendfsync everysec`, which the store
/// refuses (exit 2, naming the setting) unless the URL says
/// `durability=relaxed`; opened so, the same racing through kill -9 of
/// the server. What docs/REDIS.md says everysec keeps through kill -9 of
/// the process alone: everything — Redis writes the AOF before each reply,
/// and the page cache outlives the process — so no token is reissued here
/// either. The loss everysec allows, up to a second of acknowledged writes
/// not yet fsynced, takes a crash of the machine (or of its kernel), which
/// this case cannot make: it shows that kill -9 is not that crash, not
/// that everysec is safe.
fn case38_redis_kill_9_under_everysec_loses_nothing_and_is_refused_unless_relaxed() {
    let _alone = one_at_a_time();
    let mut server = server(Durability::EverySec);
    let (code, _, err) = Sandbox::on_store(&server.url(), &[]).run(&["acquire", "job", "--ttl", "3s"]);
    assert!(
        code == 2 && err.contains("appendfsync everysec"),
        "acquire on an everysec server without durability=relaxed: exit {code} (2 expected, naming appendfsync everysec): {err}"
    );
    let store = format!("{}?durability=relaxed", server.url());
    let (report, summary) = racing_through_kills_of_the_server(38, &mut server, &store);
    figure(
        38,
        &format!(
            "appendfsync everysec (refused without durability=relaxed: exit 2): {summary}; \
             kill -9 of the process loses nothing even under everysec (the AOF is written before each reply, \
             the page cache survives it): everysec's loss is a machine crash's, not made here"
        ),
    );
    report.assert_clean();
}

/// One trial of case 39: racers on the primary (`?wait=1`), its replica's
/// link cut, the primary killed, the replica promoted and raced on.
/// The checker's report, the highest token granted before the kill and
/// the first granted after the promotion.
fn promoted_replica_trial(rng: &mut Rng) -> (Report, Option<u64>, Option<u64>) {
    let mut primary = server(Durability::Always);
    let mut replica = RedisServer::start_replica_of(&primary, &RedisConfig::default());
    replica.wait_in_sync(&primary, Duration::from_secs(30));
    let on_primary = format!("{}?wait=1", primary.url());
    let sb = Arc::new(Sandbox::on_store(&on_primary, &[]));
    let racers = Racers::start(&sb, &on_primary, RACERS, rng, ANSWERS);
    a_random_point_of_the_racing(&sb, rng);
    // The replica's link cut: the replica stopped (it cannot reconnect),
    // the primary told to drop it. What the primary commits from now on
    // reaches no replica: WAIT holds each such write unacknowledged.
    let replica_pid = replica.pid().expect("the replica runs");
    proc::signal(replica_pid, Signal::STOP);
    let dropped = primary.command(&["CLIENT", "KILL", "TYPE", "replica"]);
    assert_eq!(
        dropped,
        Ok(Reply::Integer(1)),
        "CLIENT KILL TYPE replica on the primary"
    );
    let cut = boot_ns();
    // Up to 2 s: long enough for grants and renewals to be asked for on
    // the primary (with WAIT skipped, acknowledged) before it dies.
    let _ = next_grant_after(&sb, cut, Duration::from_secs(2));
    primary.kill9();
    let killed = boot_ns();
    racers.halt();
    proc::signal(replica_pid, Signal::CONT);
    replica.promote();
    let promoted = boot_ns();
    // The holders' new URL: the promoted replica has no replica to wait for.
    let on_replica = replica.url();
    let newcomers = Racers::start(&sb, &on_replica, RACERS, rng, ANSWERS);
    let (_, mut unexpected) = racers.stop();
    let after = || grants(&sb, "job").into_iter().filter(|g| g.answered > promoted).count();
    let raced = wait_until(Duration::from_secs(30), || after() >= 3);
    let (_, more) = newcomers.stop();
    unexpected.extend(more);
    assert!(
        raced.is_some(),
        "fewer than 3 grants on the promoted replica within 30 s"
    );
    acquire_after_all(&sb, &on_replica, "job");
    let before_kill = grants(&sb, "job")
        .iter()
        .filter(|g| g.answered < killed)
        .filter_map(|g| g.token)
        .max();
    let first_after = grants(&sb, "job")
        .iter()
        .filter(|g| g.answered > promoted)
        .filter_map(|g| g.token)
        .min();
    let mut report = judge(&sb, &[&resource_of(&sb, "job")]);
    for v in unexpected {
        report.push("unclear-outcome", v);
    }
    (report, before_kill, first_after)
}

/// fault case 39: a primary with one replica, eight racers on the primary
/// with `?wait=1` (each write acknowledged only once the replica has it);
/// at a random point of the racing the replica's link is cut (the replica
/// `SIGSTOPped`, the primary told to drop it: `CLIENT KILL TYPE replica`)
/// for up to 2 s, then the primary is killed with kill -9, the replica
/// resumed and promoted, and new racers pointed at it while the old ones
/// wind down. Every acknowledged grant must be on the replica: the
/// checker finds no token reissued and every grant's token above those
/// answered before it was asked for (the replica's first grant above all
/// the primary's), no two holders at once across the failover; afterwards
/// the name is granted above every earlier token.
fn case39_redis_a_promoted_replica_has_every_grant_acknowledged_with_wait() {
    let _alone = one_at_a_time();
    let trials = count(1, 20);
    let mut rng = Rng::from_env("case 39");
    let mut report = Report::new("case 39");
    let mut firsts = Vec::new();
    for trial in 0..trials {
        let (trial_report, before, after) = promoted_replica_trial(&mut rng);
        report.merge(trial_report);
        match (before, after) {
            (Some(before), Some(after)) if after > before => firsts.push(format!("{before} then {after}")),
            _ => report.push(
                "trial",
                format!(
                    "trial {trial}: highest token granted by the primary {before:?}, first by the promoted replica {after:?}"
                ),
            ),
        }
    }
    figure(
        39,
        &format!(
            "{trials} failovers (replica cut up to 2 s, primary killed with kill -9, replica promoted) under {RACERS} racers \
             with wait=1, then {RACERS} on the replica; highest token of the primary, then the replica's first: {}; \
             {} grants, {} tokens reissued, {} out of real-time order, {} overlapping holdings; {} violations",
            firsts.join(", "),
            report.counts.grants,
            report.count("token-reissued"),
            report.count("token-order"),
            report.count("overlap"),
            report.total()
        ),
    );
    report.assert_clean();
}

/// fault case 40: cases 28 and 29 on Redis — a `run` holder inside a
/// network namespace (TTL 3 s) is cut off from redis-server, which listens
/// on the host's end of the link (`RedisConfig::bind`), while the host's
/// side tries to take the name: the holder's command must be stopped
/// before the host's side is granted (the server's expiry), and, healed,
/// its store fence and fenced write refused (`cluster::partition_trials`;
/// each trial on a prefix of its own). Needs root (the namespace).
fn case40_redis_a_holder_cut_off_from_redis_stops_before_the_other_side_is_granted() {
    let net = TestNet::for_case();
    let _alone = one_at_a_time();
    let server = RedisServer::start_with(&RedisConfig {
        bind: Some(net.host_addr.parse().expect("the test network's address")),
        ..RedisConfig::default()
    });
    let mut trial = 0;
    partition_trials(40, "Redis", &net, || {
        trial += 1;
        format!("{}?prefix=trial{trial}", server.url())
    });
}
