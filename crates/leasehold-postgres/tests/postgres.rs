//! What only the PostgreSQL store does, on a throwaway server: schema
//! versioning and races, errors, concurrent claims and acquirers, the
//! task queue end to end (until the conformance suite has task cases), and
//! records' bytewise order under another collation.

use std::collections::HashSet;

use postgres::fallible_iterator::FallibleIterator as _;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime};

use leasehold_backend::{
    Available, Backend, Claim, ErrorKind, Expect, LeaseAcquire, LeaseName, QueueName, RecordBackend as _, RecordChange,
    RecordKey, RecordListParams, RecordWriteParams, Retry, TaskAddParams, TaskBackend as _, TaskClaimParams,
    TaskCompleteParams, TaskFail, TaskFailParams, TaskHeartbeatParams, TaskLost, TaskPurgeParams, TaskState,
    TaskStatsParams, TaskUpdate, Token,
};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions, SCHEMA_VERSION};
use leasehold_testkit::postgres::Server;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        one_call_at_a_time_keeps_one_connection,
        the_schema_objects_checked_at_open_are_those_created,
        a_store_missing_a_table_is_refused_as_damaged_and_not_recreated,
        first_starts_race_safely_and_a_newer_schema_is_refused,
        a_schema_with_foreign_tables_is_refused_not_adopted,
        a_missing_database_says_what_to_do,
        racing_acquirers_get_unique_growing_tokens_and_never_overlap,
        concurrent_claimers_take_distinct_tasks_and_finish_the_queue,
        task_lifecycle_on_the_server_clock,
        claim_order_is_priority_then_available_at_then_insertion,
        a_release_and_an_expired_waiter_notify_the_name,
        history_keeps_the_newest_entries_of_a_name,
        a_claim_that_returns_expired_claims_notifies_the_queue,
        records_are_listed_bytewise_whatever_the_database_collation,
        a_record_write_that_waited_for_its_turn_is_judged_when_applied,
    ]]);
}

fn open(url: &str) -> PostgresBackend {
    PostgresBackend::open(url, PostgresOptions::default()).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

fn fresh() -> (String, PostgresBackend) {
    let url = Server::shared().url(&Server::fresh_schema());
    let store = open(&url);
    (url, store)
}

fn psql(sql: &str) {
    let mut client = Server::shared().client();
    client.batch_execute(sql).unwrap();
}

fn add(store: &PostgresBackend, queue: &str, ids: impl IntoIterator<Item = String>) {
    let tasks: Vec<TaskAddParams> = ids
        .into_iter()
        .map(|id| TaskAddParams {
            queue: params::name(queue),
            id: params::name(&id),
            payload: serde_json::json!({ "id": id }),
            priority: 0,
            available: Available::Now,
            max_attempts: 3,
        })
        .collect();
    store.task_add(&tasks).unwrap();
}

fn claim_params(queue: &str, ttl: Duration) -> TaskClaimParams {
    TaskClaimParams {
        queue: params::name(queue),
        owner: "worker".into(),
        ttl,
    }
}

/// A process making one call at a time holds one connection, however many
/// calls it makes (an idle waiter held six: the pool handed out its slots
/// in turn, and 200 waiters ran a server with 1,500 slots out of them).
fn one_call_at_a_time_keeps_one_connection() {
    let app = format!("onecall{}", std::process::id());
    let url = format!(
        "{}&application_name={app}",
        Server::shared().url(&Server::fresh_schema())
    );
    let store = open(&url);
    for i in 0..20 {
        let name = format!("job{}", i % 3);
        if let LeaseAcquire::Acquired(g) = store.lease_acquire(&params::acquire(&name)).unwrap() {
            store.lease_release(&params::release(&name, g.token)).unwrap();
        }
        store.lease_get(&LeaseName::new(&name).unwrap()).unwrap();
    }
    let connections: i64 = Server::shared()
        .client()
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert_eq!(connections, 1, "60 calls one at a time held {connections} connections");
}

fn the_schema_objects_checked_at_open_are_those_created() {
    let (url, _store) = fresh();
    let schema = url.split("schema=").nth(1).unwrap().split('&').next().unwrap();
    let mut created: Vec<String> = Server::shared()
        .client()
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'i') AND c.relname <> 'leasehold_schema' \
             AND c.relname NOT LIKE '%\\_pkey' AND c.relname NOT LIKE '%\\_key'",
            &[&schema],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    created.sort();
    let mut listed: Vec<&str> = leasehold_postgres::schema_objects(SCHEMA_VERSION);
    listed.sort_unstable();
    assert_eq!(created, listed);
}

