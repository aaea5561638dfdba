//! Which stores a command makes (issue 39, item 12): one that only reads
//! never creates a store, and a store in memory is warned about.

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_command_that_only_reads_never_creates_a_store,
    a_store_on_tmpfs_is_warned_about_when_made_and_by_doctor,
    too_few_open_files_are_named_with_the_limit_before_anything_is_done,
    descriptors_used_up_on_the_way_are_named_with_the_limit,
    a_store_file_this_user_cannot_read_is_named_not_its_directory,
    a_store_without_a_schema_says_so_in_doctor_and_migrate,
];

/// A mistyped path (its directory missing, or only its file) is an error
/// naming it — 69, so that `list --live` never tells a script nobody holds
/// — and afterwards nothing is there: no directory, no empty store.
fn a_command_that_only_reads_never_creates_a_store() {
    let env = Env::new();
    env.acquire(&["job"]);
    let dir = env.store_path().parent().unwrap().to_owned();
    for typo in [dir.join("typo").join("leasehold.db"), dir.join("leasehold.bd")] {
        let url = format!("sqlite://{}", typo.display());
        for args in [
            vec!["status", "job"],
            vec!["status"],
            vec!["list"],
            vec!["list", "--live"],
            vec!["history", "job"],
        ] {
            let mut all = vec!["--store", url.as_str()];
            all.extend_from_slice(&args);
            let (code, out, err) = env.run(&all);
            assert_eq!(code, 69, "{args:?} on {url}: {out}{err}");
            assert!(
                err.contains(&typo.display().to_string()) && err.contains("nothing was created"),
                "{args:?}: {err}"
            );
        }
        let (code, out, _) = env.run(&["--store", &url, "doctor"]);
        assert_eq!(code, 1, "doctor on {url}: {out}");
        assert!(
            out.contains("FAIL store") && out.contains("nothing was created"),
            "{out}"
        );
        assert!(!typo.exists(), "{} was created", typo.display());
        assert!(!dir.join("typo").exists(), "the mistyped directory was created");
    }
    // The store itself is still read as ever.
    let (code, out, err) = env.run(&["status", "job"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A store on tmpfs loses everything at reboot and starts its tokens at 1
/// again: said when it is made and by `doctor` (a warning: doctor passes).
fn a_store_on_tmpfs_is_warned_about_when_made_and_by_doctor() {
    let fs = leasehold_testkit::Tmpfs::mount("4m");
    let env = Env::new();
    let url = format!("sqlite://{}", fs.path().join("s.db").display());
    let (code, out, err) = env.run(&["--store", &url, "acquire", "job"]);
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    assert!(
        err.contains("is on tmpfs, a filesystem in memory") && err.contains("tokens restarting at 1"),
        "{err}"
    );
    // Once, when made: later commands on it do not repeat it.
    let (code, _, err) = env.run(&["--store", &url, "acquire", "other"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("tmpfs"), "{err}");
    let (code, out, err) = env.run(&["--store", &url, "doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().any(|l| l.starts_with("warn") && l.contains("tmpfs")),
        "{out}"
    );
}

/// `leasehold ARGS` in `env`'s sandbox under `ulimit -n limit`.
fn with_open_files(env: &Env, limit: u32, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new("sh")
        .args(["-c", "ulimit -n \"$0\" && exec \"$@\""])
        .arg(limit.to_string())
        .arg(crate::util::bin())
        .args(args)
        .env("LEASEHOLD_STORE", env.store_url())
        .env("HOME", env.path())
        .env("XDG_STATE_HOME", env.path().join("xdg"))
        .env_remove("LEASEHOLD_LOG")
        .current_dir(env.path())
        .output()
        .expect("run sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Too few file descriptors (issue 41): `run` at `ulimit -n 10` exited 2
/// blaming the process identity, at 8 exited 1 "cannot install the signal
/// handlers", `acquire` at 5 exited 69 blaming permissions. Each now says
/// EMFILE and the limit, exit 69 (a resource of the system, as a full
/// disk under the store), before anything was done: no grant is left.
fn too_few_open_files_are_named_with_the_limit_before_anything_is_done() {
    let env = Env::new();
    for (limit, args) in [
        (10, &["run", "x", "--", "true"][..]),
        (8, &["run", "x", "--", "true"][..]),
        (5, &["acquire", "x", "--ttl", "1m"][..]),
        (10, &["--json", "acquire", "x", "--ttl", "1m"][..]),
    ] {
        let (code, out, err) = with_open_files(&env, limit, args);
        assert_eq!(code, 69, "ulimit -n {limit}, {args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "leasehold: too many open files (EMFILE): this process may open {limit} (ulimit -n), and leasehold needs at least 32: raise the limit (ulimit -n 1024"
            )) && err.contains("nothing was done"),
            "ulimit -n {limit}, {args:?}: {err}"
        );
        if args[0] == "--json" {
            let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
            assert_eq!(doc["exit_code"], 69, "{out}");
        }
    }
    assert!(!env.store_path().exists(), "a store was made");
    // With room, the same commands work.
    let (code, out, err) = with_open_files(&env, 64, &["run", "x", "--", "true"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Descriptors used up after the start check passed (the parent left 27
/// to 35 of them open under `ulimit -n 40`): `acquire` either works or
/// fails saying EMFILE and the limit, exit 69, whichever step ran out —
/// the SQLite open ("unable to open database file" blamed permissions),
/// the boot id ("is /proc mounted?").
fn descriptors_used_up_on_the_way_are_named_with_the_limit() {
    let env = Env::new();
    let mut failed = 0;
    for inherited in 27..=35 {
        let out = std::process::Command::new("bash")
            .args([
                "-c",
                "ulimit -n 40 && for fd in $(seq 5 \"$1\"); do eval \"exec $fd</dev/null\"; done && shift && exec \"$@\"",
                "bash",
            ])
            .arg((4 + inherited).to_string())
            .arg(crate::util::bin())
            .args(["acquire", &format!("job-{inherited}"), "--ttl", "1m"])
            .env("LEASEHOLD_STORE", env.store_url())
            .env("HOME", env.path())
            .env("XDG_STATE_HOME", env.path().join("xdg"))
            .env_remove("LEASEHOLD_LOG")
            .output()
            .expect("run bash");
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            code => {
                failed += 1;
                assert_eq!(code, Some(69), "{inherited} inherited: {err}");
                assert!(
                    err.starts_with(
                        "leasehold: too many open files (EMFILE): this process may open 40 (ulimit -n); raise the limit"
                    ),
                    "{inherited} inherited: {err}"
                );
            }
        }
    }
    assert!(failed > 0, "no descriptor ran out: the test proves nothing");
}

/// A store made by root (its file, -wal and -shm 0600), used by another
/// user from a directory that user may write: the file is named with its
/// mode and owner and the user — the log's failure was blamed on the
/// directory ("cannot make its write-ahead log ready: Permission denied.
/// check the directory's permissions").
fn a_store_file_this_user_cannot_read_is_named_not_its_directory() {
    use std::os::unix::fs::PermissionsExt as _;
    leasehold_testkit::need_root("to run leasehold as another user");
    leasehold_testkit::need_program("setpriv", "util-linux");
    let env = Env::new();
    let (code, out, err) = env.run(&["acquire", "job", "--ttl", "1m"]);
    assert_eq!(code, 0, "{out}{err}");
    let store = env.store_path();
    let open_to_all = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    open_to_all(env.path(), 0o755);
    open_to_all(store.parent().expect("its directory"), 0o777);
    for args in [&["status", "job"][..], &["acquire", "other"][..]] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(crate::util::bin())
            .args(["--store", &env.store_url()])
            .args(args)
            .env("HOME", env.path())
            .env("XDG_STATE_HOME", env.path().join("xdg"))
            .env_remove("LEASEHOLD_LOG")
            .output()
            .expect("run setpriv");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "permission denied: this user (uid 65534, gid 65534) may neither read nor write {} (mode 0600, owner uid 0, gid 0)",
                store.display()
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("check the directory's permissions"), "{args:?}: {err}");
    }
}

/// `doctor` and `migrate` on stores that keep no schema (Redis,
/// Firestore): they said "schema version ?"; now that there is none to
/// migrate.
fn a_store_without_a_schema_says_so_in_doctor_and_migrate() {
    const NONE: &str = "no schema version (this store has no schema to migrate: each record is checked as it is read)";
    for env in [Env::redis("no-schema").0, Env::firestore("no-schema").0] {
        let (code, out, err) = env.run(&["migrate"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains(&format!(": {NONE}")) && !out.contains("version ?"),
            "{out}"
        );
        let (_, out, err) = env.run(&["doctor"]);
        assert!(out.contains(NONE) && !out.contains("schema version ?"), "{out}{err}");
    }
    // A store with a schema says its version.
    let env = Env::new();
    let (code, out, err) = env.run(&["migrate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": schema version "), "{out}");
}
