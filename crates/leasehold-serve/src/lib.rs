//! `leasehold serve`: a live status page of a store's leases, their
//! timelines, its queues and its schedules, Prometheus metrics at
//! `/metrics`, and the CLI's `--json` documents at `/api/...` — over the
//! library only.
//!
//! The server is synchronous, like the rest of leasehold: [`http`] is a
//! small HTTP/1.1 server on `std::net` with a thread per connection, and
//! one follower thread ([`watch`]) reads the store once per refresh for
//! every page, event stream and scrape. Pages are HTML and SVG written with
//! `maud`, which escapes every value it interpolates; the one script and
//! the one stylesheet are compiled into the binary, and a strict
//! Content-Security-Policy allows nothing else. docs/SERVE.md describes it
//! for operators, and why this stack.
//!
//! Safe by default: loopback only unless a token is required
//! ([`Config::check`]), read-only unless `allow_actions`, and actions
//! always need the token and a same-origin form.

mod daemon;
mod error;
pub mod hosts;
pub mod http;
mod metrics;
pub use daemon::serve_metrics;
mod pages;
mod text;
pub mod watch;

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leasehold::{LeaseName, Store, TaskRetry, TaskState, json};
use serde_json::json;

pub use crate::error::ServeError;
use crate::http::{Body, Request, Response};
use crate::watch::Shared;

/// How `serve` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen: `HOST:PORT`, the host an address (`127.0.0.1`,
    /// `[::1]`) or a name (`localhost`), resolved by the system. Only an
    /// address, or a name every one of whose addresses is, on loopback may
    /// be read without a token.
    pub listen: String,
    /// A file holding the token (its first line, trimmed): required to
    /// read on a non-loopback address, and for every action.
    pub token_file: Option<PathBuf>,
    /// Offer retry and purge (with the token).
    pub allow_actions: bool,
    /// How often the store is read.
    pub refresh: Duration,
    /// How long history entries followed are kept in memory.
    pub retention: Duration,
    /// Names a request may reach the page by beside `localhost`, an IP
    /// address and the host of `listen` ([`hosts`]: DNS rebinding).
    pub allow_hosts: Vec<String>,
    /// Says where the page is, once it listens (the CLI: a line on stderr,
    /// or an event with `--log-format json`).
    pub announce: fn(&str),
}

/// [`Config::announce`] by default: the line on stderr.
fn announce_on_stderr(line: &str) {
    eprintln!("leasehold serve: {line}");
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.to_owned(),
            token_file: None,
            allow_actions: false,
            refresh: Duration::from_secs(1),
            retention: Duration::from_secs(7 * 86_400),
            allow_hosts: Vec::new(),
            announce: announce_on_stderr,
        }
    }
}

/// Where `serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The addresses `listen` (`HOST:PORT`) names, resolved.
pub(crate) fn resolve(listen: &str) -> Result<Vec<SocketAddr>, ServeError> {
    let addresses: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|error| ServeError::Unresolvable {
            listen: listen.to_owned(),
            error,
        })?
        .collect();
    if addresses.is_empty() {
        return Err(ServeError::NoAddress {
            listen: listen.to_owned(),
        });
    }
    Ok(addresses)
}

/// Whether every one of `addresses` is on loopback: a name that resolves
/// to anything else as well counts as not loopback.
pub(crate) fn all_loopback(addresses: &[SocketAddr]) -> bool {
    addresses.iter().all(|a| a.ip().is_loopback())
}

impl Config {
    /// Refuse what is unsafe before anything listens: a non-loopback
    /// address without a token, actions without a token. Returns the token.
    pub fn check(&self) -> Result<Option<String>, ServeError> {
        self.admit().map(|(token, _)| token)
    }

