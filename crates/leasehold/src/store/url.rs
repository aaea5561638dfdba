//! Store URLs: which store a URL names — through the store list
//! (`leasehold_stores::STORES`: every store's kind, and the registration
//! of each this build includes) — how it is shown (passwords redacted), and
//! opening it. What a URL of a store may say is its own crate's business
//! (`leasehold_etcd::STORE`, …); this module names no store.

use std::fmt;
use std::path::{Path, PathBuf};

use leasehold_backend::{
    Backend, BackendError, Remedy, StoreKind, StoreLocation, StoreOpenOptions, StoreRegistration, redact_password,
};
use leasehold_host as host;
use leasehold_stores::{EMBEDDED, STORES, one_of};

use super::StoreOptions;
use crate::Result;

/// Where lease state lives: a URL of one of the stores —
/// `sqlite://PATH`, `postgres://…`, `postgresql://…` or
/// `etcd://HOST:PORT[,HOST:PORT…][?prefix=/KEY/PREFIX]` (TLS and users:
/// `leasehold_etcd::STORE`) — or a name for a store of the caller's
/// ([`StoreUrl::custom`]).
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(Target);

#[derive(Clone)]
enum Target {
    /// A URL of a store built in, as its registration parsed it.
    Built(&'static StoreRegistration, StoreLocation),
    /// A URL of a store this build leaves out, as given.
    LeftOut(&'static StoreKind, String),
    /// A store built from a backend of the caller's, named by the caller.
    Custom(String),
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Target::Built(a, at), Target::Built(b, to)) => a.kind == b.kind && at == to,
            (Target::LeftOut(a, at), Target::LeftOut(b, to)) => a == b && at == to,
            (Target::Custom(a), Target::Custom(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Target {}

impl StoreUrl {
    /// Parse a store URL.
    ///
    /// # Errors
    /// [`BackendError`] of kind [`crate::ErrorKind::InvalidInput`] for an
    /// unknown scheme, or a URL its store refuses (an empty path, …).
    ///
    /// # Examples
    /// ```
    /// use leasehold::StoreUrl;
    /// assert_eq!(
    ///     StoreUrl::parse("sqlite:///var/lib/jobs.db").unwrap(),
    ///     StoreUrl::sqlite("/var/lib/jobs.db")
    /// );
    /// assert!(StoreUrl::parse("mysql://localhost").is_err());
    /// let url = StoreUrl::parse("etcd://10.0.0.5:2379,10.0.0.6:2379/?prefix=/myapp").unwrap();
    /// assert_eq!(url.to_string(), "etcd://10.0.0.5:2379,10.0.0.6:2379?prefix=/myapp");
    /// // Never a password in an etcd URL itself (see leasehold_etcd::STORE).
    /// assert!(StoreUrl::parse("etcd://h:2379?user=agent&password=hunter2").is_err());
    /// ```
    pub fn parse(url: &str) -> std::result::Result<Self, BackendError> {
        let Some((scheme, _)) = url.split_once("://") else {
            let examples = STORES.iter().map(|s| s.kind.example.to_owned());
            return Err(BackendError::invalid_url(
                redact_password(url),
                format!("expected SCHEME://…, e.g. {}", one_of(examples)),
            ));
        };
        let Some(listed) = STORES.iter().find(|s| s.kind.schemes.contains(&scheme)) else {
            let schemes = STORES.iter().map(|s| format!("{}://", s.kind.schemes[0]));
            return Err(BackendError::invalid_url(
                redact_password(url),
                format!("unknown scheme {scheme:?}; use {}", one_of(schemes)),
            ));
        };
        match listed.built {
            Some(store) => Ok(StoreUrl(Target::Built(store, (store.parse)(url)?))),
            None => Ok(StoreUrl(Target::LeftOut(listed.kind, url.to_owned()))),
        }
    }

    /// The SQLite store in the file at `path`: the embedded store
    /// (`leasehold_stores::EMBEDDED`).
    #[must_use]
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        StoreUrl(Target::Built(EMBEDDED, StoreLocation::File(path.into())))
    }

    /// The name of a store built from a backend of the caller's
    /// ([`Store::from_backend`](super::Store::from_backend)), which
    /// [`Store::open`](super::Store::open) cannot open.
    #[must_use]
    pub fn custom(name: impl Into<String>) -> Self {
        StoreUrl(Target::Custom(name.into()))
    }

    /// The file of a store kept in one file on this machine (SQLite).
    #[must_use]
    pub fn local_file(&self) -> Option<&Path> {
        match &self.0 {
            Target::Built(_, StoreLocation::File(path)) => Some(path),
            _ => None,
        }
    }

    /// The URL for messages: as [`Display`](fmt::Display) shows it (which
    /// a child process can open again), with any password replaced by
    /// `***`.
    ///
    /// # Examples
    /// ```
    /// use leasehold::StoreUrl;
    /// let url = StoreUrl::parse("postgres://agent:s3cret@db/leases?sslmode=verify-full").unwrap();
    /// assert_eq!(url.redacted(), "postgres://agent:***@db/leases?sslmode=verify-full");
    /// ```
    #[must_use]
    pub fn redacted(&self) -> String {
        match &self.0 {
            Target::Built(store, _) => (store.redact)(&self.to_string()),
            Target::LeftOut(..) | Target::Custom(_) => redact_password(&self.to_string()),
        }
    }

    /// The embedded default: `$XDG_STATE_HOME/leasehold/leasehold.db`, or
    /// `~/.local/state/leasehold/leasehold.db` when it is unset.
    ///
    /// # Errors
    /// When neither `$XDG_STATE_HOME` nor `$HOME` is set.
    pub fn default_location() -> std::result::Result<Self, BackendError> {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| host::home_dir().map(|h| h.join(".local/state")))
            .ok_or_else(|| {
                BackendError::invalid_url(
                    String::new(),
                    "neither $XDG_STATE_HOME nor $HOME is set, so there is no default store",
                )
                .remedy(Remedy::AnotherStore)
            })?;
        Ok(StoreUrl::sqlite(state.join("leasehold").join("leasehold.db")))
    }

    /// The store a language package opens (Python's `Store(url)`,
    /// Node's `new Store(url)`) when given `url` — a URL as the CLI's
    /// `--store` takes it — or nothing: [`STORE_VAR`], else the embedded
    /// default, so a program and `leasehold` on the command line share
    /// their leases. `path_words` says how the package's caller names a
    /// file instead (`pass pathlib.Path(PATH)`).
    ///
    /// A string without a scheme is refused rather than taken for a file
    /// name (`"localhost:5432"` must not become a SQLite file in the
    /// current directory), and so is a SQLite URL with a query string or
    /// fragment (`sqlite:///x.db?mode=ro` would be a file named so).
    ///
    /// # Errors
    /// [`ChosenUrlError::Refused`] as above (the message never shows the
    /// string: a mistyped URL may hold a password);
    /// [`ChosenUrlError::Store`] when the store refuses the URL or there
    /// is no default.
    pub fn chosen(url: Option<&str>, path_words: &str) -> std::result::Result<Self, ChosenUrlError> {
        let from_env = std::env::var(STORE_VAR).ok().filter(|v| !v.is_empty());
        let text = match url {
            Some(text) if !text.contains("://") => {
                let urls = one_of(
                    STORES
                        .iter()
                        .filter(|s| !s.kind.local_file)
                        .map(|s| s.kind.example.to_owned()),
                );
                return Err(ChosenUrlError::Refused(format!(
                    "the store URL has no scheme (no \"://\"): write {}:///PATH (or {path_words}) for {}, \
                     or a URL such as {urls}; or no URL for ${STORE_VAR}, else the embedded store",
                    EMBEDDED.kind.schemes[0], EMBEDDED.kind.name
                )));
            }
            Some(text) => text.to_owned(),
            None => match from_env {
                Some(text) => text,
                None => return Ok(Self::default_location()?),
            },
        };
        if let Some(rest) = text.strip_prefix("sqlite://")
            && let Some(at) = rest.find(['?', '#'])
        {
            return Err(ChosenUrlError::Refused(format!(
                "the SQLite store URL {text:?} has a query string or fragment ({:?}), which SQLite URLs do not \
                 take: the store would be a file named {rest:?}. Drop it (sqlite:///PATH); for a file whose name \
                 holds '?' or '#', {path_words}",
                &rest[at..]
            )));
        }
        Ok(Self::parse(&text)?)
    }

    /// Open the store's backend (for [`Store::open`](super::Store::open)).
    pub(super) fn open_backend(&self, options: &StoreOptions) -> Result<Box<dyn Backend>> {
        match &self.0 {
            Target::Built(store, location) => Ok((store.open)(
                location,
                &StoreOpenOptions {
                    allow_network_fs: options.allow_network_fs,
                    must_exist: options.must_exist,
                },
            )?),
            Target::LeftOut(kind, _) => {
                let what = match kind.feature {
                    Some(feature) => format!("{} (cargo feature `{feature}`)", kind.name),
                    None => kind.name.to_owned(),
                };
                Err(BackendError::unsupported(
                    self.redacted(),
                    "this store",
                    format!(
                        "this build of leasehold does not include {what}; use {}://PATH or another build",
                        EMBEDDED.kind.schemes[0]
                    ),
                )
                .into())
            }
            Target::Custom(_) => Err(BackendError::unsupported(
                self.to_string(),
                "opening a store by a name of the caller's",
                "build it with Store::from_backend",
            )
            .into()),
        }
    }
}

/// The environment variable every front end reads its store from (the
/// CLI's `--store`, the language packages' default).
pub const STORE_VAR: &str = "LEASEHOLD_STORE";

/// Why [`StoreUrl::chosen`] refused what it was given.
#[derive(Debug, thiserror::Error)]
pub enum ChosenUrlError {
    /// Not a URL to open as given; the message says what to write.
    #[error("{0}")]
    Refused(String),
    /// The store refused the URL, or there is no default.
    #[error(transparent)]
    Store(#[from] BackendError),
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Target::Built(store, StoreLocation::File(path)) => {
                write!(f, "{}://{}", store.kind.schemes[0], path.display())
            }
            Target::Built(_, StoreLocation::Url(url)) | Target::LeftOut(_, url) | Target::Custom(url) => {
                f.write_str(url)
            }
        }
    }
}

impl fmt::Debug for StoreUrl {
    /// Redacted, as in messages: a `{:?}` may end up in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted()).finish()
    }
}

