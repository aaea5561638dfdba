//! What the Redis store promises beyond the conformance suite, on real
//! `redis-server`s started by the test kit. Keys are looked at through the
//! test kit's own RESP client, which shares no code with the store's.

use std::time::{Duration, Instant};

use leasehold_backend::{Backend, ErrorKind, LeaseAcquire, LeaseAcquireParams, Token};
use leasehold_backend_tests::{contention, params};
use leasehold_redis::{RedisBackend, RedisUrl};
use leasehold_testkit::redis::{Durability, GRANTED, PASSWORD, RedisConfig, RedisServer, Reply, USER};

/// The races every store with many clients runs
/// (`leasehold_backend_tests::contention`), on clients of one prefix.
fn racing_clients_never_hold_one_name_at_once() {
    let server = RedisServer::start();
    contention::racing_clients_never_hold_one_name_at_once(&|| open(&server.url()).expect("open"));
}

fn a_crowd_of_waiters_never_holds_up_the_holders_renewals() {
    let server = RedisServer::start();
    contention::a_crowd_of_waiters_never_holds_up_the_holders_renewals(&|| open(&server.url()).expect("open"));
}

fn a_bump_raises_every_token_after_it_while_names_are_made() {
    let server = RedisServer::start();
    contention::a_bump_raises_every_token_after_it_while_names_are_made(&|| open(&server.url()).expect("open"));
}

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        racing_clients_never_hold_one_name_at_once,
        a_crowd_of_waiters_never_holds_up_the_holders_renewals,
        a_bump_raises_every_token_after_it_while_names_are_made,
        tokens_acknowledged_before_a_kill_9_are_never_issued_again,
        a_server_that_can_lose_grants_is_refused_unless_relaxed,
        every_write_waits_for_its_replicas_and_says_when_they_are_missing,
        a_replica_promoted_after_the_primary_dies_has_every_acknowledged_grant,
        a_damaged_name_is_reported_and_left_as_it_is,
        an_acl_user_works_under_its_prefix_with_a_password_from_a_file,
        history_is_capped_per_name,
        tls_trusts_only_the_ca_it_is_given,
        a_server_nobody_answers_for_is_unavailable_with_what_to_do,
        a_waiter_is_woken_by_the_release_not_by_its_poll,
    ]]);
}

fn open(url: &str) -> Result<RedisBackend, leasehold_backend::BackendError> {
    RedisBackend::open(&RedisUrl::parse(url).expect("a URL"))
}

fn acquire(n: &str, ttl: Duration) -> LeaseAcquireParams {
    LeaseAcquireParams {
        ttl,
        ..params::acquire(n)
    }
}

/// Acquire `n` (free) and release it: its token.
fn cycle(store: &RedisBackend, n: &str) -> Token {
    let grant = match store
        .lease_acquire(&acquire(n, Duration::from_secs(30)))
        .expect("acquire")
    {
        LeaseAcquire::Acquired(g) => g,
        LeaseAcquire::Held(h) => panic!("{n} is held: {h:?}"),
    };
    store.lease_release(&params::release(n, grant.token)).expect("release");
    grant.token
}

/// A server killed with SIGKILL and started again on its append-only
/// file: every token acknowledged before is below every token after.
/// (Page cache outlives the process, so this is the crash of Redis, not
/// of the machine: docs/REDIS.md.)
fn tokens_acknowledged_before_a_kill_9_are_never_issued_again() {
    let mut server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    let before: Vec<Token> = (0..20).map(|_| cycle(&store, "job")).collect();
    server.kill9();
    server.restart();
    let store = open(&server.url()).expect("open again");
    let after = cycle(&store, "job");
    let highest = before.iter().max().copied().expect("tokens");
    assert!(
        after > highest,
        "token {after} issued again after a crash (had {highest})"
    );
}

