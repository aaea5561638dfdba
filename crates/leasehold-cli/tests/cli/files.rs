//! write / update: JSON refusal, modes, filters, concurrent updates, fenced
//! writes with racing tokens, planted symlinks, kill -9 mid-write, disk full
//! and read-only filesystems (the last two need root for mount: ignored,
//! with the reason, otherwise).

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    write_json_refuses_invalid_input_and_update_refuses_a_corrupt_file,
    the_mode_is_kept_or_set,
    a_failed_filter_leaves_the_file_and_passes_its_code_through,
    update_starts_a_missing_file_from_null_or_init,
    concurrent_updates_never_lose_an_increment,
    fenced_writes_refuse_lower_tokens_accept_equal_and_higher,
    racing_fenced_updates_never_accept_a_token_below_the_high_water_mark,
    planted_symlinks_are_refused_never_followed,
    a_trailing_slash_on_a_file_and_a_missing_directory_are_told_once_by_every_command,
    kill_9_mid_write_leaves_a_complete_version,
    disk_full_at_every_fill_level_is_reported_and_changes_nothing,
    a_read_only_filesystem_is_reported_and_changes_nothing,
    a_write_waits_for_an_update_holding_the_lock,
    strace_shows_fsync_before_rename_and_the_directory_fsync_before_exit,
    fenced_writes_under_run_record_the_grant_and_refuse_a_reissued_token,
    sigterm_to_update_stops_its_filter_group_and_writes_nothing,
    kill_9_of_update_takes_its_filter_with_it,
    a_write_behind_a_hung_filter_names_the_holder_and_honours_wait,
    write_keeps_extended_attributes,
    write_refuses_a_hard_linked_file_unless_told_to_break_the_links,
    the_fence_record_names_its_lease_and_refuses_another_leases_token,
    fence_token_zero_is_refused,
    a_socket_at_the_lock_path_of_a_state_file_is_named,
];

/// `leasehold ARGS` with `stdin`; (exit code, stdout, stderr).
fn run_in(env: &Env, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let out = env.cmd(args).write_stdin(stdin).output().expect("run leasehold");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn arg(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Plant a fixture file (not a state write).
fn put(p: &Path, data: &[u8]) {
    fs::File::create(p).unwrap().write_all(data).unwrap();
}

fn temps(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".leasehold-tmp."))
        .collect()
}

