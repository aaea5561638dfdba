//! A directory link someone else planted in a sticky world-writable
//! directory is refused with the rule that refuses it (`protected_symlinks`),
//! and followed once the directory's owner owns the link. Giving a link
//! another owner needs root: as another user this is reported as ignored
//! (leasehold-testkit).

use std::os::unix::fs::{PermissionsExt as _, lchown, symlink};

use leasehold_host::symlinks::{DirError, resolve_dir};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_link_planted_in_a_sticky_directory_by_someone_else_is_refused
    ]]);
}

fn a_link_planted_in_a_sticky_directory_by_someone_else_is_refused() {
    leasehold_testkit::need_root("to give a link another owner");
    let dir = tempfile::tempdir().unwrap();
    let t = std::fs::canonicalize(dir.path()).unwrap();
    let shared = t.join("shared");
    std::fs::create_dir_all(t.join("real")).unwrap();
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let link = shared.join("link");
    symlink(t.join("real"), &link).unwrap();
    assert_eq!(resolve_dir(&link).unwrap(), t.join("real"), "our own link");
    lchown(&link, Some(4242), None).unwrap();
    let err = resolve_dir(&link.join("sub")).unwrap_err();
    assert!(
        matches!(
            &err,
            DirError::PlantedLink {
                link_owner: 4242,
                dir_owner: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("protected_symlinks"), "{err}");
    // The directory's owner may link there.
    std::os::unix::fs::chown(&shared, Some(4242), None).unwrap();
    assert_eq!(resolve_dir(&link).unwrap(), t.join("real"));
}
