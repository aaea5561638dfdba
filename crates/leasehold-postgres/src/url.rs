//! The store's URL: libpq's, plus leasehold's own `schema=NAME` and TLS
//! parameters; and the URL as messages show it, without its password.

use std::str::FromStr;
use std::time::Duration;

use leasehold_backend::BackendError;

use crate::{DEFAULT_SCHEMA, PostgresOptions, tls};

/// `"name"`, for a schema name already checked by `valid_schema`.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{name}\"")
}

/// A schema name leasehold accepts: a plain lower-case identifier, so it
/// needs no quoting rules and means the same in psql.
pub(crate) fn valid_schema(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
        && !name.starts_with("pg_")
}

pub(crate) struct ParsedUrl {
    pub(crate) config: postgres::Config,
    pub(crate) tls: tls::Tls,
    pub(crate) schema: String,
    pub(crate) display: String,
}

/// Split `schema=NAME` off the URL's query (leasehold's own parameter) and
/// parse the rest as a libpq URL.
pub(crate) fn parse_url(url: &str) -> std::result::Result<ParsedUrl, BackendError> {
    let invalid = |reason: String| BackendError::invalid_url(redact(url), reason);
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut schema, mut sslmode, mut root_cert, mut cert, mut key) = (None, None, None, None, None);
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", value)) => schema = Some(value.to_owned()),
            // TLS is leasehold's (rustls): these are read here.
            Some(("sslmode", value)) => sslmode = Some(value.to_owned()),
            Some(("sslrootcert", value)) => root_cert = Some(value.to_owned()),
            Some(("sslcert", value)) => cert = Some(value.to_owned()),
            Some(("sslkey", value)) => key = Some(value.to_owned()),
            _ => rest.push(pair),
        }
    }
    let verify = match sslmode.as_deref() {
        None | Some("disable" | "allow" | "prefer") => None,
        Some("require" | "verify-full") => Some(tls::Verify::Full),
        Some("verify-ca") => Some(tls::Verify::Chain),
        Some(other) => {
            return Err(invalid(format!(
                "sslmode={other}: use disable, prefer, require, verify-ca or verify-full"
            )));
        }
    };
    let client = match (cert.as_deref(), key.as_deref()) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => {
            return Err(invalid(
                "sslcert=PATH needs sslkey=PATH too: the certificate's private key (PEM)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "sslkey=PATH needs sslcert=PATH too: the certificate of that key (PEM)".into(),
            ));
        }
    };
    let tls = match verify {
        None if client.is_some() => {
            return Err(invalid(format!(
                "a client certificate (sslcert, sslkey) needs TLS, which {} does not give in leasehold: add sslmode=verify-full (or require, verify-ca)",
                sslmode.map_or_else(|| "a URL without sslmode".to_owned(), |m| format!("sslmode={m}"))
            )));
        }
        None => tls::Tls::Off,
        Some(v) => tls::connector(v, root_cert.as_deref(), client).map_err(|e| invalid(e.to_string()))?,
    };
    let schema = schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
    if !valid_schema(&schema) {
        return Err(invalid(format!(
            "schema {schema:?} is not a plain lower-case identifier (a-z, 0-9, _; not starting with a digit or pg_; at most 63 bytes)"
        )));
    }
    let libpq = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    let mut config = postgres::Config::from_str(&libpq).map_err(|e| invalid(e.to_string()))?;
    // As libpq: the password from the environment when the URL has none
    // (so it need not be in the URL, nor on a command line).
    if config.get_password().is_none()
        && let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty())
    {
        config.password(password.as_encoded_bytes());
    }
    config.ssl_mode(match verify {
        Some(_) => postgres::config::SslMode::Require,
        None => postgres::config::SslMode::Disable,
    });
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PostgresOptions::default().connect_timeout);
    }
    // Notice a dead server or network within seconds, not the kernel's
    // default of hours.
    config.keepalives_idle(Duration::from_secs(10));
    config.tcp_user_timeout(Duration::from_secs(20));
    if config.get_application_name().is_none() {
        config.application_name("leasehold");
    }
    let display = redact(&libpq);
    let display = if schema == DEFAULT_SCHEMA {
        display
    } else {
        format!("{display} (schema {schema})")
    };
    Ok(ParsedUrl {
        config,
        tls,
        schema,
        display,
    })
}

/// The URL with its password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let redacted = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = tail
        .split('&')
        .map(|p| {
            if p.starts_with("password=") || p.contains("?password=") {
                p.split_once("password=")
                    .map_or(p.to_owned(), |(a, _)| format!("{a}password=***"))
            } else {
                p.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{scheme}://{redacted}{tail}")
}

#[cfg(test)]
mod tests {
    use leasehold_backend::ErrorKind;

    use super::*;

    #[test]
    fn schema_parameter_is_stripped_and_checked() {
        let p = parse_url("postgres://u:secret@db.internal:5433/leases?schema=team_a&connect_timeout=3").unwrap();
        assert_eq!(p.schema, "team_a");
        assert_eq!(p.config.get_dbname(), Some("leases"));
        assert_eq!(p.config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert!(!p.display.contains("secret"), "{}", p.display);
        assert_eq!(parse_url("postgresql://db/x").unwrap().schema, DEFAULT_SCHEMA);
        for bad in ["Team", "1a", "a-b", "pg_x", "x\"; DROP", ""] {
            assert!(
                parse_url(&format!("postgres://db/x?schema={bad}")).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(parse_url("postgres://db/x?sslmode=bogus").is_err());
        assert!(parse_url("postgres://db/x?sslmode=require&sslrootcert=/nonexistent.pem").is_err());
        assert!(parse_url("postgres://db/x?sslmode=verify-ca&sslrootcert=/dev/null").is_err());
        assert!(matches!(
            parse_url("postgres://db/x?sslmode=prefer").unwrap().tls,
            tls::Tls::Off
        ));
        // A client certificate needs its key, and TLS.
        let reason = |url: &str| match parse_url(url) {
            Err(e) if e.kind() == ErrorKind::InvalidInput => e.reason().to_owned(),
            Err(e) => panic!("{url}: {e}"),
            Ok(_) => panic!("{url} was accepted"),
        };
        assert!(reason("postgres://db/x?sslmode=verify-full&sslcert=/c.pem").contains("needs sslkey=PATH"));
        assert!(reason("postgres://db/x?sslmode=verify-full&sslkey=/c.key").contains("needs sslcert=PATH"));
        assert!(reason("postgres://db/x?sslcert=/c.pem&sslkey=/c.key").contains("needs TLS"));
        assert!(reason("postgres://db/x?sslmode=disable&sslcert=/c.pem&sslkey=/c.key").contains("sslmode=disable"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://h/db?password=pw&x=1"),
            "postgres://h/db?password=***&x=1"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
