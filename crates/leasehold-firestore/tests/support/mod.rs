//! What the store's test binaries share: the emulator, a store on it, and
//! a raw REST client that reads and writes documents without the store's
//! code (the independent side of the checks).

#![allow(dead_code, reason = "each test binary uses a part")]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

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
/// `body` on a connection of its own, written by hand: the answer's
/// status and JSON.
pub fn raw(path: &str, body: &Value) -> (u16, Value) {
    let host = host();
    let body = body.to_string();
    let mut tcp = TcpStream::connect(&host).expect("connect to the emulator");
    write!(
        tcp,
        "POST /v1/projects/{PROJECT}/databases/(default)/documents{path} HTTP/1.1\r\nHost: {host}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    // The emulator keeps the connection open whatever it is asked:
    // read the headers, then Content-Length bytes.
    let mut answer = Vec::new();
    let mut byte = [0u8];
    while !answer.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).expect("read the answer's headers");
        answer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("the emulator answers with a Content-Length");
    let mut body = vec![0; length];
    tcp.read_exact(&mut body).expect("read the answer's body");
    let json = String::from_utf8_lossy(&body).into_owned();
    (status, serde_json::from_str(&json).unwrap_or(Value::String(json)))
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
