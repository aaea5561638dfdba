//! Throwaway certificates for the TLS tests of the network stores, made at
//! test time by the `openssl` command (EC P-256, valid two days) in a
//! directory the caller owns:
//!
//! - `ca.crt` / `ca.key`: the test CA the servers' certificates chain to;
//! - `server.crt` / `server.key`: for `127.0.0.1` and `localhost`, signed
//!   by the CA (server and client use, as etcd also dials itself with it);
//! - `client.crt` / `client.key`: a client certificate signed by the CA,
//!   for the common name the caller chose (PostgreSQL's `cert`
//!   authentication takes the role from it);
//! - `other-ca.crt`: a second CA that signed nothing the servers trust, and
//!   `foreign.crt` / `foreign.key`: a client certificate it signed, with the
//!   same common name — what a server must refuse.
//!
//! Keys are written unencrypted and `0600`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of one set of test certificates.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Make every file in `dir` (which must exist); the client
    /// certificates name `client_cn`.
    ///
    /// # Panics
    /// When `openssl` fails. Without it, the test that asked cannot run
    /// here, and is reported so ([`need_program`](crate::need_program)).
    #[must_use]
    pub fn make(dir: &Path, client_cn: &str) -> Pki {
        crate::need_program("openssl", "openssl");
        let pki = Pki { dir: dir.to_owned() };
        pki.write(
            "server.ext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        pki.write(
            "client.ext",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
        );
        pki.make_ca("ca", "/CN=leasehold test CA");
        pki.make_ca("other-ca", "/CN=a CA nobody trusts");
        pki.make_leaf("server", "/CN=localhost", "ca", "server.ext");
        let client = format!("/CN={client_cn}");
        pki.make_leaf("client", &client, "ca", "client.ext");
        pki.make_leaf("foreign", &client, "other-ca", "client.ext");
        pki
    }

    /// The files [`Pki::make`] made in `dir` earlier.
    #[must_use]
    pub fn from_dir(dir: &Path) -> Pki {
        Pki { dir: dir.to_owned() }
    }

    /// The CA that signed the server and client certificates.
    #[must_use]
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A CA that signed neither the server's certificate nor the client's.
    #[must_use]
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join("other-ca.crt")
    }

    #[must_use]
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    #[must_use]
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    #[must_use]
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.crt")
    }

    #[must_use]
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// A client certificate signed by [`Pki::other_ca`].
    #[must_use]
    pub fn foreign_cert(&self) -> PathBuf {
        self.dir.join("foreign.crt")
    }

    #[must_use]
    pub fn foreign_key(&self) -> PathBuf {
        self.dir.join("foreign.key")
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a throwaway test fixture needs no atomic write"
    )]
    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    }

    /// A self-signed CA `NAME.crt` with its key `NAME.key`.
    fn make_ca(&self, name: &str, subject: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            subject,
        ]);
        self.private(name);
    }

    /// `NAME.crt` and `NAME.key` for `subject`, signed by the CA `ca`.
    fn make_leaf(&self, name: &str, subject: &str, ca: &str, extensions: &str) {
        let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subject,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            extensions,
        ]);
        self.private(name);
    }

    fn private(&self, name: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let key = self.dir.join(format!("{name}.key"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", key.display()));
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (install the openssl package): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
