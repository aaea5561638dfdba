//! The queue under kills and pauses (fault case 23), fenced-write interleavings
//! in process (24), and the flock race with kill -9 (17).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use leasehold::Token;
use leasehold_faults::checker::Report;
use leasehold_faults::history::{Acts, Answer, Attempt, Fence, GrantRecord, History};
use leasehold_faults::proc::{self, Sandbox, boot_ns};
use leasehold_faults::resource::FencedResource;
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use rustix::process::Signal;

use crate::common::{client, grants, history, history_path, judge};

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case23_the_queue_loses_nothing_and_completes_each_task_at_most_once,
    case24_racing_fenced_writes_never_accept_below_the_high_water_mark,
    case17_the_flock_race_with_kill_9_never_has_two_holders,
];

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// `leasehold task done|fail Q ID --token T ...` as `claim` (the task's
/// name and the claim's label in the history): an attempt through the
/// store's gate (it judges the token), recorded with its answer — exit 0
/// accepted, 12 refused (the claim was lost).
fn report_task(
    sb: &Sandbox,
    history: &mut History,
    (task, claim, token): (&str, &str, &str),
    args: &[&str],
) -> (i32, String) {
    let attempt = Attempt {
        name: task,
        grant: claim,
        token: token.parse().ok(),
        resource: task,
        fence: Fence::Store,
        value: if args[1] == "done" { "done" } else { "-" },
    };
    let (_, (code, err)) = history
        .attempt(&attempt, || {
            let (code, _, err) = sb.run(args);
            let answer = match code {
                0 => Answer::Accepted,
                12 => Answer::Refused,
                _ => Answer::Failed,
            };
            (answer, (code, err))
        })
        .expect("record in the history");
    (code, err)
}

/// How long a queue worker waits with nothing to claim before it gives up
/// on the tasks left (far above the 2.5 s a retry's backoff can take here).
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// Whether every task of queue `q` is done or dead (none pending or running).
fn all_finished(sb: &Sandbox) -> bool {
    let (code, out, _) = sb.run(&["task", "stats", "q", "--json"]);
    let stats = &json(&out)["queues"][0];
    code == 0 && stats["pending"].as_u64() == Some(0) && stats["running"].as_u64() == Some(0)
}

