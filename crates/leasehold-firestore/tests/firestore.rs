//! The Firestore store's own promises, beyond the conformance suite:
//! history kept within the bound across chunk documents (counted by hand),
//! tokens above a bump's floor for old and new names alike while names are
//! being made, a store that cannot be reached or a document changed by
//! hand reported clearly and left as it is.

mod support;

use std::time::Duration;

use leasehold_backend::plan::{HISTORY_PER_NAME, HISTORY_PRUNE_EVERY};
use leasehold_backend::{
    Backend, ErrorKind, LeaseAcquire, LeaseAcquireParams, LeaseFenceParams, LeaseHistoryParams, Token,
};
use leasehold_backend_tests::{contention, params};
use serde_json::json;

/// The races every store with many clients runs
/// (`leasehold_backend_tests::contention`), on clients of one collection.
fn racing_clients_never_hold_one_name_at_once() {
    let prefix = support::unique_prefix("race");
    contention::racing_clients_never_hold_one_name_at_once(&|| support::open(&prefix));
}

fn a_crowd_of_waiters_never_holds_up_the_holders_renewals() {
    let prefix = support::unique_prefix("crowd");
    contention::a_crowd_of_waiters_never_holds_up_the_holders_renewals(&|| support::open(&prefix));
}

fn a_bump_raises_every_token_after_it_while_names_are_made() {
    let prefix = support::unique_prefix("bump");
    contention::a_bump_raises_every_token_after_it_while_names_are_made(&|| support::open(&prefix));
}

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        racing_clients_never_hold_one_name_at_once,
        a_crowd_of_waiters_never_holds_up_the_holders_renewals,
        a_bump_raises_every_token_after_it_while_names_are_made,
        a_waiter_asking_again_early_writes_nothing,
        history_keeps_the_newest_entries_within_the_bound_across_chunks,
        a_store_nobody_answers_for_is_unavailable_with_what_to_do,
        a_server_that_never_answers_times_out_in_words,
        a_document_changed_by_hand_is_corrupt_and_left_as_it_is,
    ]]);
}

/// A waiter that asks again while its registration has more than half its
/// time left keeps its place without a write (the name's document, read
/// by hand, keeps its update time); once less than half is left, asking
/// again writes the refreshed registration.
fn a_waiter_asking_again_early_writes_nothing() {
    let prefix = support::unique_prefix("early");
    let store = support::open(&prefix);
    contention::acquire(&store, "job");
    let path = format!("{prefix}/store/leases/job");
    let version = || support::document(&path).expect("job's document")["updateTime"].clone();
    let ask = |ticket, ttl| {
        let p = LeaseAcquireParams {
            ticket,
            waiter_ttl: ttl,
            waiter_holder: Some(params::holder()),
            ..params::acquire("job")
        };
        match store.lease_acquire(&p).expect("acquire") {
            LeaseAcquire::Held(h) => h.ticket.expect("queued"),
            LeaseAcquire::Acquired(g) => panic!("granted {g:?}"),
        }
    };
    let ticket = store
        .waiter_enqueue(&params::enqueue("job", leasehold_backend::Mode::Exclusive))
        .expect("queue");
    let queued = version();
    assert_eq!(ask(Some(ticket), Duration::from_secs(30)), ticket);
    assert_eq!(
        version(),
        queued,
        "asking again with 30 s of 30 s left wrote the document"
    );
    // Asking for a longer registration than half of what is left: written.
    assert_eq!(ask(Some(ticket), Duration::from_secs(120)), ticket);
    assert_ne!(
        version(),
        queued,
        "a registration with less than half its time left was not refreshed"
    );
}

/// Each fence check records one entry. After every one, the store's
/// history of the name is the newest entries in order, at least
/// `min(n, HISTORY_PER_NAME)` of them; the entries stored (counted by hand
/// in the name's document and its chunk documents) are never more than
/// the bound allows.
fn history_keeps_the_newest_entries_within_the_bound_across_chunks() {
    let prefix = support::unique_prefix("history");
    let store = support::open(&prefix);
    let token = contention::acquire(&store, "job");
    let bound = (HISTORY_PER_NAME + HISTORY_PRUNE_EVERY - 1) as usize;
    let total = HISTORY_PER_NAME as usize + 100;
    for i in 1..total {
        let p = LeaseFenceParams {
            caller: format!("check {i}"),
            ..params::fence("job", token)
        };
        store.lease_fence(&p).expect("fence");
        if i % 97 != 0 && i != total - 1 {
            continue;
        }
        let entries = store
            .lease_history(&LeaseHistoryParams {
                name: params::name("job"),
                limit: 5000,
            })
            .expect("history");
        let n = i + 1; // and the grant's entry
        assert!(
            entries.len() >= n.min(HISTORY_PER_NAME as usize),
            "after {n} entries the store gives {}",
            entries.len()
        );
        // Newest first, consecutive, the newest the last check.
        for (k, e) in entries.iter().take(entries.len().min(n - 1)).enumerate() {
            assert!(
                e.detail == format!("passed by check {}", i - k),
                "entry {k} after {n}: {:?}",
                e.detail
            );
        }
        let stored = stored_entries(&prefix);
        assert!(
            stored <= bound,
            "after {n} entries the store keeps {stored} (bound {bound})"
        );
        assert!(
            stored >= n.min(HISTORY_PER_NAME as usize),
            "after {n} entries only {stored} are stored"
        );
    }
}

