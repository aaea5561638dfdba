//! `leasehold run`: real processes, real signals, generous bounds.

use std::time::{Duration, Instant};

use leasehold_testkit::process::{alive, guard_of};
use leasehold_testkit::wait::wait_until;

use crate::util::{Env, FAST, finish, signal};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    exit_codes_pass_through_and_death_by_signal_is_128_plus_n,
    the_command_gets_the_lease_in_its_environment_and_stdio_passes_through,
    a_second_run_is_refused_skipped_or_waits_its_turn,
    a_run_waiting_for_the_run_it_is_inside_is_refused,
    the_old_if_held_wait_says_to_use_wait,
    arguments_that_cannot_stop_the_command_in_time_are_refused,
    signals_to_the_supervisor_are_forwarded_to_the_command,
    a_lease_lost_while_running_stops_the_command_with_75_within_the_ttl,
    an_unavailable_store_stops_the_command_before_the_holder_side_deadline,
    sigkill_of_the_supervisor_takes_the_whole_tree_down_within_grace_and_frees_the_lease,
    a_supervisor_paused_past_the_ttl_stops_the_command_on_its_boot_clock,
    a_silent_command_is_stopped_as_stalled_and_a_touched_progress_file_counts,
    a_stopped_command_is_continued_to_act_on_a_forwarded_sigterm,
    sigkill_of_the_guard_stops_what_left_the_group_before_the_lease_is_released,
    ctrl_z_on_a_terminal_gives_the_shell_back_and_fg_continues_the_command,
    run_starts_the_guard_beside_it_and_itself_when_that_one_is_another_build,
];

const LIMIT: Duration = Duration::from_secs(30);

fn run_args<'a>(name: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    crate::util::sh_args("run", name, options, script)
}

fn exit_codes_pass_through_and_death_by_signal_is_128_plus_n() {
    let env = Env::new();
    assert_eq!(env.run(&run_args("job", &[], "exit 7")).0, 7);
    assert_eq!(env.run(&run_args("job", &[], "exit 0")).0, 0);
    assert_eq!(env.run(&run_args("job", &[], "kill -TERM $$")).0, 128 + 15);
    let (code, _, err) = env.run(&["run", "job", "--", "/no/such/command"]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("cannot run /no/such/command"), "{err}");
    // Released every time: the lease is free again.
    assert!(env.acquire(&["job"]) > 0);
}

fn the_command_gets_the_lease_in_its_environment_and_stdio_passes_through() {
    let env = Env::new();
    let (code, out, err) = env.run(&run_args(
        "job",
        &["--owner", "nightly"],
        "echo \"$LEASEHOLD_NAME|$LEASEHOLD_TOKEN|$LEASEHOLD_OWNER|$LEASEHOLD_STORE\"; echo to-stderr >&2",
    ));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("job|1|nightly|{}", env.store_url()));
    assert!(err.contains("to-stderr"));
    // With --stall-timeout the output is piped through, unchanged.
    let (code, out, _) = env.run(&run_args("job", &["--stall-timeout", "5s"], "echo piped; exit 3"));
    assert_eq!((code, out.trim()), (3, "piped"));
}

