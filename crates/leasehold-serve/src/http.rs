//! A small synchronous HTTP/1.1 server: one thread per connection (at most
//! [`MAX_CONNECTIONS`] at once), one request per connection
//! (`Connection: close`), request heads parsed by `httparse`, bounded in
//! size and time. Enough for a status page a few people look at and a
//! Prometheus scraper, with nothing to tune and no async runtime.
//!
//! Slow clients cannot take the page (slowloris): what mature servers do
//! (Go's `ReadHeaderTimeout`, nginx's `client_header_timeout` and
//! `limit_conn`), in one place — the constants below and `Gate`:
//! - the request (its head, then its body) must arrive within
//!   [`HEAD_TIMEOUT`] of the connection's accept, however it trickles in —
//!   a deadline, not a timeout per read; then 408 and the connection closed;
//! - at most [`MAX_HEADS`] connections at once may still be sending their
//!   head, at most [`MAX_HEADS_PER_CLIENT`] of them from one client
//!   address; a connection beyond either takes the place of the oldest
//!   unfinished head (of its own address first), which is closed — not
//!   of one whose end has arrived and waits to be read, so a burst of new
//!   connections cannot close a request that came whole, and not of one
//!   younger than [`HEAD_GRACE`], whose client may not yet have run the
//!   write that follows its connect (the new connection waits for that);
//! - so [`MAX_CONNECTIONS`] − [`MAX_HEADS`] connections are always kept for
//!   requests whose head has arrived: a scrape of `/metrics`, a page load
//!   and the open tabs' event streams. A connection whose head has arrived
//!   (an event stream included) is never counted as a head again;
//! - and at most [`MAX_STREAMS`] of those are streamed bodies (event
//!   streams, a tab each): one more is answered 503, `Retry-After: 10`, so
//!   a scrape and a page load find a place however many tabs are open.

