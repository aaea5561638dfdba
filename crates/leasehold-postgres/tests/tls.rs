//! TLS with rustls against a real server started with `ssl=on` and a
//! certificate made at test time (by the `openssl` command) for 127.0.0.1,
//! signed by a throwaway CA, which the server also trusts for client
//! certificates: role `leasehold` logs in with one (`hostssl ... cert`),
//! role `with_password` with a password (`hostssl ... scram-sha-256`).

use std::path::Path;

use leasehold_backend::{Backend, BackendError, ErrorKind, LeaseAcquire};
use leasehold_backend_tests::opening::{acquire_and_release, invalid_url, unavailable};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use leasehold_testkit::postgres::{CERT_USER, OTHER_CERT_USER, PASSWORD, PASSWORD_USER, Server};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        sslmode_require_with_the_servers_ca_encrypts_and_works,
        a_certificate_from_another_ca_is_refused,
        sslmode_require_against_a_server_without_tls_fails_clearly,
        a_client_certificate_logs_in_with_cert_authentication,
        a_missing_or_untrusted_client_certificate_is_refused_with_what_to_do,
        client_certificate_files_are_checked_before_connecting,
        a_password_role_over_tls_and_what_a_wrong_or_missing_password_says,
    ]]);
}

fn tls_server() -> &'static Server {
    static SERVER: std::sync::OnceLock<Server> = std::sync::OnceLock::new();
    SERVER.get_or_init(Server::start_tls)
}

fn open(url: &str) -> Result<PostgresBackend, BackendError> {
    PostgresBackend::open(url, PostgresOptions::default())
}

/// The connections of application `leasehold` that use TLS.
fn encrypted_connections(server: &Server) -> i64 {
    server
        .client()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'leasehold' AND s.ssl",
            &[],
        )
        .unwrap()
        .get(0)
}

fn sslmode_require_with_the_servers_ca_encrypts_and_works() {
    let server = tls_server();
    for mode in ["require", "verify-full", "verify-ca"] {
        let url = format!(
            "{}&sslmode={mode}&sslrootcert={}",
            server.url(&Server::fresh_schema()),
            server.pki().ca().display()
        );
        let store = open(&url).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(matches!(
            store.lease_acquire(&params::acquire("job")).unwrap(),
            LeaseAcquire::Acquired(_)
        ));
        assert!(encrypted_connections(server) >= 1, "{mode}: no TLS connection seen");
        let facts = store.describe().unwrap().facts;
        assert!(
            facts.iter().any(|(k, v)| k == "TLS" && v.starts_with("on")),
            "{facts:?}"
        );
    }
}

fn a_certificate_from_another_ca_is_refused() {
    let server = tls_server();
    // Trust only the system's roots: the throwaway CA is not among them.
    // (Where the system has no roots at all, the URL itself is refused.)
    let url = format!("{}&sslmode=require", server.url(&Server::fresh_schema()));
    match open(&url) {
        Err(e) if e.kind() == ErrorKind::Auth => {
            eprintln!("untrusted certificate: {e}");
            assert!(e.reason().contains("TLS"), "{e}");
            assert!(e.hint_text().contains("sslrootcert"), "{e}");
        }
        Err(e) if e.kind() == ErrorKind::InvalidInput => assert!(e.reason().contains("root"), "{e}"),
        other => panic!("an untrusted certificate was accepted: {other:?}"),
    }
}

fn sslmode_require_against_a_server_without_tls_fails_clearly() {
    let plain = Server::shared();
    let other = tls_server();
    let url = format!(
        "{}&sslmode=require&sslrootcert={}",
        plain.url(&Server::fresh_schema()),
        other.pki().ca().display()
    );
    match open(&url) {
        Err(e) if e.kind() == ErrorKind::Auth => {
            eprintln!("server without TLS: {e}");
            assert!(e.reason().contains("TLS"), "{e}");
            assert!(e.hint_text().contains("does not offer it"), "{e}");
        }
        other => panic!("expected unavailable (exit 69), got {other:?}"),
    }
    // Plain connections to it still work.
    open(&format!("{}&sslmode=disable", plain.url(&Server::fresh_schema()))).unwrap();
}

/// A URL for `user` (`user:password`) on the TLS server, verifying its
/// certificate (`sslmode`) against the test CA, presenting `client`
/// (certificate, key) if given.
fn url_as(user: &str, sslmode: &str, client: Option<(&Path, &Path)>) -> String {
    let server = tls_server();
    let client = client.map_or_else(String::new, |(cert, key)| {
        format!("&sslcert={}&sslkey={}", cert.display(), key.display())
    });
    format!(
        "postgres://{user}@127.0.0.1:{}/postgres?schema={}&connect_timeout=5&sslmode={sslmode}&sslrootcert={}{client}",
        server.port(),
        Server::fresh_schema(),
        server.pki().ca().display()
    )
}

