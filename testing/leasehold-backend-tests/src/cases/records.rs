//! Records (`leasehold_backend::record`): "all or nothing", "versions never
//! repeat for a key", "lists are in key order, bounded by the prefix,
//! resumable after a key, either way round", "one clock".

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use leasehold_backend::{
    ErrorKind, Expect, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
    StoreTime,
};
use leasehold_host as host;

use crate::{Case, Harness};

fn key(k: &str) -> RecordKey {
    RecordKey::new(k).expect("a valid key")
}

fn put(k: &str, body: &str, expect: Expect) -> RecordChange {
    RecordChange::Put {
        key: key(k),
        body: body.into(),
        expect,
    }
}

fn delete(k: &str, expect: Expect) -> RecordChange {
    RecordChange::Delete { key: key(k), expect }
}

impl<H: Harness> Case<H> {
    #[allow(clippy::needless_pass_by_value, reason = "cases build the batch in the call")]
    fn write(&self, changes: Vec<RecordChange>) -> RecordWrite {
        let params = RecordWriteParams::new(changes);
        self.records()
            .record_write(&params)
            .unwrap_or_else(|e| panic!("record_write({params:?}): {e}"))
    }

    /// Write, expecting success; the new versions.
    #[allow(clippy::needless_pass_by_value, reason = "cases build the batch in the call")]
    fn written(&self, changes: Vec<RecordChange>) -> Vec<Option<RecordVersion>> {
        match self.write(changes.clone()) {
            RecordWrite::Written { versions } => versions,
            other @ (RecordWrite::Conflict { .. } | RecordWrite::TooLate { .. }) => {
                panic!("record_write({changes:?}): {other:?}, expected Written")
            }
        }
    }

    /// `record_write` of `changes` applied only up to `not_after`.
    fn write_by(&self, changes: Vec<RecordChange>, not_after: SystemTime) -> RecordWrite {
        let params = RecordWriteParams {
            changes,
            not_after: Some(not_after),
        };
        self.records()
            .record_write(&params)
            .unwrap_or_else(|e| panic!("record_write({params:?}): {e}"))
    }

    /// `record_clock`.
    fn clock(&self) -> StoreTime {
        self.records()
            .record_clock()
            .unwrap_or_else(|e| panic!("record_clock(): {e}"))
    }

    fn body(&self, k: &str) -> Option<(RecordVersion, String)> {
        self.records()
            .record_get(&key(k))
            .unwrap_or_else(|e| panic!("record_get({k}): {e}"))
            .map(|r| (r.version, r.body))
    }

    fn list_keys(&self, prefix: &str, after: Option<&str>, descending: bool, limit: u32) -> Vec<String> {
        let params = RecordListParams {
            prefix: prefix.into(),
            after: after.map(key),
            descending,
            limit,
        };
        self.records()
            .record_list(&params)
            .unwrap_or_else(|e| panic!("record_list({params:?}): {e}"))
            .into_iter()
            .map(|r| r.key.as_str().to_owned())
            .collect()
    }
}

/// A put expecting absence creates the record; a second one conflicts and
/// names the version found; a put at the right version replaces it with a
/// new version. No record has the version 0 (an absent key is not at 0).
pub fn records_put_creates_then_compares_versions<H: Harness>(t: &mut Case<H>) {
    assert_eq!(t.body("schedule/a"), None);
    assert_eq!(
        t.write(vec![put("schedule/a", "zero", Expect::Version(RecordVersion(0)))]),
        RecordWrite::Conflict {
            key: key("schedule/a"),
            found: None
        },
        "a write expecting the version 0 of an absent key must not apply"
    );
    let v1 = t.written(vec![put("schedule/a", "one", Expect::Absent)])[0].expect("a put has a version");
    assert_eq!(t.body("schedule/a"), Some((v1, "one".into())));
    assert_eq!(
        t.write(vec![put("schedule/a", "again", Expect::Absent)]),
        RecordWrite::Conflict {
            key: key("schedule/a"),
            found: Some(v1)
        }
    );
    let v2 = t.written(vec![put("schedule/a", "two", Expect::Version(v1))])[0].expect("a version");
    assert_ne!(v1, v2, "a write must give a new version");
    assert_eq!(t.body("schedule/a"), Some((v2, "two".into())));
    assert_eq!(
        t.write(vec![put("schedule/a", "stale", Expect::Version(v1))]),
        RecordWrite::Conflict {
            key: key("schedule/a"),
            found: Some(v2)
        },
        "a write expecting the old version must not apply"
    );
    assert_eq!(t.body("schedule/a"), Some((v2, "two".into())));
}