use std::fmt::Write as _;
use std::io::{self, Read as _, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Connections open at once (a thread each): heads still arriving,
/// requests being answered, event streams. Beyond it a new connection is
/// answered 503 at once — which only [`MAX_CONNECTIONS`] − [`MAX_HEADS`]
/// answered requests and streams can cause.
pub const MAX_CONNECTIONS: usize = 64;
/// Streamed bodies (event streams: a tab each) at once; one more is
/// answered 503 with `Retry-After` [`STREAM_RETRY`]. Leaves
/// [`MAX_CONNECTIONS`] − [`MAX_HEADS`] − [`MAX_STREAMS`] = 16 places for
/// requests answered at once, whatever heads and streams hold.
pub const MAX_STREAMS: usize = 32;
/// When a stream refused for [`MAX_STREAMS`] is asked to come back.
pub const STREAM_RETRY: Duration = Duration::from_secs(10);
/// Connections at once still sending their request head. A browser or a
/// scraper sends its head in one packet; only a slow or hostile client
/// holds one of these for long.
pub const MAX_HEADS: usize = 16;
/// Of [`MAX_HEADS`], from one client address ([`client_of`]: an IPv4
/// address, an IPv6 /64). Above the 6 connections a browser opens to one
/// server at once.
pub const MAX_HEADS_PER_CLIENT: usize = 8;
/// How long a new head is safe from being closed for a newer connection.
/// A client writes its head right after its connect returns, but on a
/// busy machine (a burst of connections, two cores) that write may run
/// milliseconds later: a probe accepted amid a burst was closed before its
/// bytes came (a CI run: status 0). A flood of unfinished heads is still
/// closed, [`MAX_HEADS`] per grace at most.
pub const HEAD_GRACE: Duration = Duration::from_millis(100);
/// From a connection's accept to the last byte of its request, head and
/// body: a deadline for the whole, however the bytes trickle in (Go's
/// `ReadHeaderTimeout`; nginx's `client_header_timeout`, 60 s by default,
/// 10 s as CIS advises).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Each write of a response (an event stream's too).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 64 * 1024;

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
        408 => "Request Timeout",
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
    let gate = Arc::new(Gate::default());
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let accepted = Instant::now();
        let Ok(peer) = stream.peer_addr() else { continue };
        let Some(slot) = Gate::admit(&gate, &stream, peer.ip()) else {
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
            let _ = write_response(&mut stream, Response::text(503, "too many connections; try again\n"));
            continue;
        };
        let handler = Arc::clone(handler);
        let spawned = std::thread::Builder::new()
            .name("leasehold-serve-conn".into())
            .spawn(move || {
                let _ = connection(stream, peer, accepted, slot, handler.as_ref());
            });
        if spawned.is_err() {
            // The closure, its slot with it, was dropped: the place is free.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Who holds which place: the connections still sending their head, in
/// the order they were accepted, and how many are past it.
#[derive(Debug, Default)]
struct Gate {
    places: Mutex<Places>,
}

#[derive(Debug, Default)]
struct Places {
    heads: Vec<Head>,
    answering: usize,
    /// Of `answering`, streamed bodies.
    streams: usize,
    next: u64,
}

/// A connection still sending its head; `stream` is its socket, to close
/// it when another connection takes its place.
#[derive(Debug)]
struct Head {
    id: u64,
    client: IpAddr,
    stream: TcpStream,
    admitted: Instant,
}

impl Gate {
    fn places(&self) -> MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection from `client`, taking the place of
    /// the oldest unfinished head of the same address, or else of anyone,
    /// when their limits are reached; `None` when the connections past
    /// their head take every place left (answer 503).
    fn admit(gate: &Arc<Self>, stream: &TcpStream, client: IpAddr) -> Option<Slot> {
        let client = client_of(client);
        // Only this (the accepting) thread adds heads: the room made by the
        // first stays made while the lock is let go between the two.
        drop(gate.make_room(|places| {
            let own = places.heads.iter().filter(|h| h.client == client).count();
            (own >= MAX_HEADS_PER_CLIENT).then_some(Some(client))
        }));
        let mut places = gate.make_room(|places| (places.heads.len() >= MAX_HEADS).then_some(None));
        if places.heads.len() + places.answering >= MAX_CONNECTIONS {
            return None;
        }
        let stream = stream.try_clone().ok()?;
        let id = places.next;
        places.next += 1;
        places.heads.push(Head {
            id,
            client,
            stream,
            admitted: Instant::now(),
        });
        Some(Slot {
            gate: Arc::clone(gate),
            id,
            answering: false,
            streaming: false,
        })
    }
}

impl Gate {
    /// When `full` names a limit reached (`Some(client)`: that client's,
    /// `Some(None)`: everyone's), closes the oldest unfinished head within
    /// it — once it is [`HEAD_GRACE`] old, waiting (the lock let go) until
    /// then; the places after, locked.
    fn make_room(&self, full: impl Fn(&Places) -> Option<Option<IpAddr>>) -> MutexGuard<'_, Places> {
        loop {
            let mut places = self.places();
            let Some(within) = full(&places) else { return places };
            let Some(oldest) = places.unfinished(within) else {
                return places;
            };
            let Some(left) = HEAD_GRACE.checked_sub(places.heads[oldest].admitted.elapsed()) else {
                places.close(Some(oldest));
                return places;
            };
            drop(places);
            std::thread::sleep(left);
        }
    }
}

impl Places {
    /// The oldest head (of `client`, when given) still arriving: not one
    /// whose end has arrived and waits unread — its thread not yet run,
    /// in a burst of connections — which would be answered in a moment.
    fn unfinished(&self, client: Option<IpAddr>) -> Option<usize> {
        let mut unread = vec![0u8; MAX_HEAD];
        self.heads
            .iter()
            .position(|h| client.is_none_or(|c| c == h.client) && !head_waits(&h.stream, &mut unread))
    }

    /// Close the head at `index`: its thread's next read ends.
    fn close(&mut self, index: Option<usize>) {
        if let Some(i) = index {
            let head = self.heads.remove(i);
            let _ = head.stream.shutdown(Shutdown::Both);
        }
    }
}

/// The client a connection from `ip` counts for: an IPv4 address (one
/// mapped into IPv6 too), or an IPv6 address's /64 — the block one site
/// is given, whose 2^64 addresses are one client's to choose from.
#[must_use]
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// Whether the end of a request head is among the bytes `stream` has
/// received and not yet read (looked at, not taken).
fn head_waits(stream: &TcpStream, buf: &mut [u8]) -> bool {
    use rustix::net::RecvFlags;
    match rustix::net::recv(stream, &mut *buf, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
        Ok((n, _)) => {
            let unread = &buf[..n];
            unread.windows(4).any(|w| w == b"\r\n\r\n") || unread.windows(2).any(|w| w == b"\n\n")
        }
        Err(_) => false,
    }
}

/// A connection's place, given back when dropped (a panicking handler
/// included).
struct Slot {
    gate: Arc<Gate>,
    id: u64,
    answering: bool,
    streaming: bool,
}

impl Slot {
    /// The head has arrived: from a head's place to an answered one.
    /// False when another connection took this one's place meanwhile.
    fn arrived(&mut self) -> bool {
        let mut places = self.gate.places();
        let Some(i) = places.heads.iter().position(|h| h.id == self.id) else {
            return false;
        };
        places.heads.remove(i);
        places.answering += 1;
        self.answering = true;
        true
    }

    /// A streamed body's place, if one of [`MAX_STREAMS`] is free.
    fn stream(&mut self) -> bool {
        let mut places = self.gate.places();
        if places.streams >= MAX_STREAMS {
            return false;
        }
        places.streams += 1;
        self.streaming = true;
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut places = self.gate.places();
        if self.streaming {
            places.streams -= 1;
        }
        if self.answering {
            places.answering -= 1;
        } else if let Some(i) = places.heads.iter().position(|h| h.id == self.id) {
            places.heads.remove(i);
        }
    }
}

fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    mut slot: Slot,
    handler: &(dyn Fn(Request) -> Response + Send + Sync),
) -> io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let _ = stream.set_nodelay(true);
    let response = match read_request(&mut stream, peer, accepted + HEAD_TIMEOUT) {
        // Closed by the client, or its place taken by another connection.
        Err(Unread::Gone) => return Ok(()),
        Err(Unread::Refused(status, why)) => Response::text(status, why),
        Ok(request) => {
            if !slot.arrived() {
                return Ok(());
            }
            match handler(request) {
                Response {
                    body: Body::Stream(_), ..
                } if !slot.stream() => Response::text(
                    503,
                    format!(
                        "{MAX_STREAMS} event streams are open, as many as this server keeps; try again in {} s\n",
                        STREAM_RETRY.as_secs()
                    ),
                )
                .with("retry-after", STREAM_RETRY.as_secs().to_string()),
                response => response,
            }
        }
    };
    write_response(&mut stream, response)
}

