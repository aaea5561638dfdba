//! The PEM files of leasehold's network stores, read for rustls: the roots a
//! server's certificate must chain to, and a client's certificate with its
//! key. PostgreSQL (`sslrootcert`, `sslcert`, `sslkey`) and etcd (`cacert`,
//! `cert`, `key`) name the same files differently, so every function takes
//! the URL parameter's name and every error says `NAME=PATH` and what to
//! do. The stores report these errors as an invalid URL (exit 2): nothing
//! was sent to a server yet.
//!
//! No error carries key material: a key that does not parse is described,
//! never quoted.
//!
//! [`refusal`] tells, from a failed connection's error, which side's
//! certificate TLS refused, so each store can say what to do in its own
//! words; [`probe`] finds out by a handshake of its own where a client
//! library reports such a refusal only as a closed connection.

mod error;

use std::error::Error;
use std::fmt;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, ClientConfig, ClientConnection, RootCertStore};

pub use crate::error::{ParamFile, TlsError};

/// A file named by a URL parameter: `("cacert", path)`.
pub type Param<'a> = (&'a str, &'a Path);

/// The roots to trust: the certificates in the file `ca` (PEM, one or
/// more), or the system's store when `ca` is `None` (`/etc/ssl/certs`, or
/// `SSL_CERT_FILE` / `SSL_CERT_DIR`; nothing is bundled).
///
/// # Errors
/// A file that is missing, unreadable or holds no certificate; no system
/// roots at all. `param` names the URL parameter in the message.
///
/// # Examples
/// ```
/// let e = leasehold_tls::roots("cacert", Some("/nonexistent/ca.pem".as_ref())).unwrap_err().to_string();
/// assert!(e.starts_with("cacert=/nonexistent/ca.pem: no such file"), "{e}");
/// ```
pub fn roots(param: &str, ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    if let Some(path) = ca {
        let (added, _) = roots.add_parsable_certificates(certificates((param, path))?);
        if added == 0 {
            return Err(TlsError::NoRoot((param, path).into()));
        }
    } else {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if roots.is_empty() {
            return Err(TlsError::NoSystemRoots {
                param: param.to_owned(),
            });
        }
    }
    Ok(roots)
}

/// A client certificate (with any intermediates after it) and its private
/// key, read from PEM files and checked to belong together.
pub struct Identity {
    /// The certificates, first the client's own.
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The files as read, for clients that parse PEM themselves.
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("certificates", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// Read the client certificate `cert` and its key `key`.
///
/// # Errors
/// A file missing or unreadable; no certificate in `cert`; no usable key
/// in `key` (an encrypted one says how to decrypt it); a key that is not
/// the certificate's.
pub fn identity(cert: Param<'_>, key: Param<'_>) -> Result<Identity, TlsError> {
    let cert_pem = read(cert)?;
    let chain = parse_certificates(cert, &cert_pem)?;
    let key_pem = read(key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| key_error(key, &key_pem, &e))?;
    // rustls reads certificates with webpki, which takes X.509 version 3
    // only (RFC 5280; mozilla::pkix's choice too): an older one is said
    // as such, not as a key rustls "cannot use".
    if let Some(version) = chain.first().and_then(|c| x509_version(c)).filter(|v| *v != 3) {
        return Err(TlsError::NotVersion3 {
            cert: cert.into(),
            version,
        });
    }
    let provider = rustls::crypto::ring::default_provider();
    match CertifiedKey::from_der(chain.clone(), private.clone_key(), &provider) {
        Ok(_) => Ok(Identity {
            chain,
            key: private,
            cert_pem,
            key_pem,
        }),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            key: key.into(),
            cert: cert.into(),
        }),
        // The certificate, not the key: webpki could not read it.
        Err(rustls::Error::InvalidCertificate(error)) => Err(TlsError::UnreadableCertificate {
            cert: cert.into(),
            why: certificate_words(&error),
        }),
        Err(error) => Err(TlsError::UnusableKey { key: key.into(), error }),
    }
}

/// The X.509 version of a DER certificate (1, 2 or 3), read from the
/// start of its `TBSCertificate`: `[0] EXPLICIT Version` (0 for v1, 2 for
/// v3), which a version 1 certificate leaves out. `None` when the bytes do
/// not start as a certificate does (webpki then says what is wrong).
fn x509_version(der: &[u8]) -> Option<u8> {
    /// The contents of the DER element at the start of `b`, if it has
    /// `tag`.
    fn inside(b: &[u8], tag: u8) -> Option<&[u8]> {
        let (&t, rest) = b.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if t != tag {
            return None;
        }
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n].iter().fold(0usize, |l, &b| (l << 8) | usize::from(b));
            (len, &rest[n..])
        };
        rest.get(..len)
    }
    let tbs = inside(inside(der, 0x30)?, 0x30)?;
    match inside(tbs, 0xa0) {
        None => Some(1),
        Some(version) => match inside(version, 0x02)? {
            [v @ 0..=2] => Some(v + 1),
            _ => None,
        },
    }
}

