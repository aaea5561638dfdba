//! What the etcd store adds to the conformance suite's `records_*` cases:
//! record keys live apart from leases (a record named like a lease key is
//! not read as one), and a batch the seam allows but the cluster's request
//! limit does not (64 bodies of 64 KiB against etcd's default 1.5 MiB) is
//! refused as invalid input — not as the store being unavailable, which
//! callers retry — with nothing written.

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
