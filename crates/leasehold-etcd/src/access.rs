//! TLS and authentication: whom the client trusts, and who it says it is.
//!
//! - **TLS** (rustls with ring, through the client's `tls` feature) is on
//!   when [`EtcdOptions::tls`](crate::EtcdOptions) is set or an endpoint is
//!   written `https://`. The server's certificate must chain to the roots
//!   of `cacert` (or the system's store) and name the endpoint's host (an
//!   IP address must be in its IP SANs); there is no way to skip that. A
//!   client certificate (`cert` + `key`) is presented when given. The
//!   files are read and checked (present, PEM, key matching certificate)
//!   before anything is sent: a mistake there is an invalid URL (exit 2).
//! - **Users**: with [`EtcdCredentials`] the client authenticates at
//!   connect and sends the token etcd returns with every request. etcd
//!   forgets tokens (a simple token after `--auth-token-ttl` idle seconds,
//!   300 by default; all of them on a restart; a JWT at its expiry), so a
//!   call refused with "invalid auth token" is run once more on a new
//!   client, which authenticates afresh (the old one cannot: etcd refuses
//!   an authentication request carrying the forgotten token). The refused
//!   call changed nothing, except in one case: a token lost between two
//!   requests of one call (a restart, or a JWT expiring, in that instant)
//!   after its transaction committed. Re-run, the call decides afresh from
//!   what the store holds, so it can report an acquisition as held (by the
//!   orphan grant, which runs out by its TTL) or a release as lost — never
//!   a grant it does not have. The password stays in memory (in the
//!   client's options) for the life of the store.
//! - **Refusals** are [`leasehold_backend::ErrorKind::Auth`] failures (exit 69) naming what
//!   to change: which certificate was not accepted, a wrong user or
//!   password, a user without a role on the prefix.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{ConnectOptions, Identity, TlsOptions};
use leasehold_tls::Refusal;

use crate::ETCD_PASSWORD_VAR;

/// TLS towards the cluster (URL parameters `cacert`, `cert`, `key`, named
/// as etcdctl names its flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM file of the CA certificate(s) the cluster's certificates chain
    /// to; `None`: the system's store (`/etc/ssl/certs`, `SSL_CERT_FILE`).
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM), for a cluster run with `--client-cert-auth`.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM, unencrypted).
    pub key: Option<PathBuf>,
}

/// An etcd user and its password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdCredentials {
    pub user: String,
    pub password: Password,
}

/// A password, never printed (`Debug` shows `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    #[must_use]
    pub fn new(password: impl Into<String>) -> Self {
        Self(password.into())
    }

    fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// What the client was set up with, for messages and `doctor`.
