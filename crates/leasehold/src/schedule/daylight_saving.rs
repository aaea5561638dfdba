//! The daylight-saving rules of the module docs, one test each, on fixed
//! instants of 2026 in `Europe/Berlin` and `America/New_York`. Each asserts
//! the whole run of slots around a change of clock — the slots in zone
//! time, with their offsets — so a rule broken either way (a slot lost,
//! moved or doubled) fails.

use std::time::SystemTime;

use jiff::Timestamp;

use super::ScheduleSpec;

/// `t` (RFC 3339) as an instant.
fn at(t: &str) -> SystemTime {
    SystemTime::try_from(t.parse::<Timestamp>().unwrap()).unwrap()
}

/// The slots of `text` in `zone` in (`after`, `until`], in zone time.
fn slots(text: &str, zone: &str, after: &str, until: &str) -> Vec<String> {
    let spec = ScheduleSpec::parse(text, Some(zone)).unwrap();
    let between = spec.slots_between(at(after), at(until), 1000);
    assert!(!between.more);
    between
        .slots
        .into_iter()
        .map(|slot| spec.in_zone(slot).unwrap().strftime("%Y-%m-%dT%H:%M:%S%:z").to_string())
        .collect()
}

#[test]
fn a_daily_slot_in_the_skipped_hour_fires_once_right_after_the_change() {
    // Berlin: 2026-03-29 02:00 CET becomes 03:00 CEST.
    assert_eq!(
        slots(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-27T12:00:00Z",
            "2026-03-30T12:00:00Z"
        ),
        [
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00"
        ]
    );
    // New York: 2026-03-08 02:00 EST becomes 03:00 EDT.
    assert_eq!(
        slots(
            "30 2 * * *",
            "America/New_York",
            "2026-03-06T12:00:00Z",
            "2026-03-09T12:00:00Z"
        ),
        [
            "2026-03-07T02:30:00-05:00",
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00"
        ]
    );
    // With seconds, and on the hour the clock leaves.
    assert_eq!(
        slots(
            "15 0 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            "2026-03-08T12:00:00Z"
        ),
        ["2026-03-08T03:00:00-04:00"]
    );
}

#[test]
fn a_daily_slot_in_the_repeated_hour_fires_once_the_first_time_round() {
    // Berlin: 2026-10-25 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    assert_eq!(
        slots(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-23T12:00:00Z",
            "2026-10-26T12:00:00Z"
        ),
        [
            "2026-10-24T02:30:00+02:00",
            "2026-10-25T02:30:00+02:00",
            "2026-10-26T02:30:00+01:00"
        ]
    );
    // New York: 2026-11-01 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    assert_eq!(
        slots(
            "30 1 * * *",
            "America/New_York",
            "2026-10-30T12:00:00Z",
            "2026-11-02T12:00:00Z"
        ),
        [
            "2026-10-31T01:30:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00"
        ]
    );
}

#[test]
fn a_search_from_inside_the_repeated_hour_does_not_fire_the_daily_slot_again() {
    // A daemon that starts (or asks again) after the first 02:30, in
    // either half of the repeated hour, waits for the next day.
    let spec = ScheduleSpec::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    let next_day = at("2026-10-26T01:30:00Z");
    for from in [
        "2026-10-25T00:30:00Z", // the slot itself (02:30 CEST)
        "2026-10-25T00:45:00Z", // 02:45 CEST
        "2026-10-25T01:10:00Z", // 02:10 CET, the second time round
        "2026-10-25T01:30:00Z", // 02:30 CET
    ] {
        assert_eq!(spec.next_after(at(from)), Some(next_day), "from {from}");
    }
}

/// Every slot of `text` in `zone` between `after` and `until` is
/// `seconds` after the one before, and there are `count` of them.
fn assert_evenly_spaced(text: &str, zone: &str, after: &str, until: &str, seconds: u64, count: usize) {
    let spec = ScheduleSpec::parse(text, Some(zone)).unwrap();
    let between = spec.slots_between(at(after), at(until), 1000);
    assert_eq!(between.slots.len(), count, "{text} in {zone} from {after}");
    for pair in between.slots.windows(2) {
        let gap = pair[1].duration_since(pair[0]).unwrap().as_secs();
        assert_eq!(
            gap,
            seconds,
            "{text} in {zone}: {} then {}",
            spec.in_zone(pair[0]).unwrap(),
            spec.in_zone(pair[1]).unwrap()
        );
    }
}

