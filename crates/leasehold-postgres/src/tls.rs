//! TLS with rustls, as the URL asks (`sslmode`, `sslrootcert`).
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
//!
//! Client certificates (`sslcert`, `sslkey`) are not supported.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the URL asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Chain and host name (`require`, `verify-full`).
    Full,
    /// Chain only (`verify-ca`).
    Chain,
}

/// How connections are made: plain, or TLS with this connector.
#[derive(Clone)]
pub(crate) enum Tls {
    Off,
    On(MakeRustlsConnect, Verify),
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tls::Off => f.write_str("Tls::Off"),
            Tls::On(_, v) => write!(f, "Tls::On({v:?})"),
        }
    }
}

impl Tls {
    /// For `leasehold doctor`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Tls::Off => "off (sslmode=disable/prefer: plain TCP)",
            Tls::On(_, Verify::Full) => "on, certificate and host name verified",
            Tls::On(_, Verify::Chain) => "on, certificate verified, host name not (verify-ca)",
        }
    }

    /// Connect with `config` over this transport.
    pub(crate) fn connect(&self, config: &postgres::Config) -> Result<postgres::Client, postgres::Error> {
        match self {
            Tls::Off => config.connect(postgres::NoTls),
            Tls::On(connector, _) => config.connect(connector.clone()),
        }
    }
}

/// Build the connector; `Err` says what is wrong with the roots.
pub(crate) fn connector(verify: Verify, root_cert: Option<&str>) -> Result<Tls, String> {
    let roots = roots(root_cert)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot use the root certificates: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Full => webpki,
        Verify::Chain => Arc::new(ChainOnly(webpki)),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up failed: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Tls::On(MakeRustlsConnect::new(config), verify))
}

fn roots(root_cert: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match root_cert {
        Some(path) if path != "system" => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| format!("cannot read sslrootcert={path}: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("sslrootcert={path} holds no usable PEM certificate"));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(
                    "no system root certificates found (install the ca-certificates package), and no sslrootcert=PATH given"
                        .into(),
                );
            }
        }
    }
    Ok(roots)
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
