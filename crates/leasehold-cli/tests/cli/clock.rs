//! Wall-clock jumps (libfaketime) neither expire nor prolong a lease:
//! expiry is measured on the boot clock.

use std::time::{Duration, SystemTime};

use assert_cmd::cargo::cargo_bin;
use leasehold_testkit::faketime;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_contender_whose_clock_jumps_ahead_does_not_take_over_early,
    a_holder_whose_clock_is_behind_does_not_outlive_its_ttl,
];

/// Run leasehold under a faked wall clock; returns (code, stdout).
fn faked(env: &Env, offset: &str, args: &[&str]) -> (i32, String) {
    let out = faketime::command(offset, cargo_bin("leasehold"))
        .args(args)
        .env("LEASEHOLD_STORE", env.store_url())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn wall_offset_of_acquired(json: &str) -> Duration {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let acquired = humantime::parse_rfc3339(v["acquired"].as_str().unwrap()).unwrap();
    acquired.duration_since(SystemTime::now()).unwrap_or_default()
}

fn a_contender_whose_clock_jumps_ahead_does_not_take_over_early() {
    faketime::need();
    let env = Env::new();
    env.acquire(&["job", "--ttl", "60s"]);
    for offset in ["+1h", "+1d"] {
        let (code, _) = faked(&env, offset, &["acquire", "job"]);
        assert_eq!(code, 11, "a contender at {offset} took the lease early");
    }
}

fn a_holder_whose_clock_is_behind_does_not_outlive_its_ttl() {
    faketime::need();
    let env = Env::new();
    let (code, out) = faked(&env, "+1d", &["acquire", "job", "--ttl", "1s", "--json"]);
    assert_eq!(code, 0);
    // The jump was really in effect for the holder (the wall-clock field shows it).
    assert!(wall_offset_of_acquired(&out) > Duration::from_secs(3600));
    let (code, _) = faked(&env, "-10m", &["acquire", "job2", "--ttl", "1s"]);
    assert_eq!(code, 0);
    // In real time, both expire after about a second.
    for name in ["job", "job2"] {
        let (code, _, err) = env.run(&["acquire", name, "--wait=10s"]);
        assert_eq!(code, 0, "{name} outlived its TTL: {err}");
    }
}
