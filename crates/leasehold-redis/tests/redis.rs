//! What the Redis store promises beyond the conformance suite, on real
//! `redis-server`s started by the test kit. Keys are looked at through the
//! test kit's own RESP client, which shares no code with the store's.

use std::time::{Duration, Instant};

use leasehold_backend::{
    Backend, ErrorKind, GrantId, LeaseAcquire, LeaseAcquireParams, LeaseRelease, LeaseReleaseParams, LeaseRenew,
    LostReason, Mode, Token, WaitTopic,
};
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
        a_damaged_counter_is_corrupt_at_once_and_left_as_it_is,
        a_server_that_never_answers_times_out_in_words,
        a_version_1_client_certificate_is_named_as_such,
        an_acl_user_works_under_its_prefix_with_a_password_from_a_file,
        history_is_capped_per_name,
        tls_trusts_only_the_ca_it_is_given,
        a_server_nobody_answers_for_is_unavailable_with_what_to_do,
        a_waiter_is_woken_by_the_release_not_by_its_poll,
        eviction_and_unsynced_rewrites_are_refused_unless_relaxed,
        a_replica_is_refused_even_when_relaxed,
        a_setting_changed_under_a_holder_refuses_its_next_write,
        a_key_of_another_type_in_a_commit_means_nothing_is_written,
        the_documented_acl_runs_the_store_end_to_end,
        a_user_without_channel_rights_writes_once_per_call_and_its_waiters_poll,
        only_changes_of_what_waiters_wait_on_are_announced,
        a_waiter_keeps_one_subscription_for_all_its_waits,
        a_release_decides_on_its_handles_last_commit_unless_the_name_or_the_time_moved_on,
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
    // The certificate problem in words, what to pass, and no hint that
    // the server may be down (issue 41).
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("TLS failed: the certificate of Redis at 127.0.0.1:")
            && text.contains("was not accepted: it is not signed by a CA among the trusted roots")
            && text.contains("pass cacert=PATH"),
        "{e}"
    );
    assert!(
        !text.contains("redis-server running") && !text.contains("peer") && !text.contains("UnknownIssuer"),
        "{e}"
    );
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

/// A value no leasehold writes at a key the store's scripts count with —
/// the store's token floor, a name's version, the records' version
/// counter: corrupt at the first call (it spun 24 s and blamed races with
/// other clients that never were), naming the key and the value, and the
/// key left as found.
fn a_damaged_counter_is_corrupt_at_once_and_left_as_it_is() {
    let server = RedisServer::start();
    let store = open(&format!("{}?prefix=cnt", server.url())).expect("open");
    let corrupt_at_once = |what: &str, call: &dyn Fn() -> Result<(), leasehold_backend::BackendError>, says: &str| {
        let began = Instant::now();
        let e = call().expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}");
        assert!(e.to_string().contains(says), "{what}: {e}");
        assert!(!e.to_string().contains("races"), "{what}: {e}");
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{what}: {:?}",
            began.elapsed()
        );
    };
    let acquire_new = |n: &str| store.lease_acquire(&acquire(n, Duration::from_secs(5))).map(drop);
    server.command(&["SET", "cnt:floor", "ten"]).expect("SET");
    corrupt_at_once(
        "a floor that is no number",
        &|| acquire_new("fresh"),
        "cnt:floor holds \"ten\", not a token floor",
    );
    corrupt_at_once(
        "a floor that is no number, on a bump",
        &|| Backend::tokens_bump(&store, &leasehold_backend::TokensBumpParams { by: 5 }).map(drop),
        "cnt:floor holds",
    );
    assert_eq!(server.command(&["GET", "cnt:floor"]).expect("GET").text(), Some("ten"));
    server.command(&["SET", "cnt:floor", "-3"]).expect("SET");
    corrupt_at_once("a negative floor", &|| acquire_new("fresh"), "holds \"-3\"");
    server.command(&["DEL", "cnt:floor"]).expect("DEL");
    cycle(&store, "job");
    server.command(&["HSET", "cnt:name:job", "v", "x1"]).expect("HSET");
    corrupt_at_once(
        "a version that is no number",
        &|| acquire_new("job"),
        "field `v` holds \"x1\"",
    );
    assert_eq!(
        server.command(&["HGET", "cnt:name:job", "v"]).expect("HGET").text(),
        Some("x1")
    );
    server.command(&["SET", "cnt:record-version", "1.5"]).expect("SET");
    let key = leasehold_backend::RecordKey::new("sched/a").expect("a key");
    let write = leasehold_backend::RecordWriteParams {
        changes: vec![leasehold_backend::RecordChange::Put {
            key,
            body: "{}".to_owned(),
            expect: leasehold_backend::Expect::Anything,
        }],
        not_after: None,
    };
    corrupt_at_once(
        "a record version counter that is no counter",
        &|| leasehold_backend::RecordBackend::record_write(&store, &write).map(drop),
        "cnt:record-version holds \"1.5\", not a version counter",
    );
    assert_eq!(
        server.command(&["GET", "cnt:record-version"]).expect("GET").text(),
        Some("1.5")
    );
}

