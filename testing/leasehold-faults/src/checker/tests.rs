use std::fmt::Write as _;

use super::*;

/// A grant line: exclusive, asked 1 ms before `answered` (ms).
fn grant(name: &str, token: u64, id: &str, answered_ms: u64) -> String {
    format!(
        "grant name={name} token={token} grant={id} mode=x by=pid:{token} asked={} answered={}\n",
        (answered_ms - 1) * 1_000_000,
        answered_ms * 1_000_000
    )
}

fn end(name: &str, id: &str, at_ms: u64) -> String {
    format!("end name={name} grant={id} at={}\n", at_ms * 1_000_000)
}

/// A write begun at `start_ms`, answered 1 ms later with `answer` (or never, with "").
#[allow(clippy::too_many_arguments)]
fn write(
    id: &str,
    grant: &str,
    token: u64,
    resource: &str,
    fence: &str,
    start_ms: u64,
    answer: &str,
    value: &str,
) -> String {
    let mut s = format!(
        "write id={id} name=job grant={grant} token={token} resource={resource} fence={fence} start={} value={value}\n",
        start_ms * 1_000_000
    );
    if !answer.is_empty() {
        let _ = writeln!(s, "answer id={id} end={} answer={answer}", (start_ms + 1) * 1_000_000);
    }
    s
}

fn kinds(text: &str) -> Vec<&'static str> {
    let report = check_text("test", text).unwrap();
    report.violations.iter().map(|v| v.kind).collect()
}

/// Two holders one after the other, each writing through a fence record
/// and the store's gate, the resource read back: nothing to report.
fn clean() -> String {
    let mut h = String::new();
    h += &grant("job", 1, "a", 10);
    h += &write("a1", "a", 1, "file", "record", 11, "accepted", "a1");
    h += &write("a2", "a", 1, "gate", "store", 12, "accepted", "-");
    h += &end("job", "a", 20);
    h += &grant("job", 2, "b", 30);
    h += &write("b1", "b", 2, "file", "record", 31, "accepted", "b1");
    // The old holder, resumed late: refused by both.
    h += &write("a3", "a", 1, "file", "record", 40, "refused", "a3");
    h += &write("a4", "a", 1, "gate", "store", 41, "refused", "-");
    h += &end("job", "b", 50);
    h += "read resource=file at=60000000 value=b1\n";
    h
}

#[test]
fn a_clean_history_passes_and_is_counted() {
    let report = check_text("test", &clean()).unwrap();
    report.assert_clean();
    assert_eq!(
        report.counts,
        Counts {
            grants: 2,
            writes: 5,
            accepted: 3,
            refused: 2,
            unknown: 0,
            reads: 1
        }
    );
}

#[test]
fn a_token_issued_twice_is_reported() {
    let mut h = grant("job", 1, "a", 10);
    h += &end("job", "a", 20);
    h += &grant("job", 1, "b", 30);
    h += &end("job", "b", 40);
    assert_eq!(kinds(&h), ["token-reissued"]);
}

/// A store that lost its data issues token 1 again: the token rules
/// are judged on each side of the `lost` event, never across it — but
/// a fence record that took the reissued token across it still went
/// back, and one that refused it had cause.
#[test]
fn a_loss_of_the_store_splits_the_token_rules_not_the_fence_records() {
    let mut h = grant("job", 1, "a", 10);
    h += &write("a1", "a", 1, "file", "record", 11, "accepted", "a1");
    h += &end("job", "a", 20);
    h += "lost name=job at=25000000\n";
    h += &grant("job", 1, "b", 30);
    h += &write("b1", "b", 1, "file", "record", 31, "refused", "b1");
    h += &end("job", "b", 40);
    h += "read resource=file at=60000000 value=a1\n";
    assert_eq!(kinds(&h), Vec::<&str>::new(), "judged across the loss");
    // Without the loss: the reissue is reported.
    assert_eq!(kinds(&h.replace("lost name=job at=25000000\n", "")), ["token-reissued"]);
    // The fence record is judged across it: taking the reissued token
    // is going back.
    let took = h
        .replace("answer=refused", "answer=accepted")
        .replace("value=a1\n", "value=b1\n");
    assert_eq!(kinds(&took), ["fence-went-back"]);
    // Two reissues within one stretch are still reported, and a grant
    // asked for before the loss and answered after it is in neither.
    let mut after = h.clone();
    after += &grant("job", 1, "c", 50);
    after += &end("job", "c", 55);
    assert_eq!(kinds(&after), ["token-reissued"]);
    let spanning = format!(
        "{h}grant name=job token=1 grant=d mode=x by=pid:9 asked=24000000 answered=26000000\nend name=job grant=d at=27000000\n"
    );
    assert_eq!(kinds(&spanning), Vec::<&str>::new());
}

