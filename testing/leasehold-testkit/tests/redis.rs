//! Redis as a store's test meets it: started and answering, stopped by
//! pid; an acknowledged write kept across `kill -9` when the server is
//! durable and lost when it is not (what the store's durability check
//! tells apart); the ACL user held to its prefix; a replica caught up and
//! promoted; TLS on `rediss://` only. Read and written through the kit's
//! own RESP client.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use leasehold_testkit::redis::{self, Connection, Durability, RedisConfig, RedisServer, Reply};
use leasehold_testkit::{Test, process, tests};

fn main() {
    leasehold_testkit::main(&[TESTS]);
}

const TESTS: &[Test] = tests![
    a_server_answers_and_stops_by_pid,
    each_durability_is_configured_as_named,
    acknowledged_writes_survive_kill9_when_durable,
    writes_are_lost_to_kill9_without_durability,
    the_acl_user_writes_only_under_its_prefix,
    a_replica_catches_up_and_has_the_keys_once_promoted,
    tls_answers_on_rediss_only,
];

const KEYS: usize = 20;

#[allow(clippy::unnecessary_wraps, reason = "compared with what `command` returns")]
fn ok() -> Result<Reply, String> {
    Ok(Reply::Status("OK".to_owned()))
}

#[allow(clippy::unnecessary_wraps, reason = "compared with what `command` returns")]
fn bulk(s: &str) -> Result<Reply, String> {
    Ok(Reply::Bulk(s.to_owned()))
}

