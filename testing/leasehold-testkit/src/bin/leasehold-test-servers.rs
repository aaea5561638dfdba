//! Throwaway store servers for test suites written in other languages
//! (the Node.js package's `node --test` suites): the same servers, on the
//! same terms, as the Rust tests start — 127.0.0.1, a free port, a temp
//! dir, stopped by pid.
//!
//! ```text
//! leasehold-test-servers postgres etcd redis firestore
//! ```
//!
//! prints one JSON line — for each store asked for, `{"url": …, "env": {…}}`
//! (`env`: what a client needs besides, the Firestore emulator's host), or
//! `{"missing": REASON}` when it cannot be started here (the reason the
//! Rust tests would be ignored with) — then keeps the servers until its
//! stdin closes (the suite ended, or died), and stops them.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

use leasehold_testkit::Unavailable;
use serde_json::{Value, json};

/// A server kept until stdin closes (dropping it stops it).
type Kept = Box<dyn std::any::Any>;

fn start(kind: &str) -> Result<(Value, Kept), String> {
    match kind {
        "postgres" => {
            let server = leasehold_testkit::postgres::Server::start(false);
            Ok((json!({ "url": server.url("node") }), Box::new(server)))
        }
        "etcd" => {
            leasehold_testkit::etcd::need_etcd();
            let server = leasehold_testkit::etcd::EtcdServer::start();
            Ok((
                json!({ "url": format!("etcd://{}", server.endpoint()) }),
                Box::new(server),
            ))
        }
        "redis" => {
            leasehold_testkit::redis::need_redis();
            let server = leasehold_testkit::redis::RedisServer::start();
            Ok((json!({ "url": server.url() }), Box::new(server)))
        }
        "firestore" => {
            let server = leasehold_testkit::firestore::FirestoreEmulator::start();
            let project = leasehold_testkit::firestore::unique_project("node", "suite");
            Ok((
                json!({ "url": format!("firestore://{project}"), "env": { "FIRESTORE_EMULATOR_HOST": server.host() } }),
                Box::new(server),
            ))
        }
        other => Err(format!("no such store: {other} (postgres, etcd, redis, firestore)")),
    }
}

fn main() {
    // The kit's `need_*` end a test by panicking with why it cannot run:
    // here that is an answer, not a crash, so the hook stays quiet for it.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<Unavailable>().is_none() {
            default(info);
        }
    }));
    let mut answers = BTreeMap::new();
    let mut kept: Vec<Kept> = Vec::new();
    for kind in std::env::args().skip(1) {
        let answer = match catch_unwind(AssertUnwindSafe(|| start(&kind))) {
            Ok(Ok((answer, server))) => {
                kept.push(server);
                answer
            }
            Ok(Err(refused)) => {
                eprintln!("leasehold-test-servers: {refused}");
                std::process::exit(2);
            }
            Err(payload) => match payload.downcast_ref::<Unavailable>() {
                Some(why) => json!({ "missing": why.to_string() }),
                None => json!({ "missing": format!("{kind} did not start: {}", panic_text(&*payload)) }),
            },
        };
        answers.insert(kind, answer);
    }
    println!("{}", Value::Object(answers.into_iter().collect()));
    // Until the suite closes stdin (or dies): then every server stops.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(kept);
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned())
}
