//! `leasehold lock`: flock with real processes.

use std::time::Duration;

use leasehold_testkit::process::alive;
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_held_lock_fails_at_once_naming_the_holder_pid_and_frees_when_it_ends,
    kill_9_of_the_holder_and_its_command_frees_the_lock,
    shared_locks_coexist_and_exclude_an_exclusive_one,
    the_command_inherits_the_locked_descriptor_unless_no_inherit,
    a_planted_symlink_is_refused_and_a_directory_gets_a_lock_file,
    a_missing_path_named_as_a_directory_is_created_private_and_a_file_there_is_refused,
    a_missing_directory_of_a_lock_file_is_named_once,
    a_file_it_did_not_create_is_left_byte_identical_however_it_is_locked,
    a_file_of_another_owner_is_left_byte_identical_however_it_is_locked,
    a_script_can_lock_itself_and_still_run,
    a_lock_file_it_created_records_its_exclusive_holder,
    a_socket_or_fifo_as_the_lock_path_is_named_and_refused,
];

const LIMIT: Duration = Duration::from_secs(30);

fn lock_args<'a>(path: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    crate::util::sh_args("lock", path, options, script)
}

fn a_held_lock_fails_at_once_naming_the_holder_pid_and_frees_when_it_ends() {
    let env = Env::new();
    let holder = env.spawn(&lock_args("f", &[], "touch started; sleep 1"));
    env.wait_for("started");
    let (code, _, err) = env.run(&lock_args("f", &[], "touch ran"));
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains(&format!("pid {}", holder.id())),
        "names the holder (the command exec'd in its place): {err}"
    );
    assert!(!env.file("ran").exists());
    let (code, _, err) = env.run(&lock_args("f", &["--wait=20s"], "exit 5"));
    assert_eq!(code, 5, "waited, then ran; the command's code passes through: {err}");
    assert_eq!(finish(holder, LIMIT).0, 0);
    assert!(env.file("f").exists(), "the lock file is never deleted");
}

fn kill_9_of_the_holder_and_its_command_frees_the_lock() {
    let env = Env::new();
    // Inherited: the command (and its child) hold the descriptor.
    let holder = env.spawn(&lock_args("f", &[], "sleep 60 & echo $! > kid; touch started; wait"));
    env.wait_for("started");
    let kid = env.pids("kid")[0];
    signal(holder.id(), "KILL");
    assert_eq!(
        env.run(&lock_args("f", &[], "true")).0,
        11,
        "the child still holds the inherited lock"
    );
    signal(kid, "KILL");
    finish(holder, LIMIT);
    wait_until(Duration::from_secs(5), || !alive(kid)).unwrap();
    assert_eq!(env.run(&lock_args("f", &[], "true")).0, 0);

    // Not inherited: leasehold alone holds it; kill -9 of it and its command.
    let holder = env.spawn(&lock_args(
        "g",
        &["--no-inherit"],
        "echo $$ > cmd; touch started2; exec sleep 60",
    ));
    env.wait_for("started2");
    let cmd = env.pids("cmd")[0];
    signal(holder.id(), "KILL");
    signal(cmd, "KILL");
    finish(holder, LIMIT);
    assert_eq!(env.run(&lock_args("g", &[], "true")).0, 0);
}

fn shared_locks_coexist_and_exclude_an_exclusive_one() {
    let env = Env::new();
    let a = env.spawn(&lock_args("f", &["--shared"], "touch a; sleep 2"));
    env.wait_for("a");
    let (code, _, err) = env.run(&lock_args("f", &["--shared"], "true"));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = env.run(&lock_args("f", &[], "true"));
    assert_eq!(code, 11, "{err}");
    assert_eq!(finish(a, LIMIT).0, 0);
}

fn the_command_inherits_the_locked_descriptor_unless_no_inherit() {
    let env = Env::new();
    let list_fds = "for f in /proc/$$/fd/*; do readlink $f; done; exit 0";
    let (code, out, _) = env.run(&lock_args("f", &[], list_fds));
    assert_eq!(code, 0);
    let lock_file = env.file("f").display().to_string();
    assert!(out.lines().any(|l| l == lock_file), "{out}");
    let (code, out, _) = env.run(&lock_args("f", &["--no-inherit"], list_fds));
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l == lock_file), "{out}");
}

