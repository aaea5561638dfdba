//! Google credentials for Firestore, found as Google's client libraries find
//! them (Application Default Credentials), **sans-IO**: this module reads
//! the credentials file, builds the request that gets an access token and
//! parses its response; the caller's HTTP client sends it.
//!
//! Discovery ([`discover`]), in Google's order:
//! 1. `GOOGLE_APPLICATION_CREDENTIALS` names a JSON file: a service account
//!    key or user credentials. A file that is missing or bad is an error,
//!    never a reason to try the next source: the user asked for it.
//! 2. gcloud's file, `$CLOUDSDK_CONFIG/application_default_credentials.json`
//!    or `~/.config/gcloud/application_default_credentials.json` (written by
//!    `gcloud auth application-default login`), when it exists.
//! 3. The metadata server of GCE, Cloud Run and GKE (`GCE_METADATA_HOST`
//!    overrides its host). Discovery does no network I/O: whether there is
//!    one is learnt from the token request, and [`metadata_unreachable`]
//!    is the error to show when there is none.
//!
//! A token is then had by sending [`Credentials::token_request`] and
//! reading the answer with [`Credentials::parse_token_response`]; it is
//! used until [`AccessToken::fresh`] says to get another.
//!
//! Secrets — the private key, the refresh token, the client secret, the
//! signed JWT and the access token — are never in an error, a `Display` or
//! a `Debug`: the types that hold them write `Debug` by hand.

use std::fmt::{self, Write as _};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

/// The OAuth scope a service account's token is asked for: Firestore's
/// (its API was Datastore's), narrower than `cloud-platform`.
pub const SCOPE: &str = "https://www.googleapis.com/auth/datastore";

/// Google's token endpoint: a service account's default `token_uri`, and
/// where user credentials are refreshed.
pub const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The metadata server's host, unless `GCE_METADATA_HOST` says otherwise.
pub const METADATA_HOST: &str = "metadata.google.internal";

const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
const WELL_KNOWN_FILE: &str = "application_default_credentials.json";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How long a service account's JWT is valid: the most Google accepts.
const JWT_LIFETIME_SECS: u64 = 3600;

/// How long before its expiry a token is replaced. Google's libraries
/// differ (5 minutes in Node and Java, 3m45s in Python); 3m45s is chosen
/// because the metadata server hands out its cached token until 4 minutes
/// before expiry: with 5 minutes, a token fetched in its last 4–5 minutes
/// would be stale on arrival and fetched again on every call.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(225);

/// A credentials file and how it was found; shown as
/// `GOOGLE_APPLICATION_CREDENTIALS=PATH` or `PATH (gcloud's application
/// default credentials)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsFile {
    pub path: PathBuf,
    /// Named by `GOOGLE_APPLICATION_CREDENTIALS` (else gcloud's file).
    pub from_env: bool,
}

impl fmt::Display for CredentialsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.from_env {
            write!(f, "GOOGLE_APPLICATION_CREDENTIALS={}", self.path.display())
        } else {
            write!(f, "{} (gcloud's application default credentials)", self.path.display())
        }
    }
}

/// Where access tokens come from.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A service account key file: a JWT signed with its key is exchanged
    /// for a token.
    ServiceAccount(ServiceAccount),
    /// User credentials (`gcloud auth application-default login`): a
    /// refresh token is exchanged for a token.
    AuthorizedUser(AuthorizedUser),
    /// The metadata server at `host` (`host` or `host:port`) gives the
    /// token of the service account attached to this machine.
    Metadata { host: String },
}