/// Make `p` (a symlink itself, not its target) two minutes old.
fn backdate(p: &Path) {
    let old = SystemTime::now() - Duration::from_secs(120);
    let secs = old.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    let t = rustix::fs::Timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    let times = rustix::fs::Timestamps {
        last_access: t,
        last_modification: t,
    };
    rustix::fs::utimensat(rustix::fs::CWD, p, &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

fn write_json_refuses_invalid_input_and_update_refuses_a_corrupt_file() {
    let env = Env::new();
    let f = env.path().join("state.json");
    let (code, out, err) = run_in(&env, &["write", arg(&f), "--json"], br#"{"runs": 1}"#);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["written"], true);
    for bad in [&b""[..], b"{\"runs\": 2", b"not json", b"{\"a\":1} trailing"] {
        let (code, _, err) = run_in(&env, &["write", arg(&f), "--json"], bad);
        assert_eq!(code, 65, "{bad:?}: {err}");
        assert!(err.contains("not valid JSON") && err.contains("state.json"), "{err}");
    }
    // A filter whose output does not parse: refused, untouched.
    let (code, _, err) = run_in(&env, &["update", arg(&f), "--json", "--", "echo", "{"], b"");
    assert_eq!(code, 65, "{err}");
    assert_eq!(fs::read(&f).unwrap(), br#"{"runs": 1}"#);
    // A corrupt existing file is reported, never handed to the filter or reset.
    put(&f, b"{\"runs\": 1, \"trunc");
    let marker = env.path().join("filter-ran");
    let (code, _, err) = run_in(&env, &["update", arg(&f), "--json", "--", "touch", arg(&marker)], b"");
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("corrupt") && err.contains("left as it is"), "{err}");
    assert!(!marker.exists(), "the filter ran on a corrupt file");
    assert_eq!(fs::read(&f).unwrap(), b"{\"runs\": 1, \"trunc");
    // Without --json, any bytes go.
    assert_eq!(run_in(&env, &["write", arg(&f)], b"not json").0, 0);
}

fn the_mode_is_kept_or_set() {
    let env = Env::new();
    let f = env.path().join("secret");
    assert_eq!(run_in(&env, &["write", arg(&f)], b"a").0, 0);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(run_in(&env, &["write", arg(&f)], b"b").0, 0);
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&f), 0o600);
    assert_eq!(run_in(&env, &["write", arg(&f), "--mode", "0640"], b"c").0, 0);
    assert_eq!(mode(&f), 0o640);
    assert_eq!(run_in(&env, &["update", arg(&f), "--", "cat"], b"").0, 0);
    assert_eq!(mode(&f), 0o640);
    let (code, _, err) = run_in(&env, &["write", arg(&f), "--mode", "888"], b"d");
    assert_eq!(code, 2, "{err}");
    assert_eq!(fs::read(&f).unwrap(), b"c");
}

fn a_failed_filter_leaves_the_file_and_passes_its_code_through() {
    let env = Env::new();
    let f = env.path().join("state");
    assert_eq!(run_in(&env, &["write", arg(&f)], b"old").0, 0);
    let (code, _, err) = run_in(
        &env,
        &["update", arg(&f), "--", "sh", "-c", "cat; echo more; exit 3"],
        b"",
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("exited with 3") && err.contains("unchanged"), "{err}");
    let (code, _, err) = run_in(&env, &["update", arg(&f), "--", "sh", "-c", "kill -9 $$"], b"");
    assert_eq!(code, 128 + 9, "{err}");
    let (code, _, err) = run_in(&env, &["update", arg(&f), "--", "/nonexistent/filter"], b"");
    assert_eq!(code, 127, "{err}");
    assert_eq!(fs::read(&f).unwrap(), b"old");
    assert_eq!(temps(env.path()), Vec::<String>::new());
    // A missing file gives the filter empty input.
    let g = env.path().join("new");
    let (code, _, err) = run_in(&env, &["update", arg(&g), "--", "wc", "-c"], b"");
    assert_eq!(code, 0, "{err}");
    assert_eq!(fs::read_to_string(&g).unwrap().trim(), "0");
}

/// The README's example works from the first run: with `--json` a missing
/// file reads as `null`; `--init` gives a start value of one's own.
fn update_starts_a_missing_file_from_null_or_init() {
    let env = Env::new();
    let f = env.path().join("state.json");
    for _ in 0..2 {
        let (code, _, err) = run_in(&env, &["--json", "update", arg(&f), "--", "jq", ".runs += 1"], b"");
        assert_eq!(code, 0, "{err}");
    }
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&f).unwrap()).unwrap();
    assert_eq!(value, serde_json::json!({ "runs": 2 }));
    let g = env.path().join("other.json");
    let (code, _, err) = run_in(
        &env,
        &[
            "--json",
            "update",
            arg(&g),
            "--init",
            r#"{"runs":41}"#,
            "--",
            "jq",
            ".runs += 1",
        ],
        b"",
    );
    assert_eq!(code, 0, "{err}");
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&g).unwrap()).unwrap();
    assert_eq!(value, serde_json::json!({ "runs": 42 }));
    // An existing empty file is not missing: refused, left as it is.
    let h = env.path().join("empty.json");
    fs::File::create(&h).unwrap();
    let (code, _, err) = run_in(&env, &["--json", "update", arg(&h), "--", "jq", ".runs += 1"], b"");
    assert_eq!(code, 65, "{err}");
    assert_eq!(fs::read(&h).unwrap(), b"");
}

fn concurrent_updates_never_lose_an_increment() {
    let env = Env::new();
    let f = env.path().join("count");
    assert_eq!(run_in(&env, &["write", arg(&f)], b"0\n").0, 0);
    let f = arg(&f);
    let mut workers = Vec::new();
    for _ in 0..4 {
        let mut cmds: Vec<Command> = (0..10)
            .map(|_| env.std_cmd(&["update", f, "--", "sh", "-c", "read n; echo $((n+1))"]))
            .collect();
        workers.push(std::thread::spawn(move || {
            cmds.iter_mut()
                .map(|c| c.status().expect("run leasehold").code())
                .filter(|c| *c != Some(0))
                .count()
        }));
    }
    let failures: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(failures, 0);
    assert_eq!(fs::read_to_string(f).unwrap(), "40\n");
}

fn fenced_writes_refuse_lower_tokens_accept_equal_and_higher() {
    let env = Env::new();
    let f = env.path().join("out.json");
    let w = |token: &str, data: &[u8]| run_in(&env, &["write", arg(&f), "--fence-token", token], data);
    assert_eq!(w("5", b"five").0, 0);
    assert_eq!(w("5", b"five again").0, 0);
    let (code, _, err) = w("4", b"four");
    assert_eq!(code, 13, "{err}");
    assert!(
        err.contains("stale fencing token 4") && err.contains("token 5"),
        "{err}"
    );
    assert_eq!(fs::read(&f).unwrap(), b"five again");
    assert_eq!(w("6", b"six").0, 0);
    assert_eq!(fs::read_to_string(env.path().join("out.json.fence")).unwrap(), "6\n");
    // A stale update is refused before its filter reads anything.
    let marker = env.path().join("filter-ran");
    let (code, _, err) = run_in(
        &env,
        &["update", arg(&f), "--fence-token", "3", "--", "touch", arg(&marker)],
        b"",
    );
    assert_eq!(code, 13, "{err}");
    assert!(!marker.exists());
    // A corrupt fence record is bad data, and never reset.
    put(&env.path().join("out.json.fence"), b"six\n");
    let (code, _, err) = w("100", b"hundred");
    assert_eq!(code, 65, "{err}");
    assert_eq!(fs::read(env.path().join("out.json.fence")).unwrap(), b"six\n");
    assert_eq!(fs::read(&f).unwrap(), b"six");
}

