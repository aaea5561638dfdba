//! The SQLite store on a filesystem with no room: what the user is told.
//! Issue 22: a store on a full disk (no other process holding it open)
//! said "I/O error … Error code 4874: disk I/O error" — SQLite's code for a
//! shared-memory file (`-shm`) that cannot grow — and a store on a 64 KiB
//! filesystem could never be opened, with the same words.
//!
//! What must never happen: a full (or too small) disk reported as
//! anything but a full disk, or a store changed by the failed attempt. The
//! checker reads only the exit code, the message and the store file.
//!
//! Each case mounts its own small tmpfs (root only): where none can be
//! mounted, the case cannot run here (leasehold-testkit reports it as
//! ignored with the reason; a failure under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `leasehold ARGS` with the store at `store`, in a sandbox of its own.
fn leasehold(store: &Path, args: &[&str]) -> Output {
    let home = tempfile::tempdir().expect("temp dir");
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env("LEASEHOLD_STORE", format!("sqlite://{}", store.display()))
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env_remove("LEASEHOLD_LOG")
        .output()
        .expect("run leasehold")
}

/// (exit code, stderr) of `out`.
fn outcome(out: &Output) -> (i32, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Fill the filesystem at `dir` to the last byte with one file.
fn fill(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=1k", "count=4096"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    filler
}

fn check(what: bool, message: impl FnOnce() -> String) {
    assert!(what, "{}", message());
}

/// The words a full disk must never be reported in: SQLite's I/O error,
/// or its code 4874 (`SQLITE_IOERR_SHMSIZE`) as a number of its own — not
/// digits inside another (a log line's timestamp once held `.648743`).
fn not_an_io_error(err: &str) {
    let code_4874 = err.match_indices("4874").any(|(at, _)| {
        let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
        !digit(err[..at].chars().next_back()) && !digit(err[at + 4..].chars().next())
    });
    check(!err.contains("I/O error") && !code_4874, || {
        format!("a full disk reported as an I/O error: {err}")
    });
}

/// A store made while there was room, its disk filled by another file:
/// a write says the disk is full (exit 69) and changes nothing, while a
/// read still works (leasehold keeps the store's `-shm` between calls). Put
/// back without its `-shm` (as after a restore), SQLite must make it
/// afresh: then every command says the disk is full. And everything works
/// again once there is room.
fn a_full_disk_says_the_disk_is_full() {
    let fs = leasehold_testkit::Tmpfs::mount("512k");
    let store = fs.path().join("leasehold.db");
    let (code, err) = outcome(&leasehold(&store, &["acquire", "before", "--ttl", "1h"]));
    check(code == 0, || format!("acquire with room: exit {code}: {err}"));
    let filler = fill(fs.path());
    let stored = std::fs::read(&store).expect("read the store");
    let full = |args: &[&str]| {
        let (code, err) = outcome(&leasehold(&store, args));
        check(code == 69, || format!("{args:?} on a full disk: exit {code}: {err}"));
        check(err.contains("the disk is full") && err.contains("free space"), || {
            format!("{args:?} on a full disk: {err}")
        });
        not_an_io_error(&err);
    };
    full(&["acquire", "job", "--ttl", "1h"]);
    for args in [&["list"][..], &["status", "before"]] {
        let out = leasehold(&store, args);
        let (code, err) = outcome(&out);
        check(
            code == 0 && String::from_utf8_lossy(&out.stdout).contains("before"),
            || format!("{args:?} (a read) on a full disk: exit {code}: {err}"),
        );
    }
    std::fs::remove_file(fs.path().join("leasehold.db-shm")).expect("remove the -shm");
    fill(fs.path()); // what the -shm held, filled too
    for args in [&["acquire", "job", "--ttl", "1h"][..], &["list"], &["status", "before"]] {
        full(args);
    }
    check(std::fs::read(&store).expect("read the store") == stored, || {
        "the store file changed while its disk was full".to_owned()
    });
    std::fs::remove_file(filler).expect("remove the filler");
    let out = leasehold(&store, &["acquire", "job", "--ttl", "1h"]);
    let (code, err) = outcome(&out);
    check(code == 0, || {
        format!("acquire once there is room again: exit {code}: {err}")
    });
}

/// A 64 KiB filesystem cannot hold a store (its file and its 32 KiB
/// shared-memory file): the first command says so plainly — too small,
/// can never be opened there, use a larger filesystem — not "I/O error".
fn a_filesystem_too_small_for_a_store_says_so() {
    let fs = leasehold_testkit::Tmpfs::mount("64k");
    let store = fs.path().join("leasehold.db");
    for _ in 0..2 {
        let (code, err) = outcome(&leasehold(&store, &["acquire", "job", "--ttl", "1h"]));
        check(code == 69, || {
            format!("acquire on a 64 KiB filesystem: exit {code}: {err}")
        });
        check(
            err.contains("too small") && err.contains("can never be opened") && err.contains("larger filesystem"),
            || format!("a filesystem too small for a store: {err}"),
        );
        not_an_io_error(&err);
    }
}

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_full_disk_says_the_disk_is_full,
        a_filesystem_too_small_for_a_store_says_so,
    ]]);
}
