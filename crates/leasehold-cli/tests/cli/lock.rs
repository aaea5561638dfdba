//! `leasehold lock`: flock with real processes.

use std::time::Duration;

use crate::util::{Env, alive, finish, signal, wait_until};

const LIMIT: Duration = Duration::from_secs(30);

fn lock_args<'a>(path: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    crate::util::sh_args("lock", path, options, script)
}

#[test]
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

#[test]
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

#[test]
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

#[test]
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

#[test]
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

#[test]
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

#[test]
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
