//! Versioned schemas of the SQL stores: each store keeps its own list of
//! migrations (its SQL), and this module says, once, which of them run
//! for a store of a version ([`run`]), what a store of a version must have
//! and what to tell the user when it does not.
//!
//! A store lacking a table or index of its version (one dropped by hand, or
//! lost) is damaged: bad data, refused at open, never repaired in place — a
//! new `lease_name` table would restart every token counter.

/// One migration: from version `index` to `index + 1` in a store's list.
#[derive(Debug)]
pub struct Migration {
    pub sql: &'static str,
    /// The tables and indexes `sql` creates (besides what a key creates on
    /// its own), which a store of this version or later must have. Each
    /// store has a test that keeps this true.
    pub objects: &'static [&'static str],
}

/// Run the migrations that take a store from version `from` to `to`, in
/// order, inside the transaction the store holds: `step` gets the SQL of
/// each and the version it brings the store to (for a store that records
/// its version step by step). A `from` below zero (a version no leasehold
/// writes) runs nothing.
///
/// # Errors
/// The first error of `step`, after which nothing more runs.
pub fn run<E>(
    migrations: &[Migration],
    from: i64,
    to: i64,
    mut step: impl FnMut(&'static str, i64) -> Result<(), E>,
) -> Result<(), E> {
    let pending = migrations
        .iter()
        .zip(1..)
        .take(usize::try_from(to).unwrap_or(0))
        .skip(usize::try_from(from).unwrap_or(usize::MAX));
    for (migration, version) in pending {
        step(migration.sql, version)?;
    }
    Ok(())
}

/// The tables and indexes a store at `version` has, in creation order.
#[must_use]
pub fn objects(migrations: &[Migration], version: i64) -> Vec<&'static str> {
    migrations
        .iter()
        .take(usize::try_from(version).unwrap_or(0))
        .flat_map(|m| m.objects.iter().copied())
        .collect()
}

/// What `objects(migrations, version)` lacks, given whether each name is
/// `present`, said for the user; `None` when nothing is missing.
pub fn missing(migrations: &[Migration], version: i64, present: impl Fn(&str) -> bool) -> Option<String> {
    let missing: Vec<&str> = objects(migrations, version)
        .into_iter()
        .filter(|name| !present(name))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "its schema (version {version}) is damaged: missing {}",
            missing.join(", ")
        )
    })
}

/// What to do about a damaged schema; `what` names the store ("it",
/// "schema leasehold").
#[must_use]
pub fn damage_hint(what: &str) -> String {
    format!(
        "restore {what} from a backup; do not recreate what is missing (a new lease_name table would restart every token counter)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIGRATIONS: &[Migration] = &[
        Migration {
            sql: "CREATE a",
            objects: &["a", "a_index"],
        },
        Migration {
            sql: "CREATE b",
            objects: &["b"],
        },
    ];

    #[test]
    fn a_version_has_the_objects_of_its_migrations_and_no_later_ones() {
        assert_eq!(objects(MIGRATIONS, 0), Vec::<&str>::new());
        assert_eq!(objects(MIGRATIONS, 1), ["a", "a_index"]);
        assert_eq!(objects(MIGRATIONS, 2), ["a", "a_index", "b"]);
        assert_eq!(
            missing(MIGRATIONS, 1, |n| n == "a"),
            Some("its schema (version 1) is damaged: missing a_index".into())
        );
        assert_eq!(missing(MIGRATIONS, 1, |_| true), None);
        assert_eq!(
            missing(MIGRATIONS, 2, |n| n != "b"),
            Some("its schema (version 2) is damaged: missing b".into())
        );
    }

    #[test]
    fn a_run_takes_the_steps_between_two_versions_in_order() {
        let steps = |from, to| {
            let mut ran = Vec::new();
            run(MIGRATIONS, from, to, |sql, version| {
                ran.push((sql, version));
                Ok::<_, ()>(())
            })
            .unwrap();
            ran
        };
        assert_eq!(steps(0, 2), [("CREATE a", 1), ("CREATE b", 2)]);
        assert_eq!(steps(1, 2), [("CREATE b", 2)]);
        assert_eq!(steps(0, 1), [("CREATE a", 1)]);
        assert_eq!(steps(2, 2), []);
        assert_eq!(steps(-1, 2), []);
    }
}
