//! Fault layer and power-loss model for the atomic write, and the locked,
//! JSON and fenced paths on a real filesystem.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::atomic::{self, DirOps, Ops, Perm, Step, replace, write_target_with};
use super::target::Target;
use super::*;

fn temps(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".leasehold-tmp."))
        .collect()
}

/// Plant a file as a test fixture (not a state write).
fn put(p: impl AsRef<Path>, data: &[u8]) {
    use std::io::Write as _;
    fs::File::create(p).unwrap().write_all(data).unwrap();
}

fn setup(old: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    write_atomic(&path, old, &WriteOptions::default()).unwrap();
    (dir, path)
}

/// Fails one step with `errno`, once or every time, and logs the steps run.
struct Faulty<O> {
    inner: O,
    fail: Option<Step>,
    errno: i32,
    persistent: bool,
    failed: bool,
    log: Vec<Step>,
}

impl<O: Ops> Faulty<O> {
    fn new(inner: O, fail: Option<Step>, errno: i32, persistent: bool) -> Self {
        Self {
            inner,
            fail,
            errno,
            persistent,
            failed: false,
            log: Vec::new(),
        }
    }

    fn gate(&mut self, step: Step) -> io::Result<()> {
        self.log.push(step);
        if Some(step) == self.fail && (self.persistent || !self.failed) {
            self.failed = true;
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        Ok(())
    }
}

impl<O: Ops> Ops for Faulty<O> {
    type File = O::File;
    fn create(&mut self, name: &OsStr, perm: Perm) -> io::Result<O::File> {
        self.gate(Step::Create)?;
        self.inner.create(name, perm)
    }
    fn write(&mut self, file: &mut O::File, data: &[u8]) -> io::Result<()> {
        self.gate(Step::Write)?;
        self.inner.write(file, data)
    }
    fn sync_file(&mut self, file: &mut O::File) -> io::Result<()> {
        self.gate(Step::SyncFile)?;
        self.inner.sync_file(file)
    }
    fn rename(&mut self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        self.gate(Step::Rename)?;
        self.inner.rename(from, to)
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        self.gate(Step::SyncDir)?;
        self.inner.sync_dir()
    }
    fn remove(&mut self, name: &OsStr) -> io::Result<()> {
        self.inner.remove(name)
    }
}

#[test]
fn a_failure_at_any_step_is_never_success_and_leaves_no_temp_file() {
    for step in Step::ALL {
        for errno in [libc_errno::EIO, libc_errno::ENOSPC] {
            for persistent in [false, true] {
                let (dir, path) = setup(b"{\"v\":\"old\"}");
                let target = Target::open(&path, Role::Data).unwrap();
                let mut ops = Faulty::new(DirOps::new(target.dir.as_fd()), Some(step), errno, persistent);
                let err = write_target_with(&target, b"{\"v\":\"new\"}", None, &mut ops)
                    .expect_err("a failed step must fail the write");
                let case = format!("{step:?} errno {errno} persistent {persistent}: {err}");
                let content = fs::read(&path).unwrap();
                if step == Step::SyncDir {
                    // Renamed, but not known durable: reported as a failure.
                    assert!(matches!(err, FileError::Unconfirmed { .. }), "{case}");
                    assert_eq!(content, b"{\"v\":\"new\"}", "{case}");
                } else {
                    assert_eq!(content, b"{\"v\":\"old\"}", "{case}");
                    if errno == libc_errno::ENOSPC {
                        assert!(err.to_string().starts_with("disk full: "), "{case}");
                    }
                }
                assert!(err.to_string().contains("state.json"), "{case}");
                assert_eq!(temps(dir.path()), Vec::<String>::new(), "{case}");
                // Never retried into success.
                for s in [Step::SyncFile, Step::SyncDir] {
                    assert!(
                        ops.log.iter().filter(|&&l| l == s).count() <= 1,
                        "{case}: {s:?} retried"
                    );
                }
            }
        }
    }
}

/// Errno values without a libc dependency.
mod libc_errno {
    pub const EIO: i32 = 5;
    pub const ENOSPC: i32 = 28;
}

// ---------------------------------------------------------------------------
// The power-loss model: a directory and inodes whose cached state (what
// readers see) and durable state (what survives power loss) differ until
// fsync. After a crash, a file holds its durable bytes, a torn part of its
// unsynced bytes, or all of them; the directory holds its durable entries or
// its cached ones (an unsynced rename may or may not have reached the disk).

#[derive(Clone, Default)]
struct Inode {
    cached: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Clone, Default)]
