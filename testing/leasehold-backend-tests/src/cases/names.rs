//! "Names are stored exactly as given, never used as a path, and never split
//! on a separator, so `../../etc/passwd` is just a name and `job` and `job/1`
//! are unrelated names on every store."

use leasehold_backend::{HistoryEvent, LeaseName};

use crate::params;
use crate::{Case, Harness, names};

/// Odd but valid names: path-like, SQL-like, wildcards, unicode, 255 bytes.
fn odd_names() -> Vec<String> {
    let long_unicode = format!("{}x", "é".repeat(127));
    let names = vec![
        "../../etc/passwd".to_owned(),
        "/abs/path".to_owned(),
        "it's\"; DROP TABLE leases; --".to_owned(),
        "50%_off*?[x]".to_owned(),
        "\\backslash\\".to_owned(),
        "ünïcødé ✓ 名前 🦀".to_owned(),
        "zero\u{200b}width".to_owned(),
        " padded ".to_owned(),
        "x".repeat(LeaseName::MAX_LEN),
        long_unicode,
    ];
    for name in &names {
        assert!(name.len() <= LeaseName::MAX_LEN, "{name:?}");
    }
    names
}

/// Each odd name reads back byte for byte, from the grant, `lease_get`,
/// `lease_list` and the history.
pub fn names_stored_exactly<H: Harness>(t: &mut Case<H>) {
    let odd = odd_names();
    for name in &odd {
        let grant = t.granted(&params::acquire(name));
        assert_eq!(grant.name.as_str(), name);
        let state = t.state(name);
        assert_eq!(state.name.as_str(), name);
        assert_eq!(state.grants.len(), 1, "grants of {name:?}");
        assert_eq!(state.grants[0].name.as_str(), name);
        assert_eq!(
            t.events(name),
            vec![(HistoryEvent::Granted, Some(grant.token))],
            "history of {name:?}"
        );
    }
    let listed = t.list(false);
    let mut listed = names(&listed);
    listed.sort_unstable();
    let mut expected: Vec<&str> = odd.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected);
}

/// Names that share a prefix, differ in case, a trailing character or a
/// wildcard are separate leases.
pub fn names_are_independent<H: Harness>(t: &mut Case<H>) {
    let family = ["job", "job/1", "job/", "jo", "Job", "job ", "job%", "jo_", "job/1/2"];
    // All held exclusively at once: no name blocks another.
    let grants: Vec<_> = family.iter().map(|name| t.granted(&params::acquire(name))).collect();

    // Churn on "job" touches none of the others.
    t.released(&params::release("job", grants[0].token));
    let mut job = t.granted(&params::acquire("job"));
    for _ in 0..3 {
        t.released(&params::release("job", job.token));
        job = t.granted(&params::acquire("job"));
    }
    for (name, grant) in family.iter().zip(&grants).skip(1) {
        let state = t.state(name);
        assert_eq!(state.last_token, grant.token, "last_token of {name:?}");
        assert_eq!(crate::tokens(&state.grants), vec![grant.token], "grants of {name:?}");
        assert_eq!(
            t.events(name),
            vec![(HistoryEvent::Granted, Some(grant.token))],
            "history of {name:?}"
        );
    }
    assert_eq!(t.list(true).len(), family.len());
}