/// Why no request was read.
enum Unread {
    /// Answer this status, saying why.
    Refused(u16, String),
    /// The connection is closed: answer nothing.
    Gone,
}

fn refused(status: u16) -> Unread {
    Unread::Refused(status, format!("{}\n", reason(status)))
}

/// Read from `stream` into `buf` what arrives before `deadline`.
fn read_before(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> Result<(), Unread> {
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unread::Refused(
                408,
                format!(
                    "the request did not arrive within {} s of connecting; send it whole at once\n",
                    HEAD_TIMEOUT.as_secs()
                ),
            ));
        }
        stream.set_read_timeout(Some(left)).map_err(|_| Unread::Gone)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Unread::Gone),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The deadline: the next turn answers 408.
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return Err(Unread::Gone),
        }
    }
}

fn read_request(stream: &mut TcpStream, peer: SocketAddr, deadline: Instant) -> Result<Request, Unread> {
    let mut buf = Vec::new();
    let end = loop {
        read_before(stream, &mut buf, deadline)?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        match httparse::Request::new(&mut headers).parse(&buf) {
            Ok(httparse::Status::Complete(end)) if end <= MAX_HEAD => break end,
            Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => {}
            Ok(_) | Err(httparse::Error::TooManyHeaders) => return Err(refused(431)),
            Err(_) => return Err(refused(400)),
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    if !matches!(parsed.parse(&buf[..end]), Ok(httparse::Status::Complete(_))) {
        return Err(refused(400));
    }
    let method = parsed.method.ok_or_else(|| refused(400))?.to_owned();
    let target = parsed.path.ok_or_else(|| refused(400))?;
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
        .map_err(|_| refused(400))?;
    if length > MAX_BODY {
        return Err(refused(413));
    }
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        // Chunked request bodies are not needed by anything served here.
        return Err(refused(400));
    }
    let (path, query) = (path.to_owned(), parse_query(query));
    let mut body = buf.split_off(end);
    while body.len() < length {
        read_before(stream, &mut body, deadline)?;
    }
    body.truncate(length);
    Ok(Request {
        method,
        path,
        query,
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

    /// A burst of new connections takes the places of heads still
    /// arriving, never of a head that came whole and waits to be read
    /// (its thread not yet run). Planted: every head counted as still
    /// arriving — the whole one was chosen.
    #[test]
    fn a_head_that_came_whole_is_not_the_one_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let mut places = Places::default();
        let mut clients = Vec::new();
        for (id, sent) in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\r\n",
        ]
        .into_iter()
        .enumerate()
        {
            let mut client = TcpStream::connect(address).unwrap();
            client.write_all(sent).unwrap();
            let (stream, peer) = listener.accept().unwrap();
            // Loopback delivers at once; wait until it has all the same.
            let mut buf = [0u8; 64];
            let until = Instant::now() + Duration::from_secs(10);
            while rustix::net::recv(&stream, &mut buf[..], rustix::net::RecvFlags::PEEK)
                .unwrap()
                .0
                < sent.len()
            {
                assert!(Instant::now() < until, "loopback delivered nothing");
            }
            places.heads.push(Head {
                id: id as u64,
                client: peer.ip(),
                stream,
                admitted: Instant::now(),
            });
            clients.push(client);
        }
        assert_eq!(places.unfinished(None), Some(1));
        assert_eq!(places.unfinished(Some(places.heads[0].client)), Some(1));
        places.heads.truncate(1);
        assert_eq!(places.unfinished(None), None, "the only head came whole");
    }

    /// A client whose head follows its connect late (its thread not yet
    /// run: a CI run's probe amid a burst) keeps its place while a burst
    /// from its address fills the limit: the heads closed are those still
    /// unfinished past the grace. Planted: no grace — the late head, the
    /// oldest unfinished when the burst came, was closed.
    #[test]
    fn a_head_written_just_after_its_connect_is_not_closed_by_a_burst() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let gate = Arc::new(Gate::default());
        let accept = |sent: &[u8]| {
            let mut client = TcpStream::connect(address).unwrap();
            client.write_all(sent).unwrap();
            let (stream, peer) = listener.accept().unwrap();
            let slot = Gate::admit(&gate, &stream, peer.ip()).expect("a place");
            (client, slot)
        };
        let (late, late_slot) = accept(b"");
        let writer = {
            let mut late = late.try_clone().unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(HEAD_GRACE / 4);
                late.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            })
        };
        let burst: Vec<_> = (0..MAX_HEADS_PER_CLIENT)
            .map(|_| accept(b"GET / HTTP/1.1\r\nHost: x\r\n"))
            .collect();
        writer.join().unwrap();
        assert!(
            gate.places().heads.iter().any(|h| h.id == late_slot.id),
            "the late head was closed for the burst"
        );
        late.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut byte = [0u8; 1];
        let read = (&late).read(&mut byte);
        assert!(
            read.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
            "the late client's connection was shut: {read:?}"
        );
        assert_eq!(
            gate.places().heads.len(),
            MAX_HEADS_PER_CLIENT,
            "one of the burst made room"
        );
        drop(burst);
    }

    #[test]
    fn a_client_is_an_ipv4_address_or_an_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_of(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_of(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(client_of(ip("2001:db8:1:2:ffff::9")), client_of(ip("2001:db8:1:2::1")));
        assert_ne!(client_of(ip("2001:db8:1:3::1")), client_of(ip("2001:db8:1:2::1")));
        assert_eq!(client_of(ip("::1")), ip("::"));
    }

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