fn a_planted_symlink_is_refused_and_a_directory_gets_a_lock_file() {
    let env = Env::new();
    std::os::unix::fs::symlink(env.file("victim"), env.file("link")).unwrap();
    let (code, _, err) = env.run(&lock_args("link", &[], "touch ran"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!env.file("victim").exists() && !env.file("ran").exists());

    std::fs::create_dir(env.file("state")).unwrap();
    assert_eq!(env.run(&lock_args("state", &[], "true")).0, 0);
    assert!(env.file("state/.leasehold.lock").is_file());
}

fn a_missing_path_named_as_a_directory_is_created_private_and_a_file_there_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::new();
    let mode = |p: &str| std::fs::metadata(env.file(p)).unwrap().permissions().mode() & 0o777;
    // The agent finds its state directory made for it, not a file in its way.
    let (code, _, err) = env.run(&lock_args(
        "state/my-agent/",
        &[],
        "mkdir -p state/my-agent && touch state/my-agent/ran",
    ));
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    assert!(env.file("state/my-agent/ran").exists() && env.file("state/my-agent/.leasehold.lock").is_file());
    assert_eq!((mode("state"), mode("state/my-agent")), (0o700, 0o700));
    let (code, _, err) = env.run(&lock_args("a/b", &["--dir"], "true"));
    assert_eq!(code, 0, "{err}");
    assert!(env.file("a/b/.leasehold.lock").is_file());
    assert_eq!(mode("a/b"), 0o700);

    // Neither: a lock file, quietly, as flock(1) makes one.
    let (code, out, err) = env.run(&lock_args("plain", &[], "true"));
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    assert!(env.file("plain").is_file());

    // A file where a directory is named: exit 2, nothing run.
    for (options, path, named_by) in [
        (&[][..], "plain/", "the trailing slash"),
        (&["--dir"][..], "plain", "--dir"),
    ] {
        let (code, _, err) = env.run(&lock_args(path, options, "touch ran"));
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("plain is a file, not a directory") && err.contains(&format!("leave out {named_by}")),
            "{err}"
        );
        assert!(!env.file("ran").exists());
    }
}

fn a_missing_directory_of_a_lock_file_is_named_once() {
    let env = Env::new();
    let (code, _, err) = env.run(&lock_args("no/such/app.lock", &[], "touch ran"));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no/such does not exist") && err.contains("mkdir -p") && !err.contains("os error"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!env.file("no").exists() && !env.file("ran").exists());
}

/// Everything about a file that locking must leave alone: its bytes, size,
/// permission bits, owner and modification time — read with plain `std`
/// calls, sharing nothing with the lock code.
#[derive(Debug, PartialEq, Eq)]
struct Untouched {
    bytes: Vec<u8>,
    mode: u32,
    owner: (u32, u32),
    modified: std::time::SystemTime,
}

impl Untouched {
    fn of(path: &std::path::Path) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).unwrap();
        Self {
            bytes: std::fs::read(path).unwrap(),
            mode: meta.mode(),
            owner: (meta.uid(), meta.gid()),
            modified: meta.modified().unwrap(),
        }
    }
}

