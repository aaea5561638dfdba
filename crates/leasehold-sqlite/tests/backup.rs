//! `store_backup`: a consistent copy of a live store that never overwrites
//! anything and leaves nothing behind when it fails; and what `describe`
//! says about a store's file — a copy not taken by backup, a backup, a
//! large write-ahead log.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use leasehold_backend::{Backend, ErrorKind, LeaseAcquire, StoreBackupParams, StoreInfo};
use leasehold_backend_tests::params;
use leasehold_sqlite::{LARGE_WAL_BYTES, SqliteBackend, SqliteOptions};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_backup_is_a_private_store_that_says_it_is_a_backup,
        a_destination_that_exists_is_refused_and_left_byte_for_byte,
        a_symlink_at_the_destination_is_refused_and_its_target_untouched,
        a_missing_directory_is_refused_and_not_created,
        a_full_disk_is_said_and_nothing_is_left,
        a_plain_copy_is_warned_about_until_tokens_are_bumped,
        a_store_made_before_the_record_records_its_file_at_open,
        a_large_write_ahead_log_is_warned_about,
    ]]);
}

fn open(path: &Path) -> SqliteBackend {
    SqliteBackend::open(path, SqliteOptions::default()).unwrap()
}

fn grant(b: &SqliteBackend, name: &str) -> u64 {
    match b.lease_acquire(&params::acquire(name)).unwrap() {
        LeaseAcquire::Acquired(g) => {
            b.lease_release(&params::release(name, g.token)).unwrap();
            g.token.0
        }
        LeaseAcquire::Held(h) => panic!("{name} held: {h:?}"),
    }
}

fn backup(b: &SqliteBackend, dest: &Path) -> Result<leasehold_backend::StoreBackup, leasehold_backend::BackendError> {
    b.store_backup(&StoreBackupParams { dest: dest.to_owned() })
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn labelled<'a>(pairs: &'a [(String, String)], label: &str) -> Option<&'a str> {
    pairs.iter().find(|(l, _)| l == label).map(|(_, v)| v.as_str())
}

fn warnings(info: &StoreInfo) -> Vec<&str> {
    info.warnings.iter().map(|(l, _)| l.as_str()).collect()
}

fn a_backup_is_a_private_store_that_says_it_is_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.db"));
    let last = (0..5).map(|_| grant(&store, "job")).last().unwrap();
    let dest = dir.path().join("b").join("copy.db");
    std::fs::create_dir(dest.parent().unwrap()).unwrap();
    let taken = backup(&store, &dest).unwrap();
    assert_eq!(taken.path, dest);
    let meta = std::fs::symlink_metadata(&dest).unwrap();
    assert_eq!(taken.bytes, meta.len());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        listing(dest.parent().unwrap()),
        ["copy.db"],
        "a temp file or journal was left"
    );

    let copy = open(&dest);
    assert_eq!(
        copy.lease_get(&params::name("job")).unwrap().unwrap().last_token.0,
        last
    );
    let info = copy.describe().unwrap();
    assert!(info.problems.is_empty() && info.warnings.is_empty(), "{info:?}");
    let fact = labelled(&info.facts, "backup").expect("said to be a backup");
    assert!(
        fact.contains("the backup taken by `leasehold backup`") && fact.contains("s.db"),
        "{fact}"
    );
    // The store itself says nothing of copies.
    let info = store.describe().unwrap();
    assert!(
        info.warnings.is_empty() && labelled(&info.facts, "backup").is_none(),
        "{info:?}"
    );
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_destination_that_exists_is_refused_and_left_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.db"));
    grant(&store, "job");
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("precious");
    std::fs::write(&dest, b"not yours to overwrite\n").unwrap();
    let before = std::fs::symlink_metadata(&dest).unwrap();
    let err = backup(&store, &dest).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(
        err.to_string().contains("exists") && err.to_string().contains("precious"),
        "{err}"
    );
    assert_eq!(std::fs::read(&dest).unwrap(), b"not yours to overwrite\n");
    let after = std::fs::symlink_metadata(&dest).unwrap();
    assert_eq!((before.ino(), before.mtime_nsec()), (after.ino(), after.mtime_nsec()));
    assert_eq!(listing(out.path()), ["precious"]);
    // A directory there too.
    let err = backup(&store, out.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(listing(out.path()), ["precious"]);
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_symlink_at_the_destination_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.db"));
    grant(&store, "job");
    let out = tempfile::tempdir().unwrap();
    for target in ["victim", "missing"] {
        let link = out.path().join(format!("to-{target}"));
        std::os::unix::fs::symlink(out.path().join(target), &link).unwrap();
    }
    std::fs::write(out.path().join("victim"), b"v").unwrap();
    for link in ["to-victim", "to-missing"] {
        let err = backup(&store, &out.path().join(link)).unwrap_err();
        assert!(
            err.kind() == ErrorKind::InvalidInput && err.to_string().contains("symbolic link"),
            "{link}: {err}"
        );
    }
    assert_eq!(std::fs::read(out.path().join("victim")).unwrap(), b"v");
    assert_eq!(
        listing(out.path()),
        ["to-missing", "to-victim", "victim"],
        "written through a link"
    );
}

