//! The real `leasehold` binary against TLS- and password-protected servers
//! started by the stores' own harnesses (an etcd with `--client-cert-auth`,
//! an etcd with users, a PostgreSQL with `cert` and `scram-sha-256`
//! logins over TLS): what works (acquire, then release), and the exit code
//! and message of each refusal by the server (69) and of each URL naming a
//! file that does not exist, or a password in the URL (2). No secret is
//! ever echoed.

use std::path::Path;
use std::process::{Command, Stdio};

use etcd::Security;
use leasehold_testkit::{etcd, postgres};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        etcd_with_client_certificates,
        etcd_with_a_user_whose_password_is_in_a_file_or_the_environment,
        postgres_with_a_client_certificate,
        postgres_with_the_password_in_pgpassword_or_the_url,
    ]]);
}

/// The etcd password variable of the library.
const ETCD_PASSWORD: &str = "LEASEHOLD_ETCD_PASSWORD";

/// `leasehold ARGS` on the store `url`, at home in `dir`, with `env` (and
/// no password variable from the test's own environment).
fn leasehold(url: &str, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(assert_cmd::cargo::cargo_bin("leasehold"))
        .env("LEASEHOLD_STORE", url)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .env_remove(ETCD_PASSWORD)
        .env_remove("PGPASSWORD")
        .envs(env.iter().copied())
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `acquire job`, then `release job --token T`: both exit 0.
fn acquire_and_release(url: &str, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let (code, token, err) = leasehold(url, dir.path(), env, &["acquire", "job", "--ttl", "1m"]);
    assert_eq!(code, 0, "acquire on {url}: {err}");
    let token = token.trim();
    let (code, _, err) = leasehold(url, dir.path(), env, &["release", "job", "--token", token]);
    assert_eq!(code, 0, "release on {url}: {err}");
}

/// `status job`: its exit code and stderr, which must not hold `secret`.
fn status(url: &str, env: &[(&str, &str)], secret: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = leasehold(url, dir.path(), env, &["status", "job"]);
    eprintln!("exit {code}: {err}");
    assert!(!err.contains(secret), "the secret was printed: {err}");
    (code, err)
}

fn pg_tls_server() -> &'static postgres::Server {
    static SERVER: std::sync::OnceLock<postgres::Server> = std::sync::OnceLock::new();
    SERVER.get_or_init(postgres::Server::start_tls)
}

fn etcd_with_client_certificates() {
    let server = etcd::shared_with(Security::MutualTls);
    let pki = server.pki();
    let url = |ca: &Path, cert: &Path, key: &Path| {
        format!(
            "etcd://{}?prefix=/cli&cacert={}&cert={}&key={}",
            server.endpoint(),
            ca.display(),
            cert.display(),
            key.display()
        )
    };
    acquire_and_release(&url(&pki.ca(), &pki.client_cert(), &pki.client_key()), &[]);

    let (code, err) = status(
        &url(&pki.other_ca(), &pki.client_cert(), &pki.client_key()),
        &[],
        "PRIVATE",
    );
    assert_eq!(code, 69, "a CA that did not sign the cluster's certificate: {err}");
    assert!(err.contains("cacert=PATH"), "{err}");
    let (code, err) = status(&url(&pki.ca(), &pki.foreign_cert(), &pki.foreign_key()), &[], "PRIVATE");
    assert_eq!(code, 69, "a client certificate the cluster does not trust: {err}");
    assert!(err.contains("refused the client certificate"), "{err}");
    let no_cert = format!("etcd://{}?prefix=/cli&cacert={}", server.endpoint(), pki.ca().display());
    let (code, err) = status(&no_cert, &[], "PRIVATE");
    assert_eq!(code, 69, "no client certificate: {err}");
    assert!(err.contains("wants a client certificate"), "{err}");

    let missing = pki.ca().with_file_name("missing.pem");
    let (code, err) = status(&url(&missing, &pki.client_cert(), &pki.client_key()), &[], "PRIVATE");
    assert_eq!(code, 2, "a cacert that does not exist: {err}");
    assert!(
        err.contains(&format!("cacert={}: no such file", missing.display())),
        "{err}"
    );
}