/// `SET k0 v0` ... on `server`, each acknowledged.
fn write_keys(server: &RedisServer) {
    for i in 0..KEYS {
        assert_eq!(server.command(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
}

/// How many of the keys `write_keys` wrote `server` has, with their values.
fn keys_kept(server: &RedisServer) -> usize {
    (0..KEYS)
        .filter(|i| server.command(&["GET", &format!("k{i}")]) == bulk(&format!("v{i}")))
        .count()
}

/// `CONFIG GET name`'s value.
fn config_get(server: &RedisServer, name: &str) -> String {
    match server.command(&["CONFIG", "GET", name]) {
        Ok(Reply::Array(pair)) if pair.len() == 2 => pair[1].text().expect("a value").to_owned(),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

fn a_server_answers_and_stops_by_pid() {
    let mut server = RedisServer::start();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.command(&["PING"]), Ok(Reply::Status("PONG".to_owned())));
    assert_eq!(server.command(&["SET", "a", "1"]), ok());
    assert_eq!(server.command(&["GET", "a"]), bulk("1"));
    assert_eq!(server.command(&["GET", "b"]), Ok(Reply::Nil));
    assert_eq!(config_get(&server, "bind"), "127.0.0.1");
    assert_eq!(config_get(&server, "protected-mode"), "yes");
    let dir = server.data_dir().to_owned();
    assert_eq!(config_get(&server, "dir"), dir.display().to_string());
    assert!(dir.join("redis.log").is_file());

    let pid = server.pid().expect("running");
    let port = server.port();
    server.stop();
    assert!(!process::alive(pid), "redis-server {pid} outlived stop()");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} open after stop()"
    );
    server.restart();
    assert_eq!(server.command(&["GET", "a"]), bulk("1"), "a clean stop loses nothing");
    let pid = server.pid().expect("running");
    drop(server);
    assert!(!process::alive(pid), "redis-server {pid} outlived its drop");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

fn each_durability_is_configured_as_named() {
    for (durability, appendonly, appendfsync) in [
        (Durability::Always, "yes", "always"),
        (Durability::EverySec, "yes", "everysec"),
        (Durability::None, "no", "everysec"),
    ] {
        let server = RedisServer::start_with(&RedisConfig {
            durability,
            ..RedisConfig::default()
        });
        let seen = (config_get(&server, "appendonly"), config_get(&server, "save"));
        assert_eq!(seen, (appendonly.to_owned(), String::new()), "{durability:?}");
        if appendonly == "yes" {
            assert_eq!(config_get(&server, "appendfsync"), appendfsync, "{durability:?}");
        }
    }
    assert_eq!(RedisConfig::default().durability, Durability::Always);
}

/// This catches a durable server that is not (no AOF); `everysec` for
/// `always` it cannot — the AOF is written before each reply either way,
/// and the kernel keeps it past `kill -9` — which is what
/// `each_durability_is_configured_as_named` checks.
fn acknowledged_writes_survive_kill9_when_durable() {
    let mut server = RedisServer::start();
    write_keys(&server);
    let pid = server.pid().expect("running");
    server.kill9();
    assert!(!process::alive(pid));
    server.restart();
    assert_eq!(
        keys_kept(&server),
        KEYS,
        "acknowledged writes lost to kill -9 under appendfsync always"
    );
}

fn writes_are_lost_to_kill9_without_durability() {
    let mut server = RedisServer::start_with(&RedisConfig {
        durability: Durability::None,
        ..RedisConfig::default()
    });
    write_keys(&server);
    assert_eq!(keys_kept(&server), KEYS);
    server.kill9();
    server.restart();
    assert_eq!(
        keys_kept(&server),
        0,
        "a server without persistence kept keys across kill -9"
    );
}

fn the_acl_user_writes_only_under_its_prefix() {
    let server = RedisServer::start_with(&RedisConfig {
        acl: true,
        ..RedisConfig::default()
    });
    let mine = format!("{}x", redis::GRANTED);
    let user = |args: &[&str]| server.command_as(redis::USER, redis::PASSWORD, args);
    assert_eq!(user(&["SET", &mine, "1"]), ok());
    assert_eq!(user(&["GET", &mine]), bulk("1"));
    assert_eq!(
        user(&["CONFIG", "GET", "appendfsync"]).map(|r| format!("{r:?}")),
        Ok(format!(
            "{:?}",
            Reply::Array(vec![Reply::Bulk("appendfsync".into()), Reply::Bulk("always".into())])
        )),
        "the user may read the server's configuration"
    );
    let refused = user(&["SET", "elsewhere", "1"]);
    assert!(matches!(&refused, Err(e) if e.starts_with("NOPERM")), "{refused:?}");
    assert_eq!(server.command(&["GET", "elsewhere"]), Ok(Reply::Nil));

    let anonymous = server.connect_as(None).and_then(|mut c| c.command(&["GET", &mine]));
    assert!(matches!(&anonymous, Err(e) if e.starts_with("NOAUTH")), "{anonymous:?}");
    let wrong = server.command_as(redis::USER, "wrong", &["PING"]);
    assert!(matches!(&wrong, Err(e) if e.starts_with("WRONGPASS")), "{wrong:?}");
}

fn a_replica_catches_up_and_has_the_keys_once_promoted() {
    for acl in [false, true] {
        let config = RedisConfig {
            acl,
            ..RedisConfig::default()
        };
        let mut primary = RedisServer::start_with(&config);
        write_keys(&primary);
        let mut replica = RedisServer::start_replica_of(&primary, &config);
        replica.wait_in_sync(&primary, Duration::from_secs(30));
        assert_eq!(keys_kept(&replica), KEYS, "acl: {acl}");
        let refused = replica.command(&["SET", "k0", "x"]);
        assert!(matches!(&refused, Err(e) if e.starts_with("READONLY")), "{refused:?}");

        // WAIT counts the replicas that have this connection's writes.
        let mut c = primary.connect().expect("connect");
        assert_eq!(c.command(&["SET", "late", "1"]), ok());
        assert_eq!(c.command(&["WAIT", "1", "10000"]), Ok(Reply::Integer(1)));
        drop(c);

        primary.kill9();
        replica.promote();
        assert_eq!(replica.command(&["SET", "after", "1"]), ok());
        assert_eq!(keys_kept(&replica), KEYS);
        assert_eq!(replica.command(&["GET", "late"]), bulk("1"));
        // A promoted replica stays a primary across a restart.
        replica.restart();
        assert_eq!(replica.command(&["SET", "restarted", "1"]), ok());
    }
}

fn tls_answers_on_rediss_only() {
    let server = RedisServer::start_with(&RedisConfig {
        tls: true,
        ..RedisConfig::default()
    });
    assert_eq!(server.url(), format!("rediss://127.0.0.1:{}", server.port()));
    assert_eq!(server.command(&["SET", "a", "1"]), ok());
    assert_eq!(server.command(&["GET", "a"]), bulk("1"));
    assert_eq!(config_get(&server, "port"), "0", "a plain port is open too");

    let foreign = Connection::tls(server.port(), &server.pki().other_ca()).and_then(|mut c| c.command(&["PING"]));
    assert!(
        foreign.is_err(),
        "a certificate the client does not trust passed: {foreign:?}"
    );

    // Plain RESP on the TLS port: no answer but a closed connection.
    let mut plain = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    plain.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    plain.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("PONG"),
        "a plain client got an answer: {answer:?}"
    );
}
