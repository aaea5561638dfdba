//! What the etcd store adds to the conformance suite's `records_*` cases:
//! record keys live apart from leases (a record named like a lease key is
//! not read as one), and a batch the seam allows but the cluster's request
//! limit does not (64 bodies of 64 KiB against etcd's default 1.5 MiB) is
//! refused as invalid input — not as the store being unavailable, which
//! callers retry — with nothing written. And the records' clock, the
//! members' HTTP `Date` read a second at a time, sharpens within seconds
//! to a few ms of the member's true clock.

mod support;

use leasehold_backend::record::RECORD_BODY_MAX;
use leasehold_backend::{
    Backend, ErrorKind, Expect, LeaseListParams, RecordBackend, RecordChange, RecordKey, RecordWrite, RecordWriteParams,
};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::etcd;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        records_named_like_lease_keys_are_not_leases,
        a_batch_over_the_request_limit_is_refused_as_invalid,
        the_clusters_clock_sharpens_to_the_round_trip_and_stays_true,
    ]]);
}

fn open(prefix: &str) -> EtcdBackend {
    support::open(etcd::shared(), &format!("/records/{}{prefix}", std::process::id()))
}

fn records(store: &EtcdBackend) -> &dyn RecordBackend {
    store.records().expect("the etcd store keeps records")
}

fn put(key: &str, body: String) -> RecordChange {
    RecordChange::Put {
        key: RecordKey::new(key).expect("a valid key"),
        body,
        expect: Expect::Anything,
    }
}

fn records_named_like_lease_keys_are_not_leases() {
    let store = open("/apart");
    let written = records(&store)
        .record_write(&RecordWriteParams {
            not_after: None,
            changes: vec![put("lease/job/t", "1".into()), put("/lease/job/v", "{}".into())],
        })
        .expect("write");
    assert!(matches!(written, RecordWrite::Written { .. }), "{written:?}");
    let leases = store
        .lease_list(&LeaseListParams { live_only: false })
        .expect("records must not be read as lease keys");
    assert!(leases.is_empty(), "{leases:?}");
}

fn a_batch_over_the_request_limit_is_refused_as_invalid() {
    let store = open("/large");
    let changes = (0..64)
        .map(|i| put(&format!("k/{i}"), "x".repeat(RECORD_BODY_MAX)))
        .collect();
    let refused = records(&store)
        .record_write(&RecordWriteParams::new(changes))
        .expect_err("etcd's default limit is 1.5 MiB");
    assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    assert!(refused.to_string().contains("--max-request-bytes"), "{refused}");
    let key = RecordKey::new("k/0").expect("a valid key");
    assert_eq!(
        records(&store).record_get(&key).expect("read"),
        None,
        "a refused batch wrote"
    );
}

/// The estimate of the cluster's clock starts within half a second (one
/// `Date`) and, by readings timed to the member's turn of a second,
/// narrows within 20 s to under 25 ms — and stays true: the member runs
/// on this host, so its clock is this host's, which the estimate must
/// then match to within its own `within` and a few ms (a reading's round
/// trip on loopback). A narrowing that left the truth outside would fail.
fn the_clusters_clock_sharpens_to_the_round_trip_and_stays_true() {
    use std::time::{Duration, SystemTime};
    let store = open("/clock");
    let off = |at: SystemTime, host: SystemTime| match at.duration_since(host) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    let first = records(&store).record_clock().expect("record_clock");
    assert!(first.within <= Duration::from_millis(600), "{first:?}");
    let mut last = first;
    let narrowed = leasehold_testkit::wait::wait_until(Duration::from_secs(20), || {
        let before = leasehold_host::wall_clock();
        last = records(&store).record_clock().expect("record_clock");
        let after = leasehold_host::wall_clock();
        let slack = last.within + Duration::from_millis(5);
        assert!(
            off(last.at, before) <= slack + off(after, before),
            "the estimate {last:?} is {:?} from this host's clock, more than its within",
            off(last.at, before)
        );
        last.within < Duration::from_millis(25)
    });
    assert!(
        narrowed.is_some(),
        "the estimate is still {last:?} after 20 s (first {first:?})"
    );
    println!(
        "the estimate narrowed from {:?} to {:?} in {narrowed:?}",
        first.within, last.within
    );
}