/// A server that takes the connection and never answers (a listener
/// nobody accepts on: the kernel completes the handshake): the store's
/// 10 s timeout, said as such — not the system's "Resource temporarily
/// unavailable (os error 11)", nor a hint that the server is not running.
/// The one test that waits the whole 10 s.
fn a_server_that_never_answers_times_out_in_words() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = blackhole.local_addr().expect("address").port();
    let began = Instant::now();
    let e = open(&format!("redis://127.0.0.1:{port}")).expect_err("no answer");
    let waited = began.elapsed();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "Redis at 127.0.0.1:{port} did not answer: timed out after 10 s"
        )),
        "{e}"
    );
    assert!(
        !text.contains("os error") && !text.contains("redis-server running"),
        "{e}"
    );
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    drop(blackhole);
}

/// A client certificate of X.509 version 1 (what `openssl x509 -req`
/// makes without extensions; OpenSSL, and redis-cli, take it): rustls'
/// verifier (webpki) reads only version 3, so it cannot be used — said of
/// `cert=` with how to make a version 3 one, not blamed on `key=`, no
/// "peer" certificate, no Rust debug output.
fn a_version_1_client_certificate_is_named_as_such() {
    let server = RedisServer::start_with(&RedisConfig {
        tls: true,
        ..RedisConfig::default()
    });
    let pki = server.pki();
    let dir = tempfile::tempdir().expect("temp dir");
    let (csr, cert, key) = (
        dir.path().join("v1.csr"),
        dir.path().join("v1.crt"),
        dir.path().join("v1.key"),
    );
    let openssl = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req".as_ref(),
        "-newkey".as_ref(),
        "ec".as_ref(),
        "-pkeyopt".as_ref(),
        "ec_paramgen_curve:P-256".as_ref(),
        "-nodes".as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
        "-subj".as_ref(),
        "/CN=v1".as_ref(),
    ]);
    let ca_key = pki.ca().with_file_name("ca.key");
    openssl(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-CA".as_ref(),
        pki.ca().as_os_str(),
        "-CAkey".as_ref(),
        ca_key.as_os_str(),
        "-set_serial".as_ref(),
        "7".as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-out".as_ref(),
        cert.as_os_str(),
    ]);
    let url = format!(
        "{}?cacert={}&cert={}&key={}",
        server.url(),
        pki.ca().display(),
        cert.display(),
        key.display()
    );
    let e = open(&url).expect_err("a version 1 certificate");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("cert={} is an X.509 version 1 certificate", cert.display()))
            && text.contains("reads only version 3")
            && text.contains("-extfile"),
        "{e}"
    );
    assert!(
        !text.contains("key=") && !text.contains("peer") && !text.contains("Other(") && !text.contains("Unsupported"),
        "{e}"
    );
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
    let waiter = waiter_on_job(server.url());
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