fn a_server_that_can_lose_grants_is_refused_unless_relaxed() {
    for (durability, says) in [
        (Durability::None, "appendonly no"),
        (Durability::EverySec, "appendfsync everysec"),
    ] {
        let server = RedisServer::start_with(&RedisConfig {
            durability,
            ..RedisConfig::default()
        });
        let e = open(&server.url()).expect_err("refused");
        let text = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{text}");
        assert!(text.contains(says) && text.contains("durability=relaxed"), "{text}");
        // Nothing was written by the refused open.
        let keys = server.command(&["DBSIZE"]).expect("DBSIZE");
        assert_eq!(keys, Reply::Integer(0), "a refused open wrote keys");
        let relaxed = open(&format!("{}?durability=relaxed", server.url())).expect("relaxed opens");
        let info = relaxed.describe().expect("describe");
        assert!(
            info.warnings.iter().any(|(_, w)| w.contains(says)),
            "doctor does not warn: {:?}",
            info.warnings
        );
    }
}

fn every_write_waits_for_its_replicas_and_says_when_they_are_missing() {
    let primary = RedisServer::start();
    let lonely = open(&format!("{}?wait=1&prefix=lonely", primary.url())).expect("open");
    let e = lonely
        .lease_acquire(&acquire("job", Duration::from_secs(30)))
        .expect_err("no replica confirms");
    assert!(e.to_string().contains("0 of the 1 replicas"), "{e}");
    let info = lonely.describe().expect("describe");
    assert!(
        !info.problems.is_empty(),
        "doctor finds nothing wrong with wait=1 and no replica"
    );
    let replica = RedisServer::start_replica_of(&primary, &RedisConfig::default());
    replica.wait_in_sync(&primary, Duration::from_secs(30));
    let store = open(&format!("{}?wait=1", primary.url())).expect("open");
    let token = cycle(&store, "job");
    assert_eq!(token, Token(1));
}

/// The primary killed with `wait=1`: the promoted replica holds every grant
/// the store acknowledged, so the next token is above all of them.
fn a_replica_promoted_after_the_primary_dies_has_every_acknowledged_grant() {
    let mut primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary, &RedisConfig::default());
    replica.wait_in_sync(&primary, Duration::from_secs(30));
    let store = open(&format!("{}?wait=1", primary.url())).expect("open");
    let acknowledged: Vec<Token> = (0..30).map(|_| cycle(&store, "job")).collect();
    primary.kill9();
    replica.promote();
    let store = open(&format!("{}?wait=0", replica.url())).expect("open the promoted replica");
    let next = cycle(&store, "job");
    let highest = acknowledged.iter().max().copied().expect("tokens");
    assert!(
        next > highest,
        "the promoted replica issued {next} again (acknowledged up to {highest})"
    );
}

fn a_damaged_name_is_reported_and_left_as_it_is() {
    let server = RedisServer::start();
    let store = open(&format!("{}?prefix=dmg", server.url())).expect("open");
    cycle(&store, "job");
    server
        .command(&["HSET", "dmg:name:job", "s", "{not json"])
        .expect("damage");
    let e = store
        .lease_acquire(&acquire("job", Duration::from_secs(5)))
        .expect_err("a damaged name");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert!(e.to_string().contains("dmg:name:job"), "{e}");
    let left = server.command(&["HGET", "dmg:name:job", "s"]).expect("HGET");
    assert_eq!(left.text(), Some("{not json"), "the damaged field was changed");
    // A key of another type where a name's hash goes: corrupt, untouched.
    server.command(&["SET", "dmg:name:other", "a string"]).expect("SET");
    let e = store
        .lease_acquire(&acquire("other", Duration::from_secs(5)))
        .expect_err("a string where a hash goes");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    let left = server.command(&["GET", "dmg:name:other"]).expect("GET");
    assert_eq!(left.text(), Some("a string"), "the foreign key was changed");
}