/// A batch with one unmet expectation changes nothing, whatever its order.
pub fn records_batch_is_all_or_nothing<H: Harness>(t: &mut Case<H>) {
    let v = t.written(vec![put("k/held", "x", Expect::Absent)])[0].expect("a version");
    for changes in [
        vec![put("k/new", "n", Expect::Absent), put("k/held", "y", Expect::Absent)],
        vec![put("k/held", "y", Expect::Absent), put("k/new", "n", Expect::Absent)],
        vec![put("k/new", "n", Expect::Anything), delete("k/held", Expect::Absent)],
    ] {
        assert!(
            matches!(t.write(changes.clone()), RecordWrite::Conflict { ref key, .. } if key.as_str() == "k/held"),
            "{changes:?} must conflict on k/held"
        );
        assert_eq!(t.body("k/new"), None, "{changes:?} wrote k/new although it conflicted");
        assert_eq!(t.body("k/held"), Some((v, "x".into())), "{changes:?} changed k/held");
    }
    let versions = t.written(vec![
        put("k/new", "n", Expect::Absent),
        delete("k/held", Expect::Version(v)),
    ]);
    assert!(versions[0].is_some() && versions[1].is_none(), "{versions:?}");
    assert_eq!(t.body("k/held"), None);
    assert_eq!(t.body("k/new").map(|(_, b)| b).as_deref(), Some("n"));
}

/// A key deleted and written again never gets a version it had: a write
/// expecting the first incarnation's version conflicts with the second.
pub fn records_versions_never_repeat_for_a_key<H: Harness>(t: &mut Case<H>) {
    let mut seen = BTreeSet::new();
    for round in 0..5 {
        let v = t.written(vec![put("slot/x", &format!("round {round}"), Expect::Absent)])[0].expect("a version");
        assert!(
            seen.insert(v),
            "round {round}: version {v} was given to this key before"
        );
        let first = v;
        let v = t.written(vec![put("slot/x", "again", Expect::Version(v))])[0].expect("a version");
        assert!(
            seen.insert(v),
            "round {round}: version {v} was given to this key before"
        );
        t.written(vec![delete("slot/x", Expect::Version(v))]);
        assert_eq!(
            t.write(vec![delete("slot/x", Expect::Version(first))]),
            RecordWrite::Conflict {
                key: key("slot/x"),
                found: None
            }
        );
    }
    // Deleting what is not there, expecting anything, is nothing to do.
    assert_eq!(t.written(vec![delete("slot/x", Expect::Anything)]), vec![None]);
}

/// Lists are in bytewise key order, bounded by the prefix (`slot/a/` does
/// not list `slot/ab/…` nor `slot/a`), resumable after a key either way
/// round, and at most the limit long.
pub fn records_list_by_prefix_in_key_order<H: Harness>(t: &mut Case<H>) {
    let inside = ["slot/a/0001", "slot/a/0002", "slot/a/0010", "slot/a/z", "slot/a/\u{e9}"];
    let outside = ["slot/a", "slot/ab/0001", "slot/a0", "slot/b/0001", "schedule/a"];
    let changes = inside
        .iter()
        .chain(&outside)
        .map(|k| put(k, "x", Expect::Absent))
        .collect();
    t.written(changes);
    let all: Vec<String> = inside.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(t.list_keys("slot/a/", None, false, 100), all);
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(t.list_keys("slot/a/", None, true, 100), reversed);
    assert_eq!(t.list_keys("slot/a/", None, false, 2), all[..2].to_vec());
    assert_eq!(
        t.list_keys("slot/a/", Some("slot/a/0002"), false, 2),
        all[2..4].to_vec()
    );
    assert_eq!(
        t.list_keys("slot/a/", Some("slot/a/0010"), true, 100),
        all[..2].iter().rev().cloned().collect::<Vec<_>>()
    );
    assert_eq!(t.list_keys("nothing/", None, false, 100), Vec::<String>::new());
    let bad = RecordListParams {
        prefix: "slot/".into(),
        after: None,
        descending: false,
        limit: 0,
    };
    let refused = t.records().record_list(&bad).expect_err("a limit of 0 is refused");
    assert_eq!(refused.kind(), ErrorKind::InvalidInput);
}

