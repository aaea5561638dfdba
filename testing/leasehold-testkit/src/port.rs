//! Ports for the servers a test starts.

use std::net::TcpListener;

/// A port free on 127.0.0.1 (and so, almost surely, on the test's other
/// private addresses, and in a fresh network namespace). Another process
/// may take it before the server binds it: a start that fails may retry.
#[must_use]
pub fn free() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port on 127.0.0.1")
        .port()
}