/// Rounds of 8 processes racing with tokens base+1..base+8, each appending
/// its token under `update --fence-token`: accepted tokens never decrease in
/// commit order, every process is accepted (0) or refused (13), and the
/// highest token of each round is always accepted.
fn racing_fenced_updates_never_accept_a_token_below_the_high_water_mark() {
    let env = Env::new();
    let f = env.path().join("log");
    let shared_fence = env.path().join("shared.fence");
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..10u64 {
        let mut children: Vec<_> = (1..=8u64)
            .map(|i| {
                let token = (round * 8 + i).to_string();
                let script = format!("cat; echo {token}");
                env.std_cmd(&[
                    "update",
                    arg(&f),
                    "--fence-token",
                    &token,
                    "--fence-file",
                    arg(&shared_fence),
                    "--",
                    "sh",
                    "-c",
                    &script,
                ])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        for child in &mut children {
            match child.wait().unwrap().code() {
                Some(0) => accepted += 1,
                Some(13) => refused += 1,
                other => panic!("exit {other:?}"),
            }
        }
        let log = fs::read_to_string(&f).unwrap();
        let tokens: Vec<u64> = log.lines().map(|l| l.parse().unwrap()).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "accepted out of order: {tokens:?}"
        );
        assert_eq!(tokens.last(), Some(&(round * 8 + 8)), "{tokens:?}");
        assert_eq!(
            fs::read_to_string(&shared_fence).unwrap(),
            format!("{}\n", round * 8 + 8)
        );
    }
    assert_eq!(accepted + refused, 80);
    println!("racing fenced updates: {accepted} accepted, {refused} refused as stale, 0 violations");
}

fn planted_symlinks_are_refused_never_followed() {
    let env = Env::new();
    let d = env.path();
    let victim = d.join("victim");
    put(&victim, b"precious");
    let check = |what: &str, args: &[&str]| {
        let (code, _, err) = run_in(&env, args, b"{}");
        assert_eq!(code, 65, "{what}: {err}");
        assert!(err.contains("symbolic link"), "{what}: {err}");
        assert_eq!(fs::read(&victim).unwrap(), b"precious", "{what} followed the link");
    };
    symlink(&victim, d.join("a")).unwrap();
    check("file", &["write", arg(&d.join("a"))]);
    symlink(&victim, d.join("b.lock")).unwrap();
    check("lock", &["update", arg(&d.join("b")), "--", "cat"]);
    check("lock", &["write", arg(&d.join("b"))]);
    symlink(&victim, d.join("c.fence")).unwrap();
    check("fence", &["write", arg(&d.join("c")), "--fence-token", "1"]);
    // A symlink with a temp file's name, however old, is neither followed
    // nor removed by the clean-up of stale temp files.
    let planted = d.join(".d.leasehold-tmp.1.0");
    symlink(&victim, &planted).unwrap();
    backdate(&planted);
    assert_eq!(run_in(&env, &["write", arg(&d.join("d"))], b"new").0, 0);
    assert!(fs::symlink_metadata(&planted).is_ok());
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    // A directory where a file belongs.
    fs::create_dir(d.join("e")).unwrap();
    let (code, _, err) = run_in(&env, &["write", arg(&d.join("e"))], b"x");
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("is a directory"), "{err}");
}

