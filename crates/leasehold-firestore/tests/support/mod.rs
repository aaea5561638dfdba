//! What the store's test binaries share: the emulator, a store on it, and
//! documents read and written over REST without the store's code (the
//! test kit's client: the independent side of the checks).

#![allow(dead_code, reason = "each test binary uses a part")]

use leasehold_firestore::FirestoreBackend;
use serde_json::Value;

/// The project every test uses (the emulator takes any id).
pub const PROJECT: &str = "leasehold-test";

/// The emulator of this test binary (started at first use): its
/// HOST:PORT.
pub fn host() -> String {
    leasehold_testkit::firestore::shared().host()
}

/// A root collection no other test (nor another run) uses.
pub fn unique_prefix(test: &str) -> String {
    leasehold_testkit::firestore::unique_prefix("store", test)
}

/// A new client of the store under `prefix`.
pub fn open(prefix: &str) -> FirestoreBackend {
    leasehold_firestore::open_emulator(&host(), PROJECT, prefix).expect("open the store")
}

/// `POST /v1/projects/PROJECT/databases/(default)/documents{path}` with
/// `body`, by the test kit's HTTP client: the answer's status and JSON.
pub fn raw(path: &str, body: &Value) -> (u16, Value) {
    let emulator = leasehold_testkit::firestore::shared();
    let path = format!("{}{path}", leasehold_testkit::firestore::documents(PROJECT));
    let (status, answer) = emulator.request("POST", &path, Some(&body.to_string()));
    (status, serde_json::from_str(&answer).unwrap_or(Value::String(answer)))
}

/// The full name of the document at `path` (below `documents/`).
pub fn doc_name(path: &str) -> String {
    format!("projects/{PROJECT}/databases/(default)/documents/{path}")
}

/// The documents of `collection` under `parent` (below `documents/`),
/// read by hand.
pub fn documents(parent: &str, collection: &str) -> Vec<Value> {
    let (status, answer) = raw(
        &format!("/{parent}:runQuery"),
        &serde_json::json!({ "structuredQuery": { "from": [{ "collectionId": collection }] } }),
    );
    assert_eq!(status, 200, "{answer}");
    answer
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|item| item.get("document").cloned())
        .collect()
}

/// The document at `path`, read by hand (`None` when missing).
pub fn document(path: &str) -> Option<Value> {
    let (status, answer) = raw(":batchGet", &serde_json::json!({ "documents": [doc_name(path)] }));
    assert_eq!(status, 200, "{answer}");
    answer[0].get("found").cloned()
}
