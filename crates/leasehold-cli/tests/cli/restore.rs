//! Restoring the SQLite store from an older copy (README.md, "Restoring a
//! store"): the restored store issues tokens again that a sink has seen.
//! The grant in the fence record refuses a reissued token equal to the
//! sink's mark, and `migrate --bump-tokens` makes every later grant write
//! again — nothing stale accepted, nothing legitimate refused.

use std::fs;
use std::path::Path;

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

/// Copy the store's files (no process has it open: the last one to close
/// it checkpointed its log) — a backup, or putting one back.
fn copy_store(from: &Path, to: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (src, dst) = (with_suffix(from, suffix), with_suffix(to, suffix));
        let _ = fs::remove_file(&dst);
        if src.exists() {
            fs::copy(&src, &dst).unwrap();
        }
    }
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
    copy_store(&store, &backup);
    let mut before_loss = Vec::new();
    for _ in 0..3 {
        let (token, grant, code) = holder_writes(&env);
        assert_eq!(code, 0);
        before_loss.push((token, grant));
    }
    let (mark, mark_grant) = before_loss.last().cloned().unwrap();
    assert_eq!(
        fs::read_to_string(env.file("out.fence")).unwrap(),
        format!("{mark} {mark_grant}\n")
    );

    // The store is lost and restored from the backup: it issues the last
    // three tokens again, to other grants. The sink accepts none of them —
    // the lower ones by token, the one equal to its mark by its grant.
    copy_store(&backup, &store);
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
