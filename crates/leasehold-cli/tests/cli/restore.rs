//! Restoring the SQLite store from an older backup (README.md, "Restoring
//! a store"), taken by `leasehold backup` while other names were being
//! granted: the restored store issues tokens again that a sink has seen.
//! The grant in the fence record refuses a reissued token equal to the
//! sink's mark, and `migrate --bump-tokens` makes every later grant write
//! again — nothing stale accepted, nothing legitimate refused.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::{Env, bin, sh_args};

pub const TESTS: &[leasehold_testkit::Test] =
    leasehold_testkit::tests![a_restored_store_reissues_no_token_a_sink_accepts_and_a_bump_lets_holders_write_again];

/// One `run job` whose command writes its token to the fenced sink `out`:
/// (token, grant, the write's exit code).
fn holder_writes(env: &Env) -> (u64, String, i32) {
    let script = format!(
        "printf '%s %s' \"$LEASEHOLD_TOKEN\" \"$LEASEHOLD_GRANT\" > holder; \
         echo \"$LEASEHOLD_TOKEN\" | '{}' write out --fence-token \"$LEASEHOLD_TOKEN\"",
        bin().display()
    );
    let (code, _, _) = env.run(&sh_args("run", "job", &[], &script));
    let holder = fs::read_to_string(env.file("holder")).unwrap();
    let (token, grant) = holder.split_once(' ').unwrap();
    (token.parse().unwrap(), grant.to_owned(), code)
}

/// Put a backup back as README.md says: with no process running, the
/// store's `-wal` and `-shm` removed (a stale log beside the restored file
/// would be replayed into it), the backup copied over the store file.
fn put_back(backup: &Path, store: &Path) {
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(with_suffix(store, suffix));
    }
    fs::copy(backup, store).unwrap();
}

/// `leasehold backup DEST` while two writers keep granting other names
/// (each a loop of `run`), so the copy is taken from a store in use.
fn backup_under_writers(env: &Env, dest: &Path) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for i in 0..2 {
            let stop = &stop;
            s.spawn(move || {
                let name = format!("other-{i}");
                while !stop.load(Ordering::SeqCst) {
                    assert_eq!(env.run(&["run", &name, "--", "true"]).0, 0);
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (code, _, err) = env.run(&["backup", dest.to_str().unwrap()]);
        stop.store(true, Ordering::SeqCst);
        assert_eq!(code, 0, "{err}");
    });
}

fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

fn a_restored_store_reissues_no_token_a_sink_accepts_and_a_bump_lets_holders_write_again() {
    let env = Env::new();
    let store = env.store_path();
    let backup = env.file("backup.db");
    // Three grants write, then the backup is taken, then three more write.
    for _ in 0..3 {
        assert_eq!(holder_writes(&env).2, 0);
    }
    backup_under_writers(&env, &backup);
    let mut before_loss = Vec::new();
    for _ in 0..3 {
        let (token, grant, code) = holder_writes(&env);
        assert_eq!(code, 0);
        before_loss.push((token, grant));
    }
    let (mark, mark_grant) = before_loss.last().cloned().unwrap();
    assert_eq!(
        fs::read_to_string(env.file("out.fence")).unwrap(),
        format!("{mark} {mark_grant} lease job\n")
    );

    // The store is lost and restored from the backup: it issues the last
    // three tokens again, to other grants. The sink accepts none of them —
    // the lower ones by token, the one equal to its mark by its grant.
    put_back(&backup, &store);
    for (token, grant) in &before_loss {
        let (again, other, code) = holder_writes(&env);
        assert_eq!(again, *token, "the restored store issues token {token} again");
        assert_ne!(&other, grant, "a reissued token belongs to another grant");
        assert_eq!(
            code, 13,
            "the sink accepted token {again} of grant {other}, issued again"
        );
    }
    assert_eq!(fs::read_to_string(env.file("out")).unwrap(), format!("{mark}\n"));

    // The operator bumps the tokens: every grant from now on writes, and
    // the holders from before the loss are still refused.
    let (code, out, err) = env.run(&["--json", "migrate", "--bump-tokens", "1000"]);
    assert_eq!(code, 0, "{err}");
    let bumped: serde_json::Value = serde_json::from_str(&out).unwrap();
    let floor = bumped["tokens_bumped"]["floor"].as_u64().unwrap();
    assert!(floor > mark + 999, "{bumped}");
    // The restored store is the store now: doctor passes without warnings.
    let (code, out, err) = env.run(&["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.lines().any(|l| l.starts_with("warn")), "{out}");
    for _ in 0..3 {
        let (token, _, code) = holder_writes(&env);
        assert!(token > floor, "token {token} after a bump to {floor}");
        assert_eq!(code, 0, "the sink refused token {token}, issued after the bump");
        assert_eq!(fs::read_to_string(env.file("out")).unwrap(), format!("{token}\n"));
    }
    for (token, grant) in &before_loss {
        let (code, _, err) = env.run(&[
            "write",
            "out",
            "--fence-token",
            &token.to_string(),
            "--fence-grant",
            grant,
        ]);
        assert_eq!(code, 13, "a holder from before the loss wrote: {err}");
    }
    // Out of range: a usage error, nothing bumped.
    assert_eq!(env.run(&["migrate", "--bump-tokens", "0"]).0, 2);
}
