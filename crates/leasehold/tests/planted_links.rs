//! A directory link someone else planted in a sticky world-writable
//! directory (like /tmp) is never followed — the kernel's
//! `protected_symlinks` rule — by a lock or a state-file write, and nothing
//! is written through it. Giving a link another owner needs root: as
//! another user these tests are reported as ignored (leasehold-testkit).

use std::fs;
use std::os::unix::fs::{PermissionsExt as _, lchown, symlink};
use std::path::{Path, PathBuf};

use leasehold::files::{FileError, Role, UpdateError, WriteOptions, update, write_atomic};
use leasehold::lock::{LockError, LockOptions, try_lock};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_lock_refuses_a_planted_link,
        a_state_file_write_refuses_a_planted_link,
    ]]);
}

/// In `d`: a sticky world-writable `shared/`, and in it `shared/NAME`, a
/// link to the empty directory `elsewhere/` owned by uid 4242.
fn plant(d: &Path, name: &str) -> PathBuf {
    leasehold_testkit::need_root("to give a link another owner");
    let shared = d.join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    fs::create_dir(d.join("elsewhere")).unwrap();
    let planted = shared.join(name);
    symlink(d.join("elsewhere"), &planted).unwrap();
    lchown(&planted, Some(4242), None).unwrap();
    planted
}

fn a_lock_refuses_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let planted = plant(d, "run");
    for path in [planted.join("app.lock"), planted.join("sub/app.lock")] {
        let err = try_lock(&path, LockOptions::default()).unwrap_err();
        assert!(
            matches!(err, LockError::UnsafeDirectory { .. }) && err.to_string().contains("protected_symlinks"),
            "{err}"
        );
    }
    assert_eq!(fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
}

fn a_state_file_write_refuses_a_planted_link() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let planted = plant(d, "state");
    let err = write_atomic(&planted.join("state.json"), b"x", &WriteOptions::default()).unwrap_err();
    assert!(
        matches!(err, FileError::UnsafeDirectory { role: Role::Data, .. })
            && err.to_string().contains("protected_symlinks"),
        "{err}"
    );
    let err = update(&planted.join("state.json"), &WriteOptions::default(), |_| {
        Ok::<_, ()>(b"x".to_vec())
    })
    .unwrap_err();
    assert!(
        matches!(err, UpdateError::File(FileError::UnsafeDirectory { .. })),
        "{err}"
    );
    assert_eq!(
        fs::read_dir(d.join("elsewhere")).unwrap().count(),
        0,
        "written through the planted link"
    );
}