fn etcd_with_a_user_whose_password_is_in_a_file_or_the_environment() {
    let server = etcd::shared_with(Security::TlsAndPassword);
    let base = format!(
        "etcd://{}?prefix={}cli&cacert={}&user={}",
        server.endpoint(),
        etcd::GRANTED,
        server.pki().ca().display(),
        etcd::USER
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    write(&file, &format!("{}\n", etcd::PASSWORD));
    let with_file = format!("{base}&password-file={}", file.display());
    acquire_and_release(&with_file, &[]);
    acquire_and_release(&base, &[(ETCD_PASSWORD, etcd::PASSWORD)]);

    let wrong = "not-the-password-42";
    let (code, err) = status(&base, &[(ETCD_PASSWORD, wrong)], wrong);
    assert_eq!(code, 69, "a wrong password: {err}");
    assert!(err.contains("authentication failed"), "{err}");
    let (code, err) = status(&base, &[], etcd::PASSWORD);
    assert_eq!(code, 2, "a user without a password: {err}");
    assert!(
        err.contains("password-file=PATH") && err.contains(ETCD_PASSWORD),
        "{err}"
    );
    let (code, err) = status(&format!("{base}&password={wrong}"), &[], wrong);
    assert_eq!(code, 2, "a password in the URL: {err}");
    assert!(err.contains("never taken from the URL"), "{err}");
    let missing = dir.path().join("missing");
    let (code, err) = status(&format!("{base}&password-file={}", missing.display()), &[], wrong);
    assert_eq!(code, 2, "a password file that does not exist: {err}");
    assert!(
        err.contains(&format!("password-file={}: no such file", missing.display())),
        "{err}"
    );
}

fn postgres_with_a_client_certificate() {
    let server = pg_tls_server();
    let pki = server.pki();
    let url = |cert: &Path, key: &Path| {
        format!(
            "postgres://{}@127.0.0.1:{}/postgres?schema=cli_cert&sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            postgres::CERT_USER,
            server.port(),
            pki.ca().display(),
            cert.display(),
            key.display()
        )
    };
    acquire_and_release(&url(&pki.client_cert(), &pki.client_key()), &[]);

    let (code, err) = status(&url(&pki.foreign_cert(), &pki.foreign_key()), &[], "PRIVATE");
    assert_eq!(code, 69, "a client certificate the server does not trust: {err}");
    assert!(err.contains("refused the client certificate"), "{err}");
    let missing = pki.ca().with_file_name("missing.key");
    let (code, err) = status(&url(&pki.client_cert(), &missing), &[], "PRIVATE");
    assert_eq!(code, 2, "an sslkey that does not exist: {err}");
    assert!(
        err.contains(&format!("sslkey={}: no such file", missing.display())),
        "{err}"
    );
    let with_cert = url(&pki.client_cert(), &pki.client_key());
    let (no_cert, _) = with_cert.split_once("&sslcert=").unwrap();
    let (code, err) = status(no_cert, &[], "PRIVATE");
    assert_eq!(code, 69, "no client certificate: {err}");
    assert!(err.contains("sslcert=PATH&sslkey=PATH"), "{err}");
}

fn postgres_with_the_password_in_pgpassword_or_the_url() {
    let server = pg_tls_server();
    let url = format!(
        "postgres://{}@127.0.0.1:{}/postgres?schema=cli_password&sslmode=verify-full&sslrootcert={}",
        postgres::PASSWORD_USER,
        server.port(),
        server.pki().ca().display()
    );
    acquire_and_release(&url, &[("PGPASSWORD", postgres::PASSWORD)]);
    let wrong = "not-the-password-42";
    let (code, err) = status(&url, &[("PGPASSWORD", wrong)], wrong);
    assert_eq!(code, 69, "a wrong password: {err}");
    assert!(err.contains("authentication failed"), "{err}");
    // In the URL (libpq's way, still accepted): never echoed either.
    let user = postgres::PASSWORD_USER;
    let in_url = url.replacen(&format!("{user}@"), &format!("{user}:{wrong}@"), 1);
    let (code, err) = status(&in_url, &[], wrong);
    assert_eq!(code, 69, "a wrong password in the URL: {err}");
    assert!(err.contains(&format!("{user}:***@")), "{err}");
}

#[allow(
    clippy::disallowed_methods,
    reason = "a throwaway test fixture needs no atomic write"
)]
fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}