#[derive(Clone)]
pub(crate) struct Access {
    tls: Option<EtcdTls>,
    credentials: Option<EtcdCredentials>,
    /// The same TLS set-up for [`leasehold_tls::probe`].
    probe: Option<Arc<rustls::ClientConfig>>,
    /// The same again offering HTTP/1.1, for the cluster's clock (`clock`).
    http: Option<Arc<rustls::ClientConfig>>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls)
            .field("credentials", &self.credentials)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Check the endpoints against the TLS asked for, read the files, and
    /// add TLS and the user to `connect`. `Err` is why the URL is invalid.
    pub(crate) fn new(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        credentials: Option<&EtcdCredentials>,
        connect: ConnectOptions,
    ) -> Result<(Self, ConnectOptions), AccessError> {
        let https = endpoints.iter().any(|e| e.starts_with("https://"));
        let tls = tls.cloned().or_else(|| https.then(EtcdTls::default));
        let mut connect = connect;
        let mut probe = None;
        let mut http = None;
        if let Some(tls) = &tls {
            if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
                return Err(AccessError::PlainEndpoint(plain.clone()));
            }
            let (options, config, for_clock) = tls_options(tls)?;
            connect = connect.with_tls(options);
            probe = Some(Arc::new(config));
            http = Some(Arc::new(for_clock));
        }
        if let Some(c) = credentials {
            if c.user.is_empty() || c.user.contains(':') {
                return Err(AccessError::User);
            }
            connect = connect.with_user(c.user.clone(), c.password.reveal());
        }
        let access = Self {
            tls,
            credentials: credentials.cloned(),
            probe,
            http,
        };
        Ok((access, connect))
    }

    /// The TLS set-up for an HTTP/1.1 request to a member (`None`: plain
    /// TCP).
    pub(crate) fn http_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.http.clone()
    }

    /// Whether TLS is on.
    pub(crate) fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether the client authenticates as a user.
    pub(crate) fn has_user(&self) -> bool {
        self.credentials.is_some()
    }

    /// For `leasehold doctor`.
    pub(crate) fn facts(&self) -> Vec<(String, String)> {
        let tls = match &self.tls {
            None => "off (plain HTTP)".to_owned(),
            Some(t) => {
                let roots = t.ca.as_ref().map_or_else(
                    || "the system's roots".to_owned(),
                    |p| format!("cacert={}", p.display()),
                );
                let cert = t
                    .cert
                    .as_ref()
                    .map_or_else(String::new, |p| format!("; client certificate cert={}", p.display()));
                format!("on, certificate and host name verified against {roots}{cert}")
            }
        };
        let user = self
            .credentials
            .as_ref()
            .map_or_else(|| "none".to_owned(), |c| c.user.clone());
        vec![("TLS".to_owned(), tls), ("user".to_owned(), user)]
    }

    /// The reason and what to do when the cluster refused this client
    /// (TLS, authentication, permissions); `None` for other failures.
    pub(crate) fn refusal(&self, e: &etcd_client::Error, prefix: &str) -> Option<(String, String)> {
        let refused = match e {
            etcd_client::Error::GRpcStatus(s) => {
                if let Some(r) = self.auth_refusal(s.message(), prefix) {
                    return Some(r);
                }
                leasehold_tls::refusal(s)
            }
            etcd_client::Error::TransportError(t) => leasehold_tls::refusal(t),
            _ => None,
        }?;
        Some(self.explain(refused))
    }

    /// After a connection failed without saying why: whether TLS refused
    /// this client, found by a handshake of our own with each endpoint
    /// (gRPC reports a server's refusal of the client certificate as a
    /// connection closed).
    pub(crate) fn probe(&self, endpoints: &[String], timeout: Duration) -> Option<(String, String)> {
        let config = self.probe.as_ref()?;
        endpoints.iter().find_map(|e| {
            let address = e.strip_prefix("https://").unwrap_or(e).trim_end_matches('/');
            let (host, port) = address.rsplit_once(':')?;
            let port = port.parse().ok()?;
            leasehold_tls::probe(host, port, config.clone(), HTTP2_PREFACE, timeout).map(|r| self.explain(r))
        })
    }

    fn explain(&self, refused: Refusal) -> (String, String) {
        let client_cert = self.tls.as_ref().and_then(|t| t.cert.as_deref());
        match (refused, client_cert) {
            (Refusal::ServerCertificate(what), _) => (
                format!("TLS failed: the cluster's certificate was not accepted ({what})"),
                "pass cacert=PATH with the CA certificate that signed the cluster's certificates (it must name the host you connect to); see docs/ETCD.md".to_owned(),
            ),
            (Refusal::ClientCertificate(what), Some(cert)) => (
                format!("TLS failed: the cluster refused the client certificate cert={} ({what})", cert.display()),
                "the cluster (--client-cert-auth) takes certificates signed by the CA of its --trusted-ca-file, current and not revoked: have cert= issued by that CA; see docs/ETCD.md".to_owned(),
            ),
            (Refusal::ClientCertificate(what), None) => (
                format!("TLS failed: the cluster wants a client certificate ({what})"),
                "pass cert=PATH&key=PATH: a certificate signed by the CA of the cluster's --trusted-ca-file, and its key; see docs/ETCD.md".to_owned(),
            ),
            (Refusal::Other(what), _) => (
                format!("TLS failed: {what}"),
                "check cacert, cert and key, and that the cluster serves TLS (https:// client URLs; a plain http:// cluster takes none of them); see docs/ETCD.md".to_owned(),
            ),
        }
    }

    /// etcd's authentication errors, by their text (etcd's `rpctypes`
    /// messages, which its own Go client matches on too).
    fn auth_refusal(&self, message: &str, prefix: &str) -> Option<(String, String)> {
        let user = self.credentials.as_ref().map(|c| c.user.as_str());
        let found = |m: &str| message.contains(m);
        Some(
            if found("authentication failed, invalid user ID or password") || found("user name not found") {
                (
                    format!(
                        "authentication failed for etcd user {:?}: wrong user or password",
                        user.unwrap_or("")
                    ),
                    format!(
                        "check the password (password-file=PATH or {ETCD_PASSWORD_VAR}, whichever you set) and that the user exists (etcdctl user get NAME); see docs/ETCD.md"
                    ),
                )
            } else if found("user name is empty") {
                (
                    "the cluster has authentication on, and this client gave no user".to_owned(),
                    format!(
                        "pass user=NAME with the password in password-file=PATH or {ETCD_PASSWORD_VAR} (or a client certificate whose common name is an etcd user); see docs/ETCD.md"
                    ),
                )
            } else if found("authentication is not enabled") {
                (
                format!("user={} was given, but the cluster has authentication off", user.unwrap_or("")),
                "drop user= and the password from the URL and environment, or turn authentication on (etcdctl auth enable)".to_owned(),
            )
            } else if found("permission denied") {
                let who = user.map_or_else(|| "this client".to_owned(), |u| format!("etcd user {u:?}"));
                (
                    format!("permission denied: {who} may not read and write the keys under {prefix}/"),
                    format!(
                        "grant its role read and write on the prefix: etcdctl role grant-permission ROLE --prefix=true readwrite {prefix}/"
                    ),
                )
            } else {
                return None;
            },
        )
    }
}

