//! docs/JSON.md against the types: for each command in its table, the
//! fields it names for the success document and for the refusals are
//! exactly those of the document types the CLI prints for it.

use std::collections::BTreeSet;

use super::*;

/// The keys of the store's own types that documents carry whole.
fn keys_of(sample: &impl Serialize) -> Fields {
    let Value::Object(fields) = value(sample) else {
        panic!("not an object");
    };
    fields.keys().cloned().collect()
}

type Fields = BTreeSet<String>;

/// The fields of these documents together.
fn all_fields(documents: &[&[&str]]) -> Fields {
    documents.concat().into_iter().map(str::to_owned).collect()
}

/// Each row of docs/JSON.md's table (its first cell as written): the
/// fields of the success document, then those of the refusals' details
/// (a nested document's too, where the row names them).
fn expected() -> Vec<(&'static str, Fields, Fields)> {
    let mut stats = all_fields(&[Queues::FIELDS]);
    stats.extend(keys_of(&QueueStats {
        queue: LeaseName::new("q").unwrap(),
        pending: 0,
        running: 0,
        done: 0,
        dead: 0,
    }));
    let mut migrated = all_fields(&[Migrated::FIELDS]);
    migrated.extend(keys_of(&crate::TokensBumped {
        highest: Token(1),
        floor: Token(2),
    }));
    vec![
        (
            "`acquire`",
            all_fields(&[Grant::FIELDS]),
            all_fields(&[LeaseHeld::FIELDS, WaitCancelled::FIELDS]),
        ),
        ("`renew`", all_fields(&[Grant::FIELDS]), Fields::new()),
        ("`release`", all_fields(&[Released::FIELDS]), Fields::new()),
        (
            "`fence`",
            all_fields(&[FencePassed::FIELDS]),
            all_fields(&[FenceRefused::FIELDS]),
        ),
        ("`status NAME`", all_fields(&[LeaseState::FIELDS]), Fields::new()),
        ("`status`, `list`", all_fields(&[Leases::FIELDS]), Fields::new()),
        (
            "`history`",
            all_fields(&[History::FIELDS, HistoryEntry::FIELDS]),
            Fields::new(),
        ),
        (
            "`run`",
            all_fields(&[RunEnded::FIELDS]),
            all_fields(&[RunHeld::FIELDS, RunNotStarted::FIELDS, WaitCancelled::FIELDS]),
        ),
        (
            "`lock`",
            all_fields(&[Locked::FIELDS]),
            all_fields(&[LockHeld::FIELDS, LockNotRun::FIELDS]),
        ),
        (
            "`write`, `update`",
            all_fields(&[Written::FIELDS]),
            all_fields(&[NotWritten::FIELDS]),
        ),
        (
            "`doctor`",
            all_fields(&[Doctor::FIELDS, DoctorCheck::FIELDS]),
            all_fields(&[Doctor::FIELDS]),
        ),
        ("`backup DEST`", all_fields(&[BackedUp::FIELDS]), Fields::new()),
        ("`migrate`", migrated, Fields::new()),
        ("`completions SHELL`", all_fields(&[Completions::FIELDS]), Fields::new()),
        ("`task add`", all_fields(&[TasksAdded::FIELDS]), Fields::new()),
        (
            "`task claim`",
            all_fields(&[Claim::FIELDS]),
            all_fields(&[NothingToClaim::FIELDS]),
        ),
        ("`task heartbeat`", all_fields(&[TaskHeartbeat::FIELDS]), Fields::new()),
        ("`task done`", all_fields(&[TaskDone::FIELDS]), Fields::new()),
        ("`task fail`", all_fields(&[TaskFailed::FIELDS]), Fields::new()),
        ("`task retry`", all_fields(&[TaskRetried::FIELDS]), Fields::new()),
        ("`task show`", all_fields(&[Task::FIELDS]), Fields::new()),
        ("`task list`", all_fields(&[Tasks::FIELDS]), Fields::new()),
        ("`task stats`", stats, Fields::new()),
        ("`task purge`", all_fields(&[Purged::FIELDS]), Fields::new()),
        ("`work`", all_fields(&[WorkSummary::FIELDS]), Fields::new()),
        (
            "`leader`",
            all_fields(&[LeaderChange::FIELDS, Leader::FIELDS]),
            Fields::new(),
        ),
        ("`schedule add`", all_fields(&[Schedule::FIELDS]), Fields::new()),
        ("`schedule list`", all_fields(&[Schedules::FIELDS]), Fields::new()),
        (
            "`schedule show`",
            all_fields(&[ScheduleShown::FIELDS, Slot::FIELDS]),
            Fields::new(),
        ),
        ("`schedule next`", all_fields(&[ScheduleNext::FIELDS]), Fields::new()),
        (
            "`schedule pause`, `resume`, `remove`",
            all_fields(&[ScheduleChanged::FIELDS]),
            Fields::new(),
        ),
        ("`cron`", Fields::new(), Fields::new()),
    ]
}

