//! `redis://[USER@]HOST[:PORT][/DB][?PARAMS]` (and `rediss://` for TLS) and
//! how the store registers itself.
//!
//! Parameters: `prefix` (of every key, default `leasehold`; keys are `PREFIX:…`),
//! `password-file` (as for etcd; else [`PASSWORD_VAR`] when set: the
//! password is never in the URL: a
//! command line is visible in `ps` and shell history), `durability=relaxed`
//! (open on a server whose settings can lose acknowledged writes; see
//! `durability`), `wait=N` (every write waits for N replicas), and for
//! `rediss://` `cacert`, `cert`, `key` (PEM files, as for PostgreSQL and
//! etcd).

use std::path::PathBuf;

use leasehold_backend::{Backend, BackendError, StoreLocation, StoreOpenOptions, StoreRegistration, redact_password};

use crate::RedisBackend;

pub const STORE: StoreRegistration = StoreRegistration {
    kind: crate::KIND,
    parse,
    // A URL with a password is refused, and its message must not repeat it.
    redact: redact_password,
    open,
};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "leasehold";

/// The environment variable the password is read from when the URL names
/// no `password-file`.
pub const PASSWORD_VAR: &str = "LEASEHOLD_REDIS_PASSWORD";

/// A parsed URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisUrl {
    pub tls: bool,
    pub user: Option<String>,
    pub host: String,
    pub port: u16,
    pub db: u32,
    pub prefix: String,
    /// `password-file=PATH`.
    pub password_file: Option<PathBuf>,
    /// `durability=relaxed`: open on settings that can lose acknowledged writes.
    pub relaxed: bool,
    /// `wait=N`: replicas every write waits for.
    pub wait: u32,
    pub cacert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

fn parse(url: &str) -> Result<StoreLocation, BackendError> {
    checked(url)?;
    Ok(StoreLocation::Url(url.to_owned()))
}

fn checked(url: &str) -> Result<RedisUrl, BackendError> {
    RedisUrl::parse(url).map_err(|reason| BackendError::invalid_url(redact_password(url), reason))
}

fn open(location: &StoreLocation, _: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    let url = checked(location.url(STORE.kind.name)?)?;
    Ok(Box::new(RedisBackend::open(&url)?))
}

/// A key prefix leasehold uses: letters, digits and `_-.`. Not `:`, which
/// ends the prefix in every key: prefixes `a` and `a:name` would share keys.
fn prefix_ok(p: &str) -> bool {
    !p.is_empty() && p.len() <= 100 && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

impl RedisUrl {
    /// Parse a `redis://` or `rediss://` URL: the reason it is refused, if it is.
    ///
    /// # Errors
    /// The URL is not one of a Redis store: [`UrlError`] says why.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss://") {
            (true, rest)
        } else {
            return Err(UrlError::Scheme);
        };
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, db) = path.split_once('/').unwrap_or((path, ""));
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, _)) if userinfo.contains(':') => {
                return Err(UrlError::PasswordInUrl);
            }
            Some((user, hostport)) if !user.is_empty() => (Some(user.to_owned()), hostport),
            Some((_, hostport)) => (None, hostport),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
                (h, p.parse().map_err(|_| UrlError::Port(p.to_owned()))?)
            }
            _ => (hostport, 6379),
        };
        if host.is_empty() || port == 0 {
            return Err(UrlError::NoHost);
        }
        let db = if db.is_empty() {
            0
        } else {
            db.parse().map_err(|_| UrlError::Database(db.to_owned()))?
        };
        let mut out = Self {
            tls,
            user,
            host: host.to_owned(),
            port,
            db,
            prefix: DEFAULT_PREFIX.to_owned(),
            password_file: None,
            relaxed: false,
            wait: 0,
            cacert: None,
            cert: None,
            key: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "prefix" if prefix_ok(v) => v.clone_into(&mut out.prefix),
                "prefix" => {
                    return Err(UrlError::Prefix(v.to_owned()));
                }
                "password-file" if !v.is_empty() => out.password_file = Some(v.into()),
                "durability" if v == "relaxed" => out.relaxed = true,
                "durability" if v == "strict" => out.relaxed = false,
                "durability" => return Err(UrlError::Durability(v.to_owned())),
                "wait" => {
                    out.wait = v
                        .parse()
                        .ok()
                        .filter(|n| *n <= 64)
                        .ok_or_else(|| UrlError::Wait(v.to_owned()))?;
                }
                "cacert" | "cert" | "key" if !tls => {
                    return Err(UrlError::TlsOnly(k.to_owned()));
                }
                "cacert" if !v.is_empty() => out.cacert = Some(v.into()),
                "cert" if !v.is_empty() => out.cert = Some(v.into()),
                "key" if !v.is_empty() => out.key = Some(v.into()),
                // Only the key: the value of an unknown one may be a secret
                // (`password=...`), and errors are printed and logged.
                _ => {
                    return Err(UrlError::UnknownParameter(k.to_owned()));
                }
            }
        }
        if out.cert.is_some() != out.key.is_some() {
            return Err(UrlError::CertAndKey);
        }
        Ok(out)
    }
}

