//! The store on a full or read-only filesystem (fault cases 18 and 19,
//! store side; state files are tested in leasehold-cli's `files` tests).
//! Needs root for the tmpfs mounts: ignored, with the reason, otherwise.

use std::process::Command;

use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::tier::{count, figure};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case18_a_full_disk_under_the_store_hands_out_only_durable_tokens,
    case19_a_read_only_store_is_reported_without_a_panic_and_left_intact,
];

use leasehold_testkit::Tmpfs;

fn sandbox_on(tmpfs: &Tmpfs, sb: &Sandbox) -> Vec<(&'static str, String)> {
    let _ = sb;
    vec![(
        "LEASEHOLD_STORE",
        format!("sqlite://{}/leasehold.db", tmpfs.path().display()),
    )]
}

/// fault case 18: the store's disk fills up. Every acquisition is either
/// printed and durable (found in the store afterwards) or refused with a
/// clear "disk full" (exit 69); never a panic; the store stays sound.
/// Fill levels: a filler file shrinks 1 KiB at a time after the disk is full.
fn case18_a_full_disk_under_the_store_hands_out_only_durable_tokens() {
    leasehold_testkit::need_root("to mount a tmpfs");
    let sb = Sandbox::new();
    let fs = Tmpfs::mount("512k");
    let env = sandbox_on(&fs, &sb);
    let filler = fs.path().join("filler");
    let mut printed = Vec::new();
    let (mut refused, mut bad) = (0, Vec::new());
    // Fill the disk, then free it 1 KiB per level.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=1k", "count=2048"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    let levels = count(120, 400);
    for level in 0..levels {
        let name = format!("job{level}");
        let (code, out, err) = proc::outcome(
            &sb.cmd(&["acquire", &name, "--ttl", "1h"])
                .envs(env.clone())
                .output()
                .unwrap(),
        );
        match code {
            0 => printed.push((name, out.trim().parse::<u64>().unwrap())),
            69 if err.contains("disk is full") || err.contains("unavailable") => refused += 1,
            c => bad.push(format!("level {level}: exit {c}: {err}")),
        }
        let len = std::fs::metadata(&filler).map_or(0, |m| m.len());
        let f = std::fs::OpenOptions::new().write(true).open(&filler).unwrap();
        f.set_len(len.saturating_sub(1024)).unwrap();
    }
    let store = fs.path().join("leasehold.db");
    let conn = rusqlite::Connection::open(&store).unwrap();
    for (name, token) in &printed {
        let found: Option<i64> = conn
            .query_row("SELECT last_token FROM lease_name WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .ok();
        if found != Some(*token as i64) {
            bad.push(format!("{name}: token {token} was printed but the store has {found:?}"));
        }
    }
    let integrity = proc::integrity(&store);
    figure(
        18,
        &format!(
            "store on a full 512 KiB tmpfs, {levels} fill levels: {} granted (all durable), {refused} refused with exit 69, {} wrong; integrity {integrity}",
            printed.len(),
            bad.len()
        ),
    );
    assert!(bad.is_empty(), "{bad:#?}");
    assert!(
        refused > 0 && !printed.is_empty(),
        "the disk never filled or never freed"
    );
    assert_eq!(integrity, "ok");
}

/// fault case 19 (store side): the store's filesystem turns read-only. The
/// kernel refuses to remount a filesystem read-only while a file on it is
/// open for writing (EBUSY), and SQLite keeps the store open for writing, so
/// it cannot be done mid-run; it is done between commands, and losing the
/// store mid-run is case 10. Every writing command reports it (exit 69,
/// "read-only"), none panics, and the store is intact afterwards.
fn case19_a_read_only_store_is_reported_without_a_panic_and_left_intact() {
    leasehold_testkit::need_root("to mount a tmpfs");
    let trials = count(2, 100);
    let mut bad = Vec::new();
    for trial in 0..trials {
        let sb = Sandbox::new();
        let fs = Tmpfs::mount("4m");
        let env = sandbox_on(&fs, &sb);
        let run = |args: &[&str]| proc::outcome(&sb.cmd(args).envs(env.clone()).output().unwrap());
        let (code, out, _) = run(&["acquire", "job", "--ttl", "1h"]);
        assert_eq!(code, 0);
        let token = out.trim().to_owned();
        assert_eq!(run(&["task", "add", "q", "--id", "t1"]).0, 0);
        fs.remount("ro");
        for args in [
            &["acquire", "other"][..],
            &["renew", "job", "--token", &token],
            &["release", "job", "--token", &token],
            &["task", "add", "q", "--id", "t2"],
            &["task", "claim", "q"],
            &["run", "x", "--", "true"],
        ] {
            let (code, _, err) = run(args);
            if code != 69 || !err.contains("read-only") {
                bad.push(format!(
                    "trial {trial}: {args:?}: exit {code}, not 69 naming read-only: {err}"
                ));
            }
        }
        fs.remount("rw");
        let integrity = proc::integrity(&fs.path().join("leasehold.db"));
        let (code, out, _) = run(&["status", "job", "--json"]);
        if integrity != "ok"
            || code != 0
            || !out.contains(&format!("\"token\": {token}")) && !out.contains(&format!("\"token\":{token}"))
        {
            bad.push(format!(
                "trial {trial}: integrity {integrity}, status exit {code}: {out}"
            ));
        }
    }
    figure(
        19,
        &format!(
            "panics / unclear errors / damaged stores: {} in {trials} read-only stores x 6 commands",
            bad.len()
        ),
    );
    assert!(bad.is_empty(), "{bad:#?}");
}
