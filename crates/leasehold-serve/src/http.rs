//! A small synchronous HTTP/1.1 server: one thread per connection (at most
//! [`MAX_CONNECTIONS`] at once), one request per connection
//! (`Connection: close`), request heads parsed by `httparse`, bounded in
//! size and time. Enough for a status page a few people look at and a
//! Prometheus scraper, with nothing to tune and no async runtime.

use std::fmt::Write as _;
use std::io::{self, BufRead as _, BufReader, Read as _, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 64 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One request.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path as sent (still percent-encoded: a name may hold `/`).
    pub path: String,
    /// Query parameters, decoded, in order.
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Request {
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The path's segments, each percent-decoded.
    #[must_use]
    pub fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s, false))
            .collect()
    }

    /// The first query parameter `name`.
    #[must_use]
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Every query parameter `name`.
    pub fn params<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as an `application/x-www-form-urlencoded` form.
    #[must_use]
    pub fn form(&self) -> Vec<(String, String)> {
        parse_query(&String::from_utf8_lossy(&self.body))
    }

    /// A cookie's value.
    #[must_use]
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?
            .split(';')
            .filter_map(|c| c.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// What a handler answers.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// A body: bytes, or a stream written by a function that owns the
/// connection until it returns (server-sent events).
pub enum Body {
    Bytes(Vec<u8>),
    Stream(StreamFn),
}

/// What writes a streamed body.
pub type StreamFn = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send>;

/// What answers requests.
pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync>;

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Bytes(b) => write!(f, "Bytes({})", b.len()),
            Body::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl Response {
    #[must_use]
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type", content_type.to_owned())],
            body: Body::Bytes(body.into()),
        }
    }

    #[must_use]
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self::new(status, "text/plain; charset=utf-8", body.into())
    }

    #[must_use]
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        let mut body = serde_json::to_vec_pretty(value).expect("a JSON value always serializes");
        body.push(b'\n');
        Self::new(status, "application/json", body)
    }

    #[must_use]
    pub fn redirect(to: &str) -> Self {
        let mut r = Self::text(303, "see other");
        r.headers.push(("location", to.to_owned()));
        r
    }

    #[must_use]
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Decode `%XX` and (in queries) `+`; invalid UTF-8 is replaced.
#[must_use]
pub fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    out.push(b);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encode a path segment or query value.
#[must_use]
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[must_use]
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Serve `listener` forever, answering each request with `handler`.
pub fn serve(listener: &TcpListener, handler: &Handler) -> io::Result<()> {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            let mut stream = stream;
            let _ = write_response(&mut stream, Response::text(503, "too many connections; try again\n"));
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (open, handler) = (Arc::clone(&open), Arc::clone(handler));
        let spawned = std::thread::Builder::new()
            .name("leasehold-serve-conn".into())
            .spawn(move || {
                let _ = connection(stream, handler.as_ref());
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The thread was not started and the counter not taken back.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn connection(stream: TcpStream, handler: &(dyn Fn(Request) -> Response + Send + Sync)) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr()?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    let request = match read_request(&mut reader, peer) {
        Ok(r) => r,
        Err(status) => return write_response(&mut stream, Response::text(status, format!("{}\n", reason(status)))),
    };
    write_response(&mut stream, handler(request))
}

fn read_request(reader: &mut BufReader<TcpStream>, peer: SocketAddr) -> Result<Request, u16> {
    let mut head = Vec::new();
    loop {
        let n = reader.read_until(b'\n', &mut head).map_err(|_| 400u16)?;
        if n == 0 {
            return Err(400);
        }
        if head.len() > MAX_HEAD {
            return Err(431);
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(400),
    }
    let method = parsed.method.ok_or(400u16)?.to_owned();
    let target = parsed.path.ok_or(400u16)?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(Ok(0), |(_, v)| v.trim().parse::<usize>())
        .map_err(|_| 400u16)?;
    if length > MAX_BODY {
        return Err(413);
    }
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        // Chunked request bodies are not needed by anything served here.
        return Err(400);
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).map_err(|_| 400u16)?;
    Ok(Request {
        method,
        path: path.to_owned(),
        query: parse_query(query),
        headers,
        body,
        peer,
    })
}

fn write_response(stream: &mut TcpStream, response: Response) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", response.status, reason(response.status));
    for (name, value) in &response.headers {
        // Values are ours; a newline in one would split the head.
        let value = value.replace(['\r', '\n'], " ");
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("connection: close\r\n");
    match response.body {
        Body::Bytes(body) => {
            let _ = write!(head, "content-length: {}\r\n\r\n", body.len());
            stream.write_all(head.as_bytes())?;
            stream.write_all(&body)?;
            stream.flush()
        }
        Body::Stream(write) => {
            head.push_str("\r\n");
            stream.write_all(head.as_bytes())?;
            stream.flush()?;
            write(stream)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("a%20b+c", true), "a b c");
        assert_eq!(percent_decode("a%2", true), "a%2");
        assert_eq!(percent_decode("%zz", false), "%zz");
        assert_eq!(percent_decode("%E2%80%AE", false), "\u{202e}");
        assert_eq!(percent_encode("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(
            parse_query("name=a&name=b%26c&x"),
            vec![
                ("name".into(), "a".into()),
                ("name".into(), "b&c".into()),
                ("x".into(), String::new())
            ]
        );
    }
}
