//! `etcd://HOST:PORT[,HOST:PORT…][?prefix=/KEY/PREFIX]` URLs, with TLS and
//! a user in the names of etcdctl's flags: how the `leasehold` crate opens
//! this store by URL ([`STORE`]).
//!
//! The parameters: `cacert=PATH` (or `cacert=system`), `cert=PATH`,
//! `key=PATH`, `user=NAME`, and `password-file=PATH`. TLS is on when any
//! of the first three is given (or an endpoint is written `https://`). A
//! password is never part of the URL: it is read from `password-file` or,
//! without one, from [`ETCD_PASSWORD_VAR`], when the store is opened.

use std::fmt;
use std::path::PathBuf;

use leasehold_backend::{Backend, BackendError, StoreLocation, StoreOpenOptions, StoreRegistration, redact_password};

use crate::{EtcdBackend, EtcdCredentials, EtcdOptions, EtcdTls, Password};

/// The environment variable an etcd password is read from when the URL
/// names a user and no `password-file`.
pub const ETCD_PASSWORD_VAR: &str = "LEASEHOLD_ETCD_PASSWORD";

/// The etcd store, by an `etcd://` URL (see the module docs).
///
/// # Examples
/// ```
/// use leasehold_backend::StoreLocation;
/// let parse = leasehold_etcd::STORE.parse;
/// assert_eq!(
///     parse("etcd://10.0.0.5:2379,10.0.0.6:2379/?prefix=/myapp").unwrap(),
///     StoreLocation::Url("etcd://10.0.0.5:2379,10.0.0.6:2379?prefix=/myapp".into())
/// );
/// let refused = parse("etcd://h:2379?prefix=myapp").unwrap_err();
/// assert!(refused.to_string().contains("absolute key path"), "{refused}");
/// assert!(parse("etcd://h:2379?prefx=/a").is_err());
/// // TLS with a client certificate, and a user whose password is in a file...
/// assert!(parse(
///     "etcd://h:2379?cacert=/etc/etcd/ca.pem&cert=/etc/etcd/me.pem&key=/etc/etcd/me.key\
///      &user=agent&password-file=/run/secrets/etcd",
/// ).is_ok());
/// // ...but never a password in the URL itself.
/// assert!(parse("etcd://h:2379?user=agent&password=hunter2").is_err());
/// assert!(parse("etcd://h:2379?user=agent:hunter2").is_err());
/// ```
pub const STORE: StoreRegistration = StoreRegistration {
    kind: crate::KIND,
    parse,
    redact: redact_password,
    open,
};

fn parse(url: &str) -> Result<StoreLocation, BackendError> {
    Ok(StoreLocation::Url(checked(url)?.to_string()))
}

/// `url` as an [`EtcdUrl`], or the invalid-URL error that names it
/// redacted.
fn checked(url: &str) -> Result<EtcdUrl, BackendError> {
    EtcdUrl::parse(url).map_err(|reason| BackendError::invalid_url(redact_password(url), reason))
}

fn open(location: &StoreLocation, _: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    let url = location.url(STORE.kind.name)?;
    let url = checked(url)?;
    let defaults = EtcdOptions::default();
    let options = EtcdOptions {
        prefix: url.prefix.clone().unwrap_or(defaults.prefix.clone()),
        tls: url.security.tls(),
        credentials: url.credentials()?,
        ..defaults
    };
    Ok(Box::new(EtcdBackend::open(&url.endpoints, &options)?))
}

/// An etcd URL: the cluster, and every key under `prefix` (the backend's
/// default when `None`), so that several deployments can share a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EtcdUrl {
    endpoints: Vec<String>,
    prefix: Option<String>,
    security: EtcdSecurity,
}

/// TLS and authentication of an etcd URL (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct EtcdSecurity {
    /// The CA certificate(s) to trust (PEM); `system`: the system's store.
    cacert: Option<PathBuf>,
    /// A client certificate (PEM) and its key (PEM, unencrypted).
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    /// The etcd user to authenticate as.
    user: Option<String>,
    /// A file holding the user's password (one trailing newline is
    /// dropped).
    password_file: Option<PathBuf>,
}