/// A service account key file (`"type": "service_account"`).
#[derive(Clone)]
pub struct ServiceAccount {
    pub client_email: String,
    /// The key's id, sent as the JWT's `kid` (when the file has one).
    pub private_key_id: Option<String>,
    /// Where the JWT is exchanged, and its audience.
    pub token_uri: String,
    /// The project the account belongs to, for a default project.
    pub project_id: Option<String>,
    pub file: CredentialsFile,
    key: Arc<RsaKeyPair>,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("project_id", &self.project_id)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// User credentials (`"type": "authorized_user"`).
#[derive(Clone)]
pub struct AuthorizedUser {
    /// The OAuth client's id (gcloud's own, usually; not a secret).
    pub client_id: String,
    client_secret: String,
    refresh_token: String,
    pub token_uri: String,
    /// The project billed for the user's calls: send it as the
    /// `x-goog-user-project` header (see [`Credentials::quota_project`]).
    pub quota_project_id: Option<String>,
    pub file: CredentialsFile,
}

impl fmt::Debug for AuthorizedUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizedUser")
            .field("client_id", &self.client_id)
            .field("token_uri", &self.token_uri)
            .field("quota_project_id", &self.quota_project_id)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// Find the credentials, in Google's order (see the module docs). `env`
/// reads an environment variable (`|name| std::env::var(name).ok()`); an
/// empty value counts as unset, as in Google's libraries.
///
/// # Errors
/// A file named by `GOOGLE_APPLICATION_CREDENTIALS` that is missing; a
/// credentials file (that one or gcloud's) that cannot be read, is not
/// JSON, lacks a field, holds an unusable key or is of a type other than
/// `service_account` and `authorized_user`; a `GCE_METADATA_HOST` that is
/// not `host` or `host:port`.
///
/// # Examples
/// ```
/// use leasehold_firestore::auth::{Credentials, discover};
/// let env = |name: &str| (name == "GCE_METADATA_HOST").then(|| "127.0.0.1:8080".to_owned());
/// let creds = discover(&env).unwrap();
/// assert!(matches!(creds, Credentials::Metadata { ref host } if host == "127.0.0.1:8080"));
/// ```
pub fn discover(env: &dyn Fn(&str) -> Option<String>) -> Result<Credentials, AuthError> {
    let var = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(path) = var("GOOGLE_APPLICATION_CREDENTIALS") {
        let file = CredentialsFile {
            path: path.into(),
            from_env: true,
        };
        let text = read(&file)?.ok_or_else(|| AuthError::Missing(file.clone()))?;
        return parse_file(&text, file);
    }
    let gcloud = var("CLOUDSDK_CONFIG")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| Path::new(&home).join(".config/gcloud")));
    if let Some(dir) = gcloud {
        let file = CredentialsFile {
            path: dir.join(WELL_KNOWN_FILE),
            from_env: false,
        };
        if let Some(text) = read(&file)? {
            return parse_file(&text, file);
        }
    }
    let host = var("GCE_METADATA_HOST").unwrap_or_else(|| METADATA_HOST.to_owned());
    Endpoint::parse(&metadata_url(&host)).map_err(|e| AuthError::MetadataHost {
        host: host.clone(),
        problem: e.to_string(),
    })?;
    Ok(Credentials::Metadata { host })
}

/// The file's text, or `None` when there is no such file.
fn read(file: &CredentialsFile) -> Result<Option<String>, AuthError> {
    match std::fs::read_to_string(&file.path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(AuthError::Unreadable {
            file: file.clone(),
            error,
        }),
    }
}

fn parse_file(text: &str, file: CredentialsFile) -> Result<Credentials, AuthError> {
    let invalid = |problem: String| AuthError::Invalid {
        file: file.clone(),
        problem,
    };
    // serde_json's syntax errors give a position, never the text.
    let value: Value = serde_json::from_str(text).map_err(|e| invalid(format!("not JSON ({e})")))?;
    let text_field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
    let required = |name: &str| text_field(name).ok_or_else(|| invalid(format!("no \"{name}\" (a string) in it")));
    let kind = value.get("type").and_then(Value::as_str);
    let kind = kind.ok_or_else(|| {
        invalid("no \"type\" in it; a credentials file has \"type\": \"service_account\" or \"authorized_user\"".into())
    })?;
    let token_uri = text_field("token_uri").unwrap_or_else(|| TOKEN_URI.to_owned());
    if matches!(kind, "service_account" | "authorized_user") {
        Endpoint::parse(&token_uri).map_err(|e| invalid(format!("token_uri: {e}")))?;
    }
    match kind {
        "service_account" => {
            let key = private_key(&required("private_key")?).map_err(|e| invalid(e.to_string()))?;
            Ok(Credentials::ServiceAccount(ServiceAccount {
                client_email: required("client_email")?,
                private_key_id: text_field("private_key_id"),
                token_uri,
                project_id: text_field("project_id"),
                file,
                key: Arc::new(key),
            }))
        }
        "authorized_user" => Ok(Credentials::AuthorizedUser(AuthorizedUser {
            client_id: required("client_id")?,
            client_secret: required("client_secret")?,
            refresh_token: required("refresh_token")?,
            token_uri,
            quota_project_id: text_field("quota_project_id"),
            file,
        })),
        kind => Err(AuthError::Unsupported {
            file,
            kind: kind.to_owned(),
        }),
    }
}

