//! A store that loses its data under racing holders (case 42, issue 39):
//! Redis flushed (`FLUSHALL`), the Firestore emulator's data reset, the
//! SQLite store's files deleted — each while eight `leasehold run`
//! racers hold the name and write through a fence record that keeps token
//! and grant.
//!
//! A store that forgot issues tokens again, and nothing can stop a
//! newcomer's grant beside an old holder's command until the old holder
//! next asks the store. What must hold: it asks soon and stops (within
//! [`STOPPED_WITHIN`] of the wipe: one heartbeat and the stop), asking
//! never touches the newcomer's grant (it names its own), and no sink
//! that keeps its mark takes a reissued token. The history marks each
//! wipe (`lost`): the checker judges the token rules, the gate's passes
//! and holders' activity within each stretch between wipes, the fence
//! record and the final read across them.

use std::sync::Arc;
use std::time::Duration;

use leasehold_faults::history::Recorded;
use leasehold_faults::proc::{Sandbox, boot_ns};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::redis::{Durability, Reply};
use leasehold_testkit::wait::wait_until;

use crate::cluster::acquire_after_all;
use crate::common::{grants, history, judge, percentile, resource_of};
use crate::firestore::{Holding, Racers, one_at_a_time, sandbox_on, shared};
use crate::redis::{RACERS, a_random_point_of_the_racing, server};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case42_redis_flushall_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token,
    case42_firestore_emulator_reset_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token,
    case42_sqlite_store_deleted_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token,
];

/// A racer's clear answers where the store is wiped: done (0), held (11),
/// the store it opened deleted under it (12: SQLite, a run that was
/// acquiring then), every write refused by the fence record (13: a holder
/// granted a token the store issued again, before the tokens were
/// raised), unavailable (69), stopped when its lease was lost (75).
const WIPE_ANSWERS: &[i32] = &[0, 11, 12, 13, 69, 75];

/// How long after a wipe a holder of the old store may still act: its next
/// renewal (every TTL/3 = 1 s) finds its grant gone, then `run` stops the
/// command (SIGTERM; the client stops at once) — with 2 s to spare for a
/// loaded machine.
const STOPPED_WITHIN: Duration = Duration::from_secs(3);

/// fault case 42 on Redis: `FLUSHALL`.
fn case42_redis_flushall_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token() {
    let _alone = one_at_a_time();
    let server = server(Durability::Always);
    let sb = Arc::new(Sandbox::on_store(&server.url(), &[]));
    racing_through_wipes("Redis, FLUSHALL", &sb, || {
        let flushed = server.command(&["FLUSHALL"]);
        assert_eq!(flushed, Ok(Reply::Status("OK".into())), "FLUSHALL");
    });
}

/// fault case 42 on Firestore: the emulator's documents of the project
/// deleted (its reset endpoint: what a restart of the in-memory emulator
/// does to them).
fn case42_firestore_emulator_reset_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token() {
    let _alone = one_at_a_time();
    let emulator = shared();
    let (project, sb) = sandbox_on(emulator, "wiped");
    let sb = Arc::new(sb);
    racing_through_wipes("Firestore emulator, reset", &sb, || {
        let path = format!("/emulator/v1/projects/{project}/databases/(default)/documents");
        let (status, body) = emulator.request("DELETE", &path, None);
        assert_eq!(status, 200, "the emulator's reset: {body}");
    });
}

/// fault case 42 on SQLite: the store's file, log and shared memory
/// deleted (`rm leasehold.db*`); the next acquirer makes a new store.
fn case42_sqlite_store_deleted_under_racing_holders_stops_them_and_no_sink_takes_a_reissued_token() {
    let sb = Arc::new(Sandbox::new());
    let store = sb.store_path();
    racing_through_wipes("SQLite, store files deleted", &sb, || {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = store.clone().into_os_string();
            path.push(suffix);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("rm {}: {e}", path.display()),
            }
        }
    });
}