/// A store missing one of its tables is damaged (exit 65), not
/// "unavailable, retry": refused at open with what is missing, and never
/// recreated (that could restart the token counters). A table dropped under
/// an open store is damage too.
fn a_store_missing_a_table_is_refused_as_damaged_and_not_recreated() {
    for table in ["lease_name", "lease_grant", "lease_waiter", "lease_history", "task"] {
        let (url, store) = fresh();
        let schema = url.split("schema=").nth(1).unwrap().split('&').next().unwrap();
        psql(&format!("DROP TABLE {schema}.{table}"));
        let err = if table == "task" {
            store.task_stats(&TaskStatsParams::default()).unwrap_err()
        } else {
            store.lease_acquire(&params::acquire("job")).unwrap_err()
        };
        assert!(
            err.kind() == ErrorKind::Corrupt && err.reason().contains(table),
            "{table} dropped under an open store: {err}"
        );
        let err = PostgresBackend::open(&url, PostgresOptions::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{table} dropped: {err}");
        assert!(err.reason().contains(&format!("missing {table}")), "{table}: {err}");
        assert!(err.hint_text().contains("backup"), "{table}: {err}");
        let mut client = Server::shared().client();
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&format!("{schema}.{table}")])
            .unwrap()
            .get(0);
        assert!(!exists, "{table} was recreated");
    }
}

fn first_starts_race_safely_and_a_newer_schema_is_refused() {
    let url = Server::shared().url(&Server::fresh_schema());
    let barrier = Arc::new(Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                open(&url).describe().unwrap().schema_version
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Some(SCHEMA_VERSION as u32));
    }
    let schema = url.split("schema=").nth(1).unwrap().split('&').next().unwrap();
    psql(&format!("UPDATE {schema}.leasehold_schema SET version = 99"));
    let err = PostgresBackend::open(&url, PostgresOptions::default()).unwrap_err();
    assert!(
        err.kind() == ErrorKind::Corrupt && err.reason().contains("schema version 99"),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade leasehold"), "{err}");
}