/// A commit is announced on the name's channel only when it changes what
/// waiters wait on — a grant made or ended, a waiter queued or gone — not
/// for a renewal, nor for a waiter's refresh of its place (issue 41: each
/// of 200 idle waiters' refreshes woke the listening ones, which then
/// read the whole name: several readings a second). Counted by the
/// server: PUBLISH in its command statistics, which count the scripts'
/// calls.
fn only_changes_of_what_waiters_wait_on_are_announced() {
    let server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    let published = || info(&server, "commandstats", "cmdstat_publish:calls=").unwrap_or(0);
    let token = take(&store, "job", Duration::from_secs(60));
    let ticket = store
        .waiter_enqueue(&leasehold_backend::WaiterEnqueueParams {
            ttl: Duration::from_secs(10),
            ..params::enqueue("job", Mode::Exclusive)
        })
        .expect("enqueue");
    let before = published();
    assert!(
        before >= 2,
        "the grant and the waiter queued were not announced ({before})"
    );
    for _ in 0..3 {
        match store.lease_renew(&params::renew("job", token)).expect("renew") {
            LeaseRenew::Renewed(_) => {}
            LeaseRenew::Lost(lost) => panic!("renew: {lost:?}"),
        }
    }
    // Held, with a TTL for its place that makes the refresh a write (the
    // place it has is less than half of it).
    let refreshed = LeaseAcquireParams {
        ticket: Some(ticket),
        waiter_ttl: Duration::from_secs(60),
        ..acquire("job", Duration::from_secs(60))
    };
    let version = |store: &RedisBackend| store.version(&params::name("job")).expect("version");
    let written = version(&store);
    assert!(matches!(
        store.lease_acquire(&refreshed).expect("attempt"),
        LeaseAcquire::Held(_)
    ));
    assert_ne!(
        version(&store),
        written,
        "the waiter's refresh wrote nothing: the test proves nothing"
    );
    assert_eq!(published(), before, "a renewal or a waiter's refresh was announced");
    store.lease_release(&params::release("job", token)).expect("release");
    assert_eq!(published(), before + 1, "the release was not announced");
}

/// A waiter waits in slices of its poll interval (the library's 100 ms);
/// its subscription is made once and kept for all of them, not made for
/// each (a connection, a SUBSCRIBE and a read of the version ten times a
/// second for every listening waiter). Counted by the server: connections
/// received over 30 waits of 50 ms on one topic — at most two (one for
/// the store's calls, one subscription); they were one per wait. The kept
/// subscription still wakes the waiter: `a_waiter_is_woken_by_the_release_not_by_its_poll`.
fn a_waiter_keeps_one_subscription_for_all_its_waits() {
    let server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    take(&store, "job", Duration::from_secs(60));
    let connections = || info(&server, "stats", "total_connections_received:").expect("a count of connections");
    let topic = WaitTopic::lease(&params::name("job"));
    let before = connections();
    for _ in 0..30 {
        store.wait_for_change(&topic, Duration::from_millis(50)).expect("wait");
    }
    let made = connections() - before;
    assert!(made <= 2, "30 waits on one topic made {made} connections");
}

/// The count after `field` in the server's `INFO section` (up to a comma
/// or the line's end), if the section has the field.
fn info(server: &RedisServer, section: &str, field: &str) -> Option<u64> {
    let Reply::Bulk(text) = server.command(&["INFO", section]).expect("INFO") else {
        panic!("INFO answered no text")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split(',').next()?.trim().parse().ok())
}

/// A waiter on `job` on its own connection to `url`: it waits twice (the
/// first wait returns at once, setting its cursor) and answers how long it
/// slept — seconds when no notification woke it.
fn waiter_on_job(url: String) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let store = open(&url).expect("open");
        let topic = WaitTopic::lease(&params::name("job"));
        let began = Instant::now();
        store
            .wait_for_change(&topic, Duration::from_secs(10))
            .expect("first wait");
        store.wait_for_change(&topic, Duration::from_secs(10)).expect("wait");
        began.elapsed()
    })
}

/// Acquire `n` (free): its grant's token.
fn take(store: &RedisBackend, n: &str, ttl: Duration) -> Token {
    match store.lease_acquire(&acquire(n, ttl)).expect("acquire") {
        LeaseAcquire::Acquired(g) => g.token,
        LeaseAcquire::Held(h) => panic!("{n} is held: {h:?}"),
    }
}