fn a_trailing_slash_on_a_file_and_a_missing_directory_are_told_once_by_every_command() {
    let env = Env::new();
    put(&env.path().join("f"), b"kept");
    let commands = |file: &'static str| -> [Vec<&'static str>; 5] {
        [
            vec!["write", file],
            vec!["write", file, "--fence-token", "1"],
            vec!["update", file, "--", "cat"],
            vec!["update", file, "--fence-token", "1", "--", "cat"],
            vec!["write", "ok", "--fence-token", "1", "--fence-file", file],
        ]
    };
    for args in commands("f/") {
        let (code, _, err) = run_in(&env, &args, b"new");
        assert_eq!(code, 65, "{args:?}: {err}");
        assert!(
            err.contains("f is a file, not a directory") && err.contains("leave out the slash"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(fs::read(env.path().join("f")).unwrap(), b"kept");
    for args in commands("nodir/x") {
        let (code, _, err) = run_in(&env, &args, b"new");
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("nodir does not exist") && err.contains("mkdir -p") && !err.contains("os error"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    assert!(!env.path().join("nodir").exists() && !env.path().join("ok").exists());
}

/// A large JSON document that says which version it is at both ends.
fn version(n: u32, size: usize) -> Vec<u8> {
    format!(r#"{{"version":{n},"payload":"{}","end":{n}}}"#, "x".repeat(size)).into_bytes()
}

fn check_complete(data: &[u8], size: usize) -> Result<u64, String> {
    let v: serde_json::Value = serde_json::from_slice(data).map_err(|e| format!("does not parse: {e}"))?;
    let ok = v["version"] == v["end"] && v["payload"].as_str().map(str::len) == Some(size);
    ok.then(|| v["version"].as_u64().unwrap())
        .ok_or_else(|| "an incomplete version".to_owned())
}

/// kill -9 at random points of a loop of large writes: the file always
/// parses as one complete version; leftover temp files (older than a
/// minute) are removed by the next write.
fn kill_9_mid_write_leaves_a_complete_version() {
    const TRIALS: u32 = 100;
    const SIZE: usize = 1 << 20;
    let env = Env::new();
    let f = env.path().join("big.json");
    assert_eq!(run_in(&env, &["write", arg(&f), "--json"], &version(0, SIZE)).0, 0);
    let mut seed = u64::from(std::process::id()) ^ 0x9e37_79b9_7f4a_7c15;
    let (mut killed, mut finished, mut violations) = (0, 0, Vec::new());
    for trial in 1..=TRIALS {
        let data = version(trial, SIZE);
        let mut child = env
            .std_cmd(&["write", arg(&f), "--json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        std::thread::sleep(Duration::from_micros((seed >> 33) % 40_000));
        let _ = child.kill();
        let status = child.wait().unwrap();
        feeder.join().unwrap();
        if status.success() {
            finished += 1;
        } else {
            killed += 1;
        }
        match check_complete(&fs::read(&f).unwrap(), SIZE) {
            Ok(v) if v == u64::from(trial) || (v < u64::from(trial) && !status.success()) => {}
            Ok(v) => violations.push(format!("trial {trial}: version {v} after exit {status}")),
            Err(e) => violations.push(format!("trial {trial}: {e}")),
        }
    }
    let left = temps(env.path());
    println!(
        "kill -9: {TRIALS} trials, {killed} killed, {finished} finished first, {} temp files left, {} violations",
        left.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:?}");
    assert!(killed > 0, "no trial was killed mid-way; the test proves nothing");
    // Young leftovers may be a live writer's: kept. Old ones: removed.
    assert_eq!(run_in(&env, &["write", arg(&f), "--json"], &version(0, 10)).0, 0);
    assert_eq!(temps(env.path()).len(), left.len());
    for name in &left {
        backdate(&env.path().join(name));
    }
    assert_eq!(run_in(&env, &["write", arg(&f), "--json"], &version(0, 10)).0, 0);
    assert_eq!(temps(env.path()), Vec::<String>::new());
}

/// Fill a 64 KiB tmpfs to every level in 256-byte steps and try a write at
/// each: it succeeds, or fails with a clear disk-full error (exit 1), the
/// old content intact and no temp file left.
fn disk_full_at_every_fill_level_is_reported_and_changes_nothing() {
    let mount = leasehold_testkit::Tmpfs::mount("64k");
    let env = Env::new();
    let d = mount.path();
    let f = d.join("state.json");
    let filler = d.join("filler");
    let (mut full, mut written, mut violations) = (0, 0, Vec::new());
    let levels: Vec<usize> = (0..=64 * 1024).step_by(256).collect();
    for (i, &level) in levels.iter().enumerate() {
        let _ = fs::remove_file(&filler);
        let _ = fs::remove_file(&f);
        assert_eq!(
            run_in(&env, &["write", arg(&f), "--json"], &version(0, 2000)).0,
            0,
            "level {level}: set-up"
        );
        if let Ok(mut file) = fs::File::create(&filler) {
            // Up to `level` bytes, or until the disk is full.
            let _ = file.write_all(&vec![b'f'; level]);
        }
        let (code, _, err) = run_in(&env, &["write", arg(&f), "--json"], &version(1 + i as u32, 8000));
        let now = fs::read(&f).unwrap();
        let content = check_complete(&now, if code == 0 { 8000 } else { 2000 });
        match code {
            0 if content.is_ok() => written += 1,
            1 if err.contains("disk full: ") && err.contains("state.json unchanged") && content == Ok(0) => full += 1,
            _ => violations.push(format!("level {level}: exit {code}, {content:?}, {err}")),
        }
        if !temps(d).is_empty() {
            violations.push(format!("level {level}: temp files left {:?}", temps(d)));
        }
    }
    println!(
        "disk full: {} fill levels, {written} written, {full} refused as disk full, {} violations",
        levels.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(full > 0 && written > 0, "the fill levels did not reach a full disk");
}

fn a_read_only_filesystem_is_reported_and_changes_nothing() {
    let mount = leasehold_testkit::Tmpfs::mount("1m");
    let env = Env::new();
    let f = mount.path().join("state.json");
    assert_eq!(run_in(&env, &["write", arg(&f), "--json"], b"{\"v\":1}").0, 0);
    mount.remount("ro");
    for args in [
        vec!["write", arg(&f), "--json"],
        vec!["write", arg(&f), "--fence-token", "3"],
        vec!["update", arg(&f), "--", "cat"],
    ] {
        let (code, _, err) = run_in(&env, &args, b"{\"v\":2}");
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("read-only filesystem: ") && err.contains("state.json unchanged"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert_eq!(fs::read(&f).unwrap(), b"{\"v\":1}");
    mount.remount("rw");
    assert_eq!(run_in(&env, &["write", arg(&f), "--json"], b"{\"v\":3}").0, 0);
}

/// A write waits for an update that holds the lock, and lands after it.
fn a_write_waits_for_an_update_holding_the_lock() {
    let env = Env::new();
    let f = env.path().join("slow");
    let mark = env.path().join("filter-running");
    let script = format!("touch {}; sleep 0.5; echo slow", arg(&mark));
    let mut slow = env
        .std_cmd(&["update", arg(&f), "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mark.exists() {
        assert!(Instant::now() < deadline, "the filter never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(run_in(&env, &["write", arg(&f)], b"fast\n").0, 0);
    assert!(slow.wait().unwrap().success());
    assert_eq!(
        fs::read(&f).unwrap(),
        b"fast\n",
        "the write did not wait for the update"
    );
}

/// The syscalls of one write, in order, under strace:
/// temp file created `O_EXCL|O_NOFOLLOW` relative to the target's directory,
/// fsync of it, rename over the target in the same directory, fsync of that
/// directory, and only then the exit.
fn strace_shows_fsync_before_rename_and_the_directory_fsync_before_exit() {
    leasehold_testkit::need_program("strace", "strace");
    let env = Env::new();
    let trace = env.path().join("trace");
    let f = env.path().join("state.json");
    assert_eq!(run_in(&env, &["write", arg(&f)], b"old").0, 0);
    let mut cmd = Command::new("strace");
    cmd.args([
        "-f",
        "-qq",
        "-e",
        "trace=openat,fsync,fdatasync,rename,renameat,renameat2,exit_group",
        "-o",
    ])
    .arg(&trace)
    .arg(crate::util::bin())
    .args(["write", arg(&f)])
    .stdin(Stdio::piped());
    let mut child = cmd.spawn().expect("start strace");
    child.stdin.take().unwrap().write_all(b"new").unwrap();
    assert!(child.wait().unwrap().success());
    let trace = fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let find = |from: usize, pred: &dyn Fn(&str) -> bool| {
        (from..lines.len())
            .find(|&i| pred(lines[i]))
            .unwrap_or_else(|| panic!("not found after line {from}:\n{trace}"))
    };
    let fd_of = |line: &str| line.rsplit("= ").next().unwrap().trim().to_owned();
    let dir = find(0, &|l| {
        l.contains("openat(AT_FDCWD") && l.contains("O_DIRECTORY") && l.contains(arg(env.path()))
    });
    let dir_fd = fd_of(lines[dir]);
    let open = find(dir, &|l| {
        l.contains(&format!("openat({dir_fd}, \".state.json.leasehold-tmp."))
            && l.contains("O_EXCL")
            && l.contains("O_NOFOLLOW")
            && l.contains("O_CLOEXEC")
    });
    let temp_fd = fd_of(lines[open]);
    let sync = find(open, &|l| l.contains(&format!("fsync({temp_fd})")));
    let rename = find(sync, &|l| {
        l.contains(&format!("renameat({dir_fd}, \".state.json.leasehold-tmp."))
            && l.contains(&format!("{dir_fd}, \"state.json\") = 0"))
    });
    let dir_sync = find(rename, &|l| {
        l.contains(&format!("fsync({dir_fd})")) && l.trim_end().ends_with("= 0")
    });
    let exit = find(dir_sync, &|l| l.contains("exit_group(0)"));
    assert!(dir < open && open < sync && sync < rename && rename < dir_sync && dir_sync < exit);
    assert_eq!(fs::read(&f).unwrap(), b"new");
}

/// Under `run`, a fenced write records the grant from the environment
/// without being told; the same token from another grant (a store restored
/// from a backup) is then refused as stale.
fn fenced_writes_under_run_record_the_grant_and_refuse_a_reissued_token() {
    let env = Env::new();
    let bin = crate::util::bin();
    let script = format!(
        "echo first | '{}' write out --fence-token \"$LEASEHOLD_TOKEN\" && printf '%s %s' \"$LEASEHOLD_TOKEN\" \"$LEASEHOLD_GRANT\" > grant",
        bin.display()
    );
    let (code, _, err) = env.run(&crate::util::sh_args("run", "job", &[], &script));
    assert_eq!(code, 0, "{err}");
    let seen = fs::read_to_string(env.file("grant")).unwrap();
    let (token, grant) = seen.split_once(' ').unwrap();
    assert_eq!(grant.len(), 16, "{seen:?}");
    // The lease is recorded too: `run` exports LEASEHOLD_NAME.
    assert_eq!(
        fs::read_to_string(env.file("out.fence")).unwrap(),
        format!("{seen} lease job\n")
    );
    // The same token, named by another grant: refused, nothing changed.
    let other = if grant == "0000000000000001" {
        "0000000000000002"
    } else {
        "0000000000000001"
    };
    let (code, _, err) = run_in(
        &env,
        &["write", "out", "--fence-token", token, "--fence-grant", other],
        b"reissued",
    );
    assert_eq!(code, 13, "{err}");
    assert!(
        err.contains(&format!("stale fencing token {token}")) && err.contains("issued twice"),
        "{err}"
    );
    assert_eq!(fs::read(env.file("out")).unwrap(), b"first\n");
    // Its own grant again passes; a writer naming no grant is judged by the
    // token alone (as before grants were recorded) and keeps the record.
    assert_eq!(
        run_in(
            &env,
            &["write", "out", "--fence-token", token, "--fence-grant", grant],
            b"again"
        )
        .0,
        0
    );
    assert_eq!(
        run_in(&env, &["write", "out", "--fence-token", token], b"token only").0,
        0
    );
    assert_eq!(
        fs::read_to_string(env.file("out.fence")).unwrap(),
        format!("{seen} lease job\n")
    );
    // A malformed grant is a usage error.
    let (code, _, err) = run_in(
        &env,
        &["write", "out", "--fence-token", token, "--fence-grant", "xyz"],
        b"x",
    );
    assert_eq!(code, 2, "{err}");
}

/// Whether `pid` runs (a zombie does not: it only waits to be reaped).
fn running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Issue 41, item 11: SIGTERM to `update` left its filter running,
/// orphaned. Now the filter's whole group (the filter and what it started)
/// is stopped, `update` exits 143 and FILE keeps its old content.
fn sigterm_to_update_stops_its_filter_group_and_writes_nothing() {
    let env = Env::new();
    let f = env.file("state");
    put(&f, b"old\n");
    // The filter and a child of it, both long-lived, their pids recorded.
    // (Its stderr away from the test's pipe, which an orphan would hold open.)
    let script = "sleep 120 2>/dev/null & echo $$ $! > pids.tmp && mv pids.tmp pids; wait; echo new";
    let update = env.spawn(&["update", "state", "--", "sh", "-c", script]);
    env.wait_for("pids");
    let pids = env.pids("pids");
    assert_eq!(pids.len(), 2, "{pids:?}");
    // A second update, waiting for FILE.lock (its descriptor open): SIGTERM
    // ends it at once, before its filter ever runs.
    let waiting = env.spawn(&["update", "state", "--", "sh", "-c", "touch second-ran"]);
    let lock = env.file("state.lock");
    let has_lock_open = |pid: u32| {
        fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == lock))
        })
    };
    assert!(
        leasehold_testkit::wait::wait_until(Duration::from_secs(20), || has_lock_open(waiting.id())).is_some(),
        "the second update never opened state.lock"
    );
    crate::util::signal(waiting.id(), "TERM");
    let (code, _, err) = crate::util::finish(waiting, Duration::from_secs(20));
    assert_eq!(code, 143, "{err}");
    assert!(
        err.contains("stopped by SIGTERM before the filter ran; state is unchanged"),
        "{err}"
    );
    assert!(!env.file("second-ran").exists());
    crate::util::signal(update.id(), "TERM");
    let (code, _, err) = crate::util::finish(update, Duration::from_secs(20));
    assert_eq!(code, 143, "{err}");
    assert!(
        err.contains("stopped by SIGTERM: the filter sh was stopped with it; state is unchanged"),
        "{err}"
    );
    assert!(
        leasehold_testkit::wait::wait_until(Duration::from_secs(20), || !pids.iter().any(|&p| running(p))).is_some(),
        "the filter's group outlived update: {:?} still run",
        pids.iter().filter(|&&p| running(p)).collect::<Vec<_>>()
    );
    assert_eq!(fs::read(&f).unwrap(), b"old\n");
}

/// The backstop: kill -9 gives `update` no chance to act, and the filter
/// (`PR_SET_PDEATHSIG`) dies with it all the same.
fn kill_9_of_update_takes_its_filter_with_it() {
    let env = Env::new();
    put(&env.file("state"), b"old\n");
    // Its stderr away from the test's pipe, which an orphan would hold open.
    let script = "echo $$ > pid.tmp && mv pid.tmp pid; exec sleep 120 2>/dev/null";
    let mut update = env.spawn(&["update", "state", "--", "sh", "-c", script]);
    env.wait_for("pid");
    let filter = env.pids("pid")[0];
    crate::util::signal(update.id(), "KILL");
    update.wait().unwrap();
    assert!(
        leasehold_testkit::wait::wait_until(Duration::from_secs(20), || !running(filter)).is_some(),
        "the filter (pid {filter}) outlived update, orphaned"
    );
    assert_eq!(fs::read(env.file("state")).unwrap(), b"old\n");
}

/// A filter that hangs held FILE.lock, and every `write` to FILE waited
/// silently. Now a write says which lock it waits for and who holds it,
/// and `--wait DUR` ends the wait: exit 11, FILE unchanged.
fn a_write_behind_a_hung_filter_names_the_holder_and_honours_wait() {
    let env = Env::new();
    let f = env.file("state");
    put(&f, b"old\n");
    let update = env.spawn(&["update", "state", "--", "sh", "-c", "touch started; sleep 120"]);
    env.wait_for("started");
    let started = Instant::now();
    let (code, _, err) = run_in(&env, &["write", arg(&f), "--wait", "1s"], b"new\n");
    let took = started.elapsed();
    let lock = format!("{}.lock", f.display());
    let holder = update.id();
    assert_eq!(code, 11, "{err}");
    assert!(
        err.contains(&format!(
            "waiting for {lock}, held by pid {holder}, to write {} (at most 1s)",
            f.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{lock} is still held by pid {holder} after waiting 1s; {} is unchanged",
            f.display()
        )),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(15),
        "{took:?}"
    );
    assert_eq!(fs::read(&f).unwrap(), b"old\n");
    crate::util::signal(update.id(), "TERM");
    assert_eq!(crate::util::finish(update, Duration::from_secs(20)).0, 143);
    // Free again: the write goes through at once.
    assert_eq!(run_in(&env, &["write", arg(&f), "--wait", "1s"], b"new\n").0, 0);
    assert_eq!(fs::read(&f).unwrap(), b"new\n");
}

/// `write` replaced the file with a new inode and dropped its extended
/// attributes (ACLs and security labels live there). Now they are set on
/// the new file before the rename.
fn write_keeps_extended_attributes() {
    let env = Env::new();
    let f = env.file("state");
    put(&f, b"old\n");
    match rustix::fs::setxattr(&f, "user.owner-note", b"keep me", rustix::fs::XattrFlags::empty()) {
        Err(rustix::io::Errno::NOTSUP) => {
            leasehold_testkit::unavailable(
                "the test directory's filesystem has no user extended attributes".to_owned(),
            );
        }
        other => other.unwrap(),
    }
    rustix::fs::setxattr(&f, "user.empty", b"", rustix::fs::XattrFlags::empty()).unwrap();
    for verb in [&["write", "state"][..], &["update", "state", "--", "tr", "a-z", "A-Z"]] {
        let (code, _, err) = run_in(&env, verb, b"new\n");
        assert_eq!(code, 0, "{err}");
        let mut value = [0; 64];
        let n = rustix::fs::getxattr(&f, "user.owner-note", &mut value[..])
            .unwrap_or_else(|e| panic!("{verb:?} dropped the attribute user.owner-note: {e}"));
        assert_eq!(&value[..n], b"keep me");
        assert_eq!(rustix::fs::getxattr(&f, "user.empty", &mut value[..]), Ok(0));
    }
    assert_eq!(fs::read(&f).unwrap(), b"NEW\n");
}

/// `write` renamed a new file over one name of a hard-linked file: the
/// other names silently kept the old content. Now it is refused, naming
/// the links, unless `--break-hard-links` says to.
fn write_refuses_a_hard_linked_file_unless_told_to_break_the_links() {
    let env = Env::new();
    let (f, other) = (env.file("state"), env.file("other-name"));
    put(&f, b"old\n");
    fs::hard_link(&f, &other).unwrap();
    let (code, _, err) = run_in(&env, &["write", arg(&f)], b"new\n");
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains(&format!(
            "{} has 2 hard links; replacing it would leave the other link with the old content, so nothing was written",
            f.display()
        )),
        "{err}"
    );
    assert_eq!(
        (fs::read(&f).unwrap(), fs::read(&other).unwrap()),
        (b"old\n".to_vec(), b"old\n".to_vec())
    );
    let (code, _, err) = run_in(&env, &["write", arg(&f), "--break-hard-links"], b"new\n");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (fs::read(&f).unwrap(), fs::read(&other).unwrap()),
        (b"new\n".to_vec(), b"old\n".to_vec())
    );
}

/// The fence record named no lease, so another lease's token 10 locked the
/// real holder (token 3) out with "token 10 was already written" and no
/// hint. Now the record names the lease, a token of another lease is
/// refused naming both (whatever the tokens), `--fence-new-lease` moves
/// the file to a lease, and records without a lease are still read.
fn the_fence_record_names_its_lease_and_refuses_another_leases_token() {
    let env = Env::new();
    let fence = |token: &str, lease: &str, extra: &[&str], data: &[u8]| {
        let mut args = vec!["write", "out", "--fence-token", token, "--fence-lease", lease];
        args.extend_from_slice(extra);
        run_in(&env, &args, data)
    };
    assert_eq!(fence("10", "other-job", &[], b"other\n").0, 0);
    assert_eq!(
        fs::read_to_string(env.file("out.fence")).unwrap(),
        "10 lease other-job\n"
    );
    let (code, _, err) = fence("3", "nightly", &[], b"nightly\n");
    assert_eq!(code, 13, "{err}");
    assert!(
        err.contains(
            "out is fenced by lease other-job (token 10 written), not by lease nightly; the file is unchanged"
        ),
        "{err}"
    );
    // The other way round too: a higher token of another lease is no newer.
    let (code, _, err) = fence("11", "nightly", &[], b"nightly\n");
    assert_eq!(code, 13, "{err}");
    assert_eq!(fs::read(env.file("out")).unwrap(), b"other\n");
    // Said on purpose: the file now belongs to nightly.
    let (code, _, err) = fence("3", "nightly", &["--fence-new-lease"], b"nightly\n");
    assert_eq!(code, 0, "{err}");
    assert_eq!(fs::read_to_string(env.file("out.fence")).unwrap(), "3 lease nightly\n");
    // A stale token of the same lease names the lease in its refusal.
    let (code, _, err) = fence("2", "nightly", &[], b"stale\n");
    assert_eq!(code, 13, "{err}");
    assert!(err.contains("token 3 of lease nightly was already written"), "{err}");
    // Under `run`, the lease comes from LEASEHOLD_NAME with the token.
    let (code, _, err) = env.run_with(
        &["write", "out", "--fence-token", "4"],
        &[("LEASEHOLD_TOKEN", "4"), ("LEASEHOLD_NAME", "other-job")],
    );
    assert_eq!(code, 13, "{err}");
    assert!(err.contains("fenced by lease nightly"), "{err}");
    // An old record (a token alone) is read and judged by its token.
    put(&env.file("old.fence"), b"10\n");
    let (code, _, err) = run_in(
        &env,
        &["write", "old", "--fence-token", "3", "--fence-lease", "nightly"],
        b"x",
    );
    assert_eq!(code, 13, "{err}");
    assert!(err.contains("token 10 was already written;"), "{err}");
    assert_eq!(
        run_in(
            &env,
            &["write", "old", "--fence-token", "10", "--fence-lease", "nightly"],
            b"x"
        )
        .0,
        0
    );
    assert_eq!(fs::read_to_string(env.file("old.fence")).unwrap(), "10 lease nightly\n");
}

/// Tokens start at 1: `--fence-token 0` was accepted (and recorded).
fn fence_token_zero_is_refused() {
    let env = Env::new();
    let (code, _, err) = run_in(&env, &["write", "out", "--fence-token", "0"], b"x");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("\"0\" is not a fencing token: stores issue tokens from 1 up"),
        "{err}"
    );
    assert!(!env.file("out").exists() && !env.file("out.fence").exists());
}

/// A socket at `FILE.lock` said "No such device or address" (ENXIO at
/// open), as for `lock`: now it is named, FILE unchanged.
fn a_socket_at_the_lock_path_of_a_state_file_is_named() {
    let env = Env::new();
    put(&env.file("state"), b"old\n");
    let _listener = std::os::unix::net::UnixListener::bind(env.file("state.lock")).unwrap();
    let (code, _, err) = run_in(&env, &["write", "state"], b"new\n");
    assert_eq!(code, 65, "{err}");
    assert!(
        err.contains("state.lock is a socket, not a regular file; it cannot be a lock file; nothing was written"),
        "{err}"
    );
    assert_eq!(fs::read(env.file("state")).unwrap(), b"old\n");
}
