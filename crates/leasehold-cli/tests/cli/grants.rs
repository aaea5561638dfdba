//! A grant is a capability of one holder: who may renew, release or share
//! it (issue 39, items 1–3). Each test is judged by what must never happen
//! — a second command running beside the first under one lease — with a
//! judge that shares nothing with leasehold: the kernel's `flock` on a
//! file every command holds for its whole life (`flock -n` fails while
//! another command still holds it).

use std::time::Duration;

use leasehold_testkit::process::alive;

use crate::util::{Env, finish, sh_args};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    an_outsiders_release_never_lets_the_next_command_start_beside_the_running_one,
    one_owner_label_never_lets_two_runs_hold_at_once,
    renew_and_release_act_only_on_the_grant_they_name,
    a_flushed_store_stops_its_old_holder_which_says_the_store_lost_data,
];

const LIMIT: Duration = Duration::from_secs(30);

/// A command that holds the judge's lock for as long as it lives (and
/// says so in `overlap` if it cannot get it: another command still runs),
/// with its pid in `pid-FILE` and `FILE` touched once it holds the lock.
fn holding(started: &str) -> String {
    format!(
        "exec 9>judge; flock -n 9 || {{ echo \"$$ started beside a running command\" >> overlap; exit 99; }}; \
         echo $$ > pid-{started}; touch {started}; trap 'exit 0' TERM; while :; do sleep 0.05; done"
    )
}

/// `overlap` stayed empty: no command ever started beside another.
fn assert_no_overlap(env: &Env) {
    let overlap = std::fs::read_to_string(env.file("overlap")).unwrap_or_default();
    assert!(
        overlap.is_empty(),
        "two commands ran under one lease at once: {overlap}"
    );
}

