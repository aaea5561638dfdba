//! Requests to Google's own Firestore: TLS to `firestore.googleapis.com`
//! with the system's root certificates, and an access token from
//! Application Default Credentials (`auth`), fetched when the cached one
//! is about to expire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use rustls::ClientConfig;

use crate::auth::{self, AccessToken, AuthError, Credentials};
use crate::http;
use crate::rest::{self, Authorizer};

/// Google's Firestore endpoint.
pub const FIRESTORE_HOST: &str = "firestore.googleapis.com";

/// A TLS client configuration trusting the system's roots, speaking
/// HTTP/1.1.
pub fn tls() -> Result<Arc<ClientConfig>, leasehold_tls::TlsError> {
    let roots = leasehold_tls::roots("system roots", None)?;
    let config = leasehold_tls::client_config(roots, None, &[b"http/1.1"])?;
    Ok(Arc::new(config))
}

/// Credentials and the token they last got.
pub struct GoogleAuth {
    credentials: Credentials,
    tls: Arc<ClientConfig>,
    timeout: Duration,
    token: Mutex<Option<AccessToken>>,
    /// One client per token endpoint (there is one per credentials).
    clients: Mutex<HashMap<(String, u16, bool), Arc<http::Client>>>,
}

impl std::fmt::Debug for GoogleAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleAuth")
            .field("credentials", &self.credentials.describe())
            .finish_non_exhaustive()
    }
}

impl GoogleAuth {
    pub fn new(credentials: Credentials, tls: Arc<ClientConfig>, timeout: Duration) -> Self {
        Self {
            credentials,
            tls,
            timeout,
            token: Mutex::new(None),
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, e: &auth::Endpoint) -> Arc<http::Client> {
        let key = (e.host.clone(), e.port, e.tls);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients
            .entry(key)
            .or_insert_with(|| {
                Arc::new(http::Client::new(
                    http::Endpoint {
                        host: e.host.clone(),
                        port: e.port,
                        tls: e.tls.then(|| self.tls.clone()),
                        proxy: Self::proxy(e),
                    },
                    self.timeout,
                ))
            })
            .clone()
    }

    /// The proxy to a token endpoint: an HTTPS one (Google's, or a service
    /// account's `token_uri`) as Firestore's; the metadata server (plain
    /// HTTP, on the local network) directly. A variable that does not
    /// parse was refused at open already (for Firestore's host); for
    /// another host it means no proxy.
    fn proxy(e: &auth::Endpoint) -> Option<crate::proxy::Proxy> {
        let env = |var: &str| std::env::var(var).ok();
        e.tls
            .then(|| crate::proxy::for_host(&e.host, &env).ok().flatten())
            .flatten()
    }

    fn fetch(&self, now: SystemTime) -> Result<AccessToken, AuthError> {
        let request = self.credentials.token_request(now)?;
        let headers: Vec<(&str, &str)> = request.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let client = self.client(&request.endpoint);
        let answer = client.send(request.method, &request.endpoint.path, &headers, &request.body);
        let answer = match (&self.credentials, answer) {
            (_, Ok(a)) => a,
            (Credentials::Metadata { host }, Err(e)) => return Err(auth::metadata_unreachable(host, &e)),
            (_, Err(e)) => {
                return Err(AuthError::Unreachable {
                    url: request.url.clone(),
                    cause: e.to_string(),
                });
            }
        };
        self.credentials.parse_token_response(answer.status, &answer.body, now)
    }
}

impl Authorizer for GoogleAuth {
    fn headers(&self) -> rest::Result<Vec<(&'static str, String)>> {
        let now = SystemTime::now();
        let mut cached = self.token.lock().unwrap_or_else(PoisonError::into_inner);
        let token = match cached.as_ref() {
            Some(t) if t.fresh(now) => t,
            _ => cached.insert(self.fetch(now).map_err(|e| rest::Error::Auth(e.to_string()))?),
        };
        let mut headers = vec![("Authorization", token.authorization())];
        if let Some(project) = self.credentials.quota_project() {
            headers.push(("x-goog-user-project", project.to_owned()));
        }
        Ok(headers)
    }

    fn describe(&self) -> String {
        self.credentials.describe()
    }
}
