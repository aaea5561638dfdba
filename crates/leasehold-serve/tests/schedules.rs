//! Schedules on the status page: `/api/schedules` and
//! `/api/schedules/NAME` (the documents of `schedule list --json` and
//! `schedule show --json`), `/metrics` and the page, for a store whose
//! schedules and slot records were made through the library at fixed
//! times — so every figure is known here, worked out by hand.
//!
//! (The page in a real browser: tests/ui, `test_schedules_show_their_slots`.)

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::schedule::Expect;
use leasehold::schedule::{Action, Schedule, ScheduleSpec, SlotClaim, SlotOutcome, SlotRecord};
use leasehold::{Binding, LeaseName, Store, json};
use leasehold_serve::http::{Body, Request, parse_query};
use leasehold_serve::{App, Config};
use serde_json::{Value, json};

/// 2026-01-01T00:00:00Z: both schedules were added then.
const ORIGIN: u64 = 1_767_225_600;

/// `hours` (and `ms`) after [`ORIGIN`].
fn at(hours: u64, ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(ORIGIN + hours * 3600) + Duration::from_millis(ms)
}

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).unwrap()
}

fn schedule(n: &str, cron: &str, zone: Option<&str>, action: Action) -> Schedule {
    Schedule::new(name(n), ScheduleSpec::parse(cron, zone).unwrap(), action, at(0, 0))
}

/// Claim what is due of `n` at `now` as a daemon of this process would;
/// the record of the slot it fires.
fn claim(store: &Store, n: &str, now: SystemTime) -> SlotRecord {
    let schedules = store.schedules().unwrap();
    let kept = schedules.get(&name(n)).unwrap().expect("the schedule");
    let daemon = leasehold::identity::holder(Binding::ThisProcess).unwrap();
    match schedules.claim(&kept, now, &daemon, 1000).unwrap() {
        SlotClaim::Claimed { fired: Some(fired), .. } => fired,
        other => panic!("{n} at {now:?}: {other:?}"),
    }
}

/// Write what became of a claimed slot.
fn report(store: &Store, n: &str, mut record: SlotRecord, outcome: SlotOutcome, exit_code: Option<i32>) {
    record.outcome = outcome;
    record.started = Some(record.slot + Duration::from_millis(200));
    record.ended = Some(record.slot + Duration::from_secs(5));
    record.token = Some(7);
    record.exit_code = exit_code;
    record.detail = exit_code.map_or_else(String::new, |c| format!("exit {c}"));
    assert!(
        store
            .schedules()
            .unwrap()
            .report(&name(n), &record, Expect::Anything)
            .unwrap()
    );
}

/// A store with two schedules, added at [`ORIGIN`]:
///
/// - `hourly` (`@every 1h`, a command): claimed at 10:00.100 — slots 1:00
///   to 9:00 missed (one record, count 9), 10:00 ran; at 11:00.050 —
///   11:00 failed (exit 3); at 15:00.010 — 12:00 to 14:00 missed (count
///   3), 15:00 claimed and not reported since.
/// - `sweep` (`*/5 * * * *` in Europe/Berlin, a task): claimed at
///   01:00.100 — the 11 slots from 00:05 to 00:55 missed, 01:00 enqueued;
///   then paused.
fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("s.db")).unwrap();
    let schedules = store.schedules().unwrap();
    let run = Action::Run {
        command: vec!["./report.sh".into(), "--all".into()],
    };
    schedules
        .add_at(&schedule("hourly", "@every 1h", None, run), false, Some(at(0, 0)))
        .unwrap();
    let enqueue = Action::Enqueue {
        queue: "jobs".into(),
        payload: json!({ "kind": "sweep" }),
    };
    schedules
        .add_at(
            &schedule("sweep", "*/5 * * * *", Some("Europe/Berlin"), enqueue),
            false,
            Some(at(0, 0)),
        )
        .unwrap();
    let ten = claim(&store, "hourly", at(10, 100));
    report(&store, "hourly", ten, SlotOutcome::Ran, Some(0));
    let eleven = claim(&store, "hourly", at(11, 50));
    report(&store, "hourly", eleven, SlotOutcome::Failed, Some(3));
    assert_eq!(claim(&store, "hourly", at(15, 10)).slot, at(15, 0));
    let one = claim(&store, "sweep", at(1, 100));
    report(&store, "sweep", one, SlotOutcome::Enqueued, None);
    assert!(schedules.set_paused(&name("sweep"), true).unwrap());
    (dir, store)
}