/// Eight racers on `sb`'s store, each holding 5 s or 4 s by turns and
/// acting only through the fence record; `wipe` makes the store forget,
/// three times (20 in the soak tier), while the first holder since the
/// last wipe (token 1) holds when it still does — so the next holder gets
/// token 1 again and a renewal by token alone would extend its grant —
/// else at a random point of the racing; at the end the tokens are raised
/// as the old holders' messages say (`migrate --bump-tokens`). Judged as
/// the module docs say; `store` names the store and the wipe in the
/// figure.
fn racing_through_wipes(store: &str, sb: &Arc<Sandbox>, mut wipe: impl FnMut()) {
    let wipes = count(3, 20);
    let url = sb.store_url();
    let mut rng = Rng::from_env("case 42");
    // Long holdings: the newcomer after a wipe still holds when the old
    // holder next renews — what a renewal by token alone would extend.
    let holding = Holding {
        ms: [5000, 4000],
        fenced: true,
        owner: None,
    };
    let racers = Racers::start_holding(sb, &url, RACERS, &mut rng, WIPE_ANSWERS, holding);
    let mut recorder = history(sb);
    let (mut late, mut stopped_after) = (Vec::new(), Vec::new());
    let (mut held_at_wipe, mut on_token_1, mut last_wipe) = (0, 0, 0);
    for n in 0..wipes {
        let first = || {
            grants(sb, "job")
                .into_iter()
                .find(|g| g.answered > last_wipe && g.token == Some(1))
        };
        wait_until(Duration::from_secs(30), || first().is_some()).expect("no grant within 30 s");
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        if first().is_some_and(|g| g.end.is_none()) {
            on_token_1 += 1;
        } else {
            a_random_point_of_the_racing(sb, &mut rng);
        }
        let at = boot_ns();
        wipe();
        let until = boot_ns();
        recorder.lost("job", at, until).unwrap();
        last_wipe = until;
        // Every holding of the old store ends within the bound.
        let old = |g: &Recorded| g.answered < at;
        let all_ended = || grants(sb, "job").iter().filter(|g| old(g)).all(|g| g.end.is_some());
        wait_until(STOPPED_WITHIN + Duration::from_secs(10), all_ended);
        for g in grants(sb, "job").into_iter().filter(|g| old(g)) {
            match g.end {
                Some(end) if end > until => {
                    held_at_wipe += 1;
                    let after = Duration::from_nanos(end - until);
                    stopped_after.push(after);
                    if after > STOPPED_WITHIN {
                        late.push(format!("wipe {n}: {g:?} acted {after:?} after the store was wiped"));
                    }
                }
                Some(_) => {}
                None => {
                    held_at_wipe += 1;
                    late.push(format!("wipe {n}: {g:?} never ended"));
                }
            }
        }
    }
    // Raised as the old holders' messages say, before the name is used again.
    let (code, _, err) = sb.run(&["migrate", "--bump-tokens", "1000000"]);
    assert_eq!(code, 0, "migrate --bump-tokens: {err}");
    let (outcomes, unexpected) = racers.stop();
    acquire_after_all(sb, &url, "job");
    let mut report = judge(sb, &[&resource_of(sb, "job")]);
    for v in unexpected {
        report.push("unclear-outcome", v);
    }
    for v in late {
        report.push("acted-after-wipe", v);
    }
    figure(
        42,
        &format!(
            "{store}: {} runs by {RACERS} racers on one name (exit codes {outcomes:?}), wiped {wipes} times ({on_token_1} while \
             token 1 was held, so the next holder got it again): the old store's holders stopped {:?} median, {:?} at most \
             after the wipe ({held_at_wipe} still holding then); {} grants, {} fenced writes accepted, {} refused; fence \
             record gone back {} times; {} violations",
            outcomes.values().sum::<usize>(),
            percentile(&mut stopped_after.clone(), 50),
            percentile(&mut stopped_after, 100),
            report.counts.grants,
            report.counts.accepted,
            report.counts.refused,
            report.count("fence-went-back"),
            report.total()
        ),
    );
    report.assert_clean();
}