#[test]
fn a_token_lower_than_one_answered_before_it_was_asked_for_is_reported() {
    let mut h = grant("job", 5, "a", 10);
    h += &end("job", "a", 20);
    h += &grant("job", 4, "b", 30);
    h += &end("job", "b", 40);
    let report = check_text("test", &h).unwrap();
    assert_eq!(report.count("token-order"), 1, "{report}");
    assert!(report.to_string().contains("grant b of job (token 4"), "{report}");
    // Asked for before the other was answered: no order is proven.
    let concurrent = h.replace("asked=29000000", "asked=9000000");
    assert_eq!(kinds(&concurrent), Vec::<&str>::new());
    // Without `asked`, holdings one after the other are the evidence.
    let unknown = h.replace("asked=29000000", "asked=-");
    assert_eq!(kinds(&unknown), ["token-order"]);
}

#[test]
fn a_holder_acting_after_the_next_grant_is_an_overlap() {
    let mut h = grant("job", 1, "a", 10);
    h += &grant("job", 2, "b", 30);
    h += &end("job", "a", 35); // a acted until 35, b was issued by 30
    h += &end("job", "b", 40);
    let report = check_text("test", &h).unwrap();
    assert_eq!(kinds(&h), ["overlap"], "{report}");
    assert!(report.to_string().contains("5 ms after grant b"), "{report}");
    // The store's own grant time, earlier than the answer, narrows it.
    let mut precise = grant("job", 1, "a", 10);
    precise += &end("job", "a", 29);
    precise += &grant("job", 2, "b", 30).replace('\n', " granted=28000000\n");
    precise += &end("job", "b", 40);
    assert_eq!(kinds(&precise), ["overlap"]);
    // Both shared: no overlap.
    let shared = h.replace("mode=x", "mode=s");
    assert_eq!(kinds(&shared), Vec::<&str>::new());
    // A holder that acts only through fences is not judged by time.
    let fenced = h.replacen("answered=10000000", "answered=10000000 acts=fenced", 1);
    assert_eq!(kinds(&fenced), Vec::<&str>::new());
}

#[test]
fn an_unfenced_action_after_the_next_grant_is_an_overlap() {
    let mut h = grant("job", 1, "a", 10);
    h += &end("job", "a", 20);
    h += &grant("job", 2, "b", 30);
    // Recorded as the old holder's, after its end: still its activity.
    h += &write("a9", "a", 1, "disk", "none", 31, "accepted", "x");
    h += &end("job", "b", 40);
    let report = check_text("test", &h).unwrap();
    assert_eq!(kinds(&h), ["overlap"], "{report}");
    assert!(report.to_string().contains("write a9 to disk"), "{report}");
}

#[test]
fn acting_after_the_store_could_expire_the_grant_is_reported() {
    let mut h = grant("job", 1, "a", 10);
    h += "expires name=job grant=a at=25000000\n";
    h += &end("job", "a", 26);
    assert_eq!(kinds(&h), ["outlived"]);
    let in_time = h.replace("at=26000000", "at=24000000");
    assert_eq!(kinds(&in_time), Vec::<&str>::new());
}

#[test]
fn a_holder_never_seen_to_stop_is_reported() {
    let h = grant("job", 1, "a", 10);
    assert_eq!(kinds(&h), ["never-ended"]);
}

#[test]
fn the_store_gate_passing_an_older_grant_after_a_newer_one_is_reported() {
    let mut h = grant("job", 1, "a", 10);
    h += &end("job", "a", 20);
    h += &grant("job", 2, "b", 30);
    h += &end("job", "b", 40);
    let late = write("a5", "a", 1, "gate", "store", 35, "accepted", "-");
    let report = check_text("test", &(h.clone() + &late)).unwrap();
    assert_eq!(kinds(&(h.clone() + &late)), ["stale-pass"], "{report}");
    assert!(report.to_string().contains("begun 5 ms after grant b"), "{report}");
    // Refused, or begun before the newer grant was answered: fine.
    let refused = write("a5", "a", 1, "gate", "store", 35, "refused", "-");
    assert_eq!(kinds(&(h.clone() + &refused)), Vec::<&str>::new());
    let early = write("a5", "a", 1, "gate", "store", 29, "accepted", "-");
    assert_eq!(kinds(&(h.clone() + &early)), Vec::<&str>::new());
    // Both shared: the older may still pass.
    let shared = h.replace("mode=x", "mode=s") + &late;
    assert_eq!(kinds(&shared), Vec::<&str>::new());
}

