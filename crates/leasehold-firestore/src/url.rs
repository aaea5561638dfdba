//! `firestore://PROJECT[/DATABASE][?prefix=COLLECTION]` and how the store
//! registers itself.
//!
//! Where the requests go is Google's way: `FIRESTORE_EMULATOR_HOST`
//! (HOST:PORT) sends them to an emulator over plain HTTP without
//! credentials, as Google's client libraries do; otherwise to
//! `firestore.googleapis.com` over TLS, with Application Default
//! Credentials (see `access`).

use leasehold_backend::{Backend, BackendError, StoreLocation, StoreOpenOptions, StoreRegistration};

use crate::{FirestoreBackend, FirestoreOptions, Target};

/// The variable that sends every request to an emulator.
pub const EMULATOR_VAR: &str = "FIRESTORE_EMULATOR_HOST";

pub const STORE: StoreRegistration = StoreRegistration {
    kind: crate::KIND,
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

/// What is wrong with a project id, if anything, by Google's rule for
/// them (Resource Manager's `Project.projectId`; `gcloud projects create`):
/// 6 to 30 lowercase ASCII letters, digits or hyphens, starting with a
/// letter and not ending with a hyphen. A legacy domain-scoped id has
/// `DOMAIN:` before one (`example.com:my-project`). The emulator takes
/// more; leasehold holds every store to Google's rule, so that a URL that
/// works on the emulator works on Google.
fn project_problem(p: &str) -> Option<UrlError> {
    let (domain, id) = p.rsplit_once(':').unwrap_or(("", p));
    if p.contains(':') && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        return Some(UrlError::Port(p.to_owned()));
    }
    let domain_ok = |d: &str| {
        !d.is_empty()
            && d.len() <= 253
            && d.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    };
    let id_ok = (6..=30).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && !id.ends_with('-');
    if id_ok && (!p.contains(':') || domain_ok(domain)) {
        return None;
    }
    Some(UrlError::Project(p.to_owned()))
}

/// Why a Firestore URL is refused (the reason of its invalid-URL error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("a Firestore URL starts with firestore://")]
    Scheme,
    /// A project with a port: a server's address where a project belongs.
    #[error(
        "{0:?} has a port: a Firestore URL names a project, not a server (send the requests to an emulator at HOST:PORT with {EMULATOR_VAR}=HOST:PORT)"
    )]
    Port(String),
    #[error(
        "{} is not a Google Cloud project id (6 to 30 lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen; a domain-scoped one as DOMAIN:ID): firestore://PROJECT[/DATABASE]",
        leasehold_backend::quoted(.0)
    )]
    Project(String),
    #[error("{0:?} is not a Firestore database id ((default), or lowercase letters, digits and hyphens)")]
    Database(String),
    #[error("prefix={0:?} is not a collection id leasehold uses (letters, digits, _ and -, not __…__)")]
    Prefix(String),
    #[error("unknown parameter {0:?} (known: prefix)")]
    UnknownParameter(String),
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
    ///
    /// # Errors
    /// The URL is not one of a Firestore store: [`UrlError`] says why.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let rest = url.strip_prefix("firestore://").ok_or(UrlError::Scheme)?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (project, database) = path.split_once('/').unwrap_or((path, "(default)"));
        let database = if database.is_empty() { "(default)" } else { database };
        if let Some(problem) = project_problem(project) {
            return Err(problem);
        }
        if !database_ok(database) {
            return Err(UrlError::Database(database.to_owned()));
        }
        let mut prefix = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) if prefix_ok(value) => prefix = Some(value.to_owned()),
                Some(("prefix", value)) => {
                    return Err(UrlError::Prefix(value.to_owned()));
                }
                _ => return Err(UrlError::UnknownParameter(pair.to_owned())),
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
        for ok in [
            "abcdef",
            &format!("a{}", "b".repeat(29)),
            "example.com:my-proj",
            "a-1-2-3",
        ] {
            assert!(FirestoreUrl::parse(&format!("firestore://{ok}")).is_ok(), "{ok}");
        }
        for bad in ["abcde", &format!("a{}", "b".repeat(30)), &"p".repeat(100)] {
            let e = FirestoreUrl::parse(&format!("firestore://{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("6 to 30 lowercase letters"), "{bad}: {e}");
        }
        let u = FirestoreUrl::parse("firestore://proj-1/db-2?prefix=jobs_a").unwrap();
        assert_eq!((u.database.as_str(), u.prefix.as_deref()), ("db-2", Some("jobs_a")));
        for (bad, says) in [
            ("postgres://x", "starts with firestore://"),
            ("firestore://", "not a Google Cloud project id"),
            ("firestore://My_Proj", "not a Google Cloud project id"),
            ("firestore://my-proj:8080", "has a port"),
            ("firestore://p", "not a Google Cloud project id"),
            ("firestore://proj-", "not a Google Cloud project id"),
            ("firestore://1proj-a", "not a Google Cloud project id"),
            ("firestore://example.com:", "not a Google Cloud project id"),
            ("firestore://ex..com:my-proj", "not a Google Cloud project id"),
            ("firestore://proj-1/DB", "not a Firestore database id"),
            ("firestore://proj-1?prefix=a/b", "not a collection id"),
            ("firestore://proj-1?prefix=__x__", "not a collection id"),
            ("firestore://proj-1?ttl=3", "unknown parameter"),
        ] {
            let e = FirestoreUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
