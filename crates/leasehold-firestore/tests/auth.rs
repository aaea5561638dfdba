//! The credentials module through its public API: discovery in Google's
//! order with an injected environment and real files, the token requests
//! (a service account's JWT checked by the `openssl` CLI, which shares no
//! code with ring), token responses, and no secret in any message.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_firestore::auth::{
    AccessToken, AuthError, Credentials, Endpoint, REFRESH_BEFORE, discover, metadata_unreachable,
};
use serde_json::{Value, json};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        a_service_accounts_jwt_verifies_with_openssl_and_carries_its_claims,
        a_service_account_with_its_own_token_uri_posts_there,
        user_credentials_post_a_refresh_grant_form_encoded,
        the_variable_wins_over_gclouds_file_and_cloudsdk_config_over_home,
        a_missing_file_named_by_the_variable_is_an_error_naming_it,
        bad_files_are_errors_that_name_the_file_and_the_problem,
        other_credential_types_are_refused_as_unsupported,
        without_files_the_metadata_server_is_asked,
        a_token_response_gives_a_token_fresh_until_refresh_time,
        refusals_quote_googles_error_and_say_what_to_do,
        garbage_answers_are_errors_that_never_quote_a_token,
        no_secret_in_any_debug_or_display,
        endpoints_split_scheme_host_port_path,
    ]]);
}

/// 2023-11-14T22:13:20Z.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn env(pairs: &[(&str, &Path)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_str().unwrap().to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path).unwrap().write_all(text.as_bytes()).unwrap();
    path.to_owned()
}

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("openssl").current_dir(dir).args(args).output().unwrap()
}

/// A new 2048-bit RSA key in `dir`: `key.pem` (PKCS#8) and `pub.pem`; the
/// key's PEM text.
fn rsa_key(dir: &Path) -> String {
    leasehold_testkit::need_program("openssl", "openssl");
    let genkey = [
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "key.pem",
    ];
    assert!(openssl(dir, &genkey).status.success());
    assert!(
        openssl(dir, &["pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"])
            .status
            .success()
    );
    std::fs::read_to_string(dir.join("key.pem")).unwrap()
}

fn service_account_json(key_pem: &str) -> Value {
    json!({
        "type": "service_account",
        "project_id": "proj-1",
        "private_key_id": "kid123",
        "private_key": key_pem,
        "client_email": "lease@proj-1.iam.gserviceaccount.com",
        "client_id": "1234",
    })
}

const USER_SECRET: &str = "d-FL95Q19q7MQmFpd7hHD0Ty";
const USER_REFRESH: &str = "1//0gAbc-def_ghi+jkl/mno=";

fn user_json() -> String {
    json!({
        "type": "authorized_user",
        "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
        "client_secret": USER_SECRET,
        "refresh_token": USER_REFRESH,
        "quota_project_id": "billing-proj",
    })
    .to_string()
}

/// The pairs of a form body, decoded here (not by the module).
fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'%' => {
                    out.push(u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap());
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                c => {
                    assert!(
                        c.is_ascii_alphanumeric() || b"-._~*".contains(&c),
                        "unencoded {:?}",
                        c as char
                    );
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).unwrap()
    };
    std::str::from_utf8(body)
        .unwrap()
        .split('&')
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap();
            (decode(k), decode(v))
        })
        .collect()
}

fn b64url_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap()
}

