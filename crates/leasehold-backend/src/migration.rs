//! Versioned schemas of the SQL stores: each store keeps its own list of
//! migrations (its SQL), and this module says, once, what a store of a
//! version must have and what to tell the user when it does not.
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
            sql: "",
            objects: &["a", "a_index"],
        },
        Migration {
            sql: "",
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
}