fn a_client_certificate_logs_in_with_cert_authentication() {
    let server = tls_server();
    let pki = server.pki();
    let (cert, key) = (pki.client_cert(), pki.client_key());
    for mode in ["verify-full", "verify-ca", "require"] {
        let store = open(&url_as(CERT_USER, mode, Some((&cert, &key)))).unwrap_or_else(|e| panic!("{mode}: {e}"));
        acquire_and_release(&store);
        let facts = store.describe().unwrap().facts;
        assert!(
            facts
                .iter()
                .any(|(k, v)| k == "TLS" && v.contains("client certificate")),
            "{facts:?}"
        );
        // The server saw the certificate, and took the role from it.
        let subjects: Vec<String> = server
            .client()
            .query(
                "SELECT s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.usename = $1 AND s.ssl",
                &[&CERT_USER],
            )
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(!subjects.is_empty(), "{mode}: no TLS connection of {CERT_USER}");
        assert!(
            subjects.iter().all(|dn| dn == &format!("/CN={CERT_USER}")),
            "{mode}: {subjects:?}"
        );
    }
}

fn a_missing_or_untrusted_client_certificate_is_refused_with_what_to_do() {
    let pki = tls_server().pki();
    let (reason, hint) = unavailable(open(&url_as(CERT_USER, "verify-full", None)));
    assert!(reason.contains("refused role"), "{reason}");
    assert!(hint.contains("sslcert=PATH&sslkey=PATH"), "{hint}");

    let (cert, key) = (pki.foreign_cert(), pki.foreign_key());
    let (reason, hint) = unavailable(open(&url_as(CERT_USER, "verify-full", Some((&cert, &key)))));
    assert!(reason.contains("refused the client certificate"), "{reason}");
    assert!(hint.contains("ssl_ca_file"), "{hint}");

    // A certificate the server trusts, for another role than its CN.
    let (cert, key) = (pki.client_cert(), pki.client_key());
    let (reason, hint) = unavailable(open(&url_as(OTHER_CERT_USER, "verify-full", Some((&cert, &key)))));
    assert!(
        reason.contains(&format!("refused role \"{OTHER_CERT_USER}\"")),
        "{reason}"
    );
    assert!(hint.contains("common name (CN) must be the role"), "{hint}");
}

/// Checked before connecting: no server is involved.
fn client_certificate_files_are_checked_before_connecting() {
    let pki = tls_server().pki();
    let (cert, key) = (pki.client_cert(), pki.client_key());
    let missing = pki.ca().with_file_name("missing.key");
    let reason = invalid_url(open(&url_as(CERT_USER, "verify-full", Some((&cert, &missing)))));
    assert!(
        reason.starts_with(&format!("sslkey={}: no such file", missing.display())),
        "{reason}"
    );
    let reason = invalid_url(open(&url_as(CERT_USER, "verify-full", Some((&missing, &key)))));
    assert!(reason.starts_with("sslcert="), "{reason}");
    let foreign_key = pki.foreign_key();
    let reason = invalid_url(open(&url_as(CERT_USER, "verify-full", Some((&cert, &foreign_key)))));
    assert!(reason.contains("is not the private key of sslcert="), "{reason}");
    let reason = invalid_url(open(&format!(
        "{}&sslcert={}",
        url_as(CERT_USER, "verify-full", None),
        cert.display()
    )));
    assert!(reason.contains("needs sslkey=PATH"), "{reason}");
    let reason = invalid_url(open(&url_as(CERT_USER, "prefer", Some((&cert, &key)))));
    assert!(reason.contains("needs TLS"), "{reason}");
}

fn a_password_role_over_tls_and_what_a_wrong_or_missing_password_says() {
    let user = |password: &str| format!("{PASSWORD_USER}:{}", password.replace(' ', "%20"));
    acquire_and_release(&open(&url_as(&user(PASSWORD), "verify-full", None)).unwrap());

    let (reason, hint) = unavailable(open(&url_as(&user("wrong"), "verify-full", None)));
    assert!(reason.contains("authentication failed"), "{reason}");
    assert!(hint.contains("PGPASSWORD"), "{hint}");

    // (Unless PGPASSWORD is set for this test run: then it is used.)
    if std::env::var_os("PGPASSWORD").is_none() {
        let (reason, hint) = unavailable(open(&url_as(PASSWORD_USER, "verify-full", None)));
        assert!(reason.contains("asks for a password"), "{reason}");
        assert!(hint.contains("PGPASSWORD"), "{hint}");
    }
}