fn a_second_run_is_refused_skipped_or_waits_its_turn() {
    let env = Env::new();
    let first = env.spawn(&run_args("job", &[], "touch started; sleep 2; touch first-done"));
    env.wait_for("started");

    let (code, _, err) = env.run(&run_args("job", &[], "touch ran"));
    assert_eq!(code, 11, "{err}");
    assert!(err.contains("job is held") && err.contains("--if-held"), "{err}");

    let (code, _, err) = env.run(&run_args("job", &["--if-held", "skip"], "touch ran"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    assert!(err.contains("skipped"), "{err}");
    assert!(!env.file("ran").exists());

    let (code, _, err) = env.run(&run_args("job", &["--wait", "20s"], "test -f first-done"));
    assert_eq!(code, 0, "the waiter ran only after the first run ended: {err}");
    assert_eq!(finish(first, LIMIT).0, 0);

    let (code, _, err) = env.run(&run_args("job", &["--wait", "1s", "--if-held", "skip"], "true"));
    assert_eq!(code, 2, "--wait and --if-held skip contradict each other: {err}");
}

/// Issue 22: the old spelling `--if-held wait` got "invalid value 'wait'"
/// and a list of values without waiting in it. It is a usage error that
/// names the flag to use instead (in JSON too), and runs nothing.
fn the_old_if_held_wait_says_to_use_wait() {
    let env = Env::new();
    for json in [false, true] {
        let mut args = run_args("job", &["--if-held", "wait"], "touch ran");
        if json {
            args.insert(0, "--json");
        }
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--wait") && err.contains("--if-held"), "{err}");
        if json {
            let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            assert!(doc["error"].as_str().unwrap().contains("--wait"), "{doc}");
        }
    }
    assert!(!env.file("ran").exists());
    let (code, _, err) = env.run(&run_args("job", &["--if-held", "never"], "true"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fail") && err.contains("skip"), "the values: {err}");
}

fn arguments_that_cannot_stop_the_command_in_time_are_refused() {
    let env = Env::new();
    // Defaults scale with the TTL: a TTL alone always works (it did not:
    // the fixed default grace of 10s refused --ttl 10s and shorter).
    for ttl in ["1s", "5s", "10s"] {
        let (code, _, err) = env.run(&["run", "job", "--ttl", ttl, "--", "true"]);
        assert_eq!(code, 0, "--ttl {ttl} with defaults: {err}");
        let (code, _, err) = env.run(&["work", "q", "--ttl", ttl, "--until-empty", "--", "true"]);
        assert_eq!(code, 0, "work --ttl {ttl} with defaults: {err}");
    }
    // What the user spelled out and cannot work is refused, naming it.
    let (code, _, err) = env.run(&["run", "job", "--ttl", "10s", "--grace", "10s", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--grace 10s") && err.contains("lower --grace"), "{err}");
    let (code, _, err) = env.run(&[
        "run",
        "job",
        "--ttl",
        "3s",
        "--heartbeat",
        "2s",
        "--grace",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = env.run(&["run", "job"]);
    assert_eq!(code, 2, "a command is required");
}

fn signals_to_the_supervisor_are_forwarded_to_the_command() {
    let env = Env::new();
    let child = env.spawn(&run_args(
        "job",
        &[],
        "trap 'exit 42' TERM; touch started; while :; do sleep 0.05; done",
    ));
    env.wait_for("started");
    signal(child.id(), "TERM");
    assert_eq!(finish(child, LIMIT).0, 42);
}

fn a_lease_lost_while_running_stops_the_command_with_75_within_the_ttl() {
    leasehold_testkit::need_program("sqlite3", "sqlite3");
    let env = Env::new();
    let child = env.spawn(&run_args(
        "job",
        &FAST,
        "echo $LEASEHOLD_TOKEN > token; touch started; exec sleep 60",
    ));
    env.wait_for("started");
    let token = std::fs::read_to_string(env.file("token")).unwrap();
    let lost_at = Instant::now();
    // The store loses the grant underneath (as a restore or a damaged
    // store would): nobody may release a running command's grant for it
    // (`grants::an_outsiders_release_never_lets_the_next_command_start_beside_the_running_one`).
    let deleted = std::process::Command::new("sqlite3")
        .arg(env.store_path())
        .arg("DELETE FROM lease_grant WHERE name = 'job'")
        .status()
        .expect("sqlite3");
    assert!(deleted.success());
    let new_token = env.acquire(&["job", "--ttl", "60s"]);
    assert!(new_token > token.trim().parse().unwrap());
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "stopped within the TTL: {:?}",
        lost_at.elapsed()
    );
    assert!(
        err.contains("refused a renewal") && err.contains("was stopped"),
        "{err}"
    );
    // The keeper's warning, in plain text: stderr is a pipe, not a terminal.
    assert!(err.contains("lease lost"), "{err}");
    assert!(!err.contains('\x1b'), "no colour codes off a terminal: {err:?}");
}

fn an_unavailable_store_stops_the_command_before_the_holder_side_deadline() {
    let env = Env::new();
    let child = env.spawn(&run_args("job", &FAST, "echo $$ > pid; touch started; exec sleep 60"));
    env.wait_for("started");
    let pid = env.pids("pid")[0];
    // Every successful renewal so far was sent before now, so the store
    // cannot expire the grant before locked_at + TTL.
    let db = rusqlite::Connection::open(env.store_path()).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked_at = Instant::now();
    let gone = wait_until(Duration::from_secs(10), || !alive(pid)).expect("command stopped");
    assert!(
        gone < Duration::from_secs(3),
        "gone {gone:?} after the store locked; the TTL is 3s"
    );
    // Keep it locked past 2×TTL, then let the supervisor finish.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(locked_at.elapsed()));
    db.execute_batch("ROLLBACK").unwrap();
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    // The renewal was out when the deadline passed; the store names its
    // locker (this test process) rather than blaming a pause.
    let locker = format!("its write lock is held by pid {}", std::process::id());
    assert!(
        err.contains("still unanswered: the store is locked") && err.contains(&locker),
        "{err}"
    );
    assert!(!err.contains("did not run"), "{err}");
}

fn sigkill_of_the_supervisor_takes_the_whole_tree_down_within_grace_and_frees_the_lease() {
    let env = Env::new();
    let script = "sh -c 'trap \"\" TERM; sleep 60' & echo $! >> pids; \
                  sleep 60 & echo $! >> pids; \
                  setsid sleep 60 & echo $! >> pids; \
                  echo $$ >> pids; touch started; wait";
    let mut child = env.spawn(&run_args("job", &["--grace", "1s"], script));
    env.wait_for("started");
    std::thread::sleep(Duration::from_millis(100));
    let pids = env.pids("pids");
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|&p| alive(p)));
    child.kill().unwrap();
    let killed_at = Instant::now();
    child.wait().unwrap();
    let gone = wait_until(Duration::from_secs(10), || pids.iter().all(|&p| !alive(p)));
    let gone = gone.expect("every process of the tree is gone");
    assert!(
        gone < Duration::from_secs(2),
        "gone after {gone:?}; grace 1s + 1s allowed"
    );
    // The supervisor and the group are gone: fast takeover, long before the 60s TTL.
    let mut token = None;
    wait_until(Duration::from_secs(5), || {
        let (code, out, _) = env.run(&["acquire", "job"]);
        token = (code == 0).then(|| out.trim().to_owned());
        token.is_some()
    })
    .expect("taken over at once");
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    let (_, history, _) = env.run(&["history", "job"]);
    assert!(history.contains("fast_takeover"), "{history}");
}

fn a_supervisor_paused_past_the_ttl_stops_the_command_on_its_boot_clock() {
    let env = Env::new();
    let options = ["--ttl", "2s", "--heartbeat", "400ms", "--grace", "500ms"];
    let child = env.spawn(&run_args("job", &options, "touch started; exec sleep 60"));
    env.wait_for("started");
    signal(child.id(), "STOP");
    std::thread::sleep(Duration::from_secs(3));
    // The store expired it; someone else takes it.
    assert!(env.acquire(&["job", "--ttl", "60s"]) >= 2);
    signal(child.id(), "CONT");
    let resumed = Instant::now();
    let (code, _, err) = finish(child, LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(resumed.elapsed() < Duration::from_secs(3), "{:?}", resumed.elapsed());
    assert!(
        err.contains("this process did not run for"),
        "noticed on the boot clock, not by a refused renewal: {err}"
    );
}

fn a_silent_command_is_stopped_as_stalled_and_a_touched_progress_file_counts() {
    let env = Env::new();
    let (code, out, err) = env.run(&run_args(
        "job",
        &["--stall-timeout", "500ms", "--grace", "500ms"],
        "echo begin; sleep 30",
    ));
    assert_eq!(code, 75, "{err}");
    assert_eq!(out.trim(), "begin");
    assert!(err.contains("stalled"), "{err}");
    let (code, _, err) = env.run(&run_args(
        "job",
        &["--stall-timeout", "500ms", "--progress-file", "p"],
        "for i in 1 2 3 4 5 6 7 8; do touch p; sleep 0.2; done",
    ));
    assert_eq!(code, 0, "progress by file: {err}");
}

/// `kill -SIG -- -PGID`.
fn signal_group(pgid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), "--", &format!("-{pgid}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} -- -{pgid}");
}

/// The state letter of `pid` (`/proc/PID/stat`), `None` when it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Issue 39's repro: a command stopped with SIGTSTP (^Z on a terminal
/// whose foreground `run` handed it) keeps a SIGTERM pending until it is
/// continued — `run` forwarded it and waited for ever, renewing. It sends
/// SIGCONT after forwarding: the command acts on the SIGTERM at once.
fn a_stopped_command_is_continued_to_act_on_a_forwarded_sigterm() {
    let env = Env::new();
    let child = env.spawn(&run_args(
        "job",
        &["--ttl", "6s", "--grace", "1s"],
        "echo $$ > pid; touch started; exec sleep 20",
    ));
    env.wait_for("started");
    let command = env.pids("pid")[0];
    signal_group(command, "TSTP");
    wait_until(Duration::from_secs(10), || state(command) == Some('T')).expect("the command stopped");
    let asked = Instant::now();
    signal(child.id(), "TERM");
    let (code, _, err) = finish(child, Duration::from_secs(15));
    assert_eq!(code, 128 + 15, "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "ended {:?} after the SIGTERM: grace 1s",
        asked.elapsed()
    );
}

/// Issue 39: kill -9 of the guard (the OOM killer; `pkill -9 -f JOB`
/// matches the guard's command line too). `run` — a child subreaper —
/// adopts what the guard kept, stops it (SIGTERM, SIGKILL after the grace
/// period; here a loop in a session of its own, deaf to SIGTERM) and only
/// then releases: the lease is held for as long as the loop runs, and
/// free once `run` has exited 1, naming the dead guard.
fn sigkill_of_the_guard_stops_what_left_the_group_before_the_lease_is_released() {
    let env = Env::new();
    let script = "setsid sh -c 'trap \"\" TERM; echo $$ > pid; while :; do sleep 0.05; done' & \
                  touch started; exec sleep 60";
    let child = env.spawn(&run_args("job", &["--grace", "1s"], script));
    env.wait_for("started");
    wait_until(Duration::from_secs(10), || env.pids("pid").len() == 1).expect("the loop started");
    let looping = env.pids("pid")[0];
    signal(guard_of(child.id()), "KILL");
    let (mut refused, killed) = (0, Instant::now());
    while alive(looping) && killed.elapsed() < LIMIT {
        let (code, _, err) = env.run(&["acquire", "job", "--ttl", "60s"]);
        if code != 11 {
            signal(looping, "KILL");
        }
        assert_eq!(code, 11, "the lease passed on while the loop ran: {err}");
        refused += 1;
    }
    let survived = alive(looping);
    if survived {
        signal(looping, "KILL");
    }
    assert!(!survived, "the loop outlived its guard by {LIMIT:?}");
    let (code, _, err) = finish(child, LIMIT);
    assert!(refused > 0, "the premise: the loop outlived its guard");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the guard process of job died unexpectedly; the command's whole tree was stopped"),
        "{err}"
    );
    assert!(env.acquire(&["job"]) > 0, "released");
}

/// Issue 39: on a terminal, ^Z stopped only the command (`run` had handed
/// it the terminal), and the shell, waiting for `run`, gave no prompt back
/// — ^C did nothing either. Now `run` stops with its command, as a job
/// does: an interactive bash in a pseudo-terminal (`script`) shows the job
/// stopped and its prompt; `fg` continues both, and ^C reaches the command.
fn ctrl_z_on_a_terminal_gives_the_shell_back_and_fg_continues_the_command() {
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};
    leasehold_testkit::need_program("script", "util-linux");
    leasehold_testkit::need_program("bash", "bash");
    let env = Env::new();
    let shell = env
        .std_cmd(&[])
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect::<Vec<_>>();
    let mut script = std::process::Command::new("script")
        .args(["-q", "-c", "bash --norc --noprofile -i", "/dev/null"])
        .envs(shell)
        .current_dir(env.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn script");
    let screen = Arc::new(Mutex::new(String::new()));
    let mut out = script.stdout.take().unwrap();
    let seen = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut input = script.stdin.take().unwrap();
    let mut type_in = |text: &str| {
        input.write_all(text.as_bytes()).unwrap();
        input.flush().unwrap();
    };
    let shows = |text: &str, after: usize| {
        wait_until(Duration::from_secs(15), || {
            screen.lock().unwrap()[after..].contains(text)
        })
        .is_some()
    };
    let len = || screen.lock().unwrap().len();
    type_in(&format!(
        "{} run job --ttl 20s --grace 1s -- sh -c 'echo $$ > pid; echo RUN\"\"NING; exec sleep 30'\n",
        crate::util::bin().display()
    ));
    assert!(shows("RUNNING", 0), "the command never ran: {}", screen.lock().unwrap());
    let command = env.pids("pid")[0];
    let at = len();
    type_in("\x1a");
    // bash reports its job stopped once it is back at its prompt.
    let stopped = shows("Stopped", at);
    let at = len();
    type_in("fg\n");
    // Continued: `run` continues the command once bash continued `run`.
    let continued = wait_until(Duration::from_secs(10), || state(command) != Some('T')).is_some();
    type_in("\x03");
    let ended = wait_until(Duration::from_secs(10), || !alive(command)).is_some();
    // bash reads the next line once `run` has exited.
    type_in("echo CODE=$?\n");
    let code = shows("CODE=130", at);
    type_in("exit\n");
    let _ = finish_script(script);
    let screen = screen.lock().unwrap().clone();
    assert!(stopped, "^Z did not give the shell back: {screen}");
    assert!(
        continued && ended,
        "fg did not continue the command, or ^C did not reach it: {screen}"
    );
    assert!(code, "run did not exit 130 after ^C: {screen}");
}

/// Wait for `script` (killing it after a while).
fn finish_script(mut script: std::process::Child) -> Option<std::process::ExitStatus> {
    if wait_until(Duration::from_secs(10), || script.try_wait().ok().flatten().is_some()).is_none() {
        let _ = script.kill();
    }
    script.wait().ok()
}

/// `run` inside `run` on its own name with a bare `--wait` waited on its
/// own parent for ever (issue 41, item 5): the outer run releases only
/// once its command — the inner run among it — has ended. Refused at once,
/// saying why, with nothing queued; as is `acquire --wait` from the same
/// command, and the inner run's own command never runs. A second name
/// still waits and runs as before. (`timeout 20`: a regression fails
/// with 124 rather than hanging the suite.)
fn a_run_waiting_for_the_run_it_is_inside_is_refused() {
    let env = Env::new();
    let bin = crate::util::bin().display().to_string();
    let script = format!(
        "timeout 20 '{bin}' run job --wait -- touch inner-ran; echo run=$?; \
         timeout 20 '{bin}' acquire job --wait 1h; echo acquire=$?; \
         timeout 20 '{bin}' run other --wait -- true; echo other=$?"
    );
    let started = std::time::Instant::now();
    let (code, out, err) = env.run(&["run", "job", "--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        out.contains("run=2") && out.contains("acquire=2") && out.contains("other=0"),
        "{out}{err}"
    );
    assert!(!env.file("inner-ran").exists(), "the inner run ran its command: {err}");
    assert!(
        err.contains("job is held by pid") && err.contains("waiting for it would never end"),
        "{err}"
    );
    let (_, status, _) = env.run(&["status", "job", "--json"]);
    assert!(
        status.contains("\"waiters\": 0"),
        "a refused waiter was queued: {status}"
    );
}

/// `leasehold run` starts the small `leasehold-guard` beside it (a shorter
/// start than its own), and never a guard of another build: beside a
/// `leasehold` upgraded alone, the old `leasehold-guard` starts nothing
/// and `leasehold` guards the command itself — as it does with no
/// `leasehold-guard` beside it. The guard is the command's parent.
fn run_starts_the_guard_beside_it_and_itself_when_that_one_is_another_build() {
    let env = Env::new();
    let guard = crate::util::bin().with_file_name("leasehold-guard");
    if !guard.is_file() {
        // `cargo test -p leasehold-cli` alone does not build it.
        leasehold_testkit::unavailable("target/debug/leasehold-guard is not built: cargo build -p leasehold-guard");
    }
    let installed = env.path().join("bin");
    std::fs::create_dir(&installed).unwrap();
    // A link, not a copy: the debug binaries are large (same file system as
    // target/ or not, a copy is the fallback).
    let install = |from: &std::path::Path, to: &std::path::Path| {
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).unwrap();
        }
    };
    let leasehold = installed.join("leasehold");
    install(&crate::util::bin(), &leasehold);
    let beside = installed.join("leasehold-guard");
    let parent_of_the_command = || {
        let output = env
            .cmd_of(
                &leasehold,
                &["run", "job", "--", "sh", "-c", "readlink /proc/$PPID/exe"],
            )
            .env("LEASEHOLD_GUARD", "/nowhere") // not read by `leasehold run`
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap().to_string_lossy().into_owned();

    // None beside it: itself.
    assert_eq!(parent_of_the_command(), canonical(&leasehold));
    // This build's beside it: that one.
    install(&guard, &beside);
    assert_eq!(parent_of_the_command(), canonical(&beside));
    // Another build's (here: this build's guard told it is another's).
    std::fs::remove_file(&beside).unwrap();
    let tried = env.path().join("tried");
    leasehold_testkit::process::write_other_builds_guard(&beside, &guard, &tried);
    assert_eq!(parent_of_the_command(), canonical(&leasehold));
    assert_eq!(
        std::fs::read_to_string(&tried).unwrap().lines().count(),
        1,
        "tried once, first"
    );
}