struct Disk {
    inodes: Vec<Inode>,
    dir: BTreeMap<OsString, usize>,
    durable_dir: BTreeMap<OsString, usize>,
}

impl Disk {
    fn with(name: &str, content: &[u8]) -> Self {
        let mut disk = Disk::default();
        disk.inodes.push(Inode {
            cached: content.to_vec(),
            durable: content.to_vec(),
        });
        disk.dir.insert(name.into(), 0);
        disk.durable_dir = disk.dir.clone();
        disk
    }

    /// Every content `name` may have after power loss now (`None`: absent).
    fn after_power_loss(&self, name: &str) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        for dir in [&self.durable_dir, &self.dir] {
            let Some(&ino) = dir.get(OsStr::new(name)) else {
                out.push(None);
                continue;
            };
            let Inode { cached, durable } = &self.inodes[ino];
            out.push(Some(durable.clone()));
            if cached != durable {
                let torn = durable.len() + cached.len().saturating_sub(durable.len()) / 2;
                out.push(Some(cached[..torn.min(cached.len())].to_vec()));
                out.push(Some(cached.clone()));
            }
        }
        out
    }
}

/// The model as [`Ops`]; remembers the disk after every operation.
struct Sim {
    disk: Disk,
    states: Vec<Disk>,
}

impl Sim {
    fn new(disk: Disk) -> Self {
        Self {
            states: vec![disk.clone()],
            disk,
        }
    }
    fn record(&mut self) {
        self.states.push(self.disk.clone());
    }
}

impl Ops for Sim {
    type File = usize;
    fn create(&mut self, name: &OsStr, _: Perm) -> io::Result<usize> {
        self.disk.inodes.push(Inode::default());
        let ino = self.disk.inodes.len() - 1;
        self.disk.dir.insert(name.to_owned(), ino);
        self.record();
        Ok(ino)
    }
    fn write(&mut self, file: &mut usize, data: &[u8]) -> io::Result<()> {
        // Two halves: a crash between them is a torn write.
        let (a, b) = data.split_at(data.len() / 2);
        for part in [a, b] {
            self.disk.inodes[*file].cached.extend_from_slice(part);
            self.record();
        }
        Ok(())
    }
    fn sync_file(&mut self, file: &mut usize) -> io::Result<()> {
        let inode = &mut self.disk.inodes[*file];
        inode.durable.clone_from(&inode.cached);
        self.record();
        Ok(())
    }
    fn rename(&mut self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let ino = self.disk.dir.remove(from).ok_or(io::ErrorKind::NotFound)?;
        self.disk.dir.insert(to.to_owned(), ino);
        self.record();
        Ok(())
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        self.disk.durable_dir = self.disk.dir.clone();
        self.record();
        Ok(())
    }
    fn remove(&mut self, name: &OsStr) -> io::Result<()> {
        self.disk.dir.remove(name);
        self.record();
        Ok(())
    }
}

/// Leaves one step out of the sequence (it "succeeds" doing nothing): the
/// negative controls.
struct Without<O> {
    inner: O,
    step: Option<Step>,
}