/// The entries of `job` as stored: those in its document and in its
/// chunk documents, counted without the store's code.
fn stored_entries(prefix: &str) -> usize {
    let doc_path = format!("{prefix}/store/leases/job");
    let doc = support::document(&doc_path).expect("job's document");
    let state: serde_json::Value =
        serde_json::from_str(doc["fields"]["state"]["stringValue"].as_str().expect("state")).expect("JSON");
    let recent = state["recent"].as_array().map_or(0, Vec::len);
    let chunks: usize = support::documents(&doc_path, "history")
        .iter()
        .map(|c| {
            let entries: serde_json::Value =
                serde_json::from_str(c["fields"]["entries"]["stringValue"].as_str().expect("entries")).expect("JSON");
            entries.as_array().map_or(0, Vec::len)
        })
        .sum();
    recent + chunks
}

fn a_store_nobody_answers_for_is_unavailable_with_what_to_do() {
    let port = leasehold_testkit::port::free();
    let store = leasehold_firestore::open_emulator(&format!("127.0.0.1:{port}"), support::PROJECT, "down")
        .expect("opening asks nothing");
    let e = store
        .lease_acquire(&params::acquire("job"))
        .expect_err("nobody answers");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let said = format!("{e} {}", e.hint_text());
    let at = format!("127.0.0.1:{port}");
    for needed in [at.as_str(), "FIRESTORE_EMULATOR_HOST", "not reported as done"] {
        assert!(said.contains(needed), "{needed:?} missing from: {said}");
    }
}

/// A server that takes the connection and never answers (a listener
/// nobody accepts on), with a 1 s timeout: "did not answer: timed out
/// after 1 s" — the words of the one HTTP client that also reaches the
/// metadata server and the token endpoint — never the system's "Resource
/// temporarily unavailable (os error 11)".
fn a_server_that_never_answers_times_out_in_words() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = format!("127.0.0.1:{}", blackhole.local_addr().expect("address").port());
    let store = leasehold_firestore::FirestoreBackend::open(&leasehold_firestore::FirestoreOptions {
        project: support::PROJECT.to_owned(),
        prefix: "silent".to_owned(),
        target: leasehold_firestore::Target::Emulator(at.clone()),
        timeout: Duration::from_secs(1),
        ..leasehold_firestore::FirestoreOptions::default()
    })
    .expect("opening asks nothing");
    let began = std::time::Instant::now();
    let e = store.lease_acquire(&params::acquire("job")).expect_err("no answer");
    assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("Firestore at http://{at} did not answer: timed out after 1 s")),
        "{e}"
    );
    assert!(!text.contains("os error") && !text.contains("temporarily"), "{e}");
    drop(blackhole);
}

/// A name's document whose state is not leasehold's: every operation on
/// it says so, and the document is as it was.
fn a_document_changed_by_hand_is_corrupt_and_left_as_it_is() {
    let prefix = support::unique_prefix("corrupt");
    let store = support::open(&prefix);
    contention::acquire(&store, "job");
    let path = format!("{prefix}/store/leases/job");
    let (status, answer) = support::raw(
        ":commit",
        &json!({ "writes": [{ "update": { "name": support::doc_name(&path), "fields": {
            "name": { "stringValue": "job" }, "newest": { "integerValue": "1" },
            "state": { "stringValue": "{\"grants\": 7}" } } } }] }),
    );
    assert_eq!(status, 200, "{answer}");
    let before = support::document(&path).expect("the document");
    let e = store.lease_acquire(&params::acquire("job")).expect_err("corrupt");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert!(e.to_string().contains("leases/job"), "names the document: {e}");
    let e = store
        .lease_release(&params::release("job", Token(1)))
        .expect_err("corrupt");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert_eq!(
        support::document(&path).expect("the document"),
        before,
        "the document was changed"
    );
}