fn a_service_accounts_jwt_verifies_with_openssl_and_carries_its_claims() {
    let dir = tempfile::tempdir().unwrap();
    let key = rsa_key(dir.path());
    let file = write(&dir.path().join("sa.json"), &service_account_json(&key).to_string());
    let creds = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &file)])).unwrap();
    let Credentials::ServiceAccount(sa) = &creds else {
        panic!("{creds:?}")
    };
    assert_eq!(sa.project_id.as_deref(), Some("proj-1"));
    let req = creds.token_request(now()).unwrap();
    assert_eq!(
        (req.method, req.url.as_str()),
        ("POST", "https://oauth2.googleapis.com/token")
    );
    let endpoint = ("oauth2.googleapis.com".to_owned(), 443, "/token".to_owned());
    assert_eq!(
        (
            req.endpoint.tls,
            (req.endpoint.host, req.endpoint.port, req.endpoint.path)
        ),
        (true, endpoint)
    );
    assert_eq!(
        req.headers,
        [("Content-Type".into(), "application/x-www-form-urlencoded".into())]
    );
    let pairs = form_pairs(&req.body);
    assert_eq!(
        pairs[0],
        (
            "grant_type".into(),
            "urn:ietf:params:oauth:grant-type:jwt-bearer".into()
        )
    );
    assert_eq!(pairs[1].0, "assertion");
    assert_eq!(pairs.len(), 2);

    let parts: Vec<&str> = pairs[1].1.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        panic!("not a JWT: {} parts", parts.len())
    };
    write(&dir.path().join("signed"), &format!("{header}.{claims}"));
    std::fs::File::create(dir.path().join("sig.bin"))
        .unwrap()
        .write_all(&b64url_decode(signature))
        .unwrap();
    let verify = [
        "dgst",
        "-sha256",
        "-verify",
        "pub.pem",
        "-signature",
        "sig.bin",
        "signed",
    ];
    let out = openssl(dir.path(), &verify);
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Verified OK");
    // The checker can fail: one changed byte of the signed text.
    write(&dir.path().join("signed"), &format!("{header}.{claims}x"));
    assert!(!openssl(dir.path(), &verify).status.success());

    let header: Value = serde_json::from_slice(&b64url_decode(header)).unwrap();
    assert_eq!(header, json!({"alg": "RS256", "typ": "JWT", "kid": "kid123"}));
    let claims: Value = serde_json::from_slice(&b64url_decode(claims)).unwrap();
    let expected = json!({
        "iss": "lease@proj-1.iam.gserviceaccount.com",
        "scope": "https://www.googleapis.com/auth/datastore",
        "aud": "https://oauth2.googleapis.com/token",
        "iat": 1_700_000_000,
        "exp": 1_700_003_600,
    });
    assert_eq!(claims, expected);
}

fn a_service_account_with_its_own_token_uri_posts_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut sa = service_account_json(&rsa_key(dir.path()));
    sa["token_uri"] = "http://127.0.0.1:8089/oauth/token".into();
    sa.as_object_mut().unwrap().remove("private_key_id");
    let file = write(&dir.path().join("sa.json"), &sa.to_string());
    let creds = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &file)])).unwrap();
    let req = creds.token_request(now()).unwrap();
    assert_eq!(
        req.endpoint,
        Endpoint {
            tls: false,
            host: "127.0.0.1".into(),
            port: 8089,
            path: "/oauth/token".into()
        }
    );
    let jwt = form_pairs(&req.body).remove(1).1;
    let mut parts = jwt.split('.').map(b64url_decode);
    let header: Value = serde_json::from_slice(&parts.next().unwrap()).unwrap();
    assert_eq!(
        header,
        json!({"alg": "RS256", "typ": "JWT"}),
        "no kid without private_key_id"
    );
    let claims: Value = serde_json::from_slice(&parts.next().unwrap()).unwrap();
    assert_eq!(claims["aud"], "http://127.0.0.1:8089/oauth/token");
}

fn user_credentials_post_a_refresh_grant_form_encoded() {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("gcloud/application_default_credentials.json"),
        &user_json(),
    );
    let creds = discover(&env(&[("CLOUDSDK_CONFIG", &dir.path().join("gcloud"))])).unwrap();
    assert!(matches!(creds, Credentials::AuthorizedUser(_)), "{creds:?}");
    assert_eq!(creds.quota_project(), Some("billing-proj"));
    let req = creds.token_request(now()).unwrap();
    assert_eq!(
        (req.method, req.url.as_str()),
        ("POST", "https://oauth2.googleapis.com/token")
    );
    assert_eq!(
        req.headers,
        [("Content-Type".into(), "application/x-www-form-urlencoded".into())]
    );
    let body = String::from_utf8(req.body.clone()).unwrap();
    assert!(
        !body.contains('/') && !body.contains('+'),
        "reserved characters escaped: {body}"
    );
    let pairs = form_pairs(&req.body);
    let expected = [
        ("grant_type", "refresh_token"),
        (
            "client_id",
            "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
        ),
        ("client_secret", USER_SECRET),
        ("refresh_token", USER_REFRESH),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    assert_eq!(pairs, expected);
}