    /// [`Config::check`], and the addresses to listen on, resolved once:
    /// the addresses judged are the addresses bound.
    fn admit(&self) -> Result<(Option<String>, Vec<SocketAddr>), ServeError> {
        let addresses = resolve(&self.listen)?;
        let token = match &self.token_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| ServeError::TokenFile {
                    path: path.clone(),
                    error,
                })?;
                let token = text.lines().next().unwrap_or("").trim().to_owned();
                if token.len() < 16 {
                    return Err(ServeError::ShortToken {
                        path: path.clone(),
                        length: token.len(),
                    });
                }
                Some(token)
            }
        };
        if !all_loopback(&addresses) && token.is_none() {
            return Err(ServeError::OpenWithoutToken {
                listen: self.listen.clone(),
                addresses,
            });
        }
        if self.allow_actions && token.is_none() {
            return Err(ServeError::ActionsWithoutToken);
        }
        if self.refresh < Duration::from_millis(100) || self.refresh > Duration::from_secs(3600) {
            return Err(ServeError::Refresh { refresh: self.refresh });
        }
        if let Some(why) = self.allow_hosts.iter().find_map(|h| hosts::refusal(h)) {
            return Err(ServeError::AllowHost(why));
        }
        Ok((token, addresses))
    }

    /// Whether reading needs the token: `listen` is not all loopback (or
    /// does not resolve).
    fn read_needs_token(&self) -> bool {
        resolve(&self.listen).map_or(true, |a| !all_loopback(&a))
    }
}

/// Everything a request handler needs.
pub struct App {
    store: Arc<Store>,
    shared: Arc<Shared>,
    token: Option<String>,
    /// Whether reading needs the token (a non-loopback address).
    read_needs_token: bool,
    allow_actions: bool,
    /// Per-process secret every action form carries (with the token
    /// cookie, which is SameSite=Strict, and the Origin check).
    csrf: String,
    store_label: String,
    /// The names a request may reach the page by.
    hosts: hosts::Hosts,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("store", &self.store_label)
            .finish_non_exhaustive()
    }
}

/// Check `config`, listen, and serve until the process ends. Prints the
/// address on stderr once it listens.
pub fn run(store: Store, config: &Config) -> Result<(), ServeError> {
    let (token, addresses) = config.admit()?;
    let listener = TcpListener::bind(&addresses[..]).map_err(|error| ServeError::Listen {
        listen: config.listen.clone(),
        error,
    })?;
    let address = listener.local_addr().map_err(ServeError::Serving)?;
    let app = Arc::new(App::with(store, config, token, !address.ip().is_loopback()));
    (config.announce)(&format!(
        "http://{address}/ ({}, {})",
        app.store_label,
        if app.allow_actions {
            "actions allowed with the token"
        } else {
            "read-only"
        }
    ));
    let handler: http::Handler = Arc::new(move |r| app.handle(&r));
    http::serve(&listener, &handler).map_err(ServeError::Serving)
}