/// Every key of the server with its value as the test kit reads it: what
/// a refused call must leave as it was.
fn dump(server: &RedisServer) -> Vec<(String, String)> {
    let Reply::Array(keys) = server.command(&["KEYS", "*"]).expect("KEYS") else {
        panic!("KEYS answered no array")
    };
    let mut out: Vec<(String, String)> = keys
        .iter()
        .map(|k| {
            let k = k.text().expect("a key").to_owned();
            let kind = server.command(&["TYPE", &k]).expect("TYPE");
            let value = match kind.text() {
                Some("hash") => server.command(&["HGETALL", &k]),
                Some("list") => server.command(&["LRANGE", &k, "0", "-1"]),
                Some("set") => server.command(&["SMEMBERS", &k]),
                Some("zset") => server.command(&["ZRANGE", &k, "0", "-1"]),
                _ => server.command(&["GET", &k]),
            };
            (k, format!("{value:?}"))
        })
        .collect();
    out.sort();
    out
}

fn config_set(server: &RedisServer, setting: &str, value: &str) {
    server
        .command(&["CONFIG", "SET", setting, value])
        .unwrap_or_else(|e| panic!("CONFIG SET {setting} {value}: {e}"));
}

/// Issue 39: a server that evicts any key when full forgot a live lease
/// (the next acquire got token 1), and one that skips fsync during an AOF
/// rewrite was never checked. Each is refused naming its setting, opens
/// with durability=relaxed with `doctor` warning; a volatile-* policy
/// (leasehold's keys have no TTL) opens.
fn eviction_and_unsynced_rewrites_are_refused_unless_relaxed() {
    let server = RedisServer::start();
    config_set(&server, "maxmemory", "100mb");
    for (settings, says, line) in [
        (
            &[("maxmemory-policy", "allkeys-lru")][..],
            "maxmemory-policy allkeys-lru",
            "eviction",
        ),
        (
            &[("maxmemory-policy", "allkeys-random")][..],
            "maxmemory-policy allkeys-random",
            "eviction",
        ),
        (
            &[("maxmemory-policy", "noeviction"), ("no-appendfsync-on-rewrite", "yes")][..],
            "no-appendfsync-on-rewrite yes",
            "rewrite",
        ),
    ] {
        for (setting, value) in settings {
            config_set(&server, setting, value);
        }
        let e = open(&server.url()).expect_err(says);
        let text = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{text}");
        assert!(
            text.contains(says) && text.contains("durability=relaxed") && text.contains("reissue"),
            "{text}"
        );
        assert_eq!(
            server.command(&["DBSIZE"]),
            Ok(Reply::Integer(0)),
            "a refused open wrote"
        );
        let relaxed = open(&format!("{}?durability=relaxed", server.url())).expect("relaxed opens");
        let info = relaxed.describe().expect("describe");
        assert!(
            info.warnings.iter().any(|(k, w)| k == line && w.contains(says)),
            "doctor does not warn of {says}: {:?}",
            info.warnings
        );
    }
    config_set(&server, "no-appendfsync-on-rewrite", "no");
    config_set(&server, "maxmemory-policy", "volatile-lru");
    let store = open(&server.url()).expect("volatile-lru evicts no leasehold key");
    assert_eq!(cycle(&store, "job"), Token(1));
    let ttl = server.command(&["TTL", "leasehold:name:job"]).expect("TTL");
    assert_eq!(
        ttl,
        Reply::Integer(-1),
        "a leasehold key has a TTL: volatile-* could evict it"
    );
}

/// Issue 39: a URL naming a replica was accepted, and with
/// `replica-read-only no` replica and primary each granted token 1. A
/// replica is refused, relaxed or not, naming its primary; and a server
/// made a replica under an open store refuses the next write, writing
/// nothing (it would have granted token 1 again: its data is its new
/// primary's).
fn a_replica_is_refused_even_when_relaxed() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary, &RedisConfig::default());
    replica.wait_in_sync(&primary, Duration::from_secs(30));
    config_set(&replica, "replica-read-only", "no");
    for url in [replica.url(), format!("{}?durability=relaxed", replica.url())] {
        let e = open(&url).expect_err("a replica");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("replica") && text.contains(&format!("127.0.0.1:{}", primary.port())),
            "{text}"
        );
    }
    // Made a replica while a store is open on it.
    let server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    assert_eq!(take(&store, "job", Duration::from_secs(60)), Token(1));
    config_set(&server, "replica-read-only", "no");
    server
        .command(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()])
        .expect("REPLICAOF");
    server.wait_in_sync(&primary, Duration::from_secs(30));
    let before = dump(&server);
    let e = store
        .lease_acquire(&acquire("job", Duration::from_secs(60)))
        .expect_err("a write on a replica");
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("replica"), "{e}");
    assert_eq!(dump(&server), before, "the refused acquire wrote on the replica");
    let info = store.describe().expect("describe");
    assert!(info.problems.iter().any(|(k, _)| k == "role"), "{:?}", info.problems);
}

