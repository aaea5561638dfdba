//! The Redis store through the CLI: where its password comes from, and a
//! server whose settings can lose grants refused with what to do.

use std::time::Duration;

use leasehold_testkit::redis::{Durability, GRANTED, PASSWORD, RedisConfig, RedisServer, USER};
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, finish};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    the_password_comes_from_the_environment_or_a_file_never_the_url,
    a_server_that_can_lose_grants_is_refused_with_what_to_do,
    a_setting_changed_under_run_stops_its_command_and_its_waiter_writing_nothing,
    the_documented_acl_runs_acquire_run_release_and_waiting,
];

fn the_password_comes_from_the_environment_or_a_file_never_the_url() {
    let server = RedisServer::start_with(&RedisConfig {
        acl: true,
        ..RedisConfig::default()
    });
    let prefix = GRANTED.trim_end_matches(':');
    let url = format!("redis://{USER}@127.0.0.1:{}?prefix={prefix}", server.port());
    let env = Env::on(url.clone());
    let (code, out, err) = env.run_with(
        &["acquire", "job", "--ttl", "30s"],
        &[("LEASEHOLD_REDIS_PASSWORD", PASSWORD)],
    );
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    let (code, _, err) = env.run_with(&["acquire", "other"], &[("LEASEHOLD_REDIS_PASSWORD", "wrong")]);
    assert_eq!(code, 69, "a wrong password: {err}");
    assert!(
        err.contains("WRONGPASS") && err.contains("LEASEHOLD_REDIS_PASSWORD"),
        "{err}"
    );
    // In the URL: refused before anything is sent, and not repeated.
    let in_url = format!("redis://{USER}:secret-word@127.0.0.1:{}", server.port());
    let (code, _, err) = Env::on(in_url).run(&["acquire", "job"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("password-file=PATH") && !err.contains("secret-word"),
        "{err}"
    );
    // From a file, as for etcd.
    let file = env.file("redis-password");
    let mut f = std::fs::File::create(&file).expect("create");
    std::io::Write::write_all(&mut f, format!("{PASSWORD}\n").as_bytes()).expect("write");
    let with_file = Env::on(format!("{url}&password-file={}", file.display()));
    let (code, out, err) = with_file.run(&["release", "job", "--token", "1"]);
    assert_eq!(code, 0, "{out}{err}");
}

fn a_server_that_can_lose_grants_is_refused_with_what_to_do() {
    let server = RedisServer::start_with(&RedisConfig {
        durability: Durability::EverySec,
        ..RedisConfig::default()
    });
    let (code, _, err) = Env::on(server.url()).run(&["acquire", "job"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("appendfsync everysec") && err.contains("durability=relaxed") && err.contains("reissue"),
        "{err}"
    );
    let relaxed = Env::on(format!("{}?durability=relaxed", server.url()));
    let (code, out, err) = relaxed.run(&["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("warn") && l.contains("appendfsync everysec")),
        "{out}"
    );
}

/// Issue 39: `CONFIG SET appendfsync everysec` under a running `run --wait`
/// went unnoticed. The holder's renewals are refused from then on (each
/// names the setting), so its command is stopped when its trust window
/// ends — before the server could expire the last grant it wrote while the
/// settings were safe — and `run` exits 75; the waiter's next attempt is
/// refused (exit 2) and its command never runs. At most the writes already
/// under way at the change land after it.
fn a_setting_changed_under_run_stops_its_command_and_its_waiter_writing_nothing() {
    let server = RedisServer::start();
    let env = Env::on(server.url());
    let holder = env.spawn(&[
        "run",
        "job",
        "--ttl",
        "3s",
        "--",
        "sh",
        "-c",
        "touch started; sleep 60; touch finished",
    ]);
    env.wait_for("started");
    let waiter = env.spawn(&[
        "run",
        "job",
        "--wait",
        "60s",
        "--ttl",
        "3s",
        "--",
        "touch",
        "waiter-ran",
    ]);
    let state = || {
        server
            .command(&["HGET", "leasehold:name:job", "s"])
            .ok()
            .and_then(|r| r.text().map(str::to_owned))
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(20), || state().contains("\"waiters\":[{")).expect("the waiter queued");
    let version = || {
        server
            .command(&["HGET", "leasehold:name:job", "v"])
            .ok()
            .and_then(|r| r.text().and_then(|v| v.parse::<u64>().ok()))
            .expect("the name's version")
    };
    server
        .command(&["CONFIG", "SET", "appendfsync", "everysec"])
        .expect("CONFIG SET");
    let at_change = version();
    let (code, _, err) = finish(holder, Duration::from_secs(30));
    assert_eq!(code, 75, "the holder: {err}");
    assert!(
        err.contains("appendfsync everysec"),
        "the holder does not say why: {err}"
    );
    assert!(!env.file("finished").exists(), "the holder's command ran to its end");
    let (code, _, err) = finish(waiter, Duration::from_secs(30));
    assert_eq!(code, 2, "the waiter: {err}");
    assert!(
        err.contains("appendfsync everysec") && err.contains("durability=relaxed"),
        "{err}"
    );
    assert!(!env.file("waiter-ran").exists(), "the waiter's command ran");
    // A renewal and a waiter's attempt may have been under way.
    assert!(
        version() <= at_change + 2,
        "{} writes after the change",
        version() - at_change
    );
}

/// Issue 39: the ACL of docs/REDIS.md was not enough to run the store. Its
/// `ACL SETUSER` line, read from the page and run word for word: as that
/// user, `acquire`, a `acquire --wait` behind it granted on the release,
/// `release`, `run` and `doctor` (no warning: its waiters are woken).
fn the_documented_acl_runs_acquire_run_release_and_waiting() {
    let (server, user, password) = RedisServer::start_with_documented_acl();
    let probe = Env::new();
    let file = probe.file("redis-password");
    let mut f = std::fs::File::create(&file).expect("create");
    std::io::Write::write_all(&mut f, format!("{password}\n").as_bytes()).expect("write");
    let env = Env::on(format!(
        "redis://{user}@127.0.0.1:{}?password-file={}",
        server.port(),
        file.display()
    ));
    let (code, out, err) = env.run(&["acquire", "job", "--ttl", "30s"]);
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    let waiter = env.spawn(&["acquire", "job", "--ttl", "30s", "--wait", "30s"]);
    wait_until(Duration::from_secs(20), || {
        server
            .command(&["HGET", "leasehold:name:job", "s"])
            .ok()
            .and_then(|r| r.text().map(|s| s.contains("\"waiters\":[{")))
            .unwrap_or(false)
    })
    .expect("the waiter queued");
    let (code, _, err) = env.run(&["release", "job", "--token", "1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = finish(waiter, Duration::from_secs(30));
    assert_eq!((code, out.trim()), (0, "2"), "the waiter: {err}");
    let (code, _, err) = env.run(&["release", "job", "--token", "2"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = env.run(&["run", "job", "--", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = env.run(&["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.lines().any(|l| l.starts_with("warn")), "{out}");
}
