//! The process fault cases run under `leasehold run` or `work` (or by hand):
//!
//! ```text
//! faults-client hold HISTORY RESOURCE HOLD_MS [x|s] [fenced] [deaf]
//!     # record the grant of $LEASEHOLD_NAME / $LEASEHOLD_TOKEN / $LEASEHOLD_GRANT
//!     # (under `work`: the claim of $LEASEHOLD_QUEUE/$LEASEHOLD_TASK_ID with
//!     # $LEASEHOLD_TASK_TOKEN; under `lock`: a holding of $FAULTS_LOCK_NAME,
//!     # which has no token), asked for at $FAULTS_ASKED_NS when the test
//!     # set it; write to the fenced RESOURCE ("" for none) every 2 ms for
//!     # HOLD_MS; record the end. `fenced`: every effect goes through the fence
//!     # (the holder is not judged by time, only by the fence's answers).
//!     # `deaf`: SIGTERM is ignored — from then on it records its own
//!     # activity (`fence=none`, resource `activity`) every 2 ms instead of
//!     # writing, until SIGKILL ends it or HOLD_MS passes.
//! faults-client act HISTORY PIDFILE AFTER_TERM_MS|deaf HOLD_MS
//!     # a descendant of a `run` command (started by it, maybe in another
//!     # process group or session: `setsid`, `timeout`): append this pid to
//!     # PIDFILE, then record activity of the command's grant (`fence=none`,
//!     # resource `activity`) every 5 ms for HOLD_MS — on SIGTERM going on
//!     # for AFTER_TERM_MS more (value `after-sigterm`), or, `deaf`, until
//!     # SIGKILL. The grant and its end are recorded by others (`hold`, the test).
//! faults-client write HISTORY RESOURCE NAME GRANT TOKEN [GRANT_ID]
//!     # one fenced write as the holder of GRANT (its label in the history)
//!     # with TOKEN (and leasehold's grant id): exit 0 accepted, 13 refused
//! faults-client candidate HISTORY STORE NAME ID TTL_MS
//!     # campaign for NAME as candidate ID (`Store::campaign`) until killed:
//!     # record each grant it leads with (`ID.pidPID.tokenT`, acting on its
//!     # own), and its end when leadership is lost, then campaign again
//! ```
//!
//! Every write asks leasehold (`FencedFile` with the token and the grant)
//! and records the attempt and the answer; this process decides nothing.
//! `hold` records its end also when it gets SIGTERM (as the supervisor or
//! its guard sends when stopping it), then exits 143 — unless `deaf`: then
//! only SIGKILL stops it, and the test records its end. Otherwise it exits 1
//! when a write failed (an error, not a refusal), 13 when leasehold refused
//! every write it made — a holder whose grant never let it write did not
//! do what the case is named for — and 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::Token;
use leasehold_faults::history::{Acts, Answer, Attempt, Fence as HistoryFence, GrantRecord, History};
use leasehold_faults::proc::boot_ns;
use leasehold_faults::resource::{Fence, FencedResource};

const USAGE: &str = "usage: faults-client hold HISTORY RESOURCE HOLD_MS [x|s] [fenced] [deaf] | act HISTORY PIDFILE AFTER_TERM_MS|deaf HOLD_MS | write HISTORY RESOURCE NAME GRANT TOKEN [GRANT_ID] | candidate HISTORY STORE NAME ID TTL_MS";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["hold", history, resource, hold_ms, ref rest @ ..] => hold(history, resource, hold_ms, rest),
        ["write", history, resource, name, grant, token, ref id @ ..] => {
            let token = Token(
                token
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("TOKEN {token:?} is not a number"))),
            );
            let grant_id = id.first().map(|g| {
                g.parse()
                    .unwrap_or_else(|e| fail(&format!("GRANT_ID {g:?} is not a grant id: {e}")))
            });
            let fence = Fence { token, grant: grant_id };
            let mut history = open_history(history);
            let value = format!("{grant}.late.{}", boot_ns());
            match FencedResource::new(resource.as_ref()).write(&mut history, name, grant, fence, &value) {
                Ok((Answer::Accepted, _)) => 0,
                Ok((Answer::Refused, _)) => 13,
                Ok((Answer::Failed, e)) => {
                    eprintln!("faults-client: the write failed: {}", e.unwrap_or_default());
                    1
                }
                Err(e) => fail(&format!("cannot record in the history: {e}")),
            }
        }
        ["candidate", history, store, name, id, ttl_ms] => candidate(history, store, name, id, ttl_ms),
        ["act", history, pidfile, after_term, hold_ms] => act(history, pidfile, after_term, hold_ms),
        _ => {
            eprintln!("{USAGE}");
            2
        }
    };
    std::process::exit(code);
}

