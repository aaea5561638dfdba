//! A waiter that is gone never blocks a free lease (issue 22, item 3).
//!
//! What must never happen to a user: a waiting `acquire --wait` or
//! `run --wait` is killed (kill -9, or SIGTERM/SIGINT/SIGHUP), the holder
//! releases, and the next plain `acquire` is refused with "1 waiter(s)
//! queued ahead" although nothing holds the lease or waits for it any more.
//!
//! Each scenario runs on SQLite, PostgreSQL, etcd, Firestore and Redis. Whether a
//! waiter's entry is in the store is read from the store itself — a SQL
//! count, etcdctl on the waiter keys, the name's document read over the
//! emulator's REST API — never through leasehold, which filters waiters it
//! can prove dead.

use std::process::Child;
use std::time::Duration;

use leasehold_testkit::wait::wait_until;
use leasehold_testkit::{etcd, postgres};

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_killed_waiter_never_blocks_a_released_lease,
    a_waiter_behind_a_killed_waiter_is_served_on_release,
    a_signalled_waiter_leaves_the_queue_and_exits_128_plus_n,
];

/// How long a waiter may take to register (a process start, a store open).
const QUEUED_WITHIN: Duration = Duration::from_secs(20);
/// How long a signalled waiter may take to leave and exit.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// One sandbox on one store, and an independent count of its waiter entries.
struct Store {
    what: &'static str,
    env: Env,
    entries: Box<dyn Fn(&str) -> usize>,
}

impl Store {
    fn sqlite() -> Self {
        let env = Env::new();
        let path = env.store_path();
        Store {
            what: "sqlite",
            env,
            entries: Box::new(move |name| {
                let db = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                    .expect("open the store read-only");
                let n: i64 = db
                    .query_row("SELECT count(*) FROM lease_waiter WHERE name = ?1", [name], |r| {
                        r.get(0)
                    })
                    .expect("count the waiter rows");
                usize::try_from(n).expect("a count")
            }),
        }
    }

    fn postgres() -> Self {
        let server = postgres::Server::shared();
        let schema = postgres::Server::fresh_schema();
        let env = Env::on(server.url(&schema));
        Store {
            what: "postgres",
            env,
            entries: Box::new(move |name| {
                let n: i64 = server
                    .client()
                    .query_one(
                        &format!("SELECT count(*) FROM {schema}.lease_waiter WHERE name = $1"),
                        &[&name],
                    )
                    .expect("count the waiter rows")
                    .get(0);
                usize::try_from(n).expect("a count")
            }),
        }
    }

    fn etcd() -> Self {
        let etcd = etcd::shared();
        let prefix = etcd::unique_prefix("cli", "waiters");
        let env = Env::on(format!("etcd://{}?prefix={prefix}", etcd.endpoint()));
        Store {
            what: "etcd",
            env,
            // The waiter keys, PREFIX/lease/NAME/w/SLOT (the layout of
            // leasehold-etcd's keys.rs; the names here need no encoding).
            entries: Box::new(move |name| {
                let out = leasehold_testkit::process::succeed(etcd.etcdctl().args([
                    "get",
                    "--prefix",
                    "--keys-only",
                    &format!("{prefix}/lease/{name}/w/"),
                ]));
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .count()
            }),
        }
    }

    fn firestore() -> Self {
        let (env, prefix) = Env::firestore("waiters");
        Store {
            what: "firestore",
            env,
            // The `waiters` of the name's document's `state` (the layout of
            // leasehold-firestore's layout.rs; the names here need no
            // encoding), expired or not.
            entries: Box::new(move |name| {
                let emulator = leasehold_testkit::firestore::shared();
                let path = format!(
                    "{}/{prefix}/store/leases/{name}",
                    leasehold_testkit::firestore::documents(crate::util::FIRESTORE_PROJECT)
                );
                let (status, body) = emulator.request("GET", &path, None);
                if status == 404 {
                    return 0;
                }
                assert_eq!(status, 200, "read {path}: {body}");
                let doc: serde_json::Value = serde_json::from_str(&body).expect("a document");
                let state: serde_json::Value =
                    serde_json::from_str(doc["fields"]["state"]["stringValue"].as_str().expect("a state"))
                        .expect("the state's JSON");
                state["waiters"].as_array().map_or(0, Vec::len)
            }),
        }
    }

    fn redis() -> Self {
        let (env, prefix) = Env::redis("waiters");
        Store {
            what: "redis",
            env,
            // The `waiters` of the name's hash's state (field `s`, the
            // layout of leasehold-redis's lease.rs), expired or not.
            entries: Box::new(move |name| {
                let server = leasehold_testkit::redis::shared();
                let state = server
                    .command(&["HGET", &format!("{prefix}:name:{name}"), "s"])
                    .expect("HGET the name's state");
                let Some(state) = state.text() else { return 0 };
                let state: serde_json::Value = serde_json::from_str(state).expect("the state's JSON");
                state["waiters"].as_array().map_or(0, Vec::len)
            }),
        }
    }

    fn every() -> Vec<Self> {
        vec![
            Self::sqlite(),
            Self::postgres(),
            Self::etcd(),
            Self::firestore(),
            Self::redis(),
        ]
    }