/// Writes that break the limits are refused before anything is written.
pub fn records_limits_are_refused<H: Harness>(t: &mut Case<H>) {
    let big = "x".repeat(leasehold_backend::record::RECORD_BODY_MAX + 1);
    for changes in [
        vec![],
        vec![put("k/a", &big, Expect::Anything)],
        vec![put("k/a", "1", Expect::Anything), put("k/a", "2", Expect::Anything)],
    ] {
        let e = t
            .records()
            .record_write(&RecordWriteParams {
                not_after: None,
                changes: changes.clone(),
            })
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{changes:?}: {e}");
    }
    assert_eq!(t.body("k/a"), None, "a refused write wrote");
}

/// Racing read-modify-write loops lose no update: 4 threads each add 1 to
/// a counter 25 times through compare-and-swap, and it ends at 100.
pub fn records_racing_writers_lose_no_update<H: Harness>(t: &mut Case<H>) {
    const THREADS: usize = 4;
    const EACH: usize = 25;
    t.written(vec![put("counter", "0", Expect::Absent)]);
    let records = t.records();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut done = 0;
                while done < EACH {
                    let now = records.record_get(&key("counter")).expect("read").expect("present");
                    let n: u64 = now.body.parse().expect("a number");
                    let params = RecordWriteParams {
                        not_after: None,
                        changes: vec![put("counter", &(n + 1).to_string(), Expect::Version(now.version))],
                    };
                    match records.record_write(&params) {
                        Ok(RecordWrite::Written { .. }) => done += 1,
                        Ok(RecordWrite::Conflict { .. }) => {}
                        Err(e) if e.kind().is_transient() => {}
                        Err(e) => panic!("record_write: {e}"),
                        Ok(late @ RecordWrite::TooLate { .. }) => panic!("record_write without not_after: {late:?}"),
                    }
                }
            });
        }
    });
    let (_, body) = t.body("counter").expect("present");
    assert_eq!(body, (THREADS * EACH).to_string(), "updates were lost");
}