impl EtcdUrl {
    /// `Err` says why the URL is refused.
    fn parse(url: &str) -> Result<Self, UrlError> {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
        let endpoints: Vec<String> = hosts.trim_end_matches('/').split(',').map(str::to_owned).collect();
        if endpoints.iter().any(String::is_empty) {
            return Err(UrlError::Endpoints);
        }
        let mut prefix = None;
        let mut security = EtcdSecurity::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "prefix" if value.starts_with('/') && value.len() > 1 => {
                    prefix = Some(value.to_owned());
                }
                "prefix" => {
                    return Err(UrlError::Prefix);
                }
                _ => {
                    if !security.set(name, value)? {
                        // Only the name: a value could be a secret.
                        return Err(UrlError::UnknownParameter(name.to_owned()));
                    }
                }
            }
        }
        if security.password_file.is_some() && security.user.is_none() {
            return Err(UrlError::PasswordFileWithoutUser);
        }
        Ok(EtcdUrl {
            endpoints,
            prefix,
            security,
        })
    }

    /// The etcd user of the URL with its password, from `password-file` or
    /// else from [`ETCD_PASSWORD_VAR`].
    fn credentials(&self) -> Result<Option<EtcdCredentials>, BackendError> {
        let Some(user) = &self.security.user else {
            return Ok(None);
        };
        let invalid = |reason: UrlError| BackendError::invalid_url(self.to_string(), reason);
        let password = match &self.security.password_file {
            Some(path) => leasehold_backend::password_from_file(path).map_err(|e| invalid(e.into()))?,
            None => std::env::var(ETCD_PASSWORD_VAR)
                .ok()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| invalid(UrlError::NoPassword(user.clone())))?,
        };
        Ok(Some(EtcdCredentials {
            user: user.clone(),
            password: Password::new(password),
        }))
    }
}

impl fmt::Display for EtcdUrl {
    /// The URL in one spelling (parameters in one order), which parses back
    /// to the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "etcd://{}", self.endpoints.join(","))?;
        let params: Vec<String> = self
            .prefix
            .iter()
            .map(|p| format!("prefix={p}"))
            .chain(self.security.params())
            .collect();
        if !params.is_empty() {
            write!(f, "?{}", params.join("&"))?;
        }
        Ok(())
    }
}

/// Why an etcd URL is refused (the reason of its invalid-URL error).
#[derive(Debug, thiserror::Error)]
enum UrlError {
    #[error("expected etcd://HOST:PORT[,HOST:PORT...][?prefix=/myapp]")]
    Endpoints,
    #[error("the prefix must be an absolute key path, e.g. ?prefix=/myapp")]
    Prefix,
    /// Only the name: a value could be a secret.
    #[error(
        "unknown parameter {0:?}; the parameters are prefix=/KEY/PREFIX, cacert=PATH, cert=PATH, key=PATH, user=NAME and password-file=PATH"
    )]
    UnknownParameter(String),
    #[error("password-file=PATH needs user=NAME: the etcd user the password is for")]
    PasswordFileWithoutUser,
    #[error("{0}= needs a path: {0}=/path/to/file.pem")]
    NoPath(String),
    #[error(
        "a password is never taken from the URL (it would show in process lists, shell history and logs): \
         write it to a file only you can read and pass password-file=PATH, or set {ETCD_PASSWORD_VAR}"
    )]
    PasswordInUrl,
    #[error("user= needs an etcd user name")]
    NoUserName,
    #[error(
        "insecure-skip-tls-verify is not offered: an unverified connection is open to a man in the middle; pass cacert=PATH with the CA that signed the cluster's certificates"
    )]
    InsecureSkipTlsVerify,
    #[error(
        "user={0} needs a password: write it to a file only you can read and pass password-file=PATH, or set {ETCD_PASSWORD_VAR}"
    )]
    NoPassword(String),
    #[error(transparent)]
    PasswordFile(#[from] leasehold_backend::PasswordFileError),
}