/// What is wrong with a certificate, in words: rustls' own messages name
/// most cases by their Rust names (`UnknownIssuer`) and call every
/// certificate the "peer" one.
#[must_use]
pub fn certificate_words(e: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match e {
        C::BadEncoding => "it is not a well-formed X.509 certificate".to_owned(),
        C::Expired | C::ExpiredContext { .. } => "it has expired".to_owned(),
        C::NotValidYet | C::NotValidYetContext { .. } => "it is not valid yet (is this host's clock right?)".to_owned(),
        C::Revoked => "it is revoked".to_owned(),
        C::UnknownIssuer => "it is not signed by a CA among the trusted roots".to_owned(),
        C::BadSignature => "its signature does not verify".to_owned(),
        C::NotValidForName => "it is not issued for the host name connected to".to_owned(),
        // rustls' words: the name expected and the names it has.
        C::NotValidForNameContext { .. } => e.to_string(),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "it is not issued for this use (its extended key usage)".to_owned()
        }
        C::UnhandledCriticalExtension => "it has a critical extension that cannot be handled".to_owned(),
        C::UnsupportedSignatureAlgorithmContext { .. } | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "it is signed with an algorithm that is not supported".to_owned()
        }
        C::Other(other) if other.to_string().contains("UnsupportedCertVersion") => {
            "it is not an X.509 version 3 certificate, the only version rustls reads".to_owned()
        }
        _ => "it cannot be verified".to_owned(),
    }
}

/// A TLS alert about the client's certificate, in words.
fn alert_words(alert: AlertDescription) -> &'static str {
    match alert {
        AlertDescription::CertificateRequired | AlertDescription::NoCertificate => {
            "the server requires a client certificate (cert= and key=)"
        }
        AlertDescription::UnknownCA => "the server does not trust the CA that signed the client certificate",
        AlertDescription::CertificateExpired => "the server says the client certificate has expired",
        AlertDescription::CertificateRevoked => "the server says the client certificate is revoked",
        AlertDescription::AccessDenied => "the server denied access to this client certificate",
        _ => "the server did not accept the client certificate",
    }
}

/// Why a TLS connection failed, as far as the client can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The server's certificate did not verify against the trusted roots
    /// (an unknown issuer, a name it is not for, expired...).
    ServerCertificate(String),
    /// The server ended the handshake over the client's certificate: none
    /// was sent and one is required, or the one sent is not trusted,
    /// expired or revoked. (TLS 1.3 servers judge it after the client has
    /// finished, so this arrives on the first read.)
    ClientCertificate(String),
    /// Anything else TLS reported (no common protocol version or cipher,
    /// a protocol error).
    Other(String),
}

/// The TLS failure in `e`'s chain of sources, if there is one: rustls'
/// error, wherever the client libraries wrapped it (also inside an
/// `io::Error`, whose own `source` skips what it wraps).
#[must_use]
pub fn refusal(e: &(dyn Error + 'static)) -> Option<Refusal> {
    let mut next = Some(e);
    while let Some(e) = next {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = e.downcast_ref::<rustls::Error>().or(inner) {
            return Some(classify(tls));
        }
        next = e.source();
    }
    None
}

/// A client configuration trusting `roots` and presenting `identity` (if
/// any), offering `alpn` protocols — for [`probe`].
///
/// # Errors
/// When rustls refuses the identity (checked by [`identity`] already).
pub fn client_config(
    roots: RootCertStore,
    identity: Option<&Identity>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(TlsError::ClientCertificate)?,
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Connect to `host:port` with `config`, finish the handshake, send
/// `hello` and read the first answer: what the server thought of this
/// client's certificate. A TLS 1.3 server judges it only after the client
/// has finished its side of the handshake, and HTTP/2 clients (gRPC's)
/// then report the server's alert as a connection closed or cancelled.
///
/// `None` when the server answered, or could not be reached: then TLS was
/// not the problem. A server that closes the connection during the
/// handshake is [`Refusal::Other`] (it may not speak TLS at all).
#[must_use]
pub fn probe(host: &str, port: u16, config: Arc<ClientConfig>, hello: &[u8], timeout: Duration) -> Option<Refusal> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_owned()).ok()?;
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let mut socket = TcpStream::connect_timeout(&addr, timeout).ok()?;
    socket.set_read_timeout(Some(timeout)).ok()?;
    socket.set_write_timeout(Some(timeout)).ok()?;
    let mut connection = ClientConnection::new(config, name).ok()?;
    let mut tls = rustls::Stream::new(&mut connection, &mut socket);
    let mut answer = [0u8; 1];
    let failed = tls
        .write_all(hello)
        .and_then(|()| tls.flush())
        .and_then(|()| tls.read(&mut answer))
        .err()?;
    refusal(&failed).or_else(|| {
        // Closed or reset: which one depends on whether the server had
        // read all of the client's hello when it hung up.
        let hung_up = matches!(
            failed.kind(),
            std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
        );
        (connection.is_handshaking() && hung_up).then(|| {
            Refusal::Other(
                "the server closed the connection during the TLS handshake (as a server without TLS does)".into(),
            )
        })
    })
}

