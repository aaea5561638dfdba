//! The store list: every store leasehold knows, in the order messages name
//! them — the one place that names each store crate. The `leasehold` crate
//! parses, shows and opens store URLs through it and asks it what a store
//! can do; it never names a store itself.
//!
//! A store this build leaves out (its cargo feature off) is still listed,
//! by its crate's `KIND` (compiled without the store's backend): its URLs
//! parse, and opening one says how to get it. Messages that list stores
//! are generated from the list by what the stores can do ([`stores_with`]),
//! so they stay true as stores are added.
//!
//! A new store: its crate (a `KIND` always; its backend and `STORE` under
//! its feature `backend`), its line in [`STORES`], a feature here, and a
//! feature of `leasehold` that forwards to it.

pub use leasehold_backend::{StoreKind, StoreRegistration};

/// A store as this build knows it.
#[derive(Debug, Clone, Copy)]
pub struct Listed {
    /// What messages say of it and what it can do.
    pub kind: &'static StoreKind,
    /// How to open it; `None`: this build leaves it out.
    pub built: Option<&'static StoreRegistration>,
}

impl Listed {
    const fn built(store: &'static StoreRegistration) -> Self {
        Listed {
            kind: &store.kind,
            built: Some(store),
        }
    }

    #[allow(dead_code, reason = "none in a build with every store")]
    const fn left_out(kind: &'static StoreKind) -> Self {
        Listed { kind, built: None }
    }
}

/// Every store, in the order messages name them: the embedded default
/// first. A store a build may leave out has a line for either case.
pub const STORES: &[Listed] = &[
    Listed::built(EMBEDDED),
    #[cfg(feature = "postgres")]
    Listed::built(&leasehold_postgres::STORE),
    #[cfg(not(feature = "postgres"))]
    Listed::left_out(&leasehold_postgres::KIND),
    #[cfg(feature = "etcd")]
    Listed::built(&leasehold_etcd::STORE),
    #[cfg(not(feature = "etcd"))]
    Listed::left_out(&leasehold_etcd::KIND),
    #[cfg(feature = "firestore")]
    Listed::built(&leasehold_firestore::STORE),
    #[cfg(not(feature = "firestore"))]
    Listed::left_out(&leasehold_firestore::KIND),
    #[cfg(feature = "redis")]
    Listed::built(&leasehold_redis::STORE),
    #[cfg(not(feature = "redis"))]
    Listed::left_out(&leasehold_redis::KIND),
];

/// The embedded default store, in every build: one file on this machine
/// (SQLite), where a path and the default location lead.
pub const EMBEDDED: &StoreRegistration = &leasehold_sqlite::STORE;

/// The stores this build includes, by their first URL scheme (the
/// embedded one always; the others, each with TLS, by cargo feature): what
/// `leasehold --version` reports.
#[must_use]
pub fn built_in_stores() -> Vec<&'static str> {
    built_in().map(|s| s.kind.schemes[0]).collect()
}

/// Every URL scheme this build opens (`sqlite`, `postgres`, `postgresql`,
/// `etcd`, `firestore`, `redis`, `rediss` with every store), in the order
/// messages name the stores: the one list that `leasehold --help` shows
/// for `--store`.
#[must_use]
pub fn built_in_schemes() -> Vec<&'static str> {
    built_in().flat_map(|s| s.kind.schemes.iter().copied()).collect()
}

fn built_in() -> impl Iterator<Item = &'static Listed> {
    STORES.iter().filter(|s| s.built.is_some())
}