    /// Start `leasehold ARGS` and return it once its waiter entry for
    /// `name` is in the store.
    fn queued(&self, name: &str, args: &[&str]) -> Child {
        let before = (self.entries)(name);
        let mut child = self.env.spawn(args);
        let queued = wait_until(QUEUED_WITHIN, || {
            (self.entries)(name) > before || child.try_wait().expect("try_wait").is_some()
        });
        if queued.is_none() || child.try_wait().expect("try_wait").is_some() {
            let (code, _, err) = finish(child, EXIT_WITHIN);
            panic!("{}: {args:?} did not queue (exit {code}): {err}", self.what);
        }
        child
    }

    /// Take `name` as a bare `acquire` (a TTL-bound grant of an hour).
    fn hold(&self, name: &str) -> String {
        self.env.acquire(&[name, "--ttl", "1h"]).to_string()
    }

    fn release(&self, name: &str, token: &str) {
        let (code, _, err) = self.env.run(&["release", name, "--token", token]);
        assert_eq!(code, 0, "{}: release: {err}", self.what);
    }
}

/// kill -9 the waiter, and reap it (a zombie's pid is still taken).
fn kill9(mut child: Child) {
    child.kill().expect("kill -9");
    child.wait().expect("reap");
}

/// A waiter killed with kill -9 — `acquire --wait` or `run --wait` — does
/// not block the lease once its holder releases it: the very next plain
/// `acquire` is granted, and so is `run --if-held skip`, which runs its
/// command.
fn a_killed_waiter_never_blocks_a_released_lease() {
    for store in Store::every() {
        let what = store.what;
        let waiters: [(&str, Vec<&str>); 2] = [
            ("acquire --wait", vec!["acquire", "a", "--wait", "1h"]),
            ("run --wait", vec!["run", "b", "--wait", "1h", "--", "true"]),
        ];
        for (how, args) in waiters {
            let name = args[1];
            let token = store.hold(name);
            kill9(store.queued(name, &args));
            store.release(name, &token);
            let (code, out, err) = store.env.run(&["acquire", name]);
            assert_eq!(
                code, 0,
                "{what}: after kill -9 of a waiting `{how}` and a release, acquire was refused: {err}"
            );
            store.release(name, out.trim());
        }

        // `run --if-held skip` after a killed waiter and a release runs.
        let token = store.hold("c");
        kill9(store.queued("c", &["acquire", "c", "--wait", "1h"]));
        store.release("c", &token);
        let (code, _, err) = store
            .env
            .run(&crate::util::sh_args("run", "c", &["--if-held", "skip"], "touch ran"));
        assert_eq!(code, 0, "{what}: {err}");
        assert!(
            store.env.file("ran").exists(),
            "{what}: run --if-held skip skipped a free lease behind a killed waiter: {err}"
        );
    }
}

/// A waiter queued behind a killed one is served as soon as the holder
/// releases — not when the dead registration expires (10 s after its last
/// refresh): the bound here is half of that, the expected time one poll
/// (100 ms).
fn a_waiter_behind_a_killed_waiter_is_served_on_release() {
    for store in Store::every() {
        let what = store.what;
        let token = store.hold("job");
        let dead = store.queued("job", &["acquire", "job", "--wait", "1h"]);
        let next = store.queued("job", &["run", "job", "--wait", "1h", "--", "touch", "ran"]);
        kill9(dead);
        store.release("job", &token);
        let released = std::time::Instant::now();
        // Waited for longer than the bound, so that a late grant fails
        // the bound below rather than this wait.
        let (code, _, err) = finish(next, QUEUED_WITHIN);
        let took = released.elapsed();
        assert_eq!(code, 0, "{what}: {err}");
        assert!(store.env.file("ran").exists(), "{what}: {err}");
        assert!(
            took < Duration::from_secs(5),
            "{what}: the waiter behind a killed one got the lease {took:?} after the release"
        );
    }
}

/// SIGTERM, SIGINT or SIGHUP to a waiting `acquire --wait` or `run --wait`:
/// it leaves the queue — its entry is gone from the store as it exits —
/// and dies with the conventional code, 128 + the signal's number. The
/// holder's grant is untouched.
fn a_signalled_waiter_leaves_the_queue_and_exits_128_plus_n() {
    for store in Store::every() {
        let what = store.what;
        let token = store.hold("job");
        for (sig, n) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
            for args in [
                vec!["--json", "acquire", "job", "--wait", "1h"],
                vec!["--json", "run", "job", "--wait", "1h", "--", "touch", "ran"],
            ] {
                let child = store.queued("job", &args);
                signal(child.id(), sig);
                let (code, out, err) = finish(child, EXIT_WITHIN);
                assert_eq!(code, 128 + n, "{what}: {args:?} on SIG{sig}: {err}");
                let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
                assert_eq!(
                    (&doc["name"], &doc["signal"], &doc["exit_code"]),
                    (&"job".into(), &format!("SIG{sig}").into(), &(128 + n).into()),
                    "{what}: {args:?}: {out}"
                );
                assert_eq!(
                    (store.entries)("job"),
                    0,
                    "{what}: {args:?} left its waiter entry on SIG{sig}"
                );
            }
        }
        assert!(
            !store.env.file("ran").exists(),
            "{what}: a cancelled run ran its command"
        );
        let (code, _, err) = store.env.run(&["acquire", "job"]);
        assert_eq!(code, 11, "{what}: the holder's grant must still hold: {err}");
        store.release("job", &token);
    }
}