fn a_schema_with_foreign_tables_is_refused_not_adopted() {
    let schema = Server::fresh_schema();
    psql(&format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.task (x int)"));
    let err = PostgresBackend::open(&Server::shared().url(&schema), PostgresOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("?schema=NAME"), "{err}");
}

fn a_missing_database_says_what_to_do() {
    let url = format!("postgres://postgres@127.0.0.1:{}/no_such_db", Server::shared().port());
    let err = PostgresBackend::open(&url, PostgresOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("createdb"), "{err}");
}

fn racing_acquirers_get_unique_growing_tokens_and_never_overlap() {
    let (url, _store) = fresh();
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let url = url.clone();
            thread::spawn(move || {
                let store = open(&url);
                let mut mine = Vec::new();
                for _ in 0..40 {
                    if let LeaseAcquire::Acquired(g) = store.lease_acquire(&params::acquire("race")).unwrap() {
                        // While held, nobody else is: the state shows only us.
                        let state = store.lease_get(&params::name("race")).unwrap().unwrap();
                        assert_eq!(leasehold_backend_tests::tokens(&state.grants), [g.token], "worker {i}");
                        mine.push(g.token);
                        store.lease_release(&params::release("race", g.token)).unwrap();
                    }
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<Token> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a token was issued twice");
    assert!(n > 0);
}

fn concurrent_claimers_take_distinct_tasks_and_finish_the_queue() {
    let (url, store) = fresh();
    add(&store, "q", (0..200).map(|i| format!("t{i}")));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            thread::spawn(move || {
                let store = open(&url);
                let mut done = Vec::new();
                while let Some(c) = store.task_claim(&claim_params("q", Duration::from_secs(60))).unwrap() {
                    assert_eq!(
                        store
                            .task_complete(&TaskCompleteParams {
                                task: c.task_ref(),
                                result: None
                            })
                            .unwrap(),
                        TaskUpdate::Applied
                    );
                    done.push(c.id.as_str().to_owned());
                }
                done
            })
        })
        .collect();
    let all: Vec<String> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), unique.len()),
        (200, 200),
        "each task claimed and completed once"
    );
    let stats = store
        .task_stats(&TaskStatsParams {
            queue: Some(params::name("q")),
        })
        .unwrap();
    assert_eq!((stats[0].done, stats[0].pending, stats[0].running), (200, 0, 0));
}

/// Task a of `q`, added twice (the second a no-op); then a batch that
/// repeats a with another payload: a conflict, and b of the same batch is
/// not added either.
fn add_a_then_conflict(store: &PostgresBackend, q: &QueueName) {
    add(store, "q", ["a".to_owned()]);
    // The same id again: a no-op; with another payload: a conflict, and
    // the batch adds nothing.
    add(store, "q", ["a".to_owned()]);
    let conflict = TaskAddParams {
        queue: q.clone(),
        id: params::name("a"),
        payload: serde_json::json!("other"),
        priority: 0,
        available: Available::Now,
        max_attempts: 3,
    };
    let b = TaskAddParams {
        id: params::name("b"),
        ..conflict.clone()
    };
    let outcomes = store.task_add(&[b, conflict]).unwrap();
    assert!(matches!(outcomes[1], leasehold_backend::TaskAdd::Conflict { .. }));
    assert!(
        store.task_get(&params::task_id("q", "b")).unwrap().is_none(),
        "a conflicting batch adds nothing"
    );
}

/// `claim` completes once (a second completion is stale), its result is
/// kept, and an hour later (on the skewed clock) the purge deletes it.
fn complete_once_then_purge(
    store: &PostgresBackend,
    skew: &leasehold_backend::ClockSkew,
    q: &QueueName,
    claim: &Claim,
) {
    let result = serde_json::json!({"ok": true});
    let complete = || {
        store
            .task_complete(&TaskCompleteParams {
                task: claim.task_ref(),
                result: Some(result.clone()),
            })
            .unwrap()
    };
    assert_eq!(complete(), TaskUpdate::Applied);
    assert_eq!(complete(), TaskUpdate::Lost(TaskLost::Stale));
    let task = store.task_get(&params::task_id("q", "a")).unwrap().unwrap();
    assert_eq!((task.state, task.result), (TaskState::Done, Some(result)));
    skew.advance(Duration::from_secs(3600));
    assert_eq!(
        store
            .task_purge(&TaskPurgeParams {
                queue: q.clone(),
                state: TaskState::Done,
                older_than: Duration::from_secs(60)
            })
            .unwrap(),
        1
    );
}