/// The token and grant id of `name`'s one grant, as `status --json`
/// shows them to anyone.
fn shown(env: &Env, name: &str) -> (String, String) {
    let (code, out, err) = env.run(&["--json", "status", name]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("status --json");
    let grant = &doc["grants"][0];
    (
        grant["token"].to_string(),
        grant["grant_id"].as_str().expect("grant_id").to_owned(),
    )
}

/// Anyone who reads `status` knows a running command's token and grant
/// id. Neither lets them end its grant while its supervisor runs (exit
/// 12, naming the holder and what to do); `--force` stops the supervisor
/// first — its command ends — and only then is the name free. At no point
/// does a second command start beside the first.
fn an_outsiders_release_never_lets_the_next_command_start_beside_the_running_one() {
    let env = Env::new();
    let first = env.spawn(&sh_args(
        "run",
        "victim",
        &["--ttl", "20s", "--grace", "2s"],
        &holding("first"),
    ));
    env.wait_for("first");
    let (token, grant) = shown(&env, "victim");

    for extra in [&[][..], &["--grant", &grant][..]] {
        let mut args = vec!["release", "victim", "--token", &token];
        args.extend_from_slice(extra);
        let (code, _, err) = env.run(&args);
        let (next, _, next_err) = env.run(&sh_args("run", "victim", &[], &holding("second")));
        assert_no_overlap(&env);
        assert_eq!(code, 12, "an outsider released a running command's grant: {err}");
        assert!(
            err.contains("the grant is bound to that process") && err.contains("--force"),
            "the refusal names the holder and what to do: {err}"
        );
        assert_eq!(next, 11, "a second command was let in: {next_err}");
    }

    let (code, _, err) = env.run(&["release", "victim", "--token", &token, "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped the holder"), "{err}");
    let pid = env.pids("pid-first")[0];
    assert!(!alive(pid), "the command still ran after --force returned");
    let (code, _, err) = finish(first, LIMIT);
    assert_eq!(code, 0, "the first command ends on the forwarded SIGTERM: {err}");

    let next = "exec 9>judge; flock -n 9 || { echo \"$$ started beside a running command\" >> overlap; exit 99; }";
    let (code, _, err) = env.run(&sh_args("run", "victim", &[], next));
    assert_eq!(code, 0, "{err}");
    assert_no_overlap(&env);
}

/// Two `run`s with one `--owner` are two holders: the second is refused
/// (exit 11), and a nested `run` under the same owner is refused rather
/// than sharing — and ending — its parent's grant. Seed 002's `touch` (a
/// bare `acquire --owner` again) still extends its own grant.
fn one_owner_label_never_lets_two_runs_hold_at_once() {
    let env = Env::new();
    let owner = ["--ttl", "20s", "--owner", "svc"];
    let first = env.spawn(&sh_args("run", "dup", &owner, &holding("first")));
    env.wait_for("first");
    let (token, _) = shown(&env, "dup");
    let (code, _, err) = env.run(&sh_args("run", "dup", &owner, &holding("second")));
    assert_eq!(code, 11, "a second run under the same owner was let in: {err}");
    assert!(err.contains("dup is held"), "{err}");
    assert_no_overlap(&env);
    assert_eq!(shown(&env, "dup").0, token, "the first grant changed");
    // Nested: the inner run is refused; its exit passes through the outer.
    let nested = format!("{} run nest --owner svc -- true", crate::util::bin().display());
    let (code, _, err) = env.run(&sh_args("run", "nest", &["--owner", "svc"], &nested));
    assert_eq!(code, 11, "a nested run shared its parent's grant: {err}");

    crate::util::signal(env.pids("pid-first")[0], "TERM");
    assert_eq!(finish(first, LIMIT).0, 0);
    // Bound to no process, the same owner touches its grant again.
    let t1 = env.acquire(&["touched", "--owner", "svc"]);
    let t2 = env.acquire(&["touched", "--owner", "svc"]);
    assert_eq!(t1, t2, "touch by the same owner is idempotent");
}

/// A store that lost a grant (its row deleted underneath, as a wipe or
/// a restore would) issues its token to the next holder only above the
/// name's counter here; but a `renew`/`release` naming a grant acts on
/// that grant alone: `--grant` of another grant is refused (exit 12),
/// the live grant left as it was.
fn renew_and_release_act_only_on_the_grant_they_name() {
    let env = Env::new();
    let t = env.acquire(&["job", "--ttl", "60s"]).to_string();
    let (_, grant) = shown(&env, "job");
    let other = if grant.starts_with('0') {
        grant.replacen('0', "1", 1)
    } else {
        grant.replacen(&grant[..1], "0", 1)
    };
    for verb in ["renew", "release"] {
        let (code, _, err) = env.run(&[verb, "job", "--token", &t, "--grant", &other]);
        assert_eq!(code, 12, "{verb} of another grant: {err}");
        assert!(err.contains("another grant"), "{err}");
    }
    assert_eq!(shown(&env, "job"), (t.clone(), grant.clone()), "the grant was touched");
    let (code, _, err) = env.run(&["release", "job", "--token", &t, "--grant", &grant]);
    assert_eq!(code, 0, "{err}");
}

/// `FLUSHALL` under a running `run` (Redis, a server of its own): the next
/// `acquire` gets token 1 again — the store forgot — but the old holder's
/// renewal neither extends nor its release ends the newcomer's grant (it
/// names its grant), and it stops its command (exit 75) saying the store
/// lost data, because the store's identity, read at its first renewal, is
/// gone.
fn a_flushed_store_stops_its_old_holder_which_says_the_store_lost_data() {
    use leasehold_testkit::redis::RedisServer;
    let server = RedisServer::start();
    let env = Env::on(server.url());
    let old = env.spawn(&sh_args(
        "run",
        "wiped",
        &["--ttl", "6s", "--heartbeat", "300ms", "--grace", "1s"],
        "touch started; while :; do sleep 0.05; done",
    ));
    env.wait_for("started");
    let has_identity = || {
        let (_, out, _) = env.run(&["--json", "doctor"]);
        out.contains("\"store identity\"") && !out.contains("none yet")
    };
    assert!(
        leasehold_testkit::wait::wait_until(Duration::from_secs(20), has_identity).is_some(),
        "the first renewal made no store identity"
    );
    server.command(&["FLUSHALL"]).expect("FLUSHALL");
    let token = env.acquire(&["wiped", "--ttl", "60s"]);
    assert_eq!(token, 1, "the flushed store forgot its tokens");
    let (code, _, err) = finish(old, LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(
        err.contains("the store lost data") && err.contains("its identity changed"),
        "{err}"
    );
    let (code, out, err) = env.run(&["--json", "status", "wiped"]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("status --json");
    let grants = doc["grants"].as_array().expect("grants");
    assert_eq!(grants.len(), 1, "the old holder's release ended the new grant: {out}");
    assert_eq!(grants[0]["token"], 1);
    assert!(
        grants[0]["expires_in_ms"].as_u64().is_some_and(|ms| ms > 40_000),
        "the old holder's renewal cut the new grant to its own TTL: {out}"
    );
}
