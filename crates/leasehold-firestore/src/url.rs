//! `firestore://PROJECT[/DATABASE][?prefix=COLLECTION]` and how the store
//! registers itself.
//!
//! Where the requests go is Google's way: `FIRESTORE_EMULATOR_HOST`
//! (HOST:PORT) sends them to an emulator over plain HTTP without
//! credentials, as Google's client libraries do; otherwise to
//! `firestore.googleapis.com` over TLS, with Application Default
//! Credentials (see `access`).

use leasehold_backend::{Backend, BackendError, StoreKind, StoreLocation, StoreOpenOptions, StoreRegistration};

use crate::{FirestoreBackend, FirestoreOptions, Target};

/// The variable that sends every request to an emulator.
pub const EMULATOR_VAR: &str = "FIRESTORE_EMULATOR_HOST";

pub const STORE: StoreRegistration = StoreRegistration {
    kind: StoreKind {
        schemes: &["firestore"],
        name: "the Firestore store",
        feature: Some("firestore"),
        example: "firestore://my-project",
    },
    parse,
    redact: str::to_owned,
    open,
};

/// A parsed URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirestoreUrl {
    pub project: String,
    pub database: String,
    pub prefix: Option<String>,
}

fn parse(url: &str) -> Result<StoreLocation, BackendError> {
    checked(url)?;
    Ok(StoreLocation::Url(url.to_owned()))
}

fn checked(url: &str) -> Result<FirestoreUrl, BackendError> {
    FirestoreUrl::parse(url).map_err(|reason| BackendError::invalid_url(url, reason))
}

fn open(location: &StoreLocation, _: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    let url = checked(location.url(STORE.kind.name)?)?;
    let target = match std::env::var(EMULATOR_VAR) {
        Ok(host) if !host.trim().is_empty() => Target::Emulator(host.trim().to_owned()),
        _ => Target::Google,
    };
    let options = FirestoreOptions {
        project: url.project,
        database: url.database,
        prefix: url.prefix.unwrap_or_else(|| crate::DEFAULT_PREFIX.to_owned()),
        target,
        ..FirestoreOptions::default()
    };
    Ok(Box::new(FirestoreBackend::open(&options)?))
}

/// A project id as Google makes them (lowercase letters, digits,
/// hyphens; a domain-scoped one has `domain:` before it).
fn project_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 100
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b))
}

/// A database id: `(default)`, or lowercase letters, digits and hyphens.
fn database_ok(d: &str) -> bool {
    d == "(default)"
        || (!d.is_empty()
            && d.len() <= 63
            && d.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'))
}

/// A root collection id leasehold may use: letters, digits, `_` and `-`,
/// not Firestore's reserved `__…__`.
pub fn prefix_ok(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 100
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !(p.starts_with("__") && p.ends_with("__"))
}

impl FirestoreUrl {
    /// Parse a `firestore://` URL: the reason it is refused, if it is.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("firestore://")
            .ok_or("a Firestore URL starts with firestore://")?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (project, database) = path.split_once('/').unwrap_or((path, "(default)"));
        let database = if database.is_empty() { "(default)" } else { database };
        if !project_ok(project) {
            return Err(format!(
                "{project:?} is not a Google Cloud project id (lowercase letters, digits and hyphens): firestore://PROJECT[/DATABASE]"
            ));
        }
        if !database_ok(database) {
            return Err(format!(
                "{database:?} is not a Firestore database id ((default), or lowercase letters, digits and hyphens)"
            ));
        }
        let mut prefix = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) if prefix_ok(value) => prefix = Some(value.to_owned()),
                Some(("prefix", value)) => {
                    return Err(format!(
                        "prefix={value:?} is not a collection id leasehold uses (letters, digits, _ and -, not __…__)"
                    ));
                }
                _ => return Err(format!("unknown parameter {pair:?} (known: prefix)")),
            }
        }
        Ok(Self {
            project: project.to_owned(),
            database: database.to_owned(),
            prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        let u = FirestoreUrl::parse("firestore://my-proj").unwrap();
        assert_eq!(
            (u.project.as_str(), u.database.as_str(), u.prefix),
            ("my-proj", "(default)", None)
        );
        let u = FirestoreUrl::parse("firestore://p-1/db-2?prefix=jobs_a").unwrap();
        assert_eq!((u.database.as_str(), u.prefix.as_deref()), ("db-2", Some("jobs_a")));
        for (bad, says) in [
            ("postgres://x", "starts with firestore://"),
            ("firestore://", "not a Google Cloud project id"),
            ("firestore://My_Proj", "not a Google Cloud project id"),
            ("firestore://p/DB", "not a Firestore database id"),
            ("firestore://p?prefix=a/b", "not a collection id"),
            ("firestore://p?prefix=__x__", "not a collection id"),
            ("firestore://p?ttl=3", "unknown parameter"),
        ] {
            let e = FirestoreUrl::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
