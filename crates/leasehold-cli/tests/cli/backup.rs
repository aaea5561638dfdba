//! `leasehold backup DEST`: a copy taken while writers run is a store that
//! `doctor` passes, holding every grant acknowledged before it began; a
//! destination that exists is refused and left as it was; `doctor` warns
//! about a copy made with `cp`, not about a backup; the stores with tools
//! of their own refuse and name them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use leasehold_testkit::{etcd, postgres};

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_backup_taken_under_four_writers_holds_every_acknowledged_grant_and_passes_doctor,
    a_destination_that_exists_or_is_a_link_is_refused_and_left_unchanged,
    doctor_warns_about_a_plain_copy_and_not_about_a_backup,
    postgres_and_etcd_refuse_and_name_their_own_tools,
];

/// Each writer's tokens, as `run` acknowledged them (its `--json`).
type Acknowledged = Arc<Mutex<BTreeMap<String, u64>>>;

/// Four writers — each a loop of `leasehold run wN -- true` processes —
/// run before, during and after the backup. Every token a writer was
/// given before `backup` started must be in the copy: its last token per
/// name at least that one. Judged from `run`'s own output and the copy
/// read by `status`, nothing shared with the backup.
fn a_backup_taken_under_four_writers_holds_every_acknowledged_grant_and_passes_doctor() {
    let env = Arc::new(Env::new());
    let acknowledged: Acknowledged = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let (env, acknowledged, stop) = (env.clone(), acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                let name = format!("w{i}");
                let mut runs = 0;
                while !stop.load(Ordering::SeqCst) || runs < 3 {
                    let (code, out, err) = env.run(&["--json", "run", &name, "--", "true"]);
                    assert_eq!(code, 0, "{err}");
                    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
                    let token = doc["token"].as_u64().unwrap();
                    acknowledged.lock().unwrap().insert(name.clone(), token);
                    runs += 1;
                }
                runs
            })
        })
        .collect();
    // Let every writer be acknowledged at least once, then note what was.
    leasehold_testkit::wait::wait_until(std::time::Duration::from_secs(60), || {
        acknowledged.lock().unwrap().len() == 4
    });
    let before = acknowledged.lock().unwrap().clone();
    let dest = env.file("copy.db");
    let (code, out, err) = env.run(&["--json", "backup", dest.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["path"], dest.to_str().unwrap());
    assert_eq!(doc["bytes"].as_u64().unwrap(), std::fs::metadata(&dest).unwrap().len());
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    let after = acknowledged.lock().unwrap().clone();

    let copy = format!("sqlite://{}", dest.display());
    for (name, token) in &before {
        let (code, out, err) = env.run(&["--store", &copy, "--json", "status", name]);
        assert_eq!(code, 0, "{err}");
        // A name the copy never saw has no state (no last token): 0.
        let last = serde_json::from_str::<serde_json::Value>(&out).unwrap()["last_token"]
            .as_u64()
            .unwrap_or(0);
        assert!(
            last >= *token,
            "{name}: the copy's last token {last} is below {token}, acknowledged before the backup began"
        );
        assert!(last <= after[name], "{name}: the copy has a token never given");
    }
    let (code, out, err) = env.run(&["--store", &copy, "--json", "doctor"]);
    assert_eq!(code, 0, "doctor failed on the backup: {out} {err}");
    let doctor: serde_json::Value = serde_json::from_str(&out).unwrap();
    let checks = doctor["checks"].as_array().unwrap();
    assert!(
        !checks.iter().any(|c| c["warning"] == true),
        "a backup is warned about: {doctor}"
    );
    assert!(
        checks.iter().any(|c| c["detail"]
            .as_str()
            .unwrap()
            .starts_with("backup: this file is the backup")),
        "{doctor}"
    );
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_destination_that_exists_or_is_a_link_is_refused_and_left_unchanged() {
    let env = Env::new();
    assert_eq!(env.run(&["run", "job", "--", "true"]).0, 0);
    let out = env.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("exists.db"), b"someone's file\n").unwrap();
    std::fs::write(out.join("target"), b"the link's target\n").unwrap();
    std::os::unix::fs::symlink(out.join("target"), out.join("link.db")).unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    for (dest, what) in [("exists.db", "a file"), ("link.db", "a symbolic link")] {
        let (code, stdout, err) = env.run(&["--json", "backup", out.join(dest).to_str().unwrap()]);
        assert_eq!(code, 2, "{dest}: {err}");
        assert!(
            err.contains("exists") && err.contains(what) && err.contains("never overwrites"),
            "{err}"
        );
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(doc["exit_code"], 2);
    }
    assert_eq!(std::fs::read(out.join("exists.db")).unwrap(), b"someone's file\n");
    assert_eq!(std::fs::read(out.join("target")).unwrap(), b"the link's target\n");
    assert_eq!(
        listing(),
        ["exists.db", "link.db", "target"],
        "something was left behind"
    );
    let (code, _, err) = env.run(&["backup", out.join("missing/copy.db").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(!out.join("missing").exists());
}

/// The store copied with `cp` while no process has it open: `doctor`
/// passes with a warning (exit 0); a backup of it, no warning; after
/// `migrate --bump-tokens` (a restore's last step) the copy no longer
/// warns.
fn doctor_warns_about_a_plain_copy_and_not_about_a_backup() {
    let env = Env::new();
    assert_eq!(env.run(&["run", "job", "--", "true"]).0, 0);
    let copy = env.file("copy.db");
    std::fs::copy(env.store_path(), &copy).unwrap();
    let copy_url = format!("sqlite://{}", copy.display());
    let (code, out, err) = env.run(&["--store", &copy_url, "doctor"]);
    assert_eq!(code, 0, "a warning failed doctor: {out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("warn"))
        .unwrap_or_else(|| panic!("no warning: {out}"));
    assert!(
        line.contains("store warning")
            && line.contains("copy:")
            && line.contains("not one taken by `leasehold backup`"),
        "{line}"
    );
    let backup = env.file("backup.db");
    assert_eq!(env.run(&["backup", backup.to_str().unwrap()]).0, 0);
    let (code, out, _) = env.run(&["--store", &format!("sqlite://{}", backup.display()), "doctor"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.lines().any(|l| l.starts_with("warn")), "{out}");
    let (code, _, err) = env.run(&["--store", &copy_url, "migrate", "--bump-tokens", "10"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = env.run(&["--store", &copy_url, "doctor"]);
    assert!(!out.lines().any(|l| l.starts_with("warn")), "{out}");
}

fn postgres_and_etcd_refuse_and_name_their_own_tools() {
    let server = postgres::Server::shared();
    let etcd = etcd::shared();
    let prefix = etcd::unique_prefix("cli", "backup");
    for (env, tool) in [
        (Env::on(server.url("backup")), "pg_dump"),
        (
            Env::on(format!("etcd://{}?prefix={prefix}", etcd.endpoint())),
            "etcdctl snapshot save",
        ),
    ] {
        let dest = env.file("copy");
        let (code, _, err) = env.run(&["backup", dest.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("a backup by leasehold is not supported")
                && err.contains(tool)
                && err.contains("--bump-tokens"),
            "{err}"
        );
        assert!(!dest.exists());
    }
}