/// Worker `w` of run `run`: claims until the queue is finished (or idle
/// for [`IDLE_LIMIT`]); fails the poison task, abandons or pauses some
/// claims as the run says, and counts its acknowledged completions in
/// `accepted` and those accepted after a pause past the lease in `late`.
fn queue_worker(sb: &Sandbox, run: usize, w: usize, accepted: &Mutex<HashMap<String, u32>>, late: &Mutex<usize>) {
    let mut rng = Rng::new((run * 100 + w) as u64);
    let mut history = history(sb);
    let mut idle_since: Option<std::time::Instant> = None;
    loop {
        let claimed_at = std::time::Instant::now();
        let asked = boot_ns();
        let (code, out, err) = sb.run(&["task", "claim", "q", "--ttl", "1s"]);
        let answered = boot_ns();
        if code == 10 {
            // Nothing to claim now: a task may still come back
            // (a failed attempt's backoff, 2 s ± 25 % after the
            // second; an abandoned claim's lapse). Done when
            // every task is done or dead — or when nothing came
            // for IDLE_LIMIT, and the run counts what is left
            // as lost. (Stopping after 2 s idle lost the poison
            // task's last attempt on a slow run.)
            let since = *idle_since.get_or_insert_with(std::time::Instant::now);
            if all_finished(sb) || since.elapsed() > IDLE_LIMIT {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert_eq!(code, 0, "claim: {err}");
        idle_since = None;
        let c = json(&out);
        let id = c["id"].as_str().unwrap().to_owned();
        let token = c["token"].as_u64().unwrap().to_string();
        let (task, claim) = (format!("q/{id}"), format!("claim{token}.w{w}"));
        // The worker's only effect is its report, which the store
        // judges: it acts through that fence alone.
        history
            .grant(&GrantRecord {
                name: task.clone(),
                token: token.parse().ok(),
                grant: claim.clone(),
                exclusive: true,
                by: format!("worker:{w}"),
                asked: Some(asked),
                answered,
                granted: None,
                acts: Acts::Fenced,
            })
            .unwrap();
        let me = (task.as_str(), claim.as_str(), token.as_str());
        if id == "t0" {
            let _ = report_task(
                sb,
                &mut history,
                me,
                &["task", "fail", "q", &id, "--token", &token, "--error", "poison"],
            );
            continue;
        }
        let roll = rng.below(100);
        if roll < 10 {
            continue; // died holding the claim
        }
        let paused = roll < 15;
        if paused {
            std::thread::sleep(Duration::from_millis(1300));
        }
        let (code, err) = report_task(sb, &mut history, me, &["task", "done", "q", &id, "--token", &token]);
        match code {
            0 => {
                *accepted.lock().unwrap().entry(id).or_default() += 1;
                if paused {
                    // Accepted after its lease ran out: only if no one else claimed it.
                    let (_, out, _) = sb.run(&["task", "show", "q", c["id"].as_str().unwrap(), "--json"]);
                    if json(&out)["attempts"].as_u64() != c["attempt"].as_u64() {
                        *late.lock().unwrap() += 1;
                    }
                }
            }
            12 if paused => {}
            // Refused without a pause: the machine was slow enough
            // that the 1 s claim lapsed anyway. That is a refusal,
            // not a violation — unless the claim was certainly
            // still live (the `done` finished within 1 s of the
            // claim being asked for, so before it could expire).
            12 if claimed_at.elapsed() >= Duration::from_secs(1) => {}
            _ => panic!(
                "done {id}: exit {code} {:?} after the claim: {err}",
                claimed_at.elapsed()
            ),
        }
    }
}

/// One run: TASKS tasks (one poison: always fails), WORKERS workers; 10% of
/// claims abandoned (the worker "died"), 5% paused past their lease before
/// completing. Each claim is a grant of its task (`q/ID`) in the history,
/// each completion an attempt through the store's gate; the task's final
/// state is read back where a completion was acknowledged. Returns (lost,
/// doubled, late completions accepted, poison dead?, the checker's report).
fn queue_run(run: usize, tasks: usize, workers: usize) -> (usize, usize, usize, bool, Report) {
    let sb = Arc::new(Sandbox::new());
    let mut lines = String::new();
    for i in 0..tasks {
        let _ = writeln!(lines, "{{\"id\":\"t{i}\",\"payload\":{i},\"max_attempts\":3}}");
    }
    let mut child = sb
        .cmd(&["task", "add", "q", "--batch"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let accepted = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let late = Arc::new(Mutex::new(0usize));
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (sb, accepted, late) = (sb.clone(), accepted.clone(), late.clone());
            std::thread::spawn(move || queue_worker(&sb, run, w, &accepted, &late))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let accepted = accepted.lock().unwrap();
    let doubled = accepted.values().filter(|n| **n > 1).count();
    let (_, out, _) = sb.run(&["task", "stats", "q", "--json"]);
    let stats = json(&out)["queues"][0].clone();
    let done = stats["done"].as_u64().unwrap_or(0) as usize;
    let dead = stats["dead"].as_u64().unwrap_or(0) as usize;
    let (_, out, _) = sb.run(&["task", "show", "q", "t0", "--json"]);
    let poison_dead = json(&out)["state"] == "dead";
    // An acknowledged completion is never lost: each such task reads back done.
    let mut history = history(&sb);
    for id in accepted.keys() {
        let at = boot_ns();
        let (_, out, _) = sb.run(&["task", "show", "q", id, "--json"]);
        let found = json(&out)["state"].as_str().unwrap_or("missing").to_owned();
        history.read(&format!("q/{id}"), at, &found).unwrap();
    }
    let report = judge(&sb, &[]);
    (tasks - done - dead, doubled, *late.lock().unwrap(), poison_dead, report)
}

/// fault case 23: 1,000 tasks, 8 workers, 10% of claims abandoned, 5% paused
/// past their lease, a poison task; 10 runs (CI: 1 run of 40 tasks, 3 workers).
/// (SQLite has no server to restart: every CLI call opens the store anew.)
fn case23_the_queue_loses_nothing_and_completes_each_task_at_most_once() {
    let (runs, tasks, workers) = (count(1, 10), count(40, 1000), count(3, 8));
    let results: Vec<_> = (0..runs).map(|r| queue_run(r, tasks, workers)).collect();
    let lost: usize = results.iter().map(|r| r.0).sum();
    let doubled: usize = results.iter().map(|r| r.1).sum();
    let late: usize = results.iter().map(|r| r.2).sum();
    let poison = results.iter().filter(|r| r.3).count();
    let mut report = Report::new("case 23");
    for r in &results {
        report.merge(r.4.clone());
    }
    figure(
        23,
        &format!(
            "lost {lost} / doubled {doubled} / late completions accepted {late} over {runs} runs of {tasks} tasks x {workers} workers; poison task dead in {poison} of {runs}; \
             checker: {} claims, {} reports ({} accepted, {} refused), {} violations",
            report.counts.grants,
            report.counts.writes,
            report.counts.accepted,
            report.counts.refused,
            report.total()
        ),
    );
    report.assert_clean();
    assert_eq!((lost, doubled, late, poison), (0, 0, 0, runs));
}

/// fault case 24: tokens t and t+1 race through every step of a fenced write
/// (two threads released together, each through the library's fenced
/// write with a random head start): the file ends with t+1's content
/// whenever t+1 was accepted, and t is never accepted after t+1.
fn case24_racing_fenced_writes_never_accept_below_the_high_water_mark() {
    let rounds = count(200, 10_000);
    let sb = Sandbox::new();
    let path = sb.file("state");
    let file = Arc::new(FencedResource::new(&path));
    let mut stale = Vec::new();
    let mut rng = Rng::from_env("case 24");
    for round in 0..rounds as u64 {
        let t = round * 2 + 1;
        let barrier = Arc::new(Barrier::new(2));
        let delays = [rng.below(300), rng.below(300)];
        let threads: Vec<_> = [t, t + 1]
            .into_iter()
            .zip(delays)
            .map(|(token, delay)| {
                let (file, barrier) = (file.clone(), barrier.clone());
                let mut history = history(&sb);
                std::thread::spawn(move || {
                    barrier.wait();
                    std::thread::sleep(Duration::from_micros(delay));
                    let grant = format!("t{token}");
                    let (answer, _) = file
                        .write(&mut history, "state", &grant, Token(token).into(), &token.to_string())
                        .expect("record in the history");
                    answer == Answer::Accepted
                })
            })
            .collect();
        let ok: Vec<bool> = threads.into_iter().map(|h| h.join().unwrap()).collect();
        let content = std::fs::read_to_string(&path).unwrap();
        if !ok[1] || content != (t + 1).to_string() {
            stale.push(format!(
                "round {round}: t={t} accepted {}, t+1 accepted {}, file holds {content}",
                ok[0], ok[1]
            ));
        }
    }
    let report = judge(&sb, &[&path]);
    figure(
        24,
        &format!(
            "stale accepted in {rounds} interleavings of t and t+1 (library fenced write): {}; checker: {} writes ({} accepted, {} refused), {} violations",
            stale.len(),
            report.counts.writes,
            report.counts.accepted,
            report.counts.refused,
            report.total()
        ),
    );
    report.assert_clean();
    assert!(stale.is_empty(), "{stale:#?}");
}

/// fault case 17: processes race for one `leasehold lock` while some are
/// `SIGKILLed` at random. Each holder is `faults-client hold` exec'd by
/// `lock` (it inherits the locked descriptor): it records its holding (a
/// grant with no token) when it starts and its end when it is done, and
/// the checker judges that no holding began before the previous one ended.
/// A killed holder cannot record its end: the test records it at the kill
/// (a process `SIGKILLed` never runs again once `kill` returns; the kernel
/// releases its lock only as it exits, later). 8,000 lockings (CI: 60).
fn case17_the_flock_race_with_kill_9_never_has_two_holders() {
    let total = count(60, 8000);
    let workers = 4;
    let sb = Arc::new(Sandbox::new());
    let killed = Arc::new(Mutex::new(0usize));
    let lock = sb.file("the.lock").display().to_string();
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (sb, killed, lock) = (sb.clone(), killed.clone(), lock.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(w as u64 + 17);
                let history_file = history_path(&sb).display().to_string();
                let mut history = history(&sb);
                for _ in 0..total / workers {
                    let child = sb
                        .cmd(&[
                            "lock",
                            &lock,
                            "--wait=60s",
                            "--",
                            client(),
                            "hold",
                            &history_file,
                            "",
                            "2",
                        ])
                        .env("FAULTS_LOCK_NAME", &lock)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap();
                    let pid = child.id(); // `lock` execs the holder: its pid
                    let mut killed_at = None;
                    if rng.below(10) == 0 {
                        std::thread::sleep(Duration::from_millis(rng.below(5)));
                        proc::signal(child.id(), Signal::KILL);
                        killed_at = Some(boot_ns());
                        *killed.lock().unwrap() += 1;
                    }
                    let out = child.wait_with_output().unwrap();
                    // Killed while holding (it recorded its start, not its end).
                    if let Some(at) = killed_at
                        && out.status.code().is_none()
                    {
                        // Its pid may have held before (pids are reused): the
                        // holding of that pid still open is this one's.
                        if let Some(g) = grants(&sb, &lock)
                            .into_iter()
                            .find(|g| g.pid() == Some(pid) && g.end.is_none())
                        {
                            history.end(&lock, &g.grant, at).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let report = judge(&sb, &[]);
    figure(
        17,
        &format!(
            "{} holdings in {total} lockings ({} SIGKILLed): {} violations (two holders at once: {})",
            report.counts.grants,
            killed.lock().unwrap(),
            report.total(),
            report.count("overlap")
        ),
    );
    report.assert_clean();
    assert!(
        report.counts.grants * 2 > total,
        "only {} of {total} lockings recorded a holding: {report}",
        report.counts.grants
    );
}
