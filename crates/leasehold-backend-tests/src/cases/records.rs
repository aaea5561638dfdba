//! Records (`leasehold_backend::record`): "all or nothing", "versions never
//! repeat for a key", "lists are in key order, bounded by the prefix,
//! resumable after a key, either way round".

use std::collections::BTreeSet;

use leasehold_backend::{
    ErrorKind, Expect, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};

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
            other @ RecordWrite::Conflict { .. } => panic!("record_write({changes:?}): {other:?}, expected Written"),
        }
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
                    }
                }
            });
        }
    });
    let (_, body) = t.body("counter").expect("present");
    assert_eq!(body, (THREADS * EACH).to_string(), "updates were lost");
}