/// Issue 39: `CONFIG SET appendfsync everysec` under a running holder went
/// unnoticed. The settings are read with the read before every write: the
/// holder's next renewal is refused naming the setting, writing nothing
/// (a renewal acknowledged now could be lost, and the grant with it), a
/// waiter's registration too; each setting back, it renews again.
fn a_setting_changed_under_a_holder_refuses_its_next_write() {
    let server = RedisServer::start();
    let store = open(&server.url()).expect("open");
    let token = take(&store, "job", Duration::from_secs(60));
    for (setting, unsafe_value, safe_value) in [
        ("appendfsync", "everysec", "always"),
        ("no-appendfsync-on-rewrite", "yes", "no"),
        ("maxmemory-policy", "allkeys-lru", "noeviction"),
        ("appendonly", "no", "yes"),
    ] {
        if setting == "maxmemory-policy" {
            config_set(&server, "maxmemory", "100mb");
        }
        config_set(&server, setting, unsafe_value);
        let before = dump(&server);
        let e = store
            .lease_renew(&params::renew("job", token))
            .expect_err("a renewal on unsafe settings");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{setting}: {e}");
        assert!(e.to_string().contains(&format!("{setting} {unsafe_value}")), "{e}");
        let e = store
            .waiter_enqueue(&params::enqueue("job", Mode::Exclusive))
            .expect_err("a waiter on unsafe settings");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{setting}: {e}");
        assert_eq!(dump(&server), before, "a refused call wrote ({setting} {unsafe_value})");
        let info = store.describe().expect("describe");
        assert!(
            info.problems
                .iter()
                .any(|(_, p)| p.contains(&format!("{setting} {unsafe_value}"))),
            "doctor says nothing of {setting}: {:?}",
            info.problems
        );
        config_set(&server, setting, safe_value);
        if setting == "maxmemory-policy" {
            config_set(&server, "maxmemory", "0");
        }
        if setting == "appendonly" {
            // Turning the AOF on starts a rewrite; Redis answers at once.
            leasehold_testkit::wait::wait_until(Duration::from_secs(30), || {
                store.lease_renew(&params::renew("job", token)).is_ok()
            })
            .expect("renews once appendonly is back");
        }
        let renewed = store.lease_renew(&params::renew("job", token)).expect("renew");
        assert!(matches!(renewed, LeaseRenew::Renewed(_)), "{renewed:?}");
    }
}

/// Issue 39: a history key of another type made `acquire` fail as
/// "left untouched" after the grant was written (the name held for its
/// TTL, a token used). Every key a commit writes is checked first: the
/// call is corrupt, and nothing at all was written — the next grant,
/// once the key is gone, takes the very next token.
fn a_key_of_another_type_in_a_commit_means_nothing_is_written() {
    let server = RedisServer::start();
    let store = open(&format!("{}?prefix=t", server.url())).expect("open");
    assert_eq!(cycle(&store, "job"), Token(1));
    for (key, fix) in [("t:history:job", "job"), ("t:names", "new")] {
        server.command(&["DEL", key]).expect("DEL");
        server.command(&["SET", key, "another program's"]).expect("SET");
        let before = dump(&server);
        let e = store
            .lease_acquire(&acquire(fix, Duration::from_secs(60)))
            .expect_err("a key of another type");
        assert_eq!(dump(&server), before, "the refused acquire wrote ({key}): {e}");
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
        assert!(e.to_string().contains(key), "{e}");
        server.command(&["DEL", key]).expect("DEL");
    }
    // The name is free, its token counter where it was.
    assert_eq!(cycle(&store, "job"), Token(2));
    assert_eq!(cycle(&store, "new"), Token(1));
}