fn the_variable_wins_over_gclouds_file_and_cloudsdk_config_over_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let home_file = write(
        &home.join(".config/gcloud/application_default_credentials.json"),
        &user_json(),
    );
    let sdk = dir.path().join("sdk");
    let sdk_file = write(&sdk.join("application_default_credentials.json"), &user_json());
    let named = write(&dir.path().join("named.json"), &user_json());
    let file_of = |creds: Credentials| match creds {
        Credentials::AuthorizedUser(user) => (user.file.path, user.file.from_env),
        other => panic!("{other:?}"),
    };
    let all = env(&[
        ("GOOGLE_APPLICATION_CREDENTIALS", &named),
        ("CLOUDSDK_CONFIG", &sdk),
        ("HOME", &home),
    ]);
    assert_eq!(file_of(discover(&all).unwrap()), (named, true));
    let gcloud = env(&[("CLOUDSDK_CONFIG", &sdk), ("HOME", &home)]);
    assert_eq!(file_of(discover(&gcloud).unwrap()), (sdk_file, false));
    let empty_var = env(&[("GOOGLE_APPLICATION_CREDENTIALS", Path::new("")), ("HOME", &home)]);
    assert_eq!(file_of(discover(&empty_var).unwrap()), (home_file, false));
}

fn a_missing_file_named_by_the_variable_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // gcloud's file exists, and the metadata server is the last resort:
    // neither is used in place of the file the user named.
    write(&dir.path().join("application_default_credentials.json"), &user_json());
    let missing = dir.path().join("nope.json");
    let e = discover(&env(&[
        ("GOOGLE_APPLICATION_CREDENTIALS", &missing),
        ("CLOUDSDK_CONFIG", dir.path()),
    ]));
    let e = e.unwrap_err();
    assert!(matches!(e, AuthError::Missing(_)), "{e:?}");
    let text = e.to_string();
    let start = format!("GOOGLE_APPLICATION_CREDENTIALS={}: no such file", missing.display());
    assert!(text.starts_with(&start), "{text}");
}

fn bad_files_are_errors_that_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let fake_key = "-----BEGIN PRIVATE KEY-----\nQUFBQXNlY3JldGlzaGtleW1hdGVyaWFs\n-----END PRIVATE KEY-----\n";
    let cases: &[(&str, String, &str)] = &[
        ("notjson.json", "{\"type\": ".into(), "not JSON"),
        ("notype.json", "{}".into(), "no \"type\""),
        ("nofield.json", json!({"type": "authorized_user", "client_id": "a", "client_secret": "b"}).to_string(), "no \"refresh_token\""),
        ("badkey.json", service_account_json(fake_key).to_string(), "private_key is not a usable RSA key"),
        ("nopem.json", service_account_json("QUFBQXNlY3JldGlzaGtleW1hdGVyaWFs").to_string(), "not a PEM PKCS#8 key"),
        ("pkcs1.json", service_account_json("-----BEGIN RSA PRIVATE KEY-----\nQUFB\n-----END RSA PRIVATE KEY-----").to_string(), "PKCS#1"),
        ("baduri.json", json!({"type": "authorized_user", "client_id": "a", "client_secret": "b", "refresh_token": "c", "token_uri": "ftp://x/"}).to_string(), "token_uri: ftp://x/ is not a usable URL"),
    ];
    for (name, text, problem) in cases {
        let path = write(&dir.path().join(name), text);
        let e = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &path)])).unwrap_err();
        let text = e.to_string();
        let start = format!(
            "GOOGLE_APPLICATION_CREDENTIALS={} is not a usable credentials file: ",
            path.display()
        );
        assert!(text.starts_with(&start) && text.contains(problem), "{name}: {text}");
        assert!(
            !text.contains("QUFBQXNlY3JldGlz") && !format!("{e:?}").contains("QUFBQXNlY3JldGlz"),
            "{text}"
        );
    }
    // gcloud's file too is an error when it exists but is bad.
    write(&dir.path().join("sdk/application_default_credentials.json"), "[1, 2");
    let e = discover(&env(&[("CLOUDSDK_CONFIG", &dir.path().join("sdk"))]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("(gcloud's application default credentials) is not a usable credentials file: not JSON"),
        "{e}"
    );
    // A directory cannot be read.
    let e = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", dir.path())])).unwrap_err();
    assert!(matches!(e, AuthError::Unreadable { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "cannot read GOOGLE_APPLICATION_CREDENTIALS={}: ",
            dir.path().display()
        )),
        "{e}"
    );
}

