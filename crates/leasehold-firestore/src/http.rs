//! A small blocking HTTP/1.1 client: what the store needs of Firestore's
//! REST API and of Google's token endpoints, and no more — JSON bodies,
//! `Content-Length` or chunked answers, kept-alive connections, plain TCP
//! (the emulator, the metadata server) or TLS by rustls (Google).
//!
//! Why not a client crate: the library is synchronous (no runtime outside
//! the etcd store), and a blocking client with TLS would bring its own
//! TLS and URL stacks beside the rustls the other stores use already.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// Answers larger than this are refused (Firestore's largest document is
/// 1 MiB; a batch of them stays far below).
const MAX_BODY: usize = 64 << 20;

/// Where requests go: a host and port, over TLS when `tls` is given.
#[derive(Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub tls: Option<Arc<ClientConfig>>,
    /// The proxy to tunnel through (`HTTPS_PROXY`, see `proxy`).
    pub proxy: Option<crate::proxy::Proxy>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.origin())
    }
}

impl Endpoint {
    /// `http://host:port` or `https://host:port`, for messages.
    pub fn origin(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// Connections to one endpoint, each used by one request at a time and
/// kept for the next one while the server keeps it open.
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
    idle: Mutex<Vec<BufReader<Stream>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// How a request failed.
enum Failed {
    /// Before its answer's first byte came back: on a kept connection,
    /// the server had closed it while idle, so it never saw the request,
    /// and sending it again on a new connection is safe.
    Stale(io::Error),
    /// Later: the server may have acted on it; not sent again.
    Final(io::Error),
}

impl Failed {
    /// A failure before any answer: stale only if the connection was
    /// closed or reset (a timeout means the server may be working on it).
    fn early(e: io::Error) -> Self {
        use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        if matches!(
            e.kind(),
            BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof
        ) {
            Failed::Stale(e)
        } else {
            Failed::Final(e)
        }
    }
}

impl Client {
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Self {
        Self {
            endpoint,
            timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Send one request and read its whole answer.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> io::Result<Response> {
        let kept = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let (mut conn, reused) = match kept {
            Some(c) => (c, true),
            None => (self.connect().map_err(|e| self.worded(e))?, false),
        };
        let answer = match self.exchange(&mut conn, method, path, headers, body) {
            Err(Failed::Stale(_)) if reused => {
                conn = self.connect().map_err(|e| self.worded(e))?;
                self.exchange(&mut conn, method, path, headers, body)
            }
            other => other,
        };
        let (response, keep) = answer.map_err(|(Failed::Stale(e) | Failed::Final(e))| self.worded(e))?;
        if keep {
            self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(conn);
        }
        Ok(response)
    }

    /// An I/O error in words (one place for this client, so the
    /// Firestore, metadata and token requests say it alike): a timeout as
    /// `timed out after N s`, where the system says "Resource temporarily
    /// unavailable (os error 11)"; a certificate TLS refused as what is
    /// wrong with it.
    fn worded(&self, e: io::Error) -> io::Error {
        if leasehold_backend::is_timeout(&e) {
            return io::Error::new(io::ErrorKind::TimedOut, leasehold_backend::timed_out(self.timeout));
        }
        match leasehold_tls::refusal(&e) {
            Some(leasehold_tls::Refusal::ServerCertificate(why)) => {
                let through = match &self.endpoint.proxy {
                    Some(p) => format!(
                        "; through the proxy {}: a proxy that inspects TLS shows a certificate of its own, whose CA must then be among the system's roots (SSL_CERT_FILE)",
                        p.shown()
                    ),
                    None => String::new(),
                };
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "TLS failed: the certificate of {} was not accepted: {why}{through}",
                        self.endpoint.origin()
                    ),
                )
            }
            Some(leasehold_tls::Refusal::ClientCertificate(why) | leasehold_tls::Refusal::Other(why)) => {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("TLS failed with {}: {why}", self.endpoint.origin()),
                )
            }
            None => e,
        }
    }

    fn connect(&self) -> io::Result<BufReader<Stream>> {
        let e = &self.endpoint;
        if let (Some(proxy), Some(config)) = (&e.proxy, &e.tls) {
            let tcp = proxy.tunnel(&e.host, e.port, self.timeout)?;
            tcp.set_nodelay(true)?;
            let name =
                ServerName::try_from(e.host.clone()).map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
            let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
            return Ok(BufReader::new(Stream::Tls(Box::new(StreamOwned::new(conn, tcp)))));
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", e.host));
        for addr in (e.host.as_str(), e.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(tcp) => {
                    tcp.set_read_timeout(Some(self.timeout))?;
                    tcp.set_write_timeout(Some(self.timeout))?;
                    tcp.set_nodelay(true)?;
                    let stream = match &e.tls {
                        None => Stream::Plain(tcp),
                        Some(config) => {
                            let name = ServerName::try_from(e.host.clone())
                                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
                            let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
                            Stream::Tls(Box::new(StreamOwned::new(conn, tcp)))
                        }
                    };
                    return Ok(BufReader::new(stream));
                }
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    /// One request on `conn`: the answer, and whether the connection may
    /// carry another.
    fn exchange(
        &self,
        conn: &mut BufReader<Stream>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(Response, bool), Failed> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nUser-Agent: leasehold/{}\r\n",
            self.endpoint.host,
            body.len(),
            env!("CARGO_PKG_VERSION")
        );
        for (k, v) in headers {
            let _ = write!(head, "{k}: {v}\r\n");
        }
        head.push_str("\r\n");
        let stream = conn.get_mut();
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body))
            .and_then(|()| stream.flush())
            .map_err(Failed::early)?;
        // Nothing back at all: the server closed a kept connection.
        if first_bytes(conn).map_err(Failed::early)?.is_empty() {
            return Err(Failed::Stale(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )));
        }
        read_response(conn).map_err(Failed::Final)
    }
}

