//! Restoring the etcd store from an older snapshot (docs/ETCD.md,
//! "Restoring from a snapshot"): etcd starts again at the snapshot's
//! revision, so the tokens issued since are issued again — until
//! `migrate --bump-tokens` raises the token offset. A client that read the
//! offset before the bump picks the new one up at its next grant (its
//! grant's compare of the offset key fails, and it reads again).

mod support;

use std::time::Duration;

use leasehold_backend::{
    Backend, HistoryEvent, LeaseAcquire, LeaseAcquireParams, LeaseHistoryParams, Token, TokensBumpParams,
};
use leasehold_backend_tests::params;
use leasehold_testkit::etcd::{self, EtcdServer};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_restored_snapshot_reissues_tokens_until_the_offset_is_bumped,
    ]]);
}

/// Acquire and release `job` once: the token.
fn grant(store: &dyn Backend) -> Token {
    let p = LeaseAcquireParams {
        ttl: Duration::from_secs(30),
        ..params::acquire("job")
    };
    let LeaseAcquire::Acquired(g) = store.lease_acquire(&p).expect("acquire") else {
        panic!("job is held");
    };
    store.lease_release(&params::release("job", g.token)).expect("release");
    g.token
}

fn a_restored_snapshot_reissues_tokens_until_the_offset_is_bumped() {
    let mut server = EtcdServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let snapshot = dir.path().join("snapshot.db");
    let prefix = etcd::unique_prefix("restore", "snapshot");
    let store = support::open(&server, &prefix);
    for _ in 0..3 {
        grant(&store);
    }
    server.snapshot(&snapshot);
    let lost: Vec<Token> = (0..3).map(|_| grant(&store)).collect();
    let highest_lost = *lost.last().expect("three grants");
    drop(store);

    server.restore(&snapshot);
    let store = support::open(&server, &prefix);
    // A client that reads the offset now, before the bump.
    let early = support::open(&server, &prefix);
    let reissued = grant(&early);
    assert!(
        reissued <= highest_lost,
        "the restored cluster went on at token {reissued}, above the lost {lost:?}: the test shows nothing"
    );

    let bumped = store
        .tokens_bump(&TokensBumpParams { by: 1000 })
        .expect("bump the tokens");
    assert!(bumped.floor > highest_lost, "{bumped:?} after the lost {lost:?}");
    // Every client, the one that read the offset before the bump included,
    // grants above the floor from now on.
    for client in [&early, &store, &support::open(&server, &prefix)] {
        let token = grant(client);
        assert!(token > bumped.floor, "token {token} after a bump to {}", bumped.floor);
    }
    // The history names the tokens as granted.
    let history = store
        .lease_history(&LeaseHistoryParams {
            name: params::name("job"),
            limit: 5,
        })
        .expect("history");
    let newest_grant = history
        .iter()
        .find(|e| e.event == HistoryEvent::Granted)
        .and_then(|e| e.token)
        .expect("a granted entry");
    assert!(newest_grant > bumped.floor, "history says {newest_grant}: {history:?}");
    assert_eq!(
        store
            .lease_get(&params::name("job"))
            .expect("get")
            .expect("known")
            .last_token,
        newest_grant
    );
}