/// The RSA key of a PEM PKCS#8 `private_key`. The problems name the field
/// and never quote it.
fn private_key(pem: &str) -> Result<RsaKeyPair, KeyError> {
    let pem = pem.trim();
    if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
        return Err(KeyError::Pkcs1);
    }
    let body = pem
        .strip_prefix("-----BEGIN PRIVATE KEY-----")
        .and_then(|rest| rest.strip_suffix("-----END PRIVATE KEY-----"))
        .ok_or(KeyError::NotPem)?;
    let der = STANDARD
        .decode(body.split_ascii_whitespace().collect::<String>())
        .map_err(|_| KeyError::NotBase64)?;
    RsaKeyPair::from_pkcs8(&der).map_err(KeyError::Unusable)
}

/// What is wrong with a `private_key` (never quoting it).
#[derive(Debug, thiserror::Error)]
enum KeyError {
    #[error(
        "private_key is a PKCS#1 key (BEGIN RSA PRIVATE KEY); convert it with \
         `openssl pkcs8 -topk8 -nocrypt`, or download a new key"
    )]
    Pkcs1,
    #[error("private_key is not a PEM PKCS#8 key (-----BEGIN PRIVATE KEY-----)")]
    NotPem,
    #[error("private_key's PEM body is not base64")]
    NotBase64,
    #[error("private_key is not a usable RSA key ({0})")]
    Unusable(ring::error::KeyRejected),
}

fn metadata_url(host: &str) -> String {
    format!("http://{host}{METADATA_TOKEN_PATH}")
}

/// The request that gets an access token: send `body` with `headers` (and
/// the `Host` and `Content-Length` the HTTP client adds) to `endpoint`.
/// Its `Debug` leaves out the body, which carries a secret.
#[derive(Clone)]
pub struct TokenRequest {
    pub method: &'static str,
    pub url: String,
    /// `url`, split for the HTTP client.
    pub endpoint: Endpoint,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl fmt::Debug for TokenRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &self.headers)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish_non_exhaustive()
    }
}

/// An HTTP(S) URL, split: `tls` for `https`, the default port filled in,
/// an IPv6 host without its brackets, the path with its query (`/` at
/// least).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Endpoint {
    /// Split `url` (`http://` or `https://`, no user info).
    ///
    /// # Errors
    /// Another scheme, no host, user info, a port that is not a number.
    ///
    /// # Examples
    /// ```
    /// let e = leasehold_firestore::auth::Endpoint::parse("https://oauth2.googleapis.com/token").unwrap();
    /// assert_eq!((e.tls, e.host.as_str(), e.port, e.path.as_str()), (true, "oauth2.googleapis.com", 443, "/token"));
    /// ```
    pub fn parse(url: &str) -> Result<Self, AuthError> {
        let bad = |problem| AuthError::BadUrl {
            url: url.to_owned(),
            problem,
        };
        let (tls, rest) = match url.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            _ => return Err(bad("not an http:// or https:// URL")),
        };
        let (authority, path) = rest.find(['/', '?']).map_or((rest, ""), |i| rest.split_at(i));
        if authority.contains('@') {
            return Err(bad("user info in a URL is not supported"));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').ok_or(bad("an IPv6 host without its `]`"))?,
            None => authority.rsplit_once(':').unwrap_or((authority, "")),
        };
        let port = match port.strip_prefix(':').unwrap_or(port) {
            "" if tls => 443,
            "" => 80,
            port => port
                .parse()
                .map_err(|_| bad("the port is not a number from 1 to 65535"))?,
        };
        if host.is_empty() || port == 0 {
            return Err(bad("no host, or port 0"));
        }
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        Ok(Self {
            tls,
            host: host.to_owned(),
            port,
            path,
        })
    }
}