fn classify(e: &rustls::Error) -> Refusal {
    match e {
        rustls::Error::InvalidCertificate(c) => Refusal::ServerCertificate(certificate_words(c)),
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
            | AlertDescription::CertificateRequired
            | AlertDescription::NoCertificate),
        ) => Refusal::ClientCertificate(alert_words(*alert).to_owned()),
        _ => Refusal::Other(e.to_string()),
    }
}

/// The certificates of a PEM file (at least one).
fn certificates(file: Param<'_>) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certificates(file, &read(file)?)
}

fn parse_certificates(file: Param<'_>, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::NotPem {
            file: file.into(),
            error,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(file.into()));
    }
    Ok(certs)
}

/// What is wrong with a key file, without quoting it.
fn key_error(file: Param<'_>, pem: &[u8], e: &pem::Error) -> TlsError {
    let file = file.into();
    if String::from_utf8_lossy(pem).contains("ENCRYPTED") {
        TlsError::EncryptedKey(file)
    } else if matches!(e, pem::Error::NoItemsFound) {
        TlsError::NoKey(file)
    } else {
        TlsError::InvalidKey(file)
    }
}

fn read(file: Param<'_>) -> Result<Vec<u8>, TlsError> {
    std::fs::read(file.1).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => TlsError::Missing(file.into()),
        _ => TlsError::Unreadable {
            file: file.into(),
            error,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::pki::Pki;

    fn pki() -> (tempfile::TempDir, Pki) {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::make(dir.path(), "someone");
        (dir, pki)
    }

    #[test]
    fn roots_from_a_file_and_what_is_wrong_with_one() {
        let (dir, pki) = pki();
        assert_eq!(roots("cacert", Some(&pki.ca())).unwrap().len(), 1);
        let missing = dir.path().join("missing.pem");
        let e = roots("cacert", Some(&missing)).unwrap_err();
        assert!(
            matches!(&e, TlsError::Missing(file) if *file == ParamFile::from(("cacert", missing.as_path()))),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("cacert=") && e.contains("missing.pem: no such file"), "{e}");
        let e = roots("sslrootcert", Some(&pki.client_key())).unwrap_err().to_string();
        assert!(
            e.contains("sslrootcert=") && e.contains("holds no PEM certificate"),
            "{e}"
        );
        let e = roots("cacert", Some(dir.path())).unwrap_err().to_string();
        assert!(e.starts_with("cannot read cacert="), "{e}");
    }

    #[test]
    fn an_identity_is_a_certificate_and_its_own_key() {
        let (dir, pki) = pki();
        let cert = pki.client_cert();
        let id = identity(("cert", &cert), ("key", &pki.client_key())).unwrap();
        assert_eq!(id.chain.len(), 1);
        assert!(!format!("{id:?}").contains("BEGIN"));

        let e = identity(("sslcert", &cert), ("sslkey", &pki.foreign_key()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not the private key of sslcert="), "{e}");
        let e = identity(("sslcert", &pki.client_key()), ("sslkey", &pki.client_key()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslcert=") && e.contains("holds no PEM certificate"), "{e}");
        let e = identity(("cert", &cert), ("key", &cert)).unwrap_err().to_string();
        assert!(e.contains("holds no private key"), "{e}");
        let e = identity(("cert", &cert), ("key", &dir.path().join("nope.key")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("key=") && e.contains("nope.key: no such file"), "{e}");

        let encrypted = dir.path().join("encrypted.key");
        let status = std::process::Command::new("openssl")
            .args(["pkey", "-aes256", "-passout", "pass:secret", "-in"])
            .arg(pki.client_key())
            .arg("-out")
            .arg(&encrypted)
            .status()
            .unwrap();
        assert!(status.success());
        let e = identity(("cert", &cert), ("key", &encrypted)).unwrap_err().to_string();
        assert!(e.contains("is encrypted") && e.contains("openssl pkey"), "{e}");
        assert!(!e.contains("BEGIN"), "{e}");
    }
}