fn other_credential_types_are_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["external_account", "impersonated_service_account"] {
        let path = write(
            &dir.path().join("c.json"),
            &json!({"type": kind, "audience": "x"}).to_string(),
        );
        let e = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &path)])).unwrap_err();
        assert!(matches!(e, AuthError::Unsupported { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains(&format!("\"{kind}\", which are not supported")), "{text}");
        assert!(
            text.contains(&path.display().to_string()) && text.contains("service account key file"),
            "{text}"
        );
    }
}

fn without_files_the_metadata_server_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let creds = discover(&env(&[("HOME", dir.path())])).unwrap();
    assert!(
        matches!(&creds, Credentials::Metadata { host } if host == "metadata.google.internal"),
        "{creds:?}"
    );
    assert_eq!(creds.describe(), "the metadata server at metadata.google.internal");
    let req = creds.token_request(now()).unwrap();
    let url = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token";
    assert_eq!((req.method, req.url.as_str(), req.body.len()), ("GET", url, 0));
    assert_eq!(req.headers, [("Metadata-Flavor".into(), "Google".into())]);
    assert_eq!((req.endpoint.tls, req.endpoint.port), (false, 80));

    let creds = discover(&env(&[("GCE_METADATA_HOST", Path::new("127.0.0.1:8080"))])).unwrap();
    let req = creds.token_request(now()).unwrap();
    assert_eq!((req.endpoint.host.as_str(), req.endpoint.port), ("127.0.0.1", 8080));
    assert_eq!(
        req.endpoint.path,
        "/computeMetadata/v1/instance/service-accounts/default/token"
    );
    let e = discover(&env(&[("GCE_METADATA_HOST", Path::new("host:port"))]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("GCE_METADATA_HOST=host:port: "), "{e}");

    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let e = metadata_unreachable("metadata.google.internal", &refused).to_string();
    assert!(
        e.starts_with("no credentials found: GOOGLE_APPLICATION_CREDENTIALS is not set"),
        "{e}"
    );
    assert!(
        e.contains("metadata.google.internal cannot be reached (connection refused)"),
        "{e}"
    );
}

fn metadata() -> Credentials {
    Credentials::Metadata {
        host: "metadata.google.internal".into(),
    }
}

fn a_token_response_gives_a_token_fresh_until_refresh_time() {
    let body = br#"{"access_token":"ya29.c.abc","expires_in":3599,"token_type":"Bearer"}"#;
    let token = metadata().parse_token_response(200, body, now()).unwrap();
    assert_eq!(token.token, "ya29.c.abc");
    assert_eq!(token.authorization(), "Bearer ya29.c.abc");
    let expires_at = now() + Duration::from_secs(3599);
    assert_eq!(token.expires_at, expires_at);
    assert!(token.fresh(now()));
    assert!(token.fresh(expires_at - REFRESH_BEFORE - Duration::from_secs(1)));
    assert!(!token.fresh(expires_at - REFRESH_BEFORE));
    assert!(!token.fresh(expires_at + Duration::from_secs(1)));
    // Google's libraries refresh minutes before expiry, not seconds.
    assert!(REFRESH_BEFORE >= Duration::from_secs(180) && REFRESH_BEFORE < Duration::from_secs(240));
}

fn refusals_quote_googles_error_and_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir.path().join("adc.json"), &user_json());
    let user = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &path)])).unwrap();
    let body = br#"{"error":"invalid_grant","error_description":"Token has been expired or revoked."}"#;
    let e = user.parse_token_response(400, body, now()).unwrap_err().to_string();
    let expected = format!(
        "https://oauth2.googleapis.com/token refused a token to user credentials from \
         GOOGLE_APPLICATION_CREDENTIALS={} (HTTP 400: invalid_grant: Token has been expired or revoked.); \
         run `gcloud auth application-default login` again",
        path.display()
    );
    assert!(e.starts_with(&expected), "{e}");

    let e = metadata()
        .parse_token_response(404, b"Not Found\n", now())
        .unwrap_err()
        .to_string();
    assert!(e.contains("/default/token refused a token to the metadata server at metadata.google.internal (HTTP 404: Not Found); check that a service account is attached"), "{e}");
    let api_error = br#"{"error":{"code":403,"message":"Permission denied.","status":"PERMISSION_DENIED"}}"#;
    let e = metadata()
        .parse_token_response(403, api_error, now())
        .unwrap_err()
        .to_string();
    assert!(e.contains("(HTTP 403: Permission denied.)"), "{e}");
    let e = metadata()
        .parse_token_response(503, b"", now())
        .unwrap_err()
        .to_string();
    assert!(e.contains("(HTTP 503: an empty body)"), "{e}");
}