fn fail(what: &str) -> ! {
    eprintln!("faults-client: {what}");
    std::process::exit(2)
}

fn open_history(path: &str) -> History {
    History::open(path.as_ref()).unwrap_or_else(|e| fail(&format!("cannot open the history {path}: {e}")))
}

/// Record that the holder of `grant` acted on its own, unfenced (`value`
/// says when): what the checker judges by time.
fn record_activity(history: &mut History, name: &str, grant: &str, token: Option<u64>, value: &str) {
    let action = Attempt {
        name,
        grant,
        token,
        resource: "activity",
        fence: HistoryFence::None,
        value,
    };
    if let Err(e) = history.attempt(&action, || (Answer::Accepted, ())) {
        fail(&format!("cannot record in the history: {e}"));
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The grant this process holds: (name, token, its label, the fence to
/// present; `None` for a `leasehold lock` holding, which has no token and
/// so cannot write through a fence).
fn held_grant() -> (String, Option<u64>, String, Option<Fence>) {
    let pid = std::process::id();
    let number = |var: &str, v: String| -> u64 {
        v.parse()
            .unwrap_or_else(|_| fail(&format!("${var} {v:?} is not a number")))
    };
    if let (Some(name), Some(token)) = (env("LEASEHOLD_NAME"), env("LEASEHOLD_TOKEN")) {
        let token = number("LEASEHOLD_TOKEN", token);
        // The library's own reading of `run`'s environment: the token and its grant.
        let fence = Fence::with_grant_from_env(Token(token)).unwrap_or_else(|e| fail(&e.to_string()));
        let label = fence
            .grant
            .map_or_else(|| format!("pid{pid}.token{token}"), |g| g.to_string());
        return (name, Some(token), label, Some(fence));
    }
    if let (Some(queue), Some(id), Some(token)) = (
        env("LEASEHOLD_QUEUE"),
        env("LEASEHOLD_TASK_ID"),
        env("LEASEHOLD_TASK_TOKEN"),
    ) {
        let token = number("LEASEHOLD_TASK_TOKEN", token);
        // A claim has no grant id: its token and holder name it.
        return (
            format!("{queue}/{id}"),
            Some(token),
            format!("claim{token}.pid{pid}"),
            Some(Fence::from(Token(token))),
        );
    }
    if let Some(name) = env("FAULTS_LOCK_NAME") {
        // Pids are reused within a long run: the start time makes the label unique.
        return (name, None, format!("lock.pid{pid}.at{}", boot_ns()), None);
    }
    fail("no grant: run me under `leasehold run` (LEASEHOLD_NAME, LEASEHOLD_TOKEN) or `leasehold work`")
}

fn hold(history: &str, resource: &str, hold_ms: &str, rest: &[&str]) -> i32 {
    let term = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone()) {
        fail(&format!("cannot handle SIGTERM: {e}"));
    }
    let exclusive = !rest.contains(&"s");
    let deaf = rest.contains(&"deaf");
    let acts = if rest.contains(&"fenced") {
        Acts::Fenced
    } else {
        Acts::Own
    };
    let hold = Duration::from_millis(
        hold_ms
            .parse()
            .unwrap_or_else(|_| fail(&format!("HOLD_MS {hold_ms:?} is not a number"))),
    );
    let (name, token, grant, fence) = held_grant();
    let pid = std::process::id();
    let mut history = open_history(history);
    let asked = env("FAULTS_ASKED_NS").and_then(|v| v.parse().ok());
    let record = GrantRecord {
        name: name.clone(),
        token,
        grant: grant.clone(),
        exclusive,
        by: format!("pid:{pid}"),
        asked,
        answered: boot_ns(),
        granted: None,
        acts,
    };
    if let Err(e) = history.grant(&record) {
        fail(&format!("cannot record the grant: {e}"));
    }
    let resource = match (resource.is_empty(), fence) {
        (true, _) => None,
        (false, Some(fence)) => Some((FencedResource::new(resource.as_ref()), fence)),
        (false, None) => fail("a `leasehold lock` holding has no token to write to a fenced RESOURCE with: pass \"\""),
    };
    let (mut written, mut accepted, mut failed) = (0u64, 0u64, None);
    let began = Instant::now();
    while began.elapsed() < hold && (deaf || !term.load(Ordering::Relaxed)) {
        if deaf && term.load(Ordering::Relaxed) {
            // Told to stop, and going on: what a command that ignores
            // SIGTERM does, recorded for the checker to judge by time.
            record_activity(&mut history, &name, &grant, token, "after-sigterm");
        } else if let Some((resource, fence)) = &resource {
            written += 1;
            match resource.write(&mut history, &name, &grant, *fence, &format!("{grant}.{written}")) {
                Ok((Answer::Accepted, _)) => accepted += 1,
                Ok((Answer::Refused, _)) => {}
                Ok((Answer::Failed, e)) => {
                    failed.get_or_insert(e.unwrap_or_default());
                }
                Err(e) => fail(&format!("cannot record in the history: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if let Err(e) = history.end(&name, &grant, boot_ns()) {
        fail(&format!("cannot record the end: {e}"));
    }
    if term.load(Ordering::Relaxed) {
        return 143;
    }
    // Writes happen only with a fence, so with a token.
    let token = token.map_or_else(|| "-".to_owned(), |t| t.to_string());
    if let Some(e) = failed {
        eprintln!("faults-client: a write of grant {grant} (token {token}) failed: {e}");
        return 1;
    }
    if written > 0 && accepted == 0 {
        eprintln!("faults-client: leasehold refused every write ({written}) of grant {grant} (token {token})");
        return 13;
    }
    0
}

/// A descendant of the command acting for its grant (see the module docs).
fn act(history: &str, pidfile: &str, after_term: &str, hold_ms: &str) -> i32 {
    let term = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone()) {
        fail(&format!("cannot handle SIGTERM: {e}"));
    }
    let ms = |what: &str, v: &str| {
        Duration::from_millis(
            v.parse()
                .unwrap_or_else(|_| fail(&format!("{what} {v:?} is not a number"))),
        )
    };
    let after_term = (after_term != "deaf").then(|| ms("AFTER_TERM_MS", after_term));
    let hold = ms("HOLD_MS", hold_ms);
    let (name, token, grant, _) = held_grant();
    let mut history = open_history(history);
    let line = format!("{}\n", std::process::id());
    if let Err(e) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(pidfile)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()))
    {
        fail(&format!("cannot record my pid in {pidfile}: {e}"));
    }
    let began = Instant::now();
    let mut termed: Option<Instant> = None;
    while began.elapsed() < hold {
        if termed.is_none() && term.load(Ordering::Relaxed) {
            termed = Some(Instant::now());
        }
        if let (Some(at), Some(more)) = (termed, after_term)
            && at.elapsed() >= more
        {
            return 143;
        }
        let value = if termed.is_some() { "after-sigterm" } else { "tree" };
        record_activity(&mut history, &name, &grant, token, value);
        std::thread::sleep(Duration::from_millis(5));
    }
    0
}

/// Lead `name` whenever this candidate can, recording each leadership;
/// only SIGKILL (or a failing store) ends it.
fn candidate(history: &str, store: &str, name: &str, id: &str, ttl_ms: &str) -> i32 {
    let url = leasehold::StoreUrl::parse(store).unwrap_or_else(|e| fail(&format!("STORE {store:?}: {e}")));
    let store = leasehold::Store::open(&url, &leasehold::StoreOptions::default())
        .unwrap_or_else(|e| fail(&format!("cannot open the store: {e}")));
    let store = Arc::new(store);
    let lease = leasehold::LeaseName::new(name).unwrap_or_else(|e| fail(&format!("NAME {name:?}: {e}")));
    let ttl = ttl_ms.parse().map_or_else(
        |_| fail(&format!("TTL_MS {ttl_ms:?} is not a number")),
        Duration::from_millis,
    );
    let options = leasehold::CampaignOptions {
        ttl,
        ..leasehold::CampaignOptions::new(id)
    };
    let mut history = open_history(history);
    let by = format!("pid:{}", std::process::id());
    loop {
        let asked = boot_ns();
        let leadership = match store.campaign(&lease, &options, &leasehold::Cancel::new()) {
            Ok(Some(leadership)) => leadership,
            Ok(None) => fail("the campaign ended without a cancel"),
            Err(e) => fail(&format!("the campaign failed: {e}")),
        };
        let grant = format!("{id}.pid{}.token{}", std::process::id(), leadership.token());
        let record = GrantRecord {
            name: name.to_owned(),
            token: Some(leadership.token().0),
            grant: grant.clone(),
            exclusive: true,
            by: by.clone(),
            asked: Some(asked),
            answered: boot_ns(),
            granted: None,
            acts: Acts::Own,
        };
        if let Err(e) = history.grant(&record) {
            fail(&format!("cannot record the grant: {e}"));
        }
        // Leads until the grant is lost; the test's SIGKILL usually comes first.
        let lost = leadership.loss_handle().expect("a leadership has a keeper");
        while lost.wait_timeout(Duration::from_secs(1)).is_none() && leadership.is_leader() {}
        if let Err(e) = history.end(name, &grant, boot_ns()) {
            fail(&format!("cannot record the end: {e}"));
        }
        eprintln!("faults-client: {by} lost {name}: {:?}", leadership.lost());
    }
}
