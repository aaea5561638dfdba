//! TLS with rustls against a real server started with `ssl=on` and a
//! certificate made at test time (by the `openssl` command) for 127.0.0.1,
//! signed by a throwaway CA.

mod support;

use leasehold_backend::{Backend, BackendError, LeaseAcquire};
use leasehold_backend_tests::params;
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use support::Server;

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

#[test]
fn sslmode_require_with_the_servers_ca_encrypts_and_works() {
    let server = tls_server();
    for mode in ["require", "verify-full", "verify-ca"] {
        let url = format!(
            "{}&sslmode={mode}&sslrootcert={}",
            server.url(&Server::fresh_schema()),
            server.ca_cert().display()
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

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let server = tls_server();
    // Trust only the system's roots: the throwaway CA is not among them.
    // (Where the system has no roots at all, the URL itself is refused.)
    let url = format!("{}&sslmode=require", server.url(&Server::fresh_schema()));
    match open(&url) {
        Err(BackendError::Unavailable { reason, hint, .. }) => {
            eprintln!("untrusted certificate: {reason}; {hint}");
            assert!(reason.contains("TLS"), "{reason}");
            assert!(hint.contains("sslrootcert"), "{hint}");
        }
        Err(BackendError::InvalidUrl { reason, .. }) => assert!(reason.contains("root"), "{reason}"),
        other => panic!("an untrusted certificate was accepted: {other:?}"),
    }
}

#[test]
fn sslmode_require_against_a_server_without_tls_fails_clearly() {
    let plain = Server::shared();
    let other = tls_server();
    let url = format!(
        "{}&sslmode=require&sslrootcert={}",
        plain.url(&Server::fresh_schema()),
        other.ca_cert().display()
    );
    match open(&url) {
        Err(BackendError::Unavailable { reason, hint, .. }) => {
            eprintln!("server without TLS: {reason}; {hint}");
            assert!(reason.contains("TLS"), "{reason}");
            assert!(hint.contains("does not offer it"), "{hint}");
        }
        other => panic!("expected unavailable (exit 69), got {other:?}"),
    }
    // Plain connections to it still work.
    open(&format!("{}&sslmode=disable", plain.url(&Server::fresh_schema()))).unwrap();
}