/// Whether the cluster refused a call because it no longer knows the token.
pub(crate) fn token_expired(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("invalid auth token") || s.message().contains("revision of auth store is old"))
}

/// Why the URL's TLS and user settings cannot be used (the reason of an
/// invalid-URL error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AccessError {
    #[error(
        "endpoint {0} is plain http://, but TLS is asked for (cacert, cert, key or an https:// endpoint): write it HOST:PORT or https://HOST:PORT"
    )]
    PlainEndpoint(String),
    #[error("user= must be a plain etcd user name (no password after a colon)")]
    User,
    #[error("cert=PATH needs key=PATH too: the certificate's private key (PEM)")]
    CertWithoutKey,
    #[error("key=PATH needs cert=PATH too: the certificate of that key (PEM)")]
    KeyWithoutCert,
    #[error(transparent)]
    Tls(#[from] leasehold_tls::TlsError),
}

/// What an HTTP/2 client sends first (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The client's TLS options, and the same as a rustls configuration for
/// [`Access::probe`] (HTTP/2) and for the cluster's clock (HTTP/1.1).
fn tls_options(tls: &EtcdTls) -> Result<(TlsOptions, rustls::ClientConfig, rustls::ClientConfig), AccessError> {
    let roots = leasehold_tls::roots("cacert", tls.ca.as_deref())?;
    let identity = match (tls.cert.as_deref(), tls.key.as_deref()) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(leasehold_tls::identity(("cert", cert), ("key", key))?),
        (Some(_), None) => return Err(AccessError::CertWithoutKey),
        (None, Some(_)) => return Err(AccessError::KeyWithoutCert),
    };
    let config = leasehold_tls::client_config(roots.clone(), identity.as_ref(), &[b"h2"])?;
    let http1 = leasehold_tls::client_config(roots.clone(), identity.as_ref(), &[b"http/1.1"])?;
    let mut options = TlsOptions::new().trust_anchors(roots.roots);
    if let Some(id) = identity {
        options = options.identity(Identity::from_pem(id.cert_pem, id.key_pem));
    }
    Ok((options, config, http1))
}