/// The application over `store`, read once (it reads again in an hour).
fn app(store: Store) -> App {
    let config = Config {
        refresh: Duration::from_secs(3600),
        ..Config::default()
    };
    App::new(store, &config, None)
}

/// GET `path`: the status and the body.
fn get(app: &App, path: &str) -> (u16, String) {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let response = app.handle(&Request {
        method: "GET".into(),
        path: path.into(),
        query: parse_query(query),
        headers: vec![],
        body: vec![],
        peer: SocketAddr::from(([127, 0, 0, 1], 1)),
    });
    let Body::Bytes(body) = response.body else {
        panic!("{path}: a stream")
    };
    (response.status, String::from_utf8(body).unwrap())
}

fn get_json(app: &App, path: &str) -> Value {
    let (status, body) = get(app, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn rfc3339(t: SystemTime) -> String {
    leasehold::format_time(t)
}

/// The first whole hour after `t`, in Unix seconds: `hourly`'s next slot
/// as of `t`, worked out apart from the library.
fn next_hour(t: SystemTime) -> u64 {
    (t.duration_since(UNIX_EPOCH).unwrap().as_secs() / 3600 + 1) * 3600
}

/// `next` set aside, everywhere: it moves with the clock (checked in
/// `the_api_documents_say_what_the_store_holds`).
fn steady(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            if m.contains_key("next") {
                m.insert("next".to_owned(), Value::Null);
            }
            for x in m.values_mut() {
                *x = steady(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = steady(x.take());
            }
        }
        _ => {}
    }
    v
}

/// The documents are what `schedule list --json` and `schedule show
/// --json` print: built by the same code from what the store holds.
#[test]
fn the_api_documents_are_what_json_prints() {
    let (_dir, store) = store();
    let app = app(store);
    let schedules = app.store().schedules().unwrap();
    let all = schedules.list().unwrap();
    let list = json::value(&json::Schedules {
        schedules: all.iter().map(|k| json::schedule(k, SystemTime::now())).collect(),
    });
    assert_eq!(steady(get_json(&app, "/api/schedules")), steady(list));
    for (path, n, limit) in [
        ("/api/schedules/hourly?limit=4", "hourly", 4),
        ("/api/schedules/hourly", "hourly", 20),
        ("/api/schedules/sweep", "sweep", 20),
    ] {
        let kept = schedules.get(&name(n)).unwrap().unwrap();
        let slots = schedules.slots(&name(n), limit).unwrap();
        let show = json::value(&json::ScheduleShown {
            schedule: json::schedule(&kept, SystemTime::now()),
            slots: slots.iter().map(|r| json::slot(&kept.schedule.name, r)).collect(),
        });
        assert_eq!(steady(get_json(&app, path)), steady(show), "{path}");
    }
    let (status, body) = get(&app, "/api/schedules/nothing-here");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no such schedule"), "{body}");
}

/// The documents say what the store was made to hold.
#[test]
fn the_api_documents_say_what_the_store_holds() {
    let (_dir, store) = store();
    let app = app(store);
    let before = SystemTime::now();
    let list = get_json(&app, "/api/schedules");
    let shown = get_json(&app, "/api/schedules/hourly?limit=4");
    let default = get_json(&app, "/api/schedules/sweep");
    let after = SystemTime::now();

    let docs = list["schedules"].as_array().unwrap();
    let names: Vec<&str> = docs.iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hourly", "sweep"]);
    let (h, s) = (&docs[0], &docs[1]);
    assert_eq!(
        (h["cron"].as_str(), h["zone"].as_str()),
        (Some("@every 1h"), Some("UTC"))
    );
    assert_eq!(
        h["action"],
        json!({ "kind": "run", "command": ["./report.sh", "--all"] })
    );
    assert_eq!(h["last_slot"], json!(rfc3339(at(15, 0))));
    assert_eq!(h["paused"], json!(false));
    let next = h["next"].as_str().expect("hourly has a next slot");
    let hours: Vec<String> = [before, after]
        .iter()
        .map(|t| rfc3339(UNIX_EPOCH + Duration::from_secs(next_hour(*t))))
        .collect();
    assert!(hours.iter().any(|h| h == next), "next {next}, not one of {hours:?}");
    assert_eq!(
        (s["cron"].as_str(), s["zone"].as_str()),
        (Some("*/5 * * * *"), Some("Europe/Berlin"))
    );
    assert_eq!(
        s["action"],
        json!({ "kind": "enqueue", "queue": "jobs", "payload": { "kind": "sweep" } })
    );
    assert_eq!((&s["paused"], &s["next"]), (&json!(true), &Value::Null));
    assert_eq!(s["last_slot"], json!(rfc3339(at(1, 0))));

    // `?limit=4`: the newest four records, newest first.
    let slots = shown["slots"].as_array().unwrap();
    let seen: Vec<(&str, &str, u64)> = slots
        .iter()
        .map(|r| {
            (
                r["slot"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let (fifteen, twelve, eleven, ten) = (
        rfc3339(at(15, 0)),
        rfc3339(at(12, 0)),
        rfc3339(at(11, 0)),
        rfc3339(at(10, 0)),
    );
    assert_eq!(
        seen,
        [
            (fifteen.as_str(), "claimed", 1),
            (twelve.as_str(), "missed", 3),
            (eleven.as_str(), "failed", 1),
            (ten.as_str(), "ran", 1),
        ]
    );
    assert_eq!(slots[1]["through"], json!(rfc3339(at(14, 0))));
    assert_eq!((&slots[2]["exit_code"], &slots[2]["late_ms"]), (&json!(3), &json!(200)));
    assert_eq!(slots[0]["pid"], json!(std::process::id()));
    // Without `?limit=`, the newest 20, as `schedule show`: both records.
    let outcomes: Vec<(&str, u64)> = default["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["outcome"].as_str().unwrap(), r["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(outcomes, [("enqueued", 1), ("missed", 11)]);
}

/// The lines of `/metrics` of the schedule families, in order.
fn schedule_lines(app: &App) -> Vec<String> {
    let (status, text) = get(app, "/metrics");
    assert_eq!(status, 200);
    text.lines()
        .filter(|l| l.contains("leasehold_schedule_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn metrics_count_each_slot_by_its_outcome() {
    let (_dir, store) = store();
    let app = app(store);
    let before = SystemTime::now();
    let lines = schedule_lines(&app);
    let after = SystemTime::now();
    let next = lines
        .iter()
        .find_map(|l| l.strip_prefix("leasehold_schedule_next_fire_timestamp_seconds{schedule=\"hourly\"} "))
        .expect("hourly's next fire")
        .to_owned();
    assert!(
        [before, after].iter().any(|t| next == format!("{}.000", next_hour(*t))),
        "next fire {next}"
    );
    let slots = |schedule: &str, counts: [u64; 9]| -> Vec<String> {
        [
            "ran", "failed", "stopped", "skipped", "missed", "enqueued", "lost", "claimed", "running",
        ]
        .iter()
        .zip(counts)
        .map(|(outcome, n)| format!("leasehold_schedule_slots{{schedule=\"{schedule}\",outcome=\"{outcome}\"}} {n}"))
        .collect()
    };
    let mut want: Vec<String> = [
        "# HELP leasehold_schedule_paused Whether the schedule is paused (1: its slots pass unfired) or fires (0).",
        "# TYPE leasehold_schedule_paused gauge",
        "leasehold_schedule_paused{schedule=\"hourly\"} 0",
        "leasehold_schedule_paused{schedule=\"sweep\"} 1",
        "# HELP leasehold_schedule_next_fire_timestamp_seconds When the schedule's next slot is due, in Unix seconds (absent while it is paused).",
        "# TYPE leasehold_schedule_next_fire_timestamp_seconds gauge",
        &format!("leasehold_schedule_next_fire_timestamp_seconds{{schedule=\"hourly\"}} {next}"),
        "# HELP leasehold_schedule_last_slot_timestamp_seconds The schedule's last slot accounted for (fired, skipped or missed), in Unix seconds (absent before its first).",
        "# TYPE leasehold_schedule_last_slot_timestamp_seconds gauge",
        // 2026-01-01 15:00 and 01:00 UTC.
        "leasehold_schedule_last_slot_timestamp_seconds{schedule=\"hourly\"} 1767279600.000",
        "leasehold_schedule_last_slot_timestamp_seconds{schedule=\"sweep\"} 1767229200.000",
        "# HELP leasehold_schedule_slots Slots per schedule and outcome among its slot records the store keeps (the newest 1000; a record of missed slots counts each slot it stands for).",
        "# TYPE leasehold_schedule_slots gauge",
    ]
    .map(str::to_owned)
    .to_vec();
    // hourly: 10:00 ran, 11:00 failed, 9 + 3 missed, 15:00 claimed.
    want.extend(slots("hourly", [1, 1, 0, 0, 12, 0, 0, 1, 0]));
    // sweep: 01:00 enqueued, 11 missed.
    want.extend(slots("sweep", [0, 0, 0, 0, 11, 1, 0, 0, 0]));
    assert_eq!(lines, want);
}

/// The page lists both schedules with a mark per record, newest last;
/// a record of missed slots shows its count.
#[test]
fn the_page_marks_each_slot_record() {
    let (_dir, store) = store();
    let app = app(store);
    let (status, page) = get(&app, "/schedules");
    assert_eq!(status, 200);
    assert!(page.contains("href=\"/schedules/hourly\"") && page.contains("href=\"/schedules/sweep\""));
    assert!(page.contains("@every 1h") && page.contains("Europe/Berlin") && page.contains("./report.sh --all"));
    let row = |n: &str| {
        let from = page.find(&format!("href=\"/schedules/{n}\"")).unwrap();
        let to = page[from..].find("</tr>").unwrap() + from;
        page[from..to].to_owned()
    };
    // hourly's marks, oldest first: missed ×9, ran, failed, missed ×3, claimed.
    let marks: Vec<(String, Option<u64>)> = row("hourly")
        .split("class=\"slot ")
        .skip(1)
        .map(|m| {
            let class = m[..m.find('"').unwrap()].replace("many ", "");
            let count = m
                .split_once("</span>×")
                .and_then(|(_, rest)| rest[..rest.find('<').unwrap()].parse().ok());
            (class, count)
        })
        .collect();
    let want: Vec<(String, Option<u64>)> = [
        ("missed", Some(9)),
        ("ran", None),
        ("failed", None),
        ("missed", Some(3)),
        ("claimed", None),
    ]
    .iter()
    .map(|(c, n)| ((*c).to_owned(), *n))
    .collect();
    assert_eq!(marks, want);
    assert!(row("sweep").contains("paused"), "{}", row("sweep"));

    let (status, page) = get(&app, "/schedules/hourly");
    assert_eq!(status, 200);
    assert!(page.contains("missed ×3") && page.contains("missed ×9") && page.contains("exit 3"));
    assert_eq!(get(&app, "/schedules/nothing-here").0, 404);
}