/// The answer's first bytes, waiting for them through signals (a
/// waiter's SIGINT handler interrupts the read; std's `read_exact` and
/// `read_until` go on after one, `fill_buf` does not).
fn first_bytes(conn: &mut BufReader<Stream>) -> io::Result<&[u8]> {
    loop {
        match conn.fill_buf() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
            Ok(_) => return conn.fill_buf(),
        }
    }
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Read one answer: status line, headers, body.
fn read_response(conn: &mut BufReader<Stream>) -> io::Result<(Response, bool)> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        conn.read_until(b'\n', &mut head)?;
        if head.len() == before {
            return Err(bad("the connection closed in the middle of an answer's headers"));
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        if head.len() > 64 << 10 {
            return Err(bad("an answer's headers are larger than 64 KiB"));
        }
    }
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut slots);
    parsed
        .parse(&head)
        .map_err(|e| bad(format!("an unreadable HTTP answer: {e}")))?;
    let status = parsed.code.ok_or_else(|| bad("an HTTP answer without a status"))?;
    let header = |name: &str| {
        parsed
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let close = header("connection").is_some_and(|v| v == "close");
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(conn)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| bad(format!("a Content-Length of {len:?}")))?;
        if len > MAX_BODY {
            return Err(bad(format!("an answer of {len} bytes")));
        }
        let mut body = vec![0; len];
        conn.read_exact(&mut body)?;
        body
    } else {
        // Neither: the body ends with the connection.
        let mut body = Vec::new();
        conn.take(MAX_BODY as u64).read_to_end(&mut body)?;
        return Ok((Response { status, body }, false));
    };
    Ok((Response { status, body }, !close))
}

fn read_chunked(conn: &mut BufReader<Stream>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        conn.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16).map_err(|_| bad(format!("a chunk size of {size:?}")))?;
        if body.len() + size > MAX_BODY {
            return Err(bad("an answer larger than 64 MiB"));
        }
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                line.clear();
                if conn.read_line(&mut line)? == 0 || line.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        conn.read_exact(&mut body[start..])?;
        line.clear();
        conn.read_line(&mut line)?;
    }
}