fn random_hex(bytes: usize) -> String {
    use std::io::Read as _;
    let mut buf = vec![0u8; bytes];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_err()
    {
        // Not secret then, but unguessable enough to tell forms apart.
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        return format!("{:x}{:x}", t.as_nanos(), std::process::id());
    }
    buf.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Compare secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const TOKEN_COOKIE: &str = "leasehold_token";

pub(crate) fn secure(r: Response) -> Response {
    r.with("content-security-policy", CSP)
        .with("x-content-type-options", "nosniff")
        .with("referrer-policy", "no-referrer")
        .with("x-frame-options", "DENY")
        .with("cache-control", "no-store")
}

/// What `/api/schedules` answers (404) for a store without records.
const NO_SCHEDULES: &str = "this store keeps no schedules";

/// Why a request is refused.
fn refuse(status: u16, message: &str) -> Response {
    Response::json(status, &json!({ "error": message, "status": status }))
}

impl App {
    /// The application over `store`; starts the follower.
    #[must_use]
    pub fn new(store: Store, config: &Config, token: Option<String>) -> Self {
        Self::with(store, config, token, config.read_needs_token())
    }

    /// As [`App::new`], reading with the token or without as the address
    /// listened on says.
    fn with(store: Store, config: &Config, token: Option<String>, read_needs_token: bool) -> Self {
        let store_label = store.url().redacted();
        let store = Arc::new(store);
        let shared = watch::start(Arc::clone(&store), config.refresh, config.retention);
        Self {
            store,
            shared,
            token,
            read_needs_token,
            allow_actions: config.allow_actions,
            csrf: random_hex(16),
            store_label,
            hosts: hosts::Hosts::new(&config.listen, &config.allow_hosts),
        }
    }

    /// The token the request presents (bearer header or cookie), if right.
    fn authenticated(&self, r: &Request) -> bool {
        let Some(token) = &self.token else { return false };
        let bearer = r.header("authorization").and_then(|h| h.strip_prefix("Bearer "));
        bearer
            .or_else(|| r.cookie(TOKEN_COOKIE))
            .is_some_and(|t| same_secret(t.trim(), token))
    }

    /// A cross-site request: the browser says so, or its Origin is not
    /// this server.
    fn cross_site(r: &Request) -> bool {
        if r.header("sec-fetch-site")
            .is_some_and(|s| s != "same-origin" && s != "none")
        {
            return true;
        }
        match (r.header("origin"), r.header("host")) {
            (Some(origin), Some(host)) => {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
                    != Some(host)
            }
            (Some(_), None) => true,
            _ => false,
        }
    }

    /// Answer one request.
    #[must_use]
    pub fn handle(&self, r: &Request) -> Response {
        // Before anything else, the token included: a page elsewhere that
        // reached here through DNS rebinding learns nothing.
        if let Some(host) = r.header("host").filter(|h| !self.hosts.admits(h)) {
            let message = format!(
                "this leasehold serve answers to {}, and IP addresses; the request named {} — a page elsewhere reaching this one through DNS rebinding? To reach it by that name, start serve with --allow-host NAME",
                self.hosts.names().join(", "),
                leasehold::quoted(host)
            );
            return secure(refuse(421, &message));
        }
        let segments = r.segments();
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let public = matches!(segs.as_slice(), ["assets", _] | ["login" | "favicon.ico"]);
        if self.read_needs_token && !public && !self.authenticated(r) {
            return if segs.first() == Some(&"api")
                || segs.first() == Some(&"metrics")
                || segs.first() == Some(&"events")
            {
                refuse(401, "this leasehold serve needs its token: Authorization: Bearer TOKEN")
                    .with("www-authenticate", "Bearer")
            } else {
                secure(pages::login(401, &segments_path(&segs), None))
            };
        }
        let response = match (r.method.as_str(), segs.as_slice()) {
            ("GET" | "HEAD", []) => self.page(r, |p| pages::leases(self, r, p)),
            ("GET" | "HEAD", ["leases", n]) => match LeaseName::new(*n) {
                Ok(n) => self.page(r, |p| pages::lease(self, r, &n, p)),
                Err(_) => pages::not_found("not a lease name"),
            },
            ("GET" | "HEAD", ["timeline"]) => self.page(r, |p| pages::timeline(self, r, p)),
            ("GET" | "HEAD", ["queues"]) => self.page(r, |p| pages::queues(self, p)),
            ("GET" | "HEAD", ["queues", q]) => match LeaseName::new(*q) {
                Ok(q) => match r.param("find").map(str::trim).filter(|id| !id.is_empty()) {
                    Some(id) => self.find(&q, id),
                    None => self.page(r, |p| pages::queue(self, r, &q, p)),
                },
                Err(_) => pages::not_found("no such queue"),
            },
            ("GET" | "HEAD", ["queues", q, "tasks", id]) => match (LeaseName::new(*q), LeaseName::new(*id)) {
                (Ok(q), Ok(id)) => self.page(r, |p| pages::task(self, &q, &id, p)),
                _ => pages::not_found("no such task"),
            },
            ("GET" | "HEAD", ["schedules"]) => self.page(r, |p| pages::schedules(self, p)),
            ("GET" | "HEAD", ["schedules", n]) => match LeaseName::new(*n) {
                Ok(n) => self.page(r, |p| pages::schedule(self, r, &n, p)),
                Err(_) => pages::not_found("no such schedule"),
            },
            ("GET" | "HEAD", ["login"]) => pages::login(200, r.param("next").unwrap_or("/"), None),
            ("POST", ["login"]) => self.login(r),
            ("GET" | "HEAD", ["assets", "app.js"]) => {
                Response::new(200, "text/javascript; charset=utf-8", include_str!("../assets/app.js"))
                    .with("cache-control", "max-age=300")
            }
            ("GET" | "HEAD", ["assets", "app.css"]) => {
                Response::new(200, "text/css; charset=utf-8", include_str!("../assets/app.css"))
                    .with("cache-control", "max-age=300")
            }
            ("GET" | "HEAD", ["metrics"]) => Response::new(
                200,
                metrics::CONTENT_TYPE,
                metrics::render(&self.shared.snapshot(), &self.shared.counters()),
            ),
            ("GET" | "HEAD", ["events"]) => self.events(),
            ("GET" | "HEAD", ["api", rest @ ..]) => self.api(r, rest),
            ("POST", ["queues", q, "tasks", id, "retry"]) if self.allow_actions => {
                self.action(r, |app| app.retry(q, id))
            }
            ("POST", ["queues", q, "purge"]) if self.allow_actions => self.action(r, |app| app.purge(r, q)),
            (_, ["queues", ..]) if r.method == "POST" => pages::not_found(
                "actions are off: start serve with --allow-actions --token-file FILE to retry or purge tasks",
            ),
            _ => pages::not_found("nothing here"),
        };
        secure(response)
    }

    /// A page, or with `?partial=1` only its `<main>` (the live refresh).
    fn page(&self, r: &Request, body: impl FnOnce(&mut pages::Page) -> maud::Markup) -> Response {
        let mut page = pages::Page::new(self.allow_actions && self.authenticated(r), &self.csrf);
        let main = body(&mut page);
        let html = if r.param("partial").is_some() {
            main.into_string()
        } else {
            pages::layout(&page, &main).into_string()
        };
        Response::new(page.status, "text/html; charset=utf-8", html)
    }

    /// `/queues/Q?find=ID`: the task's page if there is one, else the
    /// queue's page saying there is none.
    fn find(&self, q: &LeaseName, id: &str) -> Response {
        let qe = http::percent_encode(q.as_str());
        let found = LeaseName::new(id)
            .ok()
            .and_then(|task| self.store.task_get(q, &task).ok().flatten());
        match found {
            Some(t) => Response::redirect(&format!("/queues/{qe}/tasks/{}", http::percent_encode(t.id.as_str()))),
            None => Response::redirect(&format!("/queues/{qe}?missing={}", http::percent_encode(id))),
        }
    }

    fn login(&self, r: &Request) -> Response {
        let form = r.form();
        let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let next = get("next")
            .filter(|n| n.starts_with('/') && !n.starts_with("//"))
            .unwrap_or("/");
        if Self::cross_site(r) {
            return refuse(403, "cross-site request refused");
        }
        match (&self.token, get("token")) {
            (Some(token), Some(given)) if same_secret(given.trim(), token) => Response::redirect(next).with(
                "set-cookie",
                format!("{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", given.trim()),
            ),
            (None, _) => pages::login(
                400,
                next,
                Some("this serve has no token: start it with --token-file FILE"),
            ),
            _ => pages::login(401, next, Some("wrong token")),
        }
    }

    /// An action: the token, a same-origin request and the form's secret.
    fn action(&self, r: &Request, act: impl FnOnce(&Self) -> Response) -> Response {
        if !self.authenticated(r) {
            return refuse(
                401,
                "actions need the token: log in, or send Authorization: Bearer TOKEN",
            );
        }
        if Self::cross_site(r) {
            return refuse(403, "cross-site request refused");
        }
        let bearer = r.header("authorization").is_some();
        let form = r.form();
        let csrf = form.iter().find(|(n, _)| n == "csrf").map(|(_, v)| v.as_str());
        // A form posted by a browser carries the page's secret; a client
        // sending the bearer header has no ambient credentials to abuse.
        if !bearer && !csrf.is_some_and(|c| same_secret(c, &self.csrf)) {
            return refuse(403, "the form is stale or not from this page; reload and try again");
        }
        act(self)
    }

    fn retry(&self, q: &str, id: &str) -> Response {
        let (Ok(q), Ok(id)) = (LeaseName::new(q), LeaseName::new(id)) else {
            return refuse(400, "invalid queue or task id");
        };
        match self.store.task_retry(&q, &id) {
            Ok(TaskRetry::Revived) => Response::redirect(&format!(
                "/queues/{}/tasks/{}?done=revived",
                http::percent_encode(q.as_str()),
                http::percent_encode(id.as_str())
            )),
            Ok(TaskRetry::NotFound) => refuse(404, "no such task"),
            Ok(TaskRetry::NotDead(state)) => refuse(
                409,
                &format!("the task is {}; only dead tasks are retried", state.as_str()),
            ),
            Err(e) => refuse(503, &e.to_string()),
        }
    }

    fn purge(&self, r: &Request, q: &str) -> Response {
        let Ok(q) = LeaseName::new(q) else {
            return refuse(400, "invalid queue");
        };
        let form = r.form();
        let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let Some(older) =
            get("older_than").and_then(|s| leasehold::parse_duration_within(s, leasehold::limits::AGE).ok())
        else {
            return refuse(400, "older_than: a duration such as 7d");
        };
        match self.store.task_purge(&q, TaskState::Done, older) {
            Ok(n) => Response::redirect(&format!("/queues/{}?purged={n}", http::percent_encode(q.as_str()))),
            Err(e) => refuse(503, &e.to_string()),
        }
    }

    /// Server-sent events: `change` whenever a reading changed something,
    /// a comment every 15 s to keep proxies from closing the stream.
    fn events(&self) -> Response {
        let shared = Arc::clone(&self.shared);
        Response {
            status: 200,
            headers: vec![
                ("content-type", "text/event-stream".to_owned()),
                ("cache-control", "no-store".to_owned()),
            ],
            body: Body::Stream(Box::new(move |out| {
                let mut seen = shared.snapshot().generation;
                write!(out, "retry: 2000\nevent: hello\ndata: {seen}\n\n")?;
                out.flush()?;
                loop {
                    let now = shared.wait_change(seen, Duration::from_secs(15));
                    if now > seen {
                        seen = now;
                        write!(out, "event: change\ndata: {now}\n\n")?;
                    } else {
                        write!(out, ": still here\n\n")?;
                    }
                    out.flush()?;
                }
            })),
        }
    }

    fn api(&self, r: &Request, rest: &[&str]) -> Response {
        let snapshot = self.shared.snapshot();
        let name = |s: &str| LeaseName::new(s).map_err(|e| refuse(400, &e.to_string()));
        let result: Result<serde_json::Value, Response> = (|| match rest {
            ["leases"] => {
                let live = r.param("live").is_some_and(|v| v != "0");
                let states = pages::filtered(&snapshot, r.param("q"), live);
                let (offset, limit) = paging(r, usize::MAX);
                Ok(json::value(&json::leases(
                    states
                        .iter()
                        .skip(offset)
                        .take(limit)
                        .map(|s| pages::aged(&snapshot, s.as_ref()))
                        .collect::<Vec<_>>()
                        .iter(),
                )))
            }
            ["leases", n] => {
                let n = name(n)?;
                Ok(snapshot.lease(&n).map_or_else(
                    || json::value(&json::never_granted(&n)),
                    |s| json::value(&json::lease_state(&pages::aged(&snapshot, s))),
                ))
            }
            ["leases", n, "history"] => {
                let n = name(n)?;
                let limit = r.param("limit").and_then(|l| l.parse().ok()).unwrap_or(20);
                let entries = self.store.history(&n, limit).map_err(|e| refuse(503, &e.to_string()))?;
                Ok(json::value(&json::history(&n, &entries)))
            }
            ["queues"] => {
                let Some(queues) = &snapshot.queues else {
                    return Err(refuse(404, "this store has no task queue"));
                };
                let stats: Vec<_> = queues.iter().map(|q| q.stats.clone()).collect();
                Ok(json::value(&json::queues(&stats)))
            }
            ["queues", q, "tasks"] => {
                let q = name(q)?;
                let state = match r.param("state") {
                    None | Some("") => None,
                    Some(s) => {
                        Some(TaskState::parse(s).ok_or_else(|| refuse(400, "state: pending, running, done or dead"))?)
                    }
                };
                let limit = r.param("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
                let (tasks, more) = self
                    .store
                    .task_list_page(Some(&q), state, limit)
                    .map_err(|e| refuse(503, &e.to_string()))?;
                Ok(json::value(&json::tasks(&q, &tasks, more)))
            }
            ["queues", q, "tasks", id] => {
                let (q, id) = (name(q)?, name(id)?);
                match self.store.task_get(&q, &id).map_err(|e| refuse(503, &e.to_string()))? {
                    Some(t) => Ok(json::value(&json::task(&t))),
                    None => Err(refuse(404, "no such task")),
                }
            }
            ["schedules"] => {
                let Some(views) = &snapshot.schedules else {
                    return Err(refuse(404, NO_SCHEDULES));
                };
                Ok(json::value(&json::Schedules {
                    schedules: views
                        .iter()
                        .map(|v| json::schedule(&v.kept, SystemTime::now()))
                        .collect(),
                }))
            }
            ["schedules", n] => {
                let n = name(n)?;
                if snapshot.schedules.is_none() {
                    return Err(refuse(404, NO_SCHEDULES));
                }
                // Read from the store, as `schedule show` reads it: any
                // number of the records it keeps, as they are now.
                let limit = r.param("limit").and_then(|l| l.parse().ok()).unwrap_or(20);
                let unavailable = |e: leasehold::Error| refuse(503, &e.to_string());
                let schedules = self.store.schedules().map_err(unavailable)?;
                let kept = schedules
                    .get(&n)
                    .map_err(unavailable)?
                    .ok_or_else(|| refuse(404, "no such schedule"))?;
                let slots = schedules.slots(&n, limit).map_err(unavailable)?;
                Ok(json::value(&json::ScheduleShown {
                    schedule: json::schedule(&kept, SystemTime::now()),
                    slots: slots.iter().map(|r| json::slot(&n, r)).collect(),
                }))
            }
            _ => Err(refuse(404, "no such API")),
        })();
        result.map_or_else(|e| e, |v| Response::json(200, &v))
    }

    #[must_use]
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// `?offset=&limit=` (limit at most 1000, `default` when absent).
fn paging(r: &Request, default: usize) -> (usize, usize) {
    let offset = r.param("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let limit = r
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .map_or(default, |l| l.min(1000));
    (offset, limit)
}

fn segments_path(segs: &[&str]) -> String {
    let mut s = String::new();
    for seg in segs {
        s.push('/');
        s.push_str(&http::percent_encode(seg));
    }
    if s.is_empty() { "/".to_owned() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str) -> Config {
        Config {
            listen: listen.to_owned(),
            ..Config::default()
        }
    }

    #[test]
    fn only_addresses_all_on_loopback_are_served_without_a_token() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(all_loopback(&[addr("127.0.0.1:1"), addr("[::1]:1")]));
        // A name that resolves to loopback and to anything else as well
        // (a host file entry, DNS) is not loopback.
        assert!(!all_loopback(&[addr("127.0.0.1:1"), addr("10.0.0.5:1")]));
        assert!(!all_loopback(&[addr("[::]:1")]));
        for ok in ["127.0.0.1:0", "[::1]:0", "localhost:0", "127.0.0.2:7878"] {
            assert!(config(ok).check().is_ok(), "{ok}");
        }
        for refused in ["0.0.0.0:0", "[::]:0", "192.0.2.1:7878"] {
            let Err(e @ ServeError::OpenWithoutToken { .. }) = config(refused).check() else {
                panic!("{refused} accepted without a token")
            };
            assert!(e.is_usage());
            assert!(e.to_string().contains("without a token"), "{e}");
        }
        for unusable in ["localhost", "127.0.0.1", ":7878", "localhost:http"] {
            let Err(e) = config(unusable).check() else {
                panic!("{unusable} accepted")
            };
            assert!(e.is_usage());
            let m = e.to_string();
            assert!(m.contains("HOST:PORT") && m.contains(unusable), "{m}");
        }
    }
}