fn task_lifecycle_on_the_server_clock() {
    let skew = leasehold_backend::ClockSkew::default();
    let url = Server::shared().url(&Server::fresh_schema());
    let store = PostgresBackend::open(
        &url,
        PostgresOptions {
            skew: skew.clone(),
            ..PostgresOptions::default()
        },
    )
    .unwrap();
    let q: QueueName = params::name("q");
    add_a_then_conflict(&store, &q);

    let ttl = Duration::from_secs(30);
    let c1 = store.task_claim(&claim_params("q", ttl)).unwrap().unwrap();
    assert_eq!((c1.attempt, c1.token), (1, Token(1)));
    assert!(store.task_claim(&claim_params("q", ttl)).unwrap().is_none());
    // The claim expires on the (skewed) server clock and is claimable again.
    skew.advance(Duration::from_secs(31));
    assert_eq!(
        store
            .task_heartbeat(&TaskHeartbeatParams {
                task: c1.task_ref(),
                ttl
            })
            .unwrap(),
        TaskUpdate::Lost(TaskLost::Stale)
    );
    let c2 = store.task_claim(&claim_params("q", ttl)).unwrap().unwrap();
    assert_eq!((c2.attempt, c2.token), (2, Token(2)));
    // The late worker's result is refused; the current one's accepted once.
    assert_eq!(
        store
            .task_complete(&TaskCompleteParams {
                task: c1.task_ref(),
                result: None
            })
            .unwrap(),
        TaskUpdate::Lost(TaskLost::Stale)
    );
    let failed = store
        .task_fail(&TaskFailParams {
            task: c2.task_ref(),
            error: "boom".into(),
            retry: Retry::Backoff,
        })
        .unwrap();
    let TaskFail::Retrying { available_at } = failed else {
        panic!("{failed:?}")
    };
    assert!(available_at > SystemTime::now());
    assert!(
        store.task_claim(&claim_params("q", ttl)).unwrap().is_none(),
        "backing off"
    );
    skew.advance(Duration::from_secs(10));
    let c3 = store.task_claim(&claim_params("q", ttl)).unwrap().unwrap();
    assert_eq!((c3.attempt, c3.token), (3, Token(3)));
    // Attempts used up: dead, then revived with a fresh count, tokens grow.
    assert_eq!(
        store
            .task_fail(&TaskFailParams {
                task: c3.task_ref(),
                error: "boom again".into(),
                retry: Retry::Backoff
            })
            .unwrap(),
        TaskFail::Dead
    );
    let task = store.task_get(&params::task_id("q", "a")).unwrap().unwrap();
    assert_eq!((task.state, task.expirations, task.failures), (TaskState::Dead, 1, 2));
    assert_eq!(
        store.task_retry(&params::task_id("q", "a")).unwrap(),
        leasehold_backend::TaskRetry::Revived
    );
    let c4 = store.task_claim(&claim_params("q", ttl)).unwrap().unwrap();
    assert_eq!((c4.attempt, c4.token), (1, Token(4)));
    assert_eq!(store.task_release(&c4.task_ref()).unwrap(), TaskUpdate::Applied);
    let c5 = store.task_claim(&claim_params("q", ttl)).unwrap().unwrap();
    assert_eq!(
        (c5.attempt, c5.token),
        (1, Token(5)),
        "a release does not charge the attempt"
    );
    complete_once_then_purge(&store, &skew, &q, &c5);
}

fn claim_order_is_priority_then_available_at_then_insertion() {
    let (_, store) = fresh();
    let now = SystemTime::now() - Duration::from_secs(10);
    let task = |id: &str, priority: i64, ago: u64| TaskAddParams {
        queue: params::name("q"),
        id: params::name(id),
        payload: serde_json::Value::Null,
        priority,
        available: Available::At(now - Duration::from_secs(ago)),
        max_attempts: 3,
    };
    store
        .task_add(&[
            task("low", 0, 5),
            task("high", 9, 0),
            task("old", 0, 9),
            task("old-2", 0, 9),
        ])
        .unwrap();
    let order: Vec<String> =
        std::iter::from_fn(|| store.task_claim(&claim_params("q", Duration::from_secs(60))).unwrap())
            .map(|c| c.id.as_str().to_owned())
            .collect();
    assert_eq!(order, ["high", "old", "old-2", "low"]);
}