impl<O: Ops> Ops for Without<O> {
    type File = O::File;
    fn create(&mut self, name: &OsStr, perm: Perm) -> io::Result<O::File> {
        self.inner.create(name, perm)
    }
    fn write(&mut self, file: &mut O::File, data: &[u8]) -> io::Result<()> {
        self.inner.write(file, data)
    }
    fn sync_file(&mut self, file: &mut O::File) -> io::Result<()> {
        match self.step {
            Some(Step::SyncFile) => Ok(()),
            _ => self.inner.sync_file(file),
        }
    }
    fn rename(&mut self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        match self.step {
            Some(Step::SyncDir) => Ok(()),
            _ => self.inner.sync_dir(),
        }
    }
    fn remove(&mut self, name: &OsStr) -> io::Result<()> {
        self.inner.remove(name)
    }
}

/// Crash after every operation of one write; returns (crash states checked,
/// violations). The file must parse as old or new at every crash point, and
/// be new in every outcome after success.
fn power_loss_check(old: Option<&[u8]>, without: Option<Step>) -> (usize, Vec<String>) {
    let new = b"{\"version\":\"new\",\"padding\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}".as_slice();
    let disk = old.map_or_else(Disk::default, |old| Disk::with("state.json", old));
    let mut ops = Without {
        inner: Sim::new(disk),
        step: without,
    };
    replace(&mut ops, OsStr::new("state.json"), new, Perm::default()).unwrap();
    let states = &ops.inner.states;
    let mut checked = 0;
    let mut violations = Vec::new();
    for (i, state) in states.iter().enumerate() {
        for outcome in state.after_power_loss("state.json") {
            checked += 1;
            let ok = match &outcome {
                None => old.is_none(),
                Some(c) => c == new || Some(c.as_slice()) == old,
            };
            if !ok {
                violations.push(format!(
                    "crash after op {i}: {:?}",
                    outcome.as_deref().map(String::from_utf8_lossy)
                ));
            }
            if i == states.len() - 1 && outcome.as_deref() != Some(new) {
                violations.push(format!("after success the new content was lost: {outcome:?}"));
            }
        }
    }
    (checked, violations)
}

#[test]
fn power_loss_at_any_point_leaves_old_or_new_and_success_is_durable() {
    for old in [Some(b"{\"version\":\"old\"}".as_slice()), None] {
        let (checked, violations) = power_loss_check(old, None);
        assert!(checked >= 10, "only {checked} crash states");
        println!(
            "power loss: {checked} crash states checked (old file: {})",
            old.is_some()
        );
        assert_eq!(violations, Vec::<String>::new());
    }
}

/// Negative controls: the model must catch a sequence without either fsync.
#[test]
fn power_loss_model_catches_a_missing_file_fsync_or_dir_fsync() {
    for step in [Step::SyncFile, Step::SyncDir] {
        let (_, violations) = power_loss_check(Some(b"{\"version\":\"old\"}"), Some(step));
        assert!(!violations.is_empty(), "leaving out {step:?} went unnoticed");
    }
}

#[test]
fn the_real_sequence_fsyncs_the_file_before_rename_and_the_dir_after() {
    let (_dir, path) = setup(b"old");
    let target = Target::open(&path, Role::Data).unwrap();
    let mut ops = Faulty::new(DirOps::new(target.dir.as_fd()), None, 0, false);
    write_target_with(&target, b"new", None, &mut ops).unwrap();
    assert_eq!(ops.log, Step::ALL);
    assert_eq!(fs::read(&path).unwrap(), b"new");
}

