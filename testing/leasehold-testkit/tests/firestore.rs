//! The Firestore emulator as a store's test meets it: started, written to
//! and read over its REST API (hand-written HTTP/1.1, no client library),
//! projects kept apart, paused and resumed — and stopped with every process
//! of it: the Java server is a grandchild of the process this crate
//! starts, and one left behind would keep its port and memory after the
//! tests.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use leasehold_testkit::firestore::{self, FirestoreEmulator};
use leasehold_testkit::{Test, process, tests};

fn main() {
    leasehold_testkit::main(&[TESTS]);
}

const TESTS: &[Test] = tests![
    a_document_written_is_read_back_and_terminate_leaves_nothing,
    projects_are_kept_apart,
    a_paused_emulator_answers_only_once_resumed_and_drop_ends_it_paused,
];

/// Write `{"n": n}` as document `c/id` of `project`.
fn write(emulator: &FirestoreEmulator, project: &str, id: &str, n: i64) {
    let path = format!("{}/c/{id}", firestore::documents(project));
    let body = format!(r#"{{"fields":{{"n":{{"integerValue":"{n}"}}}}}}"#);
    let (status, answer) = emulator.request("PATCH", &path, Some(&body));
    assert_eq!(status, 200, "{answer}");
}

/// Document `c/id` of `project`: its field `n`, or `None` when there is no
/// such document.
fn read(emulator: &FirestoreEmulator, project: &str, id: &str) -> Option<i64> {
    let path = format!("{}/c/{id}", firestore::documents(project));
    match emulator.request("GET", &path, None) {
        (404, _) => None,
        (200, answer) => {
            let doc: serde_json::Value = serde_json::from_str(&answer).expect("a JSON document");
            Some(
                doc["fields"]["n"]["integerValue"]
                    .as_str()
                    .expect("n")
                    .parse()
                    .expect("n"),
            )
        }
        (status, answer) => panic!("GET {path}: {status} {answer}"),
    }
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn a_document_written_is_read_back_and_terminate_leaves_nothing() {
    let started = Instant::now();
    let mut emulator = FirestoreEmulator::start();
    eprintln!("the Firestore emulator answered after {:?}", started.elapsed());
    let java = emulator
        .java_pid()
        .expect("the emulator's Java server, in its process group");
    let project = firestore::unique_project("testkit", "roundtrip");
    assert_eq!(read(&emulator, &project, "x"), None);
    write(&emulator, &project, "x", 7);
    assert_eq!(read(&emulator, &project, "x"), Some(7));

    let (port, dir) = (emulator.port(), emulator.dir().to_owned());
    emulator.terminate();
    assert!(!process::alive(java), "the Java server {java} outlived terminate()");
    assert_eq!(emulator.processes(), Vec::<u32>::new());
    assert!(!port_open(port), "port {port} still open after terminate()");
    drop(emulator);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

fn projects_are_kept_apart() {
    let emulator = firestore::shared();
    let (a, b) = (
        firestore::unique_project("testkit", "apart"),
        firestore::unique_project("testkit", "apart"),
    );
    write(emulator, &a, "x", 1);
    assert_eq!(read(emulator, &a, "x"), Some(1));
    assert_eq!(read(emulator, &b, "x"), None, "project {b} sees {a}'s document");
}

fn a_paused_emulator_answers_only_once_resumed_and_drop_ends_it_paused() {
    let emulator = FirestoreEmulator::start();
    let project = firestore::unique_project("testkit", "pause");
    write(&emulator, &project, "x", 1);
    let java = emulator.java_pid().expect("the emulator's Java server");
    let port = emulator.port();

    emulator.pause();
    let path = format!("{}/c/x", firestore::documents(&project));
    let paused = firestore::http(&emulator.host(), "GET", &path, None, Duration::from_secs(1));
    assert!(paused.is_err(), "a paused emulator answered: {paused:?}");

    emulator.resume();
    assert_eq!(read(&emulator, &project, "x"), Some(1));

    // Paused again, then dropped: it must still end, Java and all.
    emulator.pause();
    drop(emulator);
    assert!(
        !process::alive(java),
        "the Java server {java} outlived the drop of a paused emulator"
    );
    assert!(!port_open(port), "port {port} still open after the drop");
}
