//! TLS with rustls, as the URL asks (`sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`).
//!
//! - `sslmode=require` and `sslmode=verify-full`: encrypted, and the
//!   server's certificate must chain to a trusted root **and** name the
//!   host of the URL. (Stricter than libpq's `require`, which encrypts but
//!   verifies nothing unless a root file exists: an unverified TLS
//!   connection is open to an active man in the middle, so leasehold does
//!   not offer one.)
//! - `sslmode=verify-ca`: encrypted, chain verified, host name not checked.
//! - `sslmode=disable`, `allow`, `prefer` or none: no TLS.
//! - Trusted roots: `sslrootcert=PATH` (PEM, one or more certificates), or
//!   the system's store (`sslrootcert=system`, or no `sslrootcert`) read
//!   from the usual files (`/etc/ssl/certs`, `SSL_CERT_FILE`/`SSL_CERT_DIR`)
//!   — nothing is bundled, nothing fetched.
//! - Client certificate: `sslcert=PATH` and `sslkey=PATH` (PEM, the key
//!   unencrypted), presented when the server asks (its `cert`
//!   authentication, or `clientcert=verify-ca/verify-full` in
//!   `pg_hba.conf`). Unlike libpq, nothing is read from `~/.postgresql/`:
//!   every file is named in the URL. Checked before any connection (both
//!   given, readable, the key the certificate's), so a mistake there is an
//!   invalid URL, not a refusal.

use std::path::Path;
use std::sync::Arc;

use leasehold_tls::Refusal;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the URL asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Chain and host name (`require`, `verify-full`).
    Full,
    /// Chain only (`verify-ca`).
    Chain,
}

/// The files of a client certificate: `sslcert` and `sslkey`.
pub(crate) type ClientCert<'a> = (&'a str, &'a str);

/// How connections are made: plain, or TLS with this connector (and
/// whether it presents a client certificate).
#[derive(Clone)]
pub(crate) enum Tls {
    Off,
    On(MakeRustlsConnect, Verify, bool),
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tls::Off => f.write_str("Tls::Off"),
            Tls::On(_, v, client_cert) => write!(f, "Tls::On({v:?}, client certificate: {client_cert})"),
        }
    }
}

impl Tls {
    /// For `leasehold doctor`.
    pub(crate) fn label(&self) -> String {
        let (verified, client_cert) = match self {
            Tls::Off => return "off (sslmode=disable/prefer: plain TCP)".into(),
            Tls::On(_, Verify::Full, c) => ("on, certificate and host name verified", *c),
            Tls::On(_, Verify::Chain, c) => ("on, certificate verified, host name not (verify-ca)", *c),
        };
        if client_cert {
            format!("{verified}; client certificate sslcert presented")
        } else {
            verified.to_owned()
        }
    }

    /// Whether a client certificate is presented.
    pub(crate) fn client_cert(&self) -> bool {
        matches!(self, Tls::On(_, _, true))
    }

    /// Connect with `config` over this transport.
    pub(crate) fn connect(&self, config: &postgres::Config) -> Result<postgres::Client, postgres::Error> {
        match self {
            Tls::Off => config.connect(postgres::NoTls),
            Tls::On(connector, ..) => config.connect(connector.clone()),
        }
    }
}

/// What to tell the user when connecting failed because of TLS: the
/// reason and what to do, or `None` when TLS was not the problem.
pub(crate) fn failure(e: &postgres::Error, client_cert: bool) -> Option<(String, &'static str)> {
    let detail = crate::classify::detail(e);
    if detail.contains("does not support TLS") {
        return Some((
            format!("TLS failed: {detail}"),
            "the URL asks for TLS (sslmode=require/verify-ca/verify-full) but the server does not offer it: turn on ssl in postgresql.conf, or use sslmode=disable on a trusted network",
        ));
    }
    let server_cert = "pass sslrootcert=PATH with the CA certificate that signed the server's (sslmode=verify-ca skips the host-name check); see docs/POSTGRES.md";
    Some(match leasehold_tls::refusal(e) {
        Some(Refusal::ServerCertificate(what)) => (
            format!("TLS failed: the server's certificate was not accepted ({what})"),
            server_cert,
        ),
        Some(Refusal::ClientCertificate(what)) if client_cert => (
            format!("TLS failed: the server refused the client certificate sslcert ({what})"),
            "the server takes only certificates signed by a CA in its ssl_ca_file, current and not revoked: have sslcert issued by that CA (or add its CA to ssl_ca_file); see docs/POSTGRES.md",
        ),
        Some(Refusal::ClientCertificate(what)) => (
            format!("TLS failed: the server wants a client certificate ({what})"),
            "pass sslcert=PATH&sslkey=PATH: a certificate signed by a CA in the server's ssl_ca_file, and its key; see docs/POSTGRES.md",
        ),
        Some(Refusal::Other(what)) => (
            format!("TLS failed: {what}"),
            "check the server's TLS settings (ssl_min_protocol_version, ssl_ciphers) and the certificates; see docs/POSTGRES.md",
        ),
        None if e.to_string().contains("TLS handshake") => (format!("TLS failed: {detail}"), server_cert),
        None => return None,
    })
}

/// Why the connector cannot be built: what is wrong with the files.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectorError {
    #[error(transparent)]
    File(#[from] leasehold_tls::TlsError),
    #[error("cannot use the root certificates: {0}")]
    Roots(rustls::client::VerifierBuilderError),
    #[error("TLS set-up failed: {0}")]
    Setup(rustls::Error),
    #[error("cannot use sslcert={cert} with sslkey={key}: {error}")]
    Identity {
        cert: String,
        key: String,
        error: rustls::Error,
    },
}

/// Build the connector; `Err` says what is wrong with the files.
pub(crate) fn connector(
    verify: Verify,
    root_cert: Option<&str>,
    client: Option<ClientCert<'_>>,
) -> Result<Tls, ConnectorError> {
    let root_cert = root_cert.filter(|&p| p != "system").map(Path::new);
    let roots = leasehold_tls::roots("sslrootcert", root_cert)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(ConnectorError::Roots)?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Full => webpki,
        Verify::Chain => Arc::new(ChainOnly(webpki)),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ConnectorError::Setup)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match client {
        None => config.with_no_client_auth(),
        Some((cert, key)) => {
            let id = leasehold_tls::identity(("sslcert", Path::new(cert)), ("sslkey", Path::new(key)))?;
            config
                .with_client_auth_cert(id.chain, id.key)
                .map_err(|error| ConnectorError::Identity {
                    cert: cert.to_owned(),
                    key: key.to_owned(),
                    error,
                })?
        }
    };
    Ok(Tls::On(MakeRustlsConnect::new(config), verify, client.is_some()))
}

/// `verify-ca`: the chain must verify; a name mismatch is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is checked last, after the chain: a name error means
        // the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