fn a_missing_directory_is_refused_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.db"));
    let dest = dir.path().join("nowhere").join("copy.db");
    let err = backup(&store, &dest).unwrap_err();
    assert!(
        err.kind() == ErrorKind::InvalidInput && err.to_string().contains("does not exist"),
        "{err}"
    );
    assert!(!dir.path().join("nowhere").exists());
}

/// On a filesystem too small for the copy (a tmpfs of 64 KiB, the store
/// grown past it), the full disk is said — not an I/O error, not the
/// store's — and nothing is left there.
fn a_full_disk_is_said_and_nothing_is_left() {
    let fs = leasehold_testkit::Tmpfs::mount("64k");
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("s.db"));
    for i in 0..400 {
        grant(&store, &format!("a-name-long-enough-to-fill-pages-{i:04}"));
    }
    let err = backup(&store, &fs.path().join("copy.db")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DiskFull, "{err}");
    assert!(
        err.to_string().contains("copy.db") && !err.to_string().contains("unavailable"),
        "{err}"
    );
    assert_eq!(listing(fs.path()), Vec::<String>::new());
    // The store itself is fine.
    grant(&store, "after");
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    p.into()
}

fn a_plain_copy_is_warned_about_until_tokens_are_bumped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = open(&path);
    grant(&store, "job");
    drop(store);
    let copy = dir.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    for suffix in ["-wal", "-shm"] {
        if with_suffix(&path, suffix).exists() {
            std::fs::copy(with_suffix(&path, suffix), with_suffix(&copy, suffix)).unwrap();
        }
    }
    assert_ne!(inode(&copy), inode(&path));
    let opened = open(&copy);
    let info = opened.describe().unwrap();
    assert_eq!(warnings(&info), ["copy"], "{info:?}");
    let text = labelled(&info.warnings, "copy").unwrap();
    assert!(
        text.contains("not one taken by `leasehold backup`") && text.contains("--bump-tokens"),
        "{text}"
    );
    opened
        .tokens_bump(&leasehold_backend::TokensBumpParams { by: 10 })
        .unwrap();
    let info = opened.describe().unwrap();
    assert!(info.warnings.is_empty(), "{info:?}");
    // The original store never warned.
    assert!(open(&path).describe().unwrap().warnings.is_empty());
}

/// A store made before it recorded its file (the record deleted, as a
/// store of an earlier leasehold has none) records it at its next open,
/// and an open of a store that has it writes nothing.
fn a_store_made_before_the_record_records_its_file_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(open(&path));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version = || -> i64 {
        conn.query_row("SELECT coalesce(max(last), 0) FROM record_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        conn.query_row("SELECT count(*) FROM record WHERE key = 'store/file'", [], |r| r
            .get::<_, i64>(0))
            .unwrap(),
        1,
        "a new store records its file"
    );
    conn.execute("DELETE FROM record WHERE key = 'store/file'", []).unwrap();
    let before = version();
    let store = open(&path);
    assert_eq!(version(), before + 1, "the first open records it");
    assert!(store.describe().unwrap().warnings.is_empty());
    drop(store);
    drop(open(&path));
    assert_eq!(version(), before + 1, "a later open wrote again");
}

/// A real log past `LARGE_WAL_BYTES`: a reader holds its snapshot (as a
/// stuck process would) while 64 MiB and more are committed, so no
/// checkpoint can restart the log.
fn a_large_write_ahead_log_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = open(&path);
    assert!(store.describe().unwrap().warnings.is_empty());
    let reader = rusqlite::Connection::open(&path).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    reader
        .query_row("SELECT count(*) FROM lease_name", [], |r| r.get::<_, i64>(0))
        .unwrap();
    let records = store.records().unwrap();
    let body = "x".repeat(60 * 1024);
    let mut batch = 0;
    while std::fs::metadata(with_suffix(&path, "-wal")).map_or(0, |m| m.len()) <= LARGE_WAL_BYTES {
        let changes = (0..32)
            .map(|i| leasehold_backend::RecordChange::Put {
                key: leasehold_backend::RecordKey::new(format!("test/{batch}/{i}")).unwrap(),
                body: body.clone(),
                expect: leasehold_backend::Expect::Anything,
            })
            .collect();
        records
            .record_write(&leasehold_backend::RecordWriteParams::new(changes))
            .unwrap();
        batch += 1;
        assert!(batch < 200, "the log does not grow");
    }
    let info = store.describe().unwrap();
    assert_eq!(warnings(&info), ["write-ahead log"], "{info:?}");
    let text = labelled(&info.warnings, "write-ahead log").unwrap();
    assert!(
        text.contains("long-lived reader") && text.contains("wal_checkpoint(TRUNCATE)"),
        "{text}"
    );
    assert!(info.problems.is_empty(), "a warning, not a problem: {info:?}");
}