/// A file's modification time set in the past, so that a write in the
/// same clock tick as its creation cannot hide behind an equal mtime.
fn age(path: &std::path::Path) {
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .append(true)
        .open(path)
        .or_else(|_| std::fs::File::open(path))
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_file_it_did_not_create_is_left_byte_identical_however_it_is_locked() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::new();
    // 1 MB of data that is not text, a read-only file, and an empty one.
    let data: Vec<u8> = (0..1_048_576u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(env.file("data.bin"), &data).unwrap();
    std::fs::write(env.file("readonly.conf"), "answer = 42\n").unwrap();
    std::fs::set_permissions(env.file("readonly.conf"), std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::write(env.file("empty"), "").unwrap();
    for name in ["data.bin", "readonly.conf", "empty"] {
        left_byte_identical_however_it_is_locked(&env, name);
    }
}

/// The same for a file owned by another user (as root: flock(1) lets root
/// lock it, so must we).
#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_file_of_another_owner_is_left_byte_identical_however_it_is_locked() {
    leasehold_testkit::need_root("to give a file another owner");
    let env = Env::new();
    std::fs::write(env.file("theirs.db"), "someone else's\n").unwrap();
    std::os::unix::fs::chown(env.file("theirs.db"), Some(4242), Some(4242)).unwrap();
    left_byte_identical_however_it_is_locked(&env, "theirs.db");
}

/// Every way of locking `name` (exclusive, inherited and not, shared,
/// waiting, and refused while another holds it) leaves it as it was.
fn left_byte_identical_however_it_is_locked(env: &Env, name: &str) {
    let path = env.file(name);
    age(&path);
    let before = Untouched::of(&path);
    for options in [&[][..], &["--no-inherit"], &["--shared"], &["--wait=5s"]] {
        let (code, _, err) = env.run(&lock_args(name, options, "true"));
        assert_eq!(code, 0, "{name} {options:?}: {err}");
    }
    let holder = env.spawn(&lock_args(name, &[], "touch held; exec sleep 30"));
    env.wait_for("held");
    let (code, _, err) = env.run(&lock_args(name, &[], "true"));
    assert_eq!(code, 11, "{name}: {err}");
    assert!(
        err.contains(&format!("locked by pid {}.", holder.id())),
        "the holder is named from the kernel's list: {err}"
    );
    let (code, out, _) = env.run(&["--json", "lock", name, "--", "true"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, &doc["pid"]), (11, &serde_json::json!(holder.id())), "{doc}");
    signal(holder.id(), "KILL");
    finish(holder, LIMIT);
    std::fs::remove_file(env.file("held")).unwrap();
    assert_eq!(Untouched::of(&path), before, "{name} was changed by locking it");
}

#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn a_script_can_lock_itself_and_still_run() {
    // The flock(1) idiom: a script takes its own file as its lock.
    let env = Env::new();
    let script = env.file("s.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    age(&script);
    let before = Untouched::of(&script);
    for options in [&[][..], &["--no-inherit"]] {
        let mut args = vec!["lock", "s.sh"];
        args.extend_from_slice(options);
        args.extend(["--", "./s.sh"]);
        let (code, out, err) = env.run(&args);
        assert_eq!((code, out.as_str()), (0, "hi\n"), "{options:?}: {err}");
    }
    assert_eq!(Untouched::of(&script), before);
}

fn a_lock_file_it_created_records_its_exclusive_holder() {
    // Where the kernel lists no holders (macOS), this record names one.
    let env = Env::new();
    let holder = env.spawn(&lock_args("app.lock", &[], "touch held; exec sleep 30"));
    env.wait_for("held");
    let record = std::fs::read_to_string(env.file("app.lock")).unwrap();
    assert_eq!(
        record,
        format!("leasehold lock file; last exclusive holder: pid {:<10}\n", holder.id())
    );
    signal(holder.id(), "KILL");
    finish(holder, LIMIT);
    // A shared holder leaves it; the next exclusive one writes itself. It
    // waits: a kill that came before `sh` exec'd `sleep` leaves `touch`
    // (which inherited the descriptor) holding the lock for as long as it
    // still runs — on a loaded machine, after the holder was reaped (a CI
    // run found it held, exit 11).
    assert_eq!(
        env.run(&lock_args("app.lock", &["--shared", "--wait", "10s"], "true"))
            .0,
        0
    );
    let (code, _, err) = env.run(&lock_args("app.lock", &[], "echo $$ > me"));
    assert_eq!(code, 0, "{err}");
    let me = env.pids("me")[0];
    assert_eq!(
        std::fs::read_to_string(env.file("app.lock")).unwrap(),
        format!("leasehold lock file; last exclusive holder: pid {me:<10}\n")
    );
    // Once its content is not the record (a command used the file), it is
    // the user's: never written again.
    let (code, _, _) = env.run(&lock_args("app.lock", &[], "echo mine > app.lock"));
    assert_eq!(code, 0);
    assert_eq!(env.run(&lock_args("app.lock", &[], "true")).0, 0);
    assert_eq!(std::fs::read_to_string(env.file("app.lock")).unwrap(), "mine\n");
}

/// Issue 41, item 12: a Unix socket as the lock path said "No such device
/// or address" (open(2)'s ENXIO). Now what is there is named and refused;
/// a FIFO too, the command never run.
fn a_socket_or_fifo_as_the_lock_path_is_named_and_refused() {
    let env = Env::new();
    let socket = env.file("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let fifo = env.file("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    for (path, kind) in [(&socket, "socket"), (&fifo, "FIFO")] {
        let (code, _, err) = env.run(&lock_args(path.to_str().unwrap(), &[], "touch ran"));
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "refusing to lock {}: it is a {kind}, not a regular file or a directory",
                path.display()
            )),
            "{err}"
        );
        assert!(!err.contains("No such device"), "{err}");
        assert!(!env.file("ran").exists());
    }
}
