//! TLS and authentication against real etcd servers configured at test time
//! (`leasehold_testkit::etcd::Security`): one with TLS and
//! `--client-cert-auth`, one with TLS and users (`auth enable`, a role
//! granted one key prefix). The
//! certificates are made by `openssl` for 127.0.0.1: a test CA, and a
//! second CA that signed nothing the servers trust.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_backend::{Backend, BackendError};
use leasehold_backend_tests::opening::{acquire_and_release, invalid_url, unavailable};
use leasehold_etcd::{EtcdBackend, EtcdCredentials, EtcdOptions, EtcdTls, Password};
use leasehold_testkit::etcd::{self, EtcdServer, GRANTED, PASSWORD, Security, USER, shared_with};
use leasehold_testkit::pki::Pki;

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_client_certificate_the_clusters_ca_signed_gets_in,
        certificates_the_other_side_does_not_trust_are_refused_with_what_to_do,
        tls_files_that_are_missing_or_wrong_make_an_invalid_url,
        a_user_whose_role_grants_the_prefix_gets_in_and_bad_credentials_do_not,
        a_token_etcd_forgot_is_renewed_by_authenticating_again,
        the_clusters_clock_is_read_over_tls_with_a_client_certificate_and_with_users,
    ]]);
}

fn open(
    server: &EtcdServer,
    prefix: &str,
    tls: Option<EtcdTls>,
    user: Option<(&str, &str)>,
) -> Result<EtcdBackend, BackendError> {
    EtcdBackend::open(
        &[server.endpoint()],
        &EtcdOptions {
            prefix: prefix.to_owned(),
            tls,
            credentials: user.map(|(user, password)| EtcdCredentials {
                user: user.to_owned(),
                password: Password::new(password),
            }),
            ..EtcdOptions::default()
        },
    )
}

/// TLS trusting `ca`, presenting `client` (certificate, key) if given.
#[allow(clippy::unnecessary_wraps, reason = "the `tls` argument of `open`")]
fn tls(ca: &Path, client: Option<(PathBuf, PathBuf)>) -> Option<EtcdTls> {
    let (cert, key) = client.unzip();
    Some(EtcdTls {
        ca: Some(ca.to_owned()),
        cert,
        key,
    })
}

/// The client certificate the cluster's CA signed, with its key.
#[allow(clippy::unnecessary_wraps, reason = "the `client` argument of `tls`")]
fn client_cert(pki: &Pki) -> Option<(PathBuf, PathBuf)> {
    Some((pki.client_cert(), pki.client_key()))
}

fn a_client_certificate_the_clusters_ca_signed_gets_in() {
    let server = shared_with(Security::MutualTls);
    let pki = server.pki();
    let store = open(server, "/mtls", tls(&pki.ca(), client_cert(pki)), None).unwrap();
    acquire_and_release(&store);
    let facts = store.describe().unwrap().facts;
    let tls_fact = &facts.iter().find(|(k, _)| k == "TLS").unwrap().1;
    assert!(
        tls_fact.starts_with("on") && tls_fact.contains("client certificate"),
        "{tls_fact}"
    );
}

fn certificates_the_other_side_does_not_trust_are_refused_with_what_to_do() {
    let server = shared_with(Security::MutualTls);
    let pki = server.pki();

    // The cluster's certificate, checked against a CA that did not sign it.
    let (reason, hint) = unavailable(open(server, "/mtls", tls(&pki.other_ca(), client_cert(pki)), None));
    assert!(reason.contains("cluster's certificate was not accepted"), "{reason}");
    assert!(hint.contains("cacert=PATH"), "{hint}");

    // No client certificate, where the cluster requires one.
    let (reason, hint) = unavailable(open(server, "/mtls", tls(&pki.ca(), None), None));
    assert!(reason.contains("wants a client certificate"), "{reason}");
    assert!(hint.contains("cert=PATH&key=PATH"), "{hint}");

    // A client certificate from a CA the cluster does not trust.
    let foreign = Some((pki.foreign_cert(), pki.foreign_key()));
    let (reason, hint) = unavailable(open(server, "/mtls", tls(&pki.ca(), foreign), None));
    assert!(reason.contains("refused the client certificate cert="), "{reason}");
    assert!(hint.contains("--trusted-ca-file"), "{hint}");

    // No TLS at all towards a TLS cluster, and TLS towards a plain one.
    let (_, hint) = unavailable(open(server, "/mtls", None, None));
    assert!(hint.contains("add cacert=PATH"), "{hint}");
    let (reason, hint) = unavailable(open(etcd::shared(), "/mtls", tls(&pki.ca(), None), None));
    assert!(reason.contains("during the TLS handshake"), "{reason}");
    assert!(hint.contains("serves TLS"), "{hint}");
}