#[test]
fn a_planted_symlink_at_a_temp_name_is_never_opened() {
    let (dir, _path) = setup(b"old");
    let victim = dir.path().join("victim");
    put(&victim, b"precious");
    let planted = dir.path().join(".state.json.leasehold-tmp.1.0");
    symlink(&victim, &planted).unwrap();
    let target = Target::open(&dir.path().join("state.json"), Role::Data).unwrap();
    let err = DirOps::new(target.dir.as_fd())
        .create(OsStr::new(".state.json.leasehold-tmp.1.0"), Perm::default())
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn stale_temp_files_are_removed_by_the_next_write_and_fresh_ones_kept() {
    let (dir, path) = setup(b"old");
    let d = dir.path();
    let old = SystemTime::now() - atomic::STALE_TEMP_AGE - Duration::from_secs(5);
    let backdate = |p: &Path| {
        fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(old)
            .unwrap();
    };
    for name in [
        ".state.json.leasehold-tmp.1.aa",
        ".state.json.leasehold-tmp.2.bb",
        ".other.leasehold-tmp.3.cc",
    ] {
        put(d.join(name), b"half");
        backdate(&d.join(name));
    }
    put(d.join(".state.json.leasehold-tmp.4.dd"), b"a live writer");
    let victim = d.join("victim");
    put(&victim, b"precious");
    backdate(&victim);
    symlink(&victim, d.join(".state.json.leasehold-tmp.5.ee")).unwrap();

    write_atomic(&path, b"new", &WriteOptions::default()).unwrap();
    let mut left = temps(d);
    left.sort();
    assert_eq!(
        left,
        [
            ".other.leasehold-tmp.3.cc",
            ".state.json.leasehold-tmp.4.dd",
            ".state.json.leasehold-tmp.5.ee"
        ]
    );
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn the_mode_of_an_existing_file_is_kept_and_an_explicit_one_set() {
    let (_dir, path) = setup(b"old");
    assert_eq!(mode_of(&path) & !0o644, 0, "a new file is at most 0644");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    write_atomic(&path, b"new", &WriteOptions::default()).unwrap();
    assert_eq!(mode_of(&path), 0o600);
    let options = WriteOptions {
        mode: Some(0o640),
        ..WriteOptions::default()
    };
    write_atomic(&path, b"newer", &options).unwrap();
    assert_eq!(mode_of(&path), 0o640);
}

#[test]
fn what_is_not_a_regular_file_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("victim");
    put(&victim, b"precious");
    symlink(&victim, d.join("link")).unwrap();
    fs::create_dir(d.join("subdir")).unwrap();
    let o = WriteOptions::default();
    assert!(matches!(
        write_atomic(&d.join("link"), b"x", &o),
        Err(FileError::Symlink { role: Role::Data, .. })
    ));
    assert!(matches!(
        write_atomic(&d.join("subdir"), b"x", &o),
        Err(FileError::IsDirectory { .. })
    ));
    assert!(matches!(
        write_atomic(&d.join("subdir/"), b"x", &o),
        Err(FileError::IsDirectory { .. })
    ));
    // Lock and fence paths.
    symlink(&victim, d.join("a.lock")).unwrap();
    let err = write_locked(&d.join("a"), b"x", &o).unwrap_err();
    assert!(matches!(err, FileError::Symlink { role: Role::Lock, .. }), "{err}");
    symlink(&victim, d.join("b.fence")).unwrap();
    let err = FencedFile::new(d.join("b")).write(Token(1), b"x", &o).unwrap_err();
    assert!(matches!(err, FileError::Symlink { role: Role::Fence, .. }), "{err}");
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert!(!d.join("a").exists() && !d.join("b").exists());
}

#[test]
fn a_trailing_slash_on_a_file_and_a_missing_directory_are_named_for_every_role() {
    use crate::symlinks::DirError;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    put(d.join("f"), b"kept");
    fs::create_dir(d.join("subdir")).unwrap();
    let o = WriteOptions::default();
    let keep = |_: Option<&[u8]>| Ok::<_, ()>(b"x".to_vec());
    // `f/`: the slash names a directory, and f is a file.
    for err in [
        write_atomic(&d.join("f/"), b"x", &o).unwrap_err(),
        write_locked(&d.join("f/."), b"x", &o).unwrap_err(),
        FencedFile::new(d.join("f/")).write(Token(1), b"x", &o).unwrap_err(),
        FencedFile::new(d.join("ok"))
            .with_fence_record(d.join("f/"))
            .write(Token(1), b"x", &o)
            .unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                FileError::TrailingSlash {
                    why: Some(DirError::NotADirectory { kind: "file", .. }),
                    ..
                }
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("f is a file, not a directory") && text.contains("leave out the slash"),
            "{text}"
        );
    }
    assert_eq!(fs::read(d.join("f")).unwrap(), b"kept");
    assert!(matches!(
        write_atomic(&d.join("new/"), b"x", &o),
        Err(FileError::TrailingSlash { why: None, .. })
    ));
    assert!(!d.join("new").exists());
    for path in ["subdir", "subdir/", "subdir/."] {
        assert!(
            matches!(
                write_atomic(&d.join(path), b"x", &o),
                Err(FileError::IsDirectory { .. })
            ),
            "{path}"
        );
    }
    // A missing directory: what is missing and what to do, once.
    let missing = |err: &FileError, role: Role| {
        assert!(
            matches!(err, FileError::UnsafeDirectory { role: r, why: DirError::Missing { .. }, .. } if *r == role),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("nodir does not exist") && text.contains("mkdir -p") && !text.contains("os error"),
            "{text}"
        );
    };
    missing(&write_locked(&d.join("nodir/x"), b"x", &o).unwrap_err(), Role::Data);
    let UpdateError::File(err) = update(&d.join("nodir/x"), &o, keep).unwrap_err() else {
        panic!()
    };
    missing(&err, Role::Data);
    missing(
        &FencedFile::new(d.join("nodir/x"))
            .write(Token(1), b"x", &o)
            .unwrap_err(),
        Role::Data,
    );
    let fenced = FencedFile::new(d.join("ok")).with_fence_record(d.join("nodir/fence"));
    missing(&fenced.write(Token(1), b"x", &o).unwrap_err(), Role::Fence);
    assert!(!d.join("nodir").exists() && !d.join("ok").exists());
}

