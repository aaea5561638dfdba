//! The Redis store through the CLI: where its password comes from, and a
//! server whose settings can lose grants refused with what to do.

use leasehold_testkit::redis::{Durability, GRANTED, PASSWORD, RedisConfig, RedisServer, USER};

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    the_password_comes_from_the_environment_or_a_file_never_the_url,
    a_server_that_can_lose_grants_is_refused_with_what_to_do,
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
