//! How a store crate makes its URLs openable: one [`StoreRegistration`]
//! each (`leasehold_sqlite::STORE`, …), listed once in the
//! `leasehold-stores` crate, through which the `leasehold` crate parses,
//! shows and opens store URLs. A new store thus names its schemes, checks
//! its URLs and opens its backend in its own crate; the library never
//! names it nor its options.

use std::path::{Path, PathBuf};

use crate::{Backend, BackendError};

/// What messages say of a store, and what it can do — also of one a build
/// leaves out: each store crate's `KIND`, compiled without its backend
/// too (the crate's feature `backend` off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreKind {
    /// The URL schemes it opens; the first names the store (in
    /// `leasehold --version`).
    pub schemes: &'static [&'static str],
    /// The store in a sentence: "the PostgreSQL store".
    pub name: &'static str,
    /// The `leasehold` crate's cargo feature that builds it in; `None`:
    /// always built in.
    pub feature: Option<&'static str>,
    /// A URL of it, for the message that lists the stores.
    pub example: &'static str,
    /// It has a task queue ([`Backend::tasks`](crate::Backend::tasks) is
    /// `Some`).
    pub queue: bool,
    /// It keeps schedules: it has records
    /// ([`Backend::records`](crate::Backend::records) is `Some`).
    pub schedules: bool,
    /// It is kept in one file on this machine ([`StoreLocation::File`]),
    /// which a network filesystem endangers; every other store is reached
    /// over the network.
    pub local_file: bool,
}

/// A store that can be opened by URL. Its functions see only URLs of its
/// own schemes.
#[derive(Debug, Clone, Copy)]
pub struct StoreRegistration {
    pub kind: StoreKind,
    /// Check a URL and return where it leads. `Err`: why it is refused
    /// ([`BackendError::invalid_url`], the URL as `redact` shows it; the
    /// reason must not repeat a value that may be a secret).
    pub parse: fn(url: &str) -> Result<StoreLocation, BackendError>,
    /// The URL for messages, with every secret in it replaced (most
    /// stores: [`redact_password`]).
    pub redact: fn(url: &str) -> String,
    /// Open what `parse` returned.
    pub open: OpenFn,
}

/// How a registered store is opened: [`StoreRegistration::open`].
pub type OpenFn = fn(location: &StoreLocation, options: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError>;

/// Where a store URL leads, as its store's `parse` left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A store in one file on this machine (SQLite), kept as a path: it
    /// need not be UTF-8. Shown as `SCHEME://PATH`.
    File(PathBuf),
    /// Any other store: the URL that opens it again, as shown (a child
    /// process is given it).
    Url(String),
}

impl StoreLocation {
    /// The URL, for a store opened by one; `store` names it in the error
    /// for a file.
    ///
    /// # Errors
    /// An invalid URL for a [`StoreLocation::File`].
    pub fn url(&self, store: &str) -> Result<&str, BackendError> {
        match self {
            StoreLocation::Url(url) => Ok(url),
            StoreLocation::File(path) => Err(BackendError::invalid_url(
                path.display().to_string(),
                format!("{store} is opened by a URL, not a file"),
            )),
        }
    }

    /// The file, for a store in one; `store` names it in the error for a
    /// URL.
    ///
    /// # Errors
    /// An invalid URL for a [`StoreLocation::Url`].
    pub fn file(&self, store: &str) -> Result<&Path, BackendError> {
        match self {
            StoreLocation::File(path) => Ok(path),
            StoreLocation::Url(url) => Err(BackendError::invalid_url(
                redact_password(url),
                format!("{store} is opened from a file, not by this URL"),
            )),
        }
    }
}

/// What every store is opened with (of `leasehold::StoreOptions`, what
/// reaches a store).
#[derive(Debug, Clone, Default)]
pub struct StoreOpenOptions {
    /// Open a store in a file on a network filesystem anyway.
    pub allow_network_fs: bool,
    /// Open only a store that exists (a file store: neither the file nor
    /// its directory is created).
    pub must_exist: bool,
}

/// The password in the file a store URL's `password-file=PATH` names: its
/// text without one trailing newline. The reason, as the URL's error says
/// it, when the file is missing, unreadable or empty. (A password is never
/// in a URL, which a command line, `ps` and shell history show.)
///
/// # Errors
/// The file cannot be read, or holds nothing.
pub fn password_from_file(path: &Path) -> Result<String, PasswordFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => PasswordFileError::Missing(path.to_owned()),
        _ => PasswordFileError::Unreadable {
            path: path.to_owned(),
            error: e,
        },
    })?;
    let password = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if password.is_empty() {
        return Err(PasswordFileError::Empty(path.to_owned()));
    }
    Ok(password.to_owned())
}

/// Why a `password-file=PATH` gave no password, in the words of the URL's
/// error.
#[derive(Debug, thiserror::Error)]
pub enum PasswordFileError {
    #[error("password-file={}: no such file (a relative path is taken from the current directory)", .0.display())]
    Missing(PathBuf),
    #[error("cannot read password-file={}: {error}", .path.display())]
    Unreadable { path: PathBuf, error: std::io::Error },
    #[error("password-file={} is empty: write the password to it", .0.display())]
    Empty(PathBuf),
}

/// `url` with every password in it replaced by `***`: one in the
/// authority (`postgres://user:PASSWORD@host`), the value of a `password=`
/// parameter, and one after `user=NAME:`. (Refused in etcd URLs, accepted
/// in libpq's; never shown in either.)
#[must_use]
pub fn redact_password(url: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) if userinfo.contains(':') => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                    format!("{scheme}://{user}:***@{host}{path}")
                }
                _ => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    let Some(query) = query else {
        return base;
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("password", _)) => "password=***".to_owned(),
            Some(("user", value)) if value.contains(':') => {
                format!("user={}:***", value.split_once(':').map_or(value, |(user, _)| user))
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_for_messages() {
        for (url, shown) in [
            ("postgres://u:pw@h:5432/db?x=1", "postgres://u:***@h:5432/db?x=1"),
            ("postgresql://u:pw@h", "postgresql://u:***@h"),
            (
                "postgres://h/db?password=pw&sslmode=require",
                "postgres://h/db?password=***&sslmode=require",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("etcd://h:1?user=a:pw", "etcd://h:1?user=a:***"),
        ] {
            assert_eq!(redact_password(url), shown);
        }
    }
}