/// A LISTEN connection on the store's channel, and what it received so far.
fn listen(schema: &str) -> (postgres::Client, impl Fn(&mut postgres::Client) -> Vec<String>) {
    let mut listener = Server::shared().client();
    listener
        .batch_execute(&format!("LISTEN \"leasehold.{schema}\""))
        .unwrap();
    let received = |listener: &mut postgres::Client| -> Vec<String> {
        // A round trip reads what arrived before it.
        listener.batch_execute("SELECT 1").unwrap();
        let mut n = listener.notifications();
        let mut it = n.iter();
        std::iter::from_fn(|| it.next().unwrap().map(|m| m.payload().to_owned())).collect()
    };
    (listener, received)
}

fn open_skewed(url: &str, skew: &leasehold_backend::ClockSkew) -> PostgresBackend {
    PostgresBackend::open(
        url,
        PostgresOptions {
            skew: skew.clone(),
            ..PostgresOptions::default()
        },
    )
    .unwrap()
}

/// A release notifies the name's waiters, and so does an acquisition that
/// removes an expired waiter registration (those behind it may fit now);
/// one that finds none sends nothing.
fn a_release_and_an_expired_waiter_notify_the_name() {
    let schema = Server::fresh_schema();
    let skew = leasehold_backend::ClockSkew::default();
    let store = open_skewed(&Server::shared().url(&schema), &skew);
    let (mut listener, received) = listen(&schema);
    let LeaseAcquire::Acquired(g) = store.lease_acquire(&params::acquire("job")).unwrap() else {
        panic!("held")
    };
    assert_eq!(received(&mut listener), Vec::<String>::new(), "a plain grant");
    store
        .waiter_enqueue(&params::enqueue("job", leasehold_backend::Mode::Exclusive))
        .unwrap();
    store.lease_release(&params::release("job", g.token)).unwrap();
    assert_eq!(received(&mut listener), ["lease:job"], "the release");
    skew.advance(params::WAITER_TTL + Duration::from_secs(1));
    let LeaseAcquire::Acquired(_) = store.lease_acquire(&params::acquire("job")).unwrap() else {
        panic!("held by an expired waiter")
    };
    assert_eq!(received(&mut listener), ["lease:job"], "the expired waiter's removal");
}

/// The history of a name keeps its newest `HISTORY_PER_NAME` entries.
fn history_keeps_the_newest_entries_of_a_name() {
    let (_, store) = fresh();
    for _ in 0..501 {
        let LeaseAcquire::Acquired(g) = store.lease_acquire(&params::acquire("busy")).unwrap() else {
            panic!("held")
        };
        store.lease_release(&params::release("busy", g.token)).unwrap();
    }
    let history = store
        .lease_history(&leasehold_backend::LeaseHistoryParams {
            name: params::name("busy"),
            limit: 5000,
        })
        .unwrap();
    let keep = leasehold_backend::plan::HISTORY_PER_NAME as usize;
    assert_eq!(history.len(), keep, "1002 events");
    assert_eq!(history[0].token, Some(Token(501)), "newest first");
    assert_eq!(history[keep - 1].token, Some(Token(2)), "the oldest kept: granted 2");
}