/// A directory link of our own is followed (one planted by someone else is
/// refused: `tests/planted_links.rs`, as root).
#[test]
fn a_symlinked_directory_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir(d.join("real")).unwrap();
    symlink("real", d.join("link")).unwrap();
    write_atomic(&d.join("link/state.json"), b"through", &WriteOptions::default()).unwrap();
    assert_eq!(fs::read(d.join("real/state.json")).unwrap(), b"through");
}

#[test]
fn json_input_is_checked_and_a_corrupt_file_is_never_handed_to_the_filter() {
    let (_dir, path) = setup(b"{\"n\": 1");
    let o = WriteOptions {
        json: true,
        ..WriteOptions::default()
    };
    let err = update(&path, &o, |_| -> Result<Vec<u8>, ()> {
        panic!("filter ran on a corrupt file")
    })
    .unwrap_err();
    assert!(matches!(err, UpdateError::File(FileError::Corrupt { .. })), "{err}");
    assert!(matches!(
        write_atomic(&path, b"", &o),
        Err(FileError::InvalidInput { .. })
    ));
    assert!(matches!(
        write_locked(&path, b"[1,", &o),
        Err(FileError::InvalidInput { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), b"{\"n\": 1");
    // A failing filter and a filter whose output does not parse change nothing.
    write_atomic(&path, b"{\"n\": 1}", &o).unwrap();
    assert!(matches!(
        update(&path, &o, |_| Err("no")),
        Err(UpdateError::Filter("no"))
    ));
    let err = update(&path, &o, |_| Ok::<_, ()>(b"{".to_vec())).unwrap_err();
    assert!(matches!(err, UpdateError::File(FileError::InvalidInput { .. })));
    assert_eq!(fs::read(&path).unwrap(), b"{\"n\": 1}");
}

#[test]
fn a_missing_file_gives_the_filter_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new");
    update(&path, &WriteOptions::default(), |old| {
        assert_eq!(old, None);
        Ok::<_, ()>(b"1".to_vec())
    })
    .unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"1");
}