impl Credentials {
    /// The request that gets an access token, made at `now`. A service
    /// account signs a JWT (RS256; `iss` its email, `scope` [`SCOPE`], `aud`
    /// its `token_uri`, valid for an hour from `now`) and posts it as a
    /// `jwt-bearer` grant; user credentials post a `refresh_token` grant;
    /// the metadata server is asked with a `GET` and `Metadata-Flavor:
    /// Google`.
    ///
    /// # Errors
    /// The key cannot sign (ring found no randomness).
    pub fn token_request(&self, now: SystemTime) -> Result<TokenRequest, AuthError> {
        let form_post = |url: &str, body: Vec<u8>| -> Result<TokenRequest, AuthError> {
            Ok(TokenRequest {
                method: "POST",
                url: url.to_owned(),
                endpoint: Endpoint::parse(url)?,
                headers: vec![("Content-Type".into(), "application/x-www-form-urlencoded".into())],
                body,
            })
        };
        match self {
            Self::ServiceAccount(sa) => {
                let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
                let mut header = json!({"alg": "RS256", "typ": "JWT"});
                if let Some(kid) = &sa.private_key_id {
                    header["kid"] = kid.as_str().into();
                }
                let claims = json!({
                    "iss": sa.client_email, "scope": SCOPE, "aud": sa.token_uri,
                    "iat": iat, "exp": iat + JWT_LIFETIME_SECS,
                });
                let signed = format!("{}.{}", base64url_json(&header), base64url_json(&claims));
                let mut signature = vec![0; sa.key.public().modulus_len()];
                sa.key
                    .sign(
                        &RSA_PKCS1_SHA256,
                        &SystemRandom::new(),
                        signed.as_bytes(),
                        &mut signature,
                    )
                    .map_err(|_| AuthError::Sign {
                        account: self.describe(),
                    })?;
                let jwt = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature));
                form_post(&sa.token_uri, form(&[("grant_type", JWT_BEARER), ("assertion", &jwt)]))
            }
            Self::AuthorizedUser(user) => form_post(
                &user.token_uri,
                form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", &user.client_id),
                    ("client_secret", &user.client_secret),
                    ("refresh_token", &user.refresh_token),
                ]),
            ),
            Self::Metadata { host } => {
                let url = metadata_url(host);
                Ok(TokenRequest {
                    method: "GET",
                    endpoint: Endpoint::parse(&url)?,
                    url,
                    headers: vec![("Metadata-Flavor".into(), "Google".into())],
                    body: Vec::new(),
                })
            }
        }
    }

    /// What to call these credentials in messages: `service account
    /// EMAIL (FILE)`, `user credentials from FILE`, `the metadata server at
    /// HOST`. Never a secret.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::ServiceAccount(sa) => format!("service account {} ({})", sa.client_email, sa.file),
            Self::AuthorizedUser(user) => format!("user credentials from {}", user.file),
            Self::Metadata { host } => format!("the metadata server at {host}"),
        }
    }

    /// The project to send as `x-goog-user-project` with every Firestore
    /// call: user credentials' `quota_project_id`. Firestore refuses user
    /// credentials without one; a service account bills its own project.
    #[must_use]
    pub fn quota_project(&self) -> Option<&str> {
        match self {
            Self::AuthorizedUser(user) => user.quota_project_id.as_deref(),
            _ => None,
        }
    }

    /// The token in the answer to [`token_request`](Self::token_request):
    /// HTTP `status` and `body`, received at `now`.
    ///
    /// # Errors
    /// A refusal (not 2xx), quoting Google's `error` and
    /// `error_description` (or the start of a body that is not JSON), with
    /// what to do for these credentials; a 2xx body without a bearer token
    /// and its lifetime.
    pub fn parse_token_response(&self, status: u16, body: &[u8], now: SystemTime) -> Result<AccessToken, AuthError> {
        let value: Option<Value> = serde_json::from_slice(body).ok();
        if !(200..300).contains(&status) {
            let reason = match value.as_ref().map(|v| (&v["error"], &v["error_description"])) {
                Some((Value::String(error), Value::String(description))) => format!("{error}: {description}"),
                Some((Value::String(error), _)) => error.clone(),
                // Google's API errors: {"error": {"code", "message", "status"}}.
                Some((Value::Object(error), _)) => {
                    error.get("message").and_then(Value::as_str).unwrap_or("").to_owned()
                }
                _ => excerpt(body),
            };
            return Err(AuthError::Refused {
                credentials: self.describe(),
                url: self.token_url(),
                status,
                reason,
                hint: self.refusal_hint(),
            });
        }
        // A 2xx body may hold the token: no problem quotes it.
        let bad = |problem: &str| AuthError::BadResponse {
            url: self.token_url(),
            status,
            problem: problem.to_owned(),
        };
        let value = value.ok_or_else(|| bad("not JSON"))?;
        let token = value["access_token"].as_str().filter(|t| !t.is_empty());
        let token = token.ok_or_else(|| bad("no \"access_token\" (a string)"))?;
        let expires_in = value["expires_in"]
            .as_u64()
            .ok_or_else(|| bad("no \"expires_in\" (seconds)"))?;
        if !value["token_type"]
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case("bearer"))
        {
            return Err(bad("\"token_type\" is not \"Bearer\""));
        }
        Ok(AccessToken {
            token: token.to_owned(),
            expires_at: now + Duration::from_secs(expires_in),
        })
    }

    fn token_url(&self) -> String {
        match self {
            Self::ServiceAccount(sa) => sa.token_uri.clone(),
            Self::AuthorizedUser(user) => user.token_uri.clone(),
            Self::Metadata { host } => metadata_url(host),
        }
    }

    fn refusal_hint(&self) -> String {
        match self {
            Self::ServiceAccount(sa) => format!(
                "check that this key of {} still exists and is enabled (`gcloud iam service-accounts keys list \
                 --iam-account={0}`) and that this machine's clock is right",
                sa.client_email
            ),
            Self::AuthorizedUser(_) => {
                "run `gcloud auth application-default login` again: the login may have expired or been revoked".into()
            }
            Self::Metadata { .. } => "check that a service account is attached to this instance or service".into(),
        }
    }
}