/// The fields a cell of the table names: each `code` span that is a
/// field (`name`, or `name: value`), outside parentheses — which hold
/// values and asides (`pending` or `dead`, `write --fence-grant`); and
/// the rows it points at ("the grant, as `acquire`").
fn fields_named(cell: &str) -> (Fields, Vec<String>) {
    let mut fields = Fields::new();
    let mut rows = Vec::new();
    let mut depth = 0usize;
    let mut spans = cell.split('`');
    while let Some(prose) = spans.next() {
        for c in prose.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let Some(code) = spans.next() else { break };
        let field = code.split(':').next().unwrap_or_default().trim();
        if prose.ends_with("as ") {
            rows.push(format!("`{code}`"));
        } else if depth == 0 && !field.is_empty() && field.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            fields.insert(field.to_owned());
        }
    }
    (fields, rows)
}

#[test]
fn docs_json_md_names_exactly_the_fields_of_each_document() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/JSON.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let rows: Vec<Vec<&str>> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| command | success |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    let expected = expected();
    assert_eq!(
        rows.iter().map(|r| r[0]).collect::<BTreeSet<_>>(),
        expected.iter().map(|e| e.0).collect::<BTreeSet<_>>(),
        "the commands of docs/JSON.md's table"
    );
    // A cell that names no field of its own is the row it points at.
    let fields_of = |cell: &str, column: usize| match fields_named(cell) {
        (named, others) if named.is_empty() && others.len() == 1 => {
            let other = rows.iter().find(|r| r[0] == others[0]).expect("the row pointed at");
            fields_named(other[column]).0
        }
        (named, _) => named,
    };
    for row in &rows {
        assert_eq!(row.len(), 3, "{row:?}");
        let (_, success, refusals) = expected.iter().find(|e| e.0 == row[0]).unwrap();
        assert_eq!(&fields_of(row[1], 1), success, "{}: the success document", row[0]);
        // Every failure says `error` (or a `message`) and `exit_code`.
        let mut named = fields_of(row[2], 2);
        named.retain(|f| !["error", "message", "exit_code"].contains(&f.as_str()));
        assert_eq!(&named, refusals, "{}: the refusals' details", row[0]);
    }
}

#[test]
fn a_failure_has_the_error_the_code_and_the_details_beside_them() {
    let name = LeaseName::new("job").unwrap();
    let held = Failure {
        words: Words::Error("held"),
        exit_code: 11,
        details: RunHeld {
            name: &name,
            held: true,
            skipped: false,
        },
    };
    assert_eq!(
        value(&held),
        serde_json::json!({"error": "held", "exit_code": 11, "name": "job", "held": true, "skipped": false})
    );
    let skipped = Failure {
        words: Words::Message("skipped"),
        exit_code: 0,
        details: (),
    };
    assert_eq!(
        value(&skipped),
        serde_json::json!({"message": "skipped", "exit_code": 0})
    );
}