/// The stores that can do what `can` asks — of every store, built in or
/// not — as a message names them, by their first URL scheme: "a sqlite://
/// or postgres:// store" for `stores_with(|k| k.queue)`.
///
/// # Examples
/// ```
/// assert_eq!(
///     leasehold_stores::stores_with(|k| k.queue),
///     "a sqlite:// or postgres:// store"
/// );
/// ```
#[must_use]
pub fn stores_with(can: impl Fn(&StoreKind) -> bool) -> String {
    let schemes: Vec<String> = STORES
        .iter()
        .filter(|s| can(s.kind))
        .map(|s| format!("{}://", s.kind.schemes[0]))
        .collect();
    let article = match schemes.first().and_then(|s| s.chars().next()) {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    format!("{article} {} store", one_of(schemes))
}

/// `a`, `a or b`, `a, b or c`.
#[must_use]
pub fn one_of(items: impl IntoIterator<Item = String>) -> String {
    let mut items: Vec<String> = items.into_iter().collect();
    let last = items.pop().unwrap_or_default();
    if items.is_empty() {
        last
    } else {
        format!("{} or {last}", items.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scheme leads to one store, whatever the build includes; a store
    /// built in is described as its crate's `KIND` describes it.
    #[test]
    fn every_store_has_schemes_of_its_own() {
        let mut seen = Vec::new();
        for listed in STORES {
            assert!(!listed.kind.schemes.is_empty(), "{} has no scheme", listed.kind.name);
            for scheme in listed.kind.schemes {
                assert!(!seen.contains(scheme), "{scheme}:// is listed twice");
                seen.push(*scheme);
            }
            if let Some(store) = listed.built {
                assert_eq!(&store.kind, listed.kind);
            }
            assert_eq!(listed.built.is_none(), listed.kind.feature.is_some_and(|f| !built(f)));
        }
        assert_eq!(STORES.len(), 5);
    }

    fn built(feature: &str) -> bool {
        match feature {
            "postgres" => cfg!(feature = "postgres"),
            "etcd" => cfg!(feature = "etcd"),
            "firestore" => cfg!(feature = "firestore"),
            "redis" => cfg!(feature = "redis"),
            other => panic!("no feature {other} in leasehold-stores"),
        }
    }

    #[test]
    fn the_embedded_store_is_first_and_always_built() {
        assert_eq!(STORES[0].kind, &EMBEDDED.kind);
        assert!(STORES[0].built.is_some());
        assert!(EMBEDDED.kind.local_file && EMBEDDED.kind.feature.is_none());
        assert_eq!(built_in_stores()[0], "sqlite");
    }

    /// The capabilities as the messages that list stores say them.
    #[test]
    fn messages_name_the_stores_by_what_they_can_do() {
        assert_eq!(stores_with(|k| k.queue), "a sqlite:// or postgres:// store");
        assert_eq!(
            stores_with(|k| k.schedules),
            "a sqlite://, postgres://, etcd://, firestore:// or redis:// store"
        );
        assert_eq!(
            stores_with(|k| !k.local_file),
            "a postgres://, etcd://, firestore:// or redis:// store"
        );
        assert_eq!(stores_with(|k| k.schemes[0] == "etcd"), "an etcd:// store");
    }

    /// What the embedded store's `KIND` says it can do is what its backend
    /// has.
    #[test]
    fn the_embedded_kind_says_what_its_backend_has() {
        let dir = tempfile::tempdir().unwrap();
        let location = (EMBEDDED.parse)(&format!("sqlite://{}", dir.path().join("l.db").display())).unwrap();
        let backend = (EMBEDDED.open)(&location, &leasehold_backend::StoreOpenOptions::default()).unwrap();
        assert_eq!(backend.tasks().is_some(), EMBEDDED.kind.queue);
        assert_eq!(backend.records().is_some(), EMBEDDED.kind.schedules);
    }

    #[test]
    fn one_of_lists_with_commas_and_or() {
        let words = |w: &[&str]| one_of(w.iter().map(|s| (*s).to_owned()));
        assert_eq!(words(&[]), "");
        assert_eq!(words(&["a"]), "a");
        assert_eq!(words(&["a", "b"]), "a or b");
        assert_eq!(words(&["a", "b", "c"]), "a, b or c");
    }
}