fn base64url_json(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// `application/x-www-form-urlencoded`: every byte but `A-Za-z0-9-._~` as
/// `%XX`.
fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        for (n, part) in [name, value].into_iter().enumerate() {
            if n == 1 {
                out.push('=');
            }
            for b in part.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    out.push(char::from(b));
                } else {
                    let _ = write!(out, "%{b:02X}");
                }
            }
        }
    }
    out.into_bytes()
}

/// The start of a body that is not JSON (an error page), on one line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text: String = text
        .chars()
        .take(200)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.trim().is_empty() {
        "an empty body".to_owned()
    } else {
        text.trim().to_owned()
    }
}

/// An access token and when it expires. Its `Debug` leaves the token out.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    pub token: String,
    pub expires_at: SystemTime,
}

impl AccessToken {
    /// Whether to keep using it at `now`: until [`REFRESH_BEFORE`] its
    /// expiry.
    #[must_use]
    pub fn fresh(&self, now: SystemTime) -> bool {
        now + REFRESH_BEFORE < self.expires_at
    }

    /// The `Authorization` header's value: `Bearer TOKEN`.
    #[must_use]
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The error to show when the metadata server at `host` (discovery's last
/// resort) cannot be reached for `cause`: there are no credentials at all.
#[must_use]
pub fn metadata_unreachable(host: &str, cause: &dyn fmt::Display) -> AuthError {
    AuthError::NoCredentials {
        host: host.to_owned(),
        cause: cause.to_string(),
    }
}

/// Why there are no credentials or no token. No variant holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "{0}: no such file (a relative path is taken from the current directory); \
         name a service account key file, or unset GOOGLE_APPLICATION_CREDENTIALS"
    )]
    Missing(CredentialsFile),
    #[error("cannot read {file}: {error}")]
    Unreadable { file: CredentialsFile, error: io::Error },
    #[error("{file} is not a usable credentials file: {problem}")]
    Invalid { file: CredentialsFile, problem: String },
    #[error(
        "{file} holds credentials of type \"{kind}\", which are not supported; \
         use a service account key file, `gcloud auth application-default login`, or the metadata server"
    )]
    Unsupported { file: CredentialsFile, kind: String },
    #[error("GCE_METADATA_HOST={host}: {problem}; give the metadata server as HOST or HOST:PORT")]
    MetadataHost { host: String, problem: String },
    #[error("{url} is not a usable URL: {problem}")]
    BadUrl { url: String, problem: &'static str },
    #[error("cannot sign a token request for {account}: no randomness from the system")]
    Sign { account: String },
    #[error("{url} refused a token to {credentials} (HTTP {status}: {reason}); {hint}")]
    Refused {
        credentials: String,
        url: String,
        status: u16,
        reason: String,
        hint: String,
    },
    #[error("{url} answered HTTP {status} without a usable token: {problem}")]
    BadResponse { url: String, status: u16, problem: String },
    /// No answer at all from a token endpoint (`cause`: the HTTP client's
    /// words — a timeout, a proxy's refusal, a certificate).
    #[error("cannot reach the token endpoint {url}: {cause}")]
    Unreachable { url: String, cause: String },
    #[error(
        "no credentials found: GOOGLE_APPLICATION_CREDENTIALS is not set, there is no \
         gcloud application default credentials file, and the metadata server at {host} \
         cannot be reached ({cause}); set GOOGLE_APPLICATION_CREDENTIALS to a service account \
         key file, or run `gcloud auth application-default login` (or set FIRESTORE_EMULATOR_HOST \
         to use the emulator)"
    )]
    NoCredentials { host: String, cause: String },
}
