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
use crate::common::{grants, history, judge, percentile, resource_of};
use crate::firestore::{Holding, Racers, one_at_a_time};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case37_redis_kill_9_of_the_server_under_racing_holders_never_reissues_a_token,
    case38_redis_kill_9_under_everysec_loses_nothing_and_is_refused_unless_relaxed,
    case39_redis_a_promoted_replica_has_every_grant_acknowledged_with_wait,
    case40_redis_a_holder_cut_off_from_redis_stops_before_the_other_side_is_granted,
    case41_redis_flushall_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token,
];

/// The TTL of the holders `common::store_holder` starts.
const TTL: Duration = Duration::from_secs(3);

/// How many `run`s race for the name.
const RACERS: usize = 8;

/// A racer's clear answers where the store goes away: done (0), held (11),
/// unavailable (69: asked while the server was down, or its answer lost
/// with it), stopped when its lease was lost (75).
const ANSWERS: &[i32] = &[0, 11, 69, 75];

/// A server set up with `durability` (on 127.0.0.1).
fn server(durability: Durability) -> RedisServer {
    RedisServer::start_with(&RedisConfig {
        durability,
        ..RedisConfig::default()
    })
}

/// Wait for the next grant of `job` (up to 30 s), then a random 0–1.2 s
/// more: a random point of the racing (of a holding, mostly).
fn a_random_point_of_the_racing(sb: &Sandbox, rng: &mut Rng) {
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

/// A racer's clear answers where the store is wiped: those of [`ANSWERS`],
/// and every write refused by the fence record (13) — a holder granted a
/// token the store issued again, before the tokens were raised.
const WIPE_ANSWERS: &[i32] = &[0, 11, 13, 69, 75];

/// How long after a wipe a holder of the old store may still act: its next
/// renewal (every TTL/3 = 1 s) finds its grant gone, then `run` stops the
/// command (SIGTERM; the client stops at once) — with 2 s to spare for a
/// loaded machine.
const STOPPED_WITHIN: Duration = Duration::from_secs(3);

/// fault case 41: the store wiped under racing holders (issue 39). Eight
/// `leasehold run` processes race for one name on Redis, each holding 5 s
/// or 4 s by turns and writing only through a fence record that keeps
/// token and grant (`fenced`); the test sends `FLUSHALL` while the first
/// holder after the last wipe (token 1) holds, when it still does (else
/// at a random point of the racing) — three times, 20 in the soak tier —
/// and at the end raises the tokens as the old holders' messages say
/// (`migrate --bump-tokens`). The store forgets every grant and token:
/// the next holder gets token 1 again. What must hold, judged by the
/// checker with each wipe marked (`lost`: the token rules within each
/// stretch, the fence record across them): no sink takes a reissued or
/// lower token (the fence record never goes back, and refuses only with
/// cause), nothing acknowledged is lost; and every holder of the old
/// store stops within `STOPPED_WITHIN` of the wipe (its renewal names its
/// grant: it never renews the newcomer's, and stops its command).
fn case41_redis_flushall_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token() {
    let _alone = one_at_a_time();
    let server = server(Durability::Always);
    let store = server.url();
    let wipes = count(3, 20);
    let sb = Arc::new(Sandbox::on_store(&store, &[]));
    let mut rng = Rng::from_env("case 41");
    // Long holdings: the newcomer after a wipe still holds when the old
    // holder next renews — what a renewal by token alone would extend.
    let holding = Holding {
        ms: [5000, 4000],
        fenced: true,
    };
    let racers = Racers::start_holding(&sb, &store, RACERS, &mut rng, WIPE_ANSWERS, holding);
    let mut recorder = history(&sb);
    let mut late = Vec::new();
    let mut stopped_after = Vec::new();
    let mut held_at_wipe = 0;
    let mut on_token_1 = 0;
    let mut last_wipe = 0;
    for wipe in 0..wipes {
        // Wiped while the stretch's first holder (token 1) holds, when it
        // still does: the next holder gets token 1 again, so an old holder
        // acting by token alone would renew the newcomer's grant.
        let first = || {
            grants(&sb, "job")
                .into_iter()
                .find(|g| g.answered > last_wipe && g.token == Some(1))
        };
        wait_until(Duration::from_secs(30), || first().is_some()).expect("no grant within 30 s");
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        if first().is_some_and(|g| g.end.is_none()) {
            on_token_1 += 1;
        } else {
            a_random_point_of_the_racing(&sb, &mut rng);
        }
        let at = boot_ns();
        let flushed = server.command(&["FLUSHALL"]);
        let until = boot_ns();
        assert_eq!(flushed, Ok(Reply::Status("OK".into())), "FLUSHALL");
        recorder.lost("job", at, until).unwrap();
        last_wipe = until;
        // Every holding of the old store ends within the bound.
        let old = |g: &leasehold_faults::history::Recorded| g.answered < at;
        let all_ended = || grants(&sb, "job").iter().filter(|g| old(g)).all(|g| g.end.is_some());
        wait_until(STOPPED_WITHIN + Duration::from_secs(10), all_ended);
        for g in grants(&sb, "job").into_iter().filter(|g| old(g)) {
            match g.end {
                Some(end) if end > until => {
                    held_at_wipe += 1;
                    stopped_after.push(Duration::from_nanos(end - until));
                    if end > until + STOPPED_WITHIN.as_nanos() as u64 {
                        late.push(format!(
                            "wipe {wipe}: {g:?} acted {:?} after the store was wiped",
                            Duration::from_nanos(end - until)
                        ));
                    }
                }
                Some(_) => {}
                None => {
                    held_at_wipe += 1;
                    late.push(format!("wipe {wipe}: {g:?} never ended"));
                }
            }
        }
    }
    // Raised as the old holders' messages say, before the name is used again.
    let (code, _, err) = sb.run(&["migrate", "--bump-tokens", "1000000"]);
    assert_eq!(code, 0, "migrate --bump-tokens: {err}");
    let (outcomes, unexpected) = racers.stop();
    acquire_after_all(&sb, &store, "job");
    let mut report = judge(&sb, &[&resource_of(&sb, "job")]);
    for v in unexpected {
        report.push("unclear-outcome", v);
    }
    for v in late {
        report.push("acted-after-wipe", v);
    }
    figure(
        41,
        &format!(
            "{} runs by {RACERS} racers on one name (exit codes {outcomes:?}), FLUSHALL {wipes} times ({on_token_1} while token 1 \
             was held, so the next holder got it again): the old store's holders stopped {:?} median, {:?} at most after the \
             wipe ({} still holding then); {} grants, {} fenced writes accepted, {} refused; fence record gone back {} times; \
             {} violations",
            outcomes.values().sum::<usize>(),
            percentile(&mut stopped_after.clone(), 50),
            percentile(&mut stopped_after, 100),
            held_at_wipe,
            report.counts.grants,
            report.counts.accepted,
            report.counts.refused,
            report.count("fence-went-back"),
            report.total()
        ),
    );
    report.assert_clean();
}