fn garbage_answers_are_errors_that_never_quote_a_token() {
    let cases: &[(&[u8], &str)] = &[
        (b"<html>ya29.secret</html>", "not JSON"),
        (
            br#"{"access_token":"ya29.secret","expires_in":"soon","token_type":"Bearer"}"#,
            "no \"expires_in\"",
        ),
        (
            br#"{"access_token":"ya29.secret","expires_in":3600,"token_type":"MAC"}"#,
            "not \"Bearer\"",
        ),
        (br#"{"expires_in":3600,"token_type":"Bearer"}"#, "no \"access_token\""),
        (
            br#"{"access_token":"","expires_in":3600,"token_type":"Bearer"}"#,
            "no \"access_token\"",
        ),
    ];
    for (body, problem) in cases {
        let e = metadata().parse_token_response(200, body, now()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("http://metadata.google.internal/") && text.contains(problem),
            "{text}"
        );
        assert!(
            !text.contains("ya29.secret") && !format!("{e:?}").contains("ya29.secret"),
            "{text}"
        );
    }
}

fn no_secret_in_any_debug_or_display() {
    let dir = tempfile::tempdir().unwrap();
    let key = rsa_key(dir.path());
    // A line of the key's base64 body: in the file, in no output.
    let key_line = key.lines().nth(5).unwrap();
    let sa_path = write(&dir.path().join("sa.json"), &service_account_json(&key).to_string());
    let user_path = write(&dir.path().join("user.json"), &user_json());
    let sa = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &sa_path)])).unwrap();
    let user = discover(&env(&[("GOOGLE_APPLICATION_CREDENTIALS", &user_path)])).unwrap();
    assert_eq!(
        sa.describe(),
        format!(
            "service account lease@proj-1.iam.gserviceaccount.com (GOOGLE_APPLICATION_CREDENTIALS={})",
            sa_path.display()
        )
    );
    let token = AccessToken {
        token: "ya29.secret-token".into(),
        expires_at: now(),
    };
    let mut outputs = vec![
        format!("{sa:?}"),
        format!("{user:?}"),
        sa.describe(),
        user.describe(),
        format!("{token:?}"),
    ];
    let mut secrets = vec![
        key_line.to_owned(),
        USER_SECRET.into(),
        USER_REFRESH.into(),
        "ya29.secret-token".into(),
    ];
    for creds in [&sa, &user] {
        let req = creds.token_request(now()).unwrap();
        let body = String::from_utf8(req.body.clone()).unwrap();
        // The signed JWT is a secret too (a token for an hour).
        secrets.push(body.rsplit('.').next().unwrap().to_owned());
        outputs.push(format!("{req:?}"));
        let e = creds
            .parse_token_response(401, br#"{"error":"unauthorized_client"}"#, now())
            .unwrap_err();
        outputs.extend([e.to_string(), format!("{e:?}")]);
    }
    assert!(outputs[0].contains("lease@proj-1.iam.gserviceaccount.com") && outputs[1].contains("billing-proj"));
    for output in &outputs {
        for secret in &secrets {
            assert!(!output.contains(secret.as_str()), "{secret} in {output}");
        }
    }
}

fn endpoints_split_scheme_host_port_path() {
    let split = |url: &str| Endpoint::parse(url).map(|e| (e.tls, e.host, e.port, e.path));
    assert_eq!(
        split("https://oauth2.googleapis.com/token").unwrap(),
        (true, "oauth2.googleapis.com".into(), 443, "/token".into())
    );
    assert_eq!(split("http://h:8080").unwrap(), (false, "h".into(), 8080, "/".into()));
    assert_eq!(split("http://h?a=b").unwrap(), (false, "h".into(), 80, "/?a=b".into()));
    assert_eq!(
        split("http://[::1]:9/x").unwrap(),
        (false, "::1".into(), 9, "/x".into())
    );
    for bad in [
        "ftp://h/",
        "oauth2.googleapis.com/token",
        "https:///x",
        "http://h:99999/",
        "http://u:p@h/",
        "http://h:0/",
    ] {
        let e = split(bad).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{bad} is not a usable URL: ")), "{e}");
    }
}