#[test]
fn a_fence_record_accepting_a_lower_or_reissued_token_went_back() {
    let mut h = String::new();
    h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
    h += &write("b1", "b", 4, "file", "record", 20, "accepted", "b1");
    assert_eq!(kinds(&h), ["fence-went-back"]);
    // The same token from another grant (a store rolled back).
    let mut h = String::new();
    h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
    h += &write("b1", "b", 5, "file", "record", 20, "accepted", "b1");
    let report = check_text("test", &h).unwrap();
    assert_eq!(kinds(&h), ["fence-went-back"], "{report}");
    assert!(
        report.to_string().contains("write b1 to file by grant b with token 5"),
        "{report}"
    );
    // The same grant again, or a higher token: fine.
    let mut h = String::new();
    h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
    h += &write("a2", "a", 5, "file", "record", 20, "accepted", "a2");
    h += &write("b1", "b", 6, "file", "record", 30, "accepted", "b1");
    assert_eq!(kinds(&h), Vec::<&str>::new());
    // Overlapping attempts prove no order.
    let mut h = String::new();
    h += "write id=a1 name=job grant=a token=5 resource=file fence=record start=10 value=a1\n";
    h += "write id=b1 name=job grant=b token=4 resource=file fence=record start=11 value=b1\n";
    h += "answer id=a1 end=20 answer=accepted\nanswer id=b1 end=21 answer=accepted\n";
    assert_eq!(kinds(&h), Vec::<&str>::new());
}

#[test]
fn a_fence_record_refusing_without_a_cause_is_reported() {
    let mut h = String::new();
    h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
    h += &write("b1", "b", 6, "file", "record", 20, "refused", "b1");
    assert_eq!(kinds(&h), ["refused-without-cause"]);
}

#[test]
fn an_acknowledged_write_missing_from_the_resource_is_lost() {
    let mut h = String::new();
    h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
    h += &write("a2", "a", 5, "file", "record", 20, "accepted", "a2");
    let read = |v: &str| format!("read resource=file at=30000000 value={v}\n");
    assert_eq!(kinds(&(h.clone() + &read("a2"))), Vec::<&str>::new());
    assert_eq!(kinds(&(h.clone() + &read("a1"))), ["lost"]);
    assert_eq!(kinds(&(h.clone() + &read("-"))), ["lost"]);
    // A write never answered may or may not have landed.
    let unknown = "write id=a3 name=job grant=a token=5 resource=file fence=record start=25000000 value=a3\n";
    assert_eq!(kinds(&(h.clone() + unknown + &read("a3"))), Vec::<&str>::new());
    assert_eq!(kinds(&(h.clone() + unknown + &read("a2"))), Vec::<&str>::new());
    // A refused write's value must never be there.
    let refused = write("b1", "b", 4, "file", "record", 22, "refused", "b1");
    assert_eq!(kinds(&(h + &refused + &read("b1"))), ["refused-applied"]);
}

#[test]
fn violations_beyond_those_kept_are_still_counted() {
    let grants = KEEP_PER_KIND + 50;
    let mut h = String::new();
    for i in 0..grants as u64 {
        h += &grant("job", 1, &format!("g{i}"), 10 * i + 10);
        h += &end("job", &format!("g{i}"), 10 * i + 15);
    }
    let report = check_text("test", &h).unwrap();
    // Each later grant of token 1 reissues the first one's: all are
    // counted, at most KEEP_PER_KIND kept.
    let reissued = grants - 1;
    assert_eq!(report.count("token-reissued"), reissued);
    assert_eq!(
        report.violations.iter().filter(|v| v.kind == "token-reissued").count(),
        KEEP_PER_KIND
    );
    let mut merged = Report::new("all");
    merged.merge(report.clone());
    merged.merge(report.clone());
    assert_eq!(merged.count("token-reissued"), 2 * reissued);
    assert_eq!(merged.total(), 2 * report.total());
    assert!(!merged.is_clean());
}

#[test]
fn a_history_that_does_not_parse_is_an_error_not_a_pass() {
    for bad in [
        "grant name=job token=1 grant=a mode=x by=p asked=- answered=zero\n",
        "end name=job grant=nobody at=1\n",
        "answer id=nothing end=1 answer=accepted\n",
        "granted name=job\n",
        "write id=w name=job grant=a token=1 resource=f fence=maybe start=1 value=v\n",
    ] {
        let err = check_text("test", bad).unwrap_err();
        assert!(err.starts_with("history test: line 1:"), "{err}");
    }
    let err = check_file(Path::new("/nonexistent/history")).unwrap_err();
    assert!(err.contains("cannot be read"), "{err}");
}