/// How far apart two readings of a clock may be for the cases below to
/// count them as the same time: generous, as a store's answer may wait.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// `a - b` in seconds, either way round.
fn seconds_between(a: SystemTime, b: SystemTime) -> f64 {
    match a.duration_since(b) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// One clock, judged at the commit: a write whose `not_after` has passed
/// on the store's clock ends `TooLate` and changes nothing of its batch
/// (not the record it would replace, not the one it would make), though
/// every expectation holds; one whose `not_after` is still ahead is
/// written. `TooLate` says the store's time, past the limit.
pub fn records_a_write_past_its_not_after_changes_nothing<H: Harness>(t: &mut Case<H>) {
    let v = t.written(vec![put("slot/held", "before", Expect::Absent)])[0].expect("a version");
    let clock = t.clock();
    // Passed on the store's clock whatever the reading's uncertainty.
    let passed = clock.at - clock.within - CLOCK_SLACK;
    let late = vec![
        put("slot/held", "late", Expect::Version(v)),
        put("slot/new", "late", Expect::Absent),
    ];
    match t.write_by(late.clone(), passed) {
        RecordWrite::TooLate { now } => {
            assert!(
                now > passed,
                "TooLate at {now:?}, which is not past the limit {passed:?}"
            );
            let off = seconds_between(now, clock.at).abs();
            assert!(
                off <= (clock.within + 2 * CLOCK_SLACK).as_secs_f64() + 60.0,
                "TooLate says the store's clock read {now:?}, {off} s from its reading {clock:?} just before"
            );
        }
        other => panic!(
            "a write whose not_after passed {:?} ago ended {other:?}",
            clock.within + CLOCK_SLACK
        ),
    }
    assert_eq!(
        t.body("slot/held"),
        Some((v, "before".into())),
        "a write too late changed a record"
    );
    assert_eq!(t.body("slot/new"), None, "a write too late made a record");
    // Still ahead on the store's clock whatever the reading's uncertainty.
    let ahead = t.clock();
    let ahead = ahead.at + ahead.within + Duration::from_secs(60);
    match t.write_by(late, ahead) {
        RecordWrite::Written { versions } => {
            let v2 = versions[0].expect("a put has a version");
            assert_eq!(t.body("slot/held"), Some((v2, "late".into())));
            assert_eq!(t.body("slot/new").map(|(_, b)| b).as_deref(), Some("late"));
        }
        other => panic!("a write whose not_after is a minute ahead ended {other:?}"),
    }
}

/// The store's clock, of a store started on this host, agrees with this
/// host's wall clock (the kernel's, read past any `LD_PRELOAD` shim) to
/// within the reading's own uncertainty and a generous slack; the
/// uncertainty is under a second (etcd's: half an interval of the
/// member's one-second `Date`).
pub fn records_clock_agrees_with_this_host<H: Harness>(t: &mut Case<H>) {
    let before = host::wall_clock();
    let clock = t.clock();
    let after = host::wall_clock();
    assert!(
        clock.within <= CLOCK_SLACK,
        "record_clock() is only known to within {:?}: {clock:?}",
        clock.within
    );
    assert!(
        clock.at + clock.within + CLOCK_SLACK >= before && clock.at <= after + clock.within + CLOCK_SLACK,
        "record_clock() read {clock:?}, this host's clock read {before:?} to {after:?}: {} s apart",
        seconds_between(clock.at, before)
    );
    let again = t.clock();
    assert!(
        again.at + again.within + clock.within >= clock.at,
        "the store's clock went back from {clock:?} to {again:?}"
    );
}

/// `record_clock` and `not_after` are the store's clock, not this
/// process's: with the store's clock moved an hour on (the test skew), it
/// reads an hour ahead of this host's, and a write whose limit is half an
/// hour ahead of this host's clock is too late; one whose limit is two
/// hours ahead is written.
pub fn records_clock_is_the_stores_not_the_clients<H: Harness>(t: &mut Case<H>) {
    const HOUR: Duration = Duration::from_secs(3600);
    let before = t.clock();
    t.advance(HOUR);
    let after = t.clock();
    let host_now = host::wall_clock();
    let moved = seconds_between(after.at, before.at);
    assert!(
        (3600.0..3600.0 + 60.0).contains(&moved),
        "the store's clock moved {moved} s when its skew moved an hour"
    );
    let ahead = seconds_between(after.at, host_now);
    assert!(
        (3600.0 - 60.0..3600.0 + 60.0).contains(&ahead),
        "record_clock() is {ahead} s from this host's clock; the store's is an hour ahead"
    );
    let soon = host_now + HOUR / 2;
    assert!(
        matches!(t.write_by(vec![put("slot/a", "x", Expect::Absent)], soon), RecordWrite::TooLate { now } if now > soon),
        "a write whose not_after is half an hour ahead of this host's clock, but past on the store's, was not too late"
    );
    assert_eq!(t.body("slot/a"), None, "a write too late made a record");
    let later = host_now + 2 * HOUR;
    assert!(
        matches!(
            t.write_by(vec![put("slot/a", "x", Expect::Absent)], later),
            RecordWrite::Written { .. }
        ),
        "a write whose not_after is an hour ahead of the store's clock was not written"
    );
}