/// Checked before anything is sent, so no server is needed (port 9 of
/// 127.0.0.1 is closed).
fn tls_files_that_are_missing_or_wrong_make_an_invalid_url() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::make(dir.path(), USER);
    let server = ["127.0.0.1:9".to_owned()];
    let open = |tls: EtcdTls| {
        EtcdBackend::open(
            &server,
            &EtcdOptions {
                tls: Some(tls),
                ..EtcdOptions::default()
            },
        )
    };
    let missing = dir.path().join("missing.pem");
    let reason = invalid_url(open(EtcdTls {
        ca: Some(missing.clone()),
        ..EtcdTls::default()
    }));
    assert!(
        reason.starts_with(&format!("cacert={}: no such file", missing.display())),
        "{reason}"
    );
    let reason = invalid_url(open(EtcdTls {
        ca: Some(pki.ca()),
        cert: Some(pki.client_cert()),
        key: Some(missing),
    }));
    assert!(
        reason.starts_with("key=") && reason.contains("no such file"),
        "{reason}"
    );
    let reason = invalid_url(open(EtcdTls {
        ca: Some(pki.ca()),
        cert: Some(pki.client_cert()),
        key: Some(pki.foreign_key()),
    }));
    assert!(reason.contains("is not the private key of cert="), "{reason}");
    let reason = invalid_url(open(EtcdTls {
        ca: Some(pki.ca()),
        cert: Some(pki.client_cert()),
        key: None,
    }));
    assert!(reason.contains("cert=PATH needs key=PATH"), "{reason}");
    let reason = invalid_url(EtcdBackend::open(
        &["http://127.0.0.1:9".to_owned()],
        &EtcdOptions {
            tls: tls(&pki.ca(), None),
            ..EtcdOptions::default()
        },
    ));
    assert!(reason.contains("is plain http://"), "{reason}");
    // Good files, nobody listening: unreachable, not a TLS refusal.
    let (_, hint) = unavailable(open(EtcdTls {
        ca: Some(pki.ca()),
        cert: Some(pki.client_cert()),
        key: Some(pki.client_key()),
    }));
    assert!(hint.starts_with("check that the cluster is up"), "{hint}");
}

fn a_user_whose_role_grants_the_prefix_gets_in_and_bad_credentials_do_not() {
    let server = shared_with(Security::TlsAndPassword);
    let ca = server.pki().ca();
    let prefix = format!("{GRANTED}users");
    let store = open(server, &prefix, tls(&ca, None), Some((USER, PASSWORD))).unwrap();
    acquire_and_release(&store);
    let facts = store.describe().unwrap().facts;
    assert!(facts.contains(&("user".to_owned(), USER.to_owned())), "{facts:?}");

    let (reason, hint) = unavailable(open(server, &prefix, tls(&ca, None), Some((USER, "wrong"))));
    assert!(
        reason.contains("authentication failed") && !reason.contains("wrong\""),
        "{reason}"
    );
    assert!(
        hint.contains("password-file") && hint.contains("LEASEHOLD_ETCD_PASSWORD"),
        "{hint}"
    );

    let (reason, hint) = unavailable(open(server, &prefix, tls(&ca, None), None));
    assert!(reason.contains("authentication on"), "{reason}");
    assert!(hint.contains("user=NAME"), "{hint}");

    // Right password, keys outside what the role grants.
    let (reason, hint) = unavailable(open(server, "/elsewhere", tls(&ca, None), Some((USER, PASSWORD))));
    assert!(reason.contains("permission denied"), "{reason}");
    assert!(
        hint.contains("etcdctl role grant-permission ROLE --prefix=true readwrite /elsewhere/"),
        "{hint}"
    );

    // A user towards a cluster without authentication.
    let mtls = shared_with(Security::MutualTls);
    let (reason, _) = unavailable(open(
        mtls,
        "/mtls",
        tls(&mtls.pki().ca(), client_cert(mtls.pki())),
        Some((USER, PASSWORD)),
    ));
    assert!(reason.contains("authentication off"), "{reason}");
}

/// etcd forgets a simple token after `--auth-token-ttl` seconds without
/// use (and every token on a restart): the store authenticates again and
/// the call goes through.
fn a_token_etcd_forgot_is_renewed_by_authenticating_again() {
    let server = EtcdServer::start_with(Security::TlsAndPassword, &["--auth-token-ttl", "1"]);
    let prefix = format!("{GRANTED}token");
    let store = open(&server, &prefix, tls(&server.pki().ca(), None), Some((USER, PASSWORD))).unwrap();
    acquire_and_release(&store);
    // The TTL keeper drops a token once a second after its TTL.
    std::thread::sleep(Duration::from_millis(2500));
    acquire_and_release(&store);
}

/// The cluster's clock (the members' HTTP `Date`) is read over the
/// store's TLS: with the client certificate a `--client-cert-auth`
/// cluster wants, and on a cluster with users (`GET /version` is open to
/// every client). It agrees with this host's, which runs the servers.
fn the_clusters_clock_is_read_over_tls_with_a_client_certificate_and_with_users() {
    use leasehold_backend::RecordBackend as _;
    let mtls = shared_with(Security::MutualTls);
    let with_cert = open(mtls, "/mtls", tls(&mtls.pki().ca(), client_cert(mtls.pki())), None).unwrap();
    let users = shared_with(Security::TlsAndPassword);
    let prefix = format!("{GRANTED}clock");
    let with_user = open(users, &prefix, tls(&users.pki().ca(), None), Some((USER, PASSWORD))).unwrap();
    for store in [&with_cert, &with_user] {
        let before = leasehold_host::wall_clock();
        let clock = store
            .record_clock()
            .unwrap_or_else(|e| panic!("record_clock over TLS: {e}"));
        let after = leasehold_host::wall_clock();
        let slack = clock.within + Duration::from_secs(1);
        assert!(
            clock.at + slack >= before && clock.at <= after + slack,
            "the cluster's clock read {clock:?}, this host's {before:?} to {after:?}"
        );
        let facts = store.describe().unwrap().facts;
        let fact = &facts.iter().find(|(k, _)| k == "clock").unwrap().1;
        assert!(fact.contains("this host's clock is"), "{fact}");
    }
}
