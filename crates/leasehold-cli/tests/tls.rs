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
        firestore_goes_through_https_proxy_unless_no_proxy_names_the_host,
        firestore_project_ids_are_held_to_googles_rule,
        firestore_names_a_certificate_it_refuses,
    ]]);
}

/// `leasehold ARGS` on the Firestore store `url` as Google's (no emulator),
/// with `env` and no proxy variable from the test's own environment.
fn on_google(url: &str, dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("leasehold"));
    for var in [
        "FIRESTORE_EMULATOR_HOST",
        "https_proxy",
        "HTTPS_PROXY",
        "no_proxy",
        "NO_PROXY",
        "GCE_METADATA_HOST",
    ] {
        command.env_remove(var);
    }
    let out = command
        .env("LEASEHOLD_STORE", url)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .envs(env.iter().copied())
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A listener that takes one connection at a time and hands what it read
/// (up to the end of a request's head, or the first bytes) to `answer`,
/// which says what to write back; every head it got is kept.
fn listener(answer: fn(&[u8]) -> &'static [u8]) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    use std::io::{Read as _, Write as _};
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for conn in socket.incoming() {
            let Ok(mut conn) = conn else { continue };
            conn.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
                // Not an HTTP request (a TLS ClientHello): the first read.
                if head.first() != Some(&b'C') {
                    break;
                }
            }
            let _ = conn.write_all(answer(&head));
            kept.lock().unwrap().push(head);
        }
    });
    (port, seen)
}

/// A service account key file whose token endpoint is `token_uri` (a key
/// made by openssl: the JWT is signed before anything is sent).
fn service_account(dir: &Path, token_uri: &str) -> std::path::PathBuf {
    leasehold_testkit::need_program("openssl", "openssl");
    let key = dir.join("sa.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let file = dir.join("sa.json");
    let json = serde_json::json!({
        "type": "service_account",
        "project_id": "lh-proxy-test",
        "private_key_id": "k1",
        "private_key": std::fs::read_to_string(&key).unwrap(),
        "client_email": "lease@lh-proxy-test.iam.gserviceaccount.com",
        "token_uri": token_uri,
    });
    std::fs::File::create(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, json.to_string().as_bytes()))
        .unwrap();
    file
}

/// Behind a corporate proxy (issue 41): `HTTPS_PROXY` sends Google's HTTPS
/// requests (here the token request of a service account, before any to
/// Firestore) through a `CONNECT` tunnel of the proxy, and a refusal by
/// the proxy is said as such, naming it (no password); `NO_PROXY` naming
/// the host sends them directly, and the proxy sees nothing.
fn firestore_goes_through_https_proxy_unless_no_proxy_names_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (proxy, through_proxy) = listener(|_| b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
    let (direct, directly) = listener(|_| b"");
    let credentials = service_account(dir.path(), &format!("https://localhost:{direct}/token"));
    let credentials = credentials.to_str().unwrap();
    let proxy_url = format!("http://someone:s3cret@127.0.0.1:{proxy}");
    let url = "firestore://lh-proxy-test";
    let (code, err) = on_google(
        url,
        dir.path(),
        &[
            ("GOOGLE_APPLICATION_CREDENTIALS", credentials),
            ("HTTPS_PROXY", &proxy_url),
        ],
        &["status", "job"],
    );
    eprintln!("exit {code}: {err}");
    assert_eq!(code, 69, "{err}");
    let heads = through_proxy.lock().unwrap().clone();
    let first = String::from_utf8_lossy(heads.first().expect("the proxy was asked")).into_owned();
    assert!(
        first.starts_with(&format!("CONNECT localhost:{direct} HTTP/1.1\r\n")),
        "{first}"
    );
    assert!(first.contains("Proxy-Authorization: Basic "), "{first}");
    assert!(
        err.contains(&format!(
            "cannot reach the token endpoint https://localhost:{direct}/token: the proxy http://127.0.0.1:{proxy} (HTTPS_PROXY) refused CONNECT localhost:{direct}"
        ))
            && err.contains("403 Forbidden"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "the proxy's password was printed: {err}");
    assert!(directly.lock().unwrap().is_empty(), "went around the proxy");

    let (code, err) = on_google(
        url,
        dir.path(),
        &[
            ("GOOGLE_APPLICATION_CREDENTIALS", credentials),
            ("https_proxy", &proxy_url),
            ("no_proxy", "example.com, .localhost, localhost"),
        ],
        &["status", "job"],
    );
    eprintln!("exit {code}: {err}");
    assert_eq!(code, 69, "{err}");
    let hello = directly.lock().unwrap().first().cloned().expect("a direct connection");
    assert_eq!(hello.first(), Some(&0x16), "a TLS handshake, directly: {hello:?}");
    assert_eq!(
        through_proxy.lock().unwrap().len(),
        1,
        "NO_PROXY names the host, yet the proxy was asked"
    );
}

/// Project ids as Google makes them (6–30 lowercase letters, digits and
/// hyphens, a letter first, no hyphen last): a port, one character or a
/// hundred are refused before anything is sent (exit 2), saying the rule.
fn firestore_project_ids_are_held_to_googles_rule() {
    let dir = tempfile::tempdir().unwrap();
    for project in ["proj-1:8080", "p", &"p".repeat(100), "my-proj-", "1-proj"] {
        let (code, err) = on_google(&format!("firestore://{project}"), dir.path(), &[], &["status", "job"]);
        assert_eq!(code, 2, "{project}: {err}");
        let says = if project.contains(':') {
            "has a port: a Firestore URL names a project, not a server"
        } else {
            "is not a Google Cloud project id (6 to 30 lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen"
        };
        assert!(err.contains(says), "{project}: {err}");
    }
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

/// An HTTPS token endpoint whose certificate the system's roots do not
/// trust (`openssl s_server` with the test CA's server certificate): the
/// certificate problem in words — not rustls' "invalid peer certificate:
/// `UnknownIssuer`" — the words of the one HTTP client the Firestore store
/// uses for Google, its token endpoints and the metadata server.
fn firestore_names_a_certificate_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let pki = leasehold_testkit::pki::Pki::make(dir.path(), "someone");
    let port = leasehold_testkit::port::free();
    let mut server = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(port.to_string())
        .arg("-cert")
        .arg(pki.server_cert())
        .arg("-key")
        .arg(pki.server_key())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = leasehold_testkit::wait::wait_until(std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up.is_some(), "openssl s_server did not listen");
    let credentials = service_account(dir.path(), &format!("https://localhost:{port}/token"));
    let (code, err) = on_google(
        "firestore://lh-cert-test",
        dir.path(),
        &[("GOOGLE_APPLICATION_CREDENTIALS", credentials.to_str().unwrap())],
        &["status", "job"],
    );
    let _ = server.kill();
    let _ = server.wait();
    eprintln!("exit {code}: {err}");
    assert_eq!(code, 69, "{err}");
    assert!(
        err.contains(&format!(
            "cannot reach the token endpoint https://localhost:{port}/token: TLS failed: the certificate of https://localhost:{port} was not accepted: it is not signed by a CA among the trusted roots"
        )),
        "{err}"
    );
    assert!(!err.contains("peer") && !err.contains("UnknownIssuer"), "{err}");
}
