//! The blocking HTTP/1.1 client of the store's requests — Firestore's REST
//! API, Google's token endpoints, the metadata server — on `ureq`: JSON
//! bodies, `Content-Length` or chunked answers, kept-alive connections
//! (ureq's pool, which drops one the server closed while it was idle).
//!
//! What ureq does not decide here: how a connection is made. This
//! module's connector ([`Connect`]) opens it as the store always has —
//! plain TCP (the emulator, the metadata server), or TLS by rustls with
//! the workspace's configuration (`leasehold-tls`: the system's roots,
//! ring), through the `HTTPS_PROXY` tunnel `proxy` decides and opens —
//! so ureq brings no TLS stack, roots or proxy rules of its own, and the
//! timeouts stay per socket operation.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport};

/// Answers larger than this are refused (Firestore's largest document is
/// 1 MiB; a batch of them stays far below).
const MAX_BODY: u64 = 64 << 20;

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

    /// The origin as a URL names it (an IPv6 address in brackets).
    fn url_origin(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Requests to one endpoint, on connections ureq keeps between them.
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            // Every status is an answer the caller reads (Firestore's
            // errors are JSON), and none is followed elsewhere.
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(format!("leasehold/{}", env!("CARGO_PKG_VERSION")))
            .build();
        let connect = Connect {
            endpoint: endpoint.clone(),
            timeout,
        };
        Self {
            agent: ureq::Agent::with_parts(config, connect, NoResolve),
            endpoint,
            timeout,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Send one request and read its whole answer.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> io::Result<Response> {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.endpoint.url_origin()));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request
            .body(body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut answer = self.agent.run(request).map_err(|e| self.worded(e))?;
        let status = answer.status().as_u16();
        let body = answer
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| self.worded(e))?;
        Ok(Response { status, body })
    }

    /// A failure in words (one place for this client, so the Firestore,
    /// metadata and token requests say it alike): a timeout as `timed out
    /// after N s`, where the system says "Resource temporarily unavailable
    /// (os error 11)"; a certificate TLS refused as what is wrong with it.
    fn worded(&self, e: ureq::Error) -> io::Error {
        let e = match e {
            ureq::Error::Io(e) => e,
            ureq::Error::Timeout(_) => io::Error::from(io::ErrorKind::TimedOut),
            ureq::Error::BodyExceedsLimit(_) => {
                return io::Error::new(io::ErrorKind::InvalidData, "an answer larger than 64 MiB");
            }
            other => {
                return io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("an unreadable HTTP answer: {other}"),
                );
            }
        };
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
}

/// No resolution by ureq: [`Connect`] resolves the endpoint itself, and
/// through a proxy the endpoint's name is the proxy's to resolve.
#[derive(Debug)]
struct NoResolve;

impl Resolver for NoResolve {
    fn resolve(
        &self,
        _: &ureq::http::Uri,
        _: &ureq::config::Config,
        _: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        Ok(self.empty())
    }
}

/// Opens a connection to the client's one endpoint: directly, or through
/// the proxy's tunnel; then TLS when the endpoint has it.
#[derive(Debug)]
struct Connect {
    endpoint: Endpoint,
    timeout: Duration,
}

impl Connect {
    fn tcp(&self) -> io::Result<TcpStream> {
        let e = &self.endpoint;
        if let (Some(proxy), Some(_)) = (&e.proxy, &e.tls) {
            let tcp = proxy.tunnel(&e.host, e.port, self.timeout)?;
            tcp.set_nodelay(true)?;
            return Ok(tcp);
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", e.host));
        for addr in (e.host.as_str(), e.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(tcp) => {
                    tcp.set_read_timeout(Some(self.timeout))?;
                    tcp.set_write_timeout(Some(self.timeout))?;
                    tcp.set_nodelay(true)?;
                    return Ok(tcp);
                }
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    fn stream(&self) -> io::Result<Stream> {
        let tcp = self.tcp()?;
        Ok(match &self.endpoint.tls {
            None => Stream::Plain(tcp),
            Some(config) => {
                let name = ServerName::try_from(self.endpoint.host.clone())
                    .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
                let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
                Stream::Tls(Box::new(StreamOwned::new(conn, tcp)))
            }
        })
    }
}

impl Connector for Connect {
    type Out = Socket;

    fn connect(&self, details: &ConnectionDetails, _: Option<()>) -> Result<Option<Socket>, ureq::Error> {
        let config = details.config;
        Ok(Some(Socket {
            stream: self.stream()?,
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
        }))
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
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

/// A connection as ureq uses it: the stream and ureq's buffers. Its
/// socket keeps the timeouts it was opened with (each read and write
/// waits at most the store's timeout), and a read interrupted by a
/// signal (a waiter's SIGINT handler) goes on.
struct Socket {
    stream: Stream,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("peer", &self.stream.tcp().peer_addr().ok())
            .finish_non_exhaustive()
    }
}

impl Transport for Socket {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, _: NextTimeout) -> Result<(), ureq::Error> {
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        self.stream.flush()?;
        Ok(())
    }

    fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match self.stream.read(input) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    /// Whether a kept connection may carry another request: nothing to
    /// read on it yet (a closed one reads as its end; anything else the
    /// server sent unasked, such as TLS's closing alert, retires it).
    fn is_open(&mut self) -> bool {
        let tcp = self.stream.tcp();
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let idle = matches!(tcp.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        tcp.set_nonblocking(false).is_ok() && idle
    }

    fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead as _;
    use std::net::TcpListener;

    /// Requests one after another go on one kept connection: a server
    /// that accepts once answers them all.
    #[test]
    fn requests_reuse_a_kept_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (socket, _) = listener.accept().unwrap();
            let mut reader = io::BufReader::new(socket.try_clone().unwrap());
            let mut writer = socket;
            for i in 0..3 {
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let answer = format!("answer {i}");
                write!(
                    writer,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                )
                .unwrap();
            }
        });
        let client = Client::new(
            Endpoint {
                host: "127.0.0.1".to_owned(),
                port,
                tls: None,
                proxy: None,
            },
            Duration::from_secs(5),
        );
        for i in 0..3 {
            let answer = client
                .send("POST", "/x", &[("Content-Type", "application/json")], b"{}")
                .unwrap();
            assert_eq!((answer.status, answer.body), (200, format!("answer {i}").into_bytes()));
        }
        server.join().unwrap();
    }
}