/// Why a Redis URL is refused (the reason of its invalid-URL error). No
/// variant holds a password or a parameter's value that may be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("a Redis URL starts with redis:// or rediss://")]
    Scheme,
    #[error(
        "a password in the URL is on the command line, in `ps` and in shell history: put it in a file only you can read and pass password-file=PATH, or set {PASSWORD_VAR}"
    )]
    PasswordInUrl,
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("no host: redis://HOST[:PORT][/DB]")]
    NoHost,
    #[error("database {0:?} is not a number (redis://HOST/0)")]
    Database(String),
    #[error("prefix={0:?} is not a key prefix leasehold uses (letters, digits and _-.)")]
    Prefix(String),
    #[error("durability={0:?}: strict (the default) or relaxed")]
    Durability(String),
    #[error("wait={0:?} is not a number of replicas from 0 to 64")]
    Wait(String),
    #[error("{0}= is for TLS: use rediss://")]
    TlsOnly(String),
    /// Only the key: the value of an unknown one may be a secret
    /// (`password=...`), and errors are printed and logged.
    #[error("unknown or empty parameter {0:?} (known: prefix, password-file, durability, wait, cacert, cert, key)")]
    UnknownParameter(String),
    #[error("cert= and key= go together (a client certificate and its key)")]
    CertAndKey,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        let u = RedisUrl::parse("redis://127.0.0.1").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.db, u.tls), ("127.0.0.1", 6379, 0, false));
        let u = RedisUrl::parse(
            "rediss://app@cache.example:6380/2?prefix=jobs&password-file=/pw&wait=1&durability=relaxed",
        )
        .unwrap();
        assert_eq!(
            (u.user.as_deref(), u.host.as_str(), u.port, u.db, u.prefix.as_str()),
            (Some("app"), "cache.example", 6380, 2, "jobs")
        );
        assert_eq!(
            (u.password_file, u.wait, u.relaxed, u.tls),
            (Some(PathBuf::from("/pw")), 1, true, true)
        );
        let u = RedisUrl::parse("redis://[::1]:7000").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("[::1]", 7000));
        for (bad, says) in [
            ("postgres://x", "starts with redis://"),
            ("redis://u:secret@h", "password in the URL"),
            ("redis://", "no host"),
            ("redis://h:99999", "not a number from 1 to 65535"),
            ("redis://h/x", "not a number"),
            ("redis://h?prefix=a%20b", "not a key prefix"),
            ("redis://h?prefix=a:name", "not a key prefix"),
            ("redis://h?durability=yolo", "strict (the default) or relaxed"),
            ("redis://h?wait=-1", "number of replicas"),
            ("redis://h?cacert=/x", "use rediss://"),
            ("rediss://h?cert=/x", "go together"),
            ("redis://h?ttl=3", "unknown"),
            ("redis://h?password=secret", "unknown or empty parameter \"password\""),
        ] {
            let e = RedisUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{bad}: {e} repeats the secret");
        }
    }
}