#[cfg(test)]
mod tests {
    use leasehold_backend::ErrorKind;

    use super::*;

    fn invalid_reason(url: &str) -> (String, String) {
        match StoreUrl::parse(url) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => (e.store().to_owned(), e.reason().to_owned()),
            other => panic!("{url} must be refused: {other:?}"),
        }
    }

    /// Whatever the build includes, the messages name every store.
    #[test]
    fn an_unknown_or_missing_scheme_names_every_store() {
        assert_eq!(
            invalid_reason("mysql://u:pw@h"),
            (
                "mysql://u:***@h".into(),
                "unknown scheme \"mysql\"; use sqlite://, postgres://, etcd://, firestore:// or redis://".into()
            )
        );
        assert_eq!(
            invalid_reason("/var/lib/jobs.db").1,
            "expected SCHEME://…, e.g. sqlite:///path/to/leasehold.db, postgres://host/db, etcd://host:2379, firestore://my-project or redis://host:6379"
        );
        let (_, reason) = invalid_reason("sqlite://");
        assert!(reason.starts_with("the path is empty"), "{reason}");
    }

    #[test]
    fn passwords_are_redacted_for_messages_and_kept_for_children() {
        let parsed = StoreUrl::parse("postgres://u:pw@h/db").unwrap();
        assert_eq!(
            parsed.to_string(),
            "postgres://u:pw@h/db",
            "Display must round-trip for children"
        );
        assert_eq!(parsed.redacted(), "postgres://u:***@h/db");
        assert_eq!(format!("{parsed:?}"), "StoreUrl(\"postgres://u:***@h/db\")");
    }

    #[test]
    fn a_sqlite_url_is_its_path() {
        let url = StoreUrl::parse("sqlite://rel/l.db").unwrap();
        assert_eq!(url, StoreUrl::sqlite("rel/l.db"));
        assert_eq!(url.local_file(), Some(Path::new("rel/l.db")));
        assert_eq!(url.to_string(), "sqlite://rel/l.db");
        assert_eq!(StoreUrl::parse("postgres://h/db").unwrap().local_file(), None);
    }

    /// Run by `cargo test -p leasehold --no-default-features`.
    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_store_left_out_parses_and_says_so_when_opened() {
        let url = StoreUrl::parse("postgres://u:pw@h/db").unwrap();
        assert_eq!(url.to_string(), "postgres://u:pw@h/db");
        let Err(crate::Error::Store(e)) = url.open_backend(&StoreOptions::default()) else {
            panic!("{url:?} opened");
        };
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(e.store(), "postgres://u:***@h/db");
        assert_eq!(
            e.hint_text(),
            "this build of leasehold does not include the PostgreSQL store (cargo feature `postgres`); use sqlite://PATH or another build"
        );
    }

    /// Of every store this build leaves out (none with every feature; all
    /// but SQLite with none), a URL parses, and opening it names the store
    /// and the cargo feature that builds it in.
    #[test]
    fn every_store_left_out_parses_and_says_how_to_get_it() {
        for kind in STORES.iter().filter(|s| s.built.is_none()).map(|s| s.kind) {
            let url = StoreUrl::parse(kind.example).unwrap();
            assert_eq!(url.to_string(), kind.example);
            let Err(crate::Error::Store(e)) = url.open_backend(&StoreOptions::default()) else {
                panic!("{url:?} opened");
            };
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            let feature = kind.feature.expect("only a store with a cargo feature is left out");
            let hint = e.hint_text();
            assert!(
                hint.contains(&format!("does not include {} (cargo feature `{feature}`)", kind.name)),
                "{hint}"
            );
        }
        assert_eq!(super::super::built_in_stores()[0], "sqlite");
    }
}