impl EtcdSecurity {
    /// Take one query parameter of an etcd URL; `Err` says why the URL is
    /// refused, `Ok(false)` that the parameter is not one of these.
    fn set(&mut self, name: &str, value: &str) -> Result<bool, UrlError> {
        let path = || {
            if value.is_empty() {
                Err(UrlError::NoPath(name.to_owned()))
            } else {
                Ok(Some(PathBuf::from(value)))
            }
        };
        match name {
            "cacert" => self.cacert = path()?,
            "cert" => self.cert = path()?,
            "key" => self.key = path()?,
            "password-file" => self.password_file = path()?,
            "user" if value.contains(':') => return Err(UrlError::PasswordInUrl),
            "user" if value.is_empty() => return Err(UrlError::NoUserName),
            "user" => self.user = Some(value.to_owned()),
            "password" => return Err(UrlError::PasswordInUrl),
            "insecure-skip-tls-verify" => return Err(UrlError::InsecureSkipTlsVerify),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The URL's parameters for these settings, as `name=value`.
    fn params(&self) -> Vec<String> {
        let path = |name: &str, p: &Option<PathBuf>| p.as_ref().map(|p| format!("{name}={}", p.display()));
        [
            path("cacert", &self.cacert),
            path("cert", &self.cert),
            path("key", &self.key),
            self.user.as_ref().map(|u| format!("user={u}")),
            path("password-file", &self.password_file),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The TLS the URL asks for: on with any of `cacert`, `cert`, `key`.
    fn tls(&self) -> Option<EtcdTls> {
        let EtcdSecurity { cacert, cert, key, .. } = self;
        (cacert.is_some() || cert.is_some() || key.is_some()).then(|| EtcdTls {
            ca: cacert.clone().filter(|p| p.as_os_str() != "system"),
            cert: cert.clone(),
            key: key.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match EtcdUrl::parse(url) {
            Err(reason) => reason.to_string(),
            Ok(parsed) => panic!("{url} must be refused: {parsed:?}"),
        }
    }

    #[test]
    fn tls_and_user_parameters_as_etcdctl_names_them() {
        let url = "etcd://a:2379,b:2379?prefix=/x&cacert=/ca.pem&cert=/me.pem&key=/me.key&user=agent&password-file=/pw";
        let parsed = EtcdUrl::parse(url).unwrap();
        assert_eq!(
            parsed.security,
            EtcdSecurity {
                cacert: Some("/ca.pem".into()),
                cert: Some("/me.pem".into()),
                key: Some("/me.key".into()),
                user: Some("agent".into()),
                password_file: Some("/pw".into()),
            }
        );
        // Shown as given, and parsed back the same.
        assert_eq!(parsed.to_string(), url);
        assert_eq!(EtcdUrl::parse(&parsed.to_string()).unwrap(), parsed);
        assert_eq!(EtcdUrl::parse("etcd://h:1").unwrap().to_string(), "etcd://h:1");
    }

    #[test]
    fn a_password_is_never_taken_from_the_url_nor_shown() {
        for url in [
            "etcd://h:2379?user=agent&password=hunter2",
            "etcd://h:2379?password=hunter2&user=agent",
            "etcd://h:2379?user=agent:hunter2",
        ] {
            let (shown, reason) = ((STORE.redact)(url), refused(url));
            assert!(
                !shown.contains("hunter2") && !reason.contains("hunter2"),
                "{shown}: {reason}"
            );
            assert!(
                reason.contains("password-file=PATH") && reason.contains(ETCD_PASSWORD_VAR),
                "{reason}"
            );
        }
        let reason = refused("etcd://h:2379?password-file=/pw");
        assert!(reason.contains("needs user=NAME"), "{reason}");
        let reason = refused("etcd://h:2379?cacert=");
        assert!(reason.contains("cacert= needs a path"), "{reason}");
        let reason = refused("etcd://h:2379?insecure-skip-tls-verify=true");
        assert!(reason.contains("not offered"), "{reason}");
        let reason = refused("etcd://h:2379?token=s3cret");
        assert!(reason.contains("\"token\"") && !reason.contains("s3cret"), "{reason}");
    }

    #[test]
    #[allow(clippy::disallowed_methods, reason = "a test's throwaway file needs no atomic write")]
    fn the_password_comes_from_its_file() {
        use leasehold_backend::ErrorKind;

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        let url = |query: &str| EtcdUrl::parse(&format!("etcd://h:2379?{query}")).unwrap();
        let password = |url: &EtcdUrl| url.credentials().map(|c| c.map(|c| (c.user, c.password)));
        let pw = Password::new;
        assert_eq!(password(&url("prefix=/a")).unwrap(), None);

        std::fs::write(&file, "correct horse \n").unwrap();
        let with_file = url(&format!("user=agent&password-file={}", file.display()));
        // One trailing newline is dropped, nothing else.
        assert_eq!(
            password(&with_file).unwrap(),
            Some(("agent".into(), pw("correct horse ")))
        );
        std::fs::write(&file, "\n").unwrap();
        match password(&with_file) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => assert!(e.reason().contains("is empty"), "{e}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&file).unwrap();
        match password(&with_file) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {
                let reason = e.reason();
                assert!(
                    reason.starts_with("password-file=") && reason.contains("no such file"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Without a file the password comes from the environment, which
        // this process cannot set safely: the CLI tests (tests/tls.rs)
        // pass it to the real binary.
    }
}