/// The ACL line of docs/REDIS.md, read from the page and run word for
/// word: the store opens, grants, renews, wakes a waiter by the release
/// (not its poll), releases, writes and lists records, bumps tokens, and
/// `doctor` finds nothing wrong.
fn the_documented_acl_runs_the_store_end_to_end() {
    let (server, user, password) = RedisServer::start_with_documented_acl();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("password");
    put(&file, &format!("{password}\n"));
    let url = format!(
        "redis://{user}@127.0.0.1:{}?password-file={}",
        server.port(),
        file.display()
    );
    let store = open(&url).expect("open as the documented user");
    let info = store.describe().expect("doctor");
    assert!(
        info.problems.is_empty() && info.warnings.is_empty(),
        "{:?} {:?}",
        info.problems,
        info.warnings
    );
    let token = take(&store, "job", Duration::from_secs(60));
    assert_eq!(token, Token(1));
    store.lease_renew(&params::renew("job", token)).expect("renew");
    let waiter = waiter_on_job(url.clone());
    std::thread::sleep(Duration::from_millis(500));
    store.lease_release(&params::release("job", token)).expect("release");
    let slept = waiter.join().expect("waiter");
    assert!(slept < Duration::from_secs(8), "the waiter slept {slept:?}: not woken");
    let ticket = store
        .waiter_enqueue(&params::enqueue("job", Mode::Exclusive))
        .expect("enqueue");
    store
        .waiter_remove(&leasehold_backend::WaiterRemoveParams {
            name: params::name("job"),
            ticket,
        })
        .expect("leave the queue");
    assert_eq!(cycle(&store, "job"), Token(2));
    let key = leasehold_backend::RecordKey::new("sched/a").expect("a key");
    let records = store.records().expect("records");
    // A write judged on the server's clock: TIME, inside the script and
    // on its own (record_clock), as the documented user.
    let now = records.record_clock().expect("record_clock").at;
    records
        .record_write(&leasehold_backend::RecordWriteParams {
            not_after: Some(now + Duration::from_secs(60)),
            changes: vec![leasehold_backend::RecordChange::Put {
                key: key.clone(),
                body: "{}".to_owned(),
                expect: leasehold_backend::Expect::Absent,
            }],
        })
        .expect("record write");
    assert!(records.record_get(&key).expect("record get").is_some());
    store
        .tokens_bump(&leasehold_backend::TokensBumpParams { by: 100 })
        .expect("bump")
        .expect("a bump of 100");
    assert!(cycle(&store, "job") > Token(100));
    store
        .lease_history(&leasehold_backend::LeaseHistoryParams {
            name: params::name("job"),
            limit: 10,
        })
        .expect("history");
}

/// Issue 39: a user made `~prefix:* +@all` (no channel rights, Redis 7's
/// default) got exit 69 on every call, each of which had written a grant
/// and used a token. It works: each call writes once (tokens 1, 2, 3), its
/// waiters poll, and `doctor` says so.
fn a_user_without_channel_rights_writes_once_per_call_and_its_waiters_poll() {
    let server = RedisServer::start();
    server
        .command(&["ACL", "SETUSER", "plain", "on", ">pw", "~p:*", "+@all"])
        .expect("ACL SETUSER");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("password");
    put(&file, "pw\n");
    let url = format!(
        "redis://plain@127.0.0.1:{}?prefix=p&password-file={}",
        server.port(),
        file.display()
    );
    let store = open(&url).expect("open");
    for expected in 1..=3 {
        assert_eq!(cycle(&store, "job"), Token(expected));
    }
    let began = Instant::now();
    store
        .wait_for_change(&WaitTopic::lease(&params::name("job")), Duration::from_secs(2))
        .expect("a wait without a subscription");
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    let info = store.describe().expect("doctor");
    assert!(
        info.warnings.iter().any(|(k, w)| k == "waking" && w.contains("poll")),
        "{:?}",
        info.warnings
    );
}