#[test]
fn concurrent_updates_never_lose_an_increment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("count");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    update(&path, &WriteOptions::default(), |old| {
                        let n: u32 = old.map_or(0, |b| std::str::from_utf8(b).unwrap().parse().unwrap());
                        Ok::<_, ()>((n + 1).to_string().into_bytes())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(fs::read_to_string(&path).unwrap(), "100");
}

#[test]
fn fenced_writes_refuse_lower_tokens_and_raise_the_record_first() {
    let dir = tempfile::tempdir().unwrap();
    let file = FencedFile::new(dir.path().join("out"));
    let o = WriteOptions::default();
    file.write(Token(5), b"five", &o).unwrap();
    file.write(Token(5), b"five again", &o).unwrap();
    let err = file.write(Token(4), b"four", &o).unwrap_err();
    assert!(
        matches!(
            err,
            FileError::StaleToken {
                token: Token(4),
                highest: Token(5),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fs::read(file.path()).unwrap(), b"five again");
    // The update's filter runs with the fence already raised.
    file.update(Token(9), &o, |old| {
        assert_eq!(old, Some(b"five again".as_slice()));
        assert_eq!(fs::read(file.fence_path()).unwrap(), b"9\n");
        Ok::<_, ()>(b"nine".to_vec())
    })
    .unwrap();
    let refused = file.update(Token(8), &o, |_| -> Result<Vec<u8>, ()> {
        panic!("a stale update read the file")
    });
    assert!(matches!(refused, Err(UpdateError::File(FileError::StaleToken { .. }))));
    assert_eq!(file.highest_token().unwrap(), Some(Token(9)));
}

#[test]
fn a_corrupt_fence_record_is_an_error_and_never_reset() {
    let dir = tempfile::tempdir().unwrap();
    let file = FencedFile::new(dir.path().join("out")).with_fence_record(dir.path().join("shared.fence"));
    put(file.fence_path(), b"12\x00garbage");
    let err = file.write(Token(100), b"x", &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, FileError::CorruptFence { .. }), "{err}");
    assert!(err.to_string().contains("shared.fence"), "{err}");
    assert_eq!(fs::read(file.fence_path()).unwrap(), b"12\x00garbage");
    assert!(!file.path().exists());
}

#[test]
fn fenced_writes_refuse_a_token_issued_again_to_another_grant() {
    use crate::GrantId;
    use crate::files::Fence;
    let dir = tempfile::tempdir().unwrap();
    let file = FencedFile::new(dir.path().join("out"));
    let o = WriteOptions::default();
    let first = Fence {
        token: Token(5),
        grant: Some(GrantId(0xa)),
    };
    let again = Fence {
        token: Token(5),
        grant: Some(GrantId(0xb)),
    };
    file.write(first, b"first", &o).unwrap();
    assert_eq!(fs::read(file.fence_path()).unwrap(), b"5 000000000000000a\n");
    file.write(first, b"first again", &o).unwrap();
    let err = file.write(again, b"reissued", &o).unwrap_err();
    assert!(
        matches!(
            err,
            FileError::ReissuedToken {
                token: Token(5),
                recorded: GrantId(0xa),
                grant: GrantId(0xb),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.kind(), crate::ErrorKind::Stale);
    let refused = file.update(again, &o, |_| -> Result<Vec<u8>, ()> {
        panic!("a reissued token's update read the file")
    });
    assert!(matches!(
        refused,
        Err(UpdateError::File(FileError::ReissuedToken { .. }))
    ));
    // A writer without a grant is judged by its token alone, and leaves the
    // record's grant in place.
    file.write(Token(5), b"token only", &o).unwrap();
    assert_eq!(file.fence_record().unwrap(), Some(first));
    assert_eq!(fs::read(file.path()).unwrap(), b"token only");
    // A higher token moves on, with its grant or without.
    file.write(Token(6), b"six", &o).unwrap();
    assert_eq!(fs::read(file.fence_path()).unwrap(), b"6\n");
}