/// A claim that returns expired claims to the queue notifies the queue's
/// waiters, on its commit, and only then: one that finds nothing expired
/// sends nothing.
fn a_claim_that_returns_expired_claims_notifies_the_queue() {
    let schema = Server::fresh_schema();
    let skew = leasehold_backend::ClockSkew::default();
    let store = open_skewed(&Server::shared().url(&schema), &skew);
    add(&store, "q", ["a".to_owned(), "b".to_owned()]);
    let (mut listener, received) = listen(&schema);

    let first = store
        .task_claim(&claim_params("q", Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!(received(&mut listener), Vec::<String>::new(), "nothing expired yet");
    skew.advance(Duration::from_secs(11));
    let second = store
        .task_claim(&claim_params("q", Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.id.as_str(), second.id.as_str()),
        ("a", "a"),
        "the expired claim comes first in claim order"
    );
    assert_eq!(received(&mut listener), ["queue:q"]);
}

/// The conformance suite's server orders text bytewise already (`C.UTF-8`);
/// in a database whose collation does not (ICU's `en-US`: `a` < `B` <
/// `é` < `z`), keys are still listed and bounded bytewise.
fn records_are_listed_bytewise_whatever_the_database_collation() {
    let db = Server::fresh_schema();
    psql(&format!(
        "CREATE DATABASE {db} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
    ));
    let url = Server::shared()
        .url("leasehold")
        .replace("/postgres?", &format!("/{db}?"));
    let store = open(&url);
    let keys = ["slot/a/z", "slot/a/\u{e9}", "slot/a/B", "slot/a/a", "slot/a0", "slot/B"];
    let changes = keys
        .iter()
        .map(|k| RecordChange::Put {
            key: RecordKey::new(*k).unwrap(),
            body: String::new(),
            expect: Expect::Absent,
        })
        .collect();
    store.record_write(&RecordWriteParams::new(changes)).unwrap();
    let list = |after: Option<&str>| -> Vec<String> {
        let params = RecordListParams {
            prefix: "slot/a/".into(),
            after: after.map(|k| RecordKey::new(k).unwrap()),
            descending: false,
            limit: 100,
        };
        store
            .record_list(&params)
            .unwrap()
            .into_iter()
            .map(|r| r.key.as_str().to_owned())
            .collect()
    };
    assert_eq!(list(None), ["slot/a/B", "slot/a/a", "slot/a/z", "slot/a/\u{e9}"]);
    assert_eq!(list(Some("slot/a/a")), ["slot/a/z", "slot/a/\u{e9}"]);
}

/// A record write's `not_after` is judged on the server's clock once the
/// write holds its turn (the row lock of `record_version`), not when it
/// was sent: a write sent well before its limit, held behind another
/// transaction until the limit passed, ends `TooLate` and writes nothing.
fn a_record_write_that_waited_for_its_turn_is_judged_when_applied() {
    use leasehold_backend::RecordWrite;
    let schema = Server::fresh_schema();
    let store = open(&Server::shared().url(&schema));
    let key = RecordKey::new("slot/late").unwrap();
    let mut holder = Server::shared().client();
    let mut turn = holder.transaction().unwrap();
    turn.batch_execute(&format!(
        "UPDATE \"{schema}\".record_version SET last = last WHERE id = 1"
    ))
    .unwrap();
    let not_after = store.record_clock().unwrap().at + Duration::from_secs(2);
    let outcome = thread::scope(|s| {
        let writer = s.spawn(|| {
            store.record_write(&RecordWriteParams {
                changes: vec![RecordChange::Put {
                    key: key.clone(),
                    body: "{}".into(),
                    expect: Expect::Absent,
                }],
                not_after: Some(not_after),
            })
        });
        let mut watcher = Server::shared().client();
        let waiting = leasehold_testkit::wait::wait_until(Duration::from_secs(10), || {
            watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%record_version%'",
                    &[],
                )
                .unwrap()
                .get::<_, i64>(0)
                == 1
        });
        assert!(waiting.is_some(), "the write never waited for the lock");
        assert!(
            store.record_clock().unwrap().at < not_after,
            "the write reached the lock after its limit: this test proves nothing on so slow a host"
        );
        let passed = leasehold_testkit::wait::wait_until(Duration::from_secs(10), || {
            store.record_clock().unwrap().at > not_after + Duration::from_millis(100)
        });
        assert!(passed.is_some(), "the server's clock never passed the limit");
        turn.commit().unwrap();
        writer.join().unwrap()
    });
    assert!(
        matches!(outcome, Ok(RecordWrite::TooLate { now }) if now > not_after),
        "a write applied after its not_after ended {outcome:?}"
    );
    assert_eq!(store.record_get(&key).unwrap(), None, "a write too late was applied");
}