/// A release decides on the document its handle last committed, without
/// reading the name again (issue 45: a lease cycle was four round trips, a
/// read and a commit each way, where a bare `SET NX` + `DEL` makes two).
/// What must never happen: a release that writes over what another client
/// committed since, or that decides on a time its decision does not hold
/// for. The server counts the scripts (`INFO commandstats`): a cycle on
/// one handle runs three, a release by a handle that did not make the
/// grant two (it reads). Then the doors: another client's shared grant,
/// committed between the acquisition and the release, stays (the version
/// moved on: the release reads again); a grant released at once is
/// released; and a grant that expired under its holder's handle is
/// released as expired, not as released (the time moved past it), as a
/// release that read would say. Planted: the handle's count of time since
/// its commit left out, and the commit's check of the server's time
/// dropped — the expired grant was "released"; the count 10 s ahead and
/// the check's lower bound dropped — the brief grant was "expired"; the
/// version not compared for a kept document — the other client's grant
/// was removed. And a server flushed and written again, where the version
/// the handle wrote comes round again: the grant made after the flush
/// stays (planted: the document not compared — it was removed).
fn a_release_decides_on_its_handles_last_commit_unless_the_name_or_the_time_moved_on() {
    let server = RedisServer::start();
    let a = open(&server.url()).expect("open");
    let b = open(&server.url()).expect("open");
    let scripts = || info(&server, "commandstats", "cmdstat_evalsha:calls=").unwrap_or(0);
    // Both handles' scripts loaded.
    cycle(&a, "warm-a");
    cycle(&b, "warm-b");
    let before = scripts();
    cycle(&a, "solo");
    assert_eq!(scripts() - before, 3, "an acquisition and a release on one handle");
    let token = take(&a, "elsewhere", Duration::from_secs(30));
    let before = scripts();
    let released = b.lease_release(&params::release("elsewhere", token)).expect("release");
    assert!(matches!(released, LeaseRelease::Released), "{released:?}");
    assert_eq!(
        scripts() - before,
        2,
        "a release by a handle that did not commit the grant"
    );

    let shared = |n: &str| LeaseAcquireParams {
        mode: params::SHARED,
        ..acquire(n, Duration::from_secs(30))
    };
    let grant = |r: LeaseAcquire| match r {
        LeaseAcquire::Acquired(g) => g.token,
        LeaseAcquire::Held(h) => panic!("held: {h:?}"),
    };
    let first = grant(a.lease_acquire(&shared("job")).expect("acquire"));
    let second = grant(b.lease_acquire(&shared("job")).expect("acquire"));
    let released = a.lease_release(&params::release("job", first)).expect("release");
    assert!(matches!(released, LeaseRelease::Released), "{released:?}");
    let state = b.lease_get(&params::name("job")).expect("get").expect("job exists");
    let held: Vec<Token> = state.grants.iter().map(|g| g.token).collect();
    assert_eq!(
        held,
        [second],
        "after the first holder's release, the second's grant must be all that is left"
    );

    // A grant released well before its expiry is released, whatever the
    // handle counted since (a count ahead of the server's clock would take
    // it for expired).
    let token = take(&a, "brief", Duration::from_secs(2));
    let released = a.lease_release(&params::release("brief", token)).expect("release");
    assert!(
        matches!(released, LeaseRelease::Released),
        "a grant released at once: {released:?}"
    );

    let token = take(&a, "short", Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(1300));
    let released = a.lease_release(&params::release("short", token)).expect("release");
    assert!(
        matches!(released, LeaseRelease::Lost(LostReason::Expired)),
        "a grant that expired 300 ms before its release: {released:?}"
    );

    // A server flushed and written again counts versions and tokens from 1
    // again: the release of a grant from before the flush must not write
    // over the name as it is now, though its version is the one the
    // handle wrote.
    let flushed = match a
        .lease_acquire(&acquire("flushed", Duration::from_secs(30)))
        .expect("acquire")
    {
        LeaseAcquire::Acquired(g) => g,
        LeaseAcquire::Held(h) => panic!("held: {h:?}"),
    };
    server.command(&["FLUSHALL"]).expect("FLUSHALL");
    let now_held = take(&b, "flushed", Duration::from_secs(30));
    assert_eq!(now_held, flushed.token, "the flush should make the same token again");
    let released = a
        .lease_release(&LeaseReleaseParams {
            grant: Some(GrantId::of(&flushed)),
            ..params::release("flushed", flushed.token)
        })
        .expect("release");
    assert!(
        matches!(released, LeaseRelease::Lost(_)),
        "a grant from before the flush: {released:?}"
    );
    let state = b
        .lease_get(&params::name("flushed"))
        .expect("get")
        .expect("flushed exists");
    assert_eq!(
        state.grants.iter().map(|g| g.token).collect::<Vec<_>>(),
        [now_held],
        "the grant made after the flush must stay"
    );
}