fn an_acl_user_works_under_its_prefix_with_a_password_from_a_file() {
    let server = RedisServer::start_with(&RedisConfig {
        acl: true,
        ..RedisConfig::default()
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("password");
    put(&file, &format!("{PASSWORD}\n"));
    let at = server.url().replacen("://", &format!("://{USER}@"), 1);
    let prefix = GRANTED.trim_end_matches(':');
    let store = open(&format!("{at}?prefix={prefix}&password-file={}", file.display())).expect("open");
    assert_eq!(cycle(&store, "job"), Token(1));
    // Outside its keys: refused by the server, said as such.
    let outside = open(&format!("{at}?prefix=other&password-file={}", file.display())).expect("open");
    let e = outside
        .lease_acquire(&acquire("job", Duration::from_secs(5)))
        .expect_err("outside the ACL");
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    // A wrong password; a file that is not there.
    let wrong = dir.path().join("wrong");
    put(&wrong, "wrong\n");
    let e = open(&format!("{at}?password-file={}", wrong.display())).expect_err("a wrong password");
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    let e = open(&format!("{at}?password-file=/nonexistent/pw")).expect_err("no file");
    assert!(
        e.to_string().contains("password-file=/nonexistent/pw: no such file"),
        "{e}"
    );
}

/// `rediss://` with the test CA works; with another CA the connection is
/// refused as unavailable, saying it was TLS; `redis://` to a TLS-only
/// server is not answered (a plain server's reply never comes).
fn tls_trusts_only_the_ca_it_is_given() {
    let server = RedisServer::start_with(&RedisConfig {
        tls: true,
        ..RedisConfig::default()
    });
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let pki = server.pki();
    let store = open(&format!("{url}?cacert={}", pki.ca().display())).expect("open over TLS");
    assert_eq!(cycle(&store, "job"), Token(1));
    let e = open(&format!("{url}?cacert={}", pki.other_ca().display())).expect_err("a foreign CA");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    let e = open(&format!("{url}?cacert=/nonexistent/ca.pem")).expect_err("no CA file");
    assert!(e.to_string().contains("cacert=/nonexistent/ca.pem"), "{e}");
}

/// A port nobody listens on, and a server stopped under an open store:
/// unavailable, naming where, never a panic or a hang.
fn a_server_nobody_answers_for_is_unavailable_with_what_to_do() {
    let port = leasehold_testkit::port::free();
    let e = open(&format!("redis://127.0.0.1:{port}")).expect_err("nobody there");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    let mut server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    cycle(&store, "job");
    server.stop();
    let e = store
        .lease_acquire(&acquire("job", Duration::from_secs(5)))
        .expect_err("stopped");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("not reported as done"), "{e}");
}

/// A password file (the test's own; nothing to keep atomic).
fn put(path: &std::path::Path, text: &str) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).expect("create the password file");
    f.write_all(text.as_bytes()).expect("write the password");
}

fn history_is_capped_per_name() {
    let server = RedisServer::start_with(&RedisConfig {
        durability: Durability::None,
        ..RedisConfig::default()
    });
    let store = open(&format!("{}?durability=relaxed&prefix=h", server.url())).expect("open");
    for _ in 0..600 {
        cycle(&store, "job");
    }
    let len = server.command(&["LLEN", "h:history:job"]).expect("LLEN");
    // 1,200 entries written (granted, released); the newest 1,000 kept.
    assert_eq!(len, Reply::Integer(1000));
    let newest = server.command(&["LINDEX", "h:history:job", "-1"]).expect("LINDEX");
    assert!(
        newest
            .text()
            .is_some_and(|e| e.contains("\"released\"") && e.contains("\"token\":600")),
        "{newest:?}"
    );
}

/// A waiter polls at most every 10 s here (its wait bounded by the
/// holder's TTL of 60 s); it holds the name well before that because the
/// release published a message.
fn a_waiter_is_woken_by_the_release_not_by_its_poll() {
    let server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    let grant = match store
        .lease_acquire(&acquire("job", Duration::from_secs(60)))
        .expect("acquire")
    {
        LeaseAcquire::Acquired(g) => g,
        LeaseAcquire::Held(h) => panic!("held: {h:?}"),
    };
    let waiter = {
        let url = server.url();
        std::thread::spawn(move || {
            let store = open(&url).expect("open");
            let topic = leasehold_backend::WaitTopic::lease(&params::name("job"));
            let began = Instant::now();
            store
                .wait_for_change(&topic, Duration::from_secs(10))
                .expect("first wait");
            store.wait_for_change(&topic, Duration::from_secs(10)).expect("wait");
            began.elapsed()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    store
        .lease_release(&params::release("job", grant.token))
        .expect("release");
    let slept = waiter.join().expect("waiter");
    assert!(
        slept < Duration::from_secs(8),
        "the waiter slept {slept:?}: not woken by the release"
    );
}