#[test]
fn an_hourly_schedule_fires_every_elapsed_hour_across_both_changes() {
    // Two days around each change: 48 elapsed hours, 48 slots an hour
    // apart — none lost in the skipped hour, both 02:30s (01:30s) of the
    // repeated hour fired, being an hour apart.
    for (zone, changes) in [
        ("Europe/Berlin", ["2026-03-28T00:10:00Z", "2026-10-24T00:10:00Z"]),
        ("America/New_York", ["2026-03-07T00:10:00Z", "2026-10-31T00:10:00Z"]),
    ] {
        for after in changes {
            let until = at(after) + std::time::Duration::from_secs(48 * 3600);
            let until = Timestamp::try_from(until).unwrap().to_string();
            for text in ["@hourly", "30 * * * *", "0 30 * * * *"] {
                assert_evenly_spaced(text, zone, after, &until, 3600, 48);
            }
        }
    }
    // The wall clock of the repeated hour, both times round.
    assert_eq!(
        slots(
            "30 * * * *",
            "Europe/Berlin",
            "2026-10-25T00:00:00Z",
            "2026-10-25T02:30:00Z"
        ),
        [
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:30:00+01:00"
        ]
    );
    assert_eq!(
        slots(
            "30 * * * *",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            "2026-03-08T08:00:00Z"
        ),
        ["2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"]
    );
}

#[test]
fn a_list_of_fixed_times_is_as_many_fixed_times() {
    // `0,30 2 * * *` is 02:00 and 02:30, each a fixed time (Vixie cron's
    // reading): both fall in the skipped hour and fire once right after
    // the change — one slot, 03:00, for both; in the repeated hour each
    // fires once, the first time round.
    assert_eq!(
        slots(
            "0,30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            "2026-03-30T02:00:00Z"
        ),
        [
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:00:00+02:00",
            "2026-03-30T02:30:00+02:00"
        ]
    );
    assert_eq!(
        slots(
            "0,30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            "2026-10-25T12:00:00Z"
        ),
        ["2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00"]
    );
    // New York, both changes of 2026, hours listed too.
    assert_eq!(
        slots(
            "15 1,2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            "2026-03-08T12:00:00Z"
        ),
        ["2026-03-08T01:15:00-05:00", "2026-03-08T03:00:00-04:00"]
    );
    assert_eq!(
        slots(
            "15 1,2 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            "2026-11-01T12:00:00Z"
        ),
        ["2026-11-01T01:15:00-04:00", "2026-11-01T02:15:00-05:00"]
    );
}

#[test]
fn a_range_or_a_step_in_the_changing_hour_follows_elapsed_time() {
    // Not a list of fixed times: a range (or a step, a wildcard) follows
    // elapsed time as an hourly pattern does — its times in the skipped
    // hour do not happen, those in the repeated hour happen twice.
    assert_eq!(
        slots(
            "0 2-3 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            "2026-10-25T12:00:00Z"
        ),
        [
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T03:00:00+01:00"
        ]
    );
}

#[test]
fn every_counts_elapsed_time_and_ignores_the_zone() {
    // Slots of @every are the same instants in every zone, an interval
    // apart through both changes.
    for (after, until) in [
        ("2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z"),
        ("2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z"),
    ] {
        let utc = ScheduleSpec::parse("@every 1h", None).unwrap();
        let berlin = ScheduleSpec::parse("@every 1h", Some("Europe/Berlin")).unwrap();
        let in_utc = utc.slots_between(at(after), at(until), 1000);
        assert_eq!(berlin.slots_between(at(after), at(until), 1000), in_utc);
        assert_evenly_spaced("@every 1h", "Europe/Berlin", after, until, 3600, 24);
    }
}
