//! What is wrong with the TLS files or set-up: each error with the facts it
//! is about (the file as its URL parameter names it, the cause), worded
//! once in `Display`, the one form the stores pass on.

use std::fmt;
use std::io;
use std::path::PathBuf;

use rustls::pki_types::pem;

use crate::Param;

/// A file as a URL parameter names it; shown `NAME=PATH`
/// (`cacert=/etc/leasehold/ca.pem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamFile {
    pub param: String,
    pub path: PathBuf,
}

impl From<Param<'_>> for ParamFile {
    fn from((param, path): Param<'_>) -> Self {
        Self {
            param: param.to_owned(),
            path: path.to_owned(),
        }
    }
}

impl fmt::Display for ParamFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.param, self.path.display())
    }
}

/// Why the roots, a client identity or a client configuration cannot be
/// had. No variant holds key material: a key that does not parse is
/// described, never quoted.
#[derive(Debug)]
pub enum TlsError {
    /// The file does not exist.
    Missing(ParamFile),
    /// The file cannot be read.
    Unreadable { file: ParamFile, error: io::Error },
    /// A certificate file that is not PEM.
    NotPem { file: ParamFile, error: pem::Error },
    /// A certificate file without a certificate.
    NoCertificate(ParamFile),
    /// A roots file none of whose certificates can be a root.
    NoRoot(ParamFile),
    /// No roots file given (`param`), and the system has no roots.
    NoSystemRoots { param: String },
    /// An encrypted key file.
    EncryptedKey(ParamFile),
    /// A key file without a private key.
    NoKey(ParamFile),
    /// A key file that is not PEM (the parser's error is not kept: it
    /// may quote the file).
    InvalidKey(ParamFile),
    /// The key is not the certificate's.
    KeyMismatch { key: ParamFile, cert: ParamFile },
    /// The certificate is not X.509 version 3 (`version`: 1 or 2), the
    /// only version rustls (webpki) reads.
    NotVersion3 { cert: ParamFile, version: u8 },
    /// rustls (webpki) cannot read the certificate: `why`, in words.
    UnreadableCertificate { cert: ParamFile, why: String },
    /// rustls cannot use the key.
    UnusableKey { key: ParamFile, error: rustls::Error },
    /// rustls cannot make a client configuration.
    Setup(rustls::Error),
    /// rustls refuses the client certificate.
    ClientCertificate(rustls::Error),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(file) => write!(
                f,
                "{file}: no such file (a relative path is taken from the current directory)"
            ),
            Self::Unreadable { file, error } => write!(f, "cannot read {file}: {error}"),
            Self::NotPem { file, error } => write!(f, "{file}: not a valid PEM file ({error})"),
            Self::NoCertificate(file) => write!(
                f,
                "{file} holds no PEM certificate (a block starting -----BEGIN CERTIFICATE-----)"
            ),
            Self::NoRoot(file) => write!(
                f,
                "{file}: none of its certificates can be used as a root (X.509 v3 CA certificates are expected)"
            ),
            Self::NoSystemRoots { param } => write!(
                f,
                "no system root certificates found (install the ca-certificates package), and no {param}=PATH given"
            ),
            Self::EncryptedKey(file) => write!(
                f,
                "{file} is encrypted, and leasehold reads only unencrypted keys: decrypt it \
                 (openssl pkey -in {} -out PLAIN.key) and keep that file private (chmod 600)",
                file.path.display()
            ),
            Self::NoKey(file) => write!(
                f,
                "{file} holds no private key (expected an unencrypted PEM key: \
                 -----BEGIN PRIVATE KEY-----, EC PRIVATE KEY or RSA PRIVATE KEY)"
            ),
            Self::InvalidKey(file) => write!(f, "{file}: not a valid PEM private key file"),
            Self::KeyMismatch { key, cert } => write!(
                f,
                "{key} is not the private key of {cert} (their public keys differ): name the key the certificate \
                 was issued for"
            ),
            Self::NotVersion3 { cert, version } => write!(
                f,
                "{cert} is an X.509 version {version} certificate, and leasehold's TLS library (rustls, with \
                 webpki) reads only version 3 ones (OpenSSL, and so redis-cli, still takes older ones): have it \
                 issued again as version 3 — `openssl x509 -req` with `-extfile` naming v3 extensions (say a file \
                 holding `basicConstraints=CA:FALSE`), or `openssl req -x509` (v3 by default)"
            ),
            Self::UnreadableCertificate { cert, why } => write!(f, "{cert}: cannot use this certificate: {why}"),
            Self::UnusableKey { key, error } => write!(f, "{key}: cannot use this key: {error}"),
            Self::Setup(error) => write!(f, "TLS set-up failed: {error}"),
            Self::ClientCertificate(error) => write!(f, "cannot use the client certificate: {error}"),
        }
    }
}

/// No source: every message prints its cause, which a chain would show
/// twice.
impl std::error::Error for TlsError {}
