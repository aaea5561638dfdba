//! Just enough of Redis's protocol (RESP2) for this store: a command is an
//! array of bulk strings, an answer one reply. Written here rather than
//! taken from a client library so that the connection is a plain
//! `TcpStream` (or rustls over one) with the read and write timeouts the
//! store sets, and TLS is set up as for every other network store
//! (`leasehold-tls`).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// The longest bulk string or array this client reads: far above what the
/// store writes (a name's document, 1,000 history entries).
const MAX_LEN: usize = 512 << 20;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    Array(Vec<Reply>),
    /// An error reply (`-ERR …`, `-NOSCRIPT …`): the server's words.
    Error(String),
}

impl Reply {
    /// The text of a bulk string or status, if it is one.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Bulk(b) => std::str::from_utf8(b).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    /// An integer, or a bulk string holding one.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            other => other.text()?.parse().ok(),
        }
    }
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// One connection to the server.
pub struct Conn {
    io: BufReader<Box<dyn Stream>>,
    socket: TcpStream,
    /// Commands queued and not yet written.
    out: Vec<u8>,
}

#[allow(
    clippy::missing_fields_in_debug,
    reason = "a buffered stream says nothing worth printing"
)]
impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.socket.peer_addr().ok())
            .finish()
    }
}

impl Conn {
    /// Connect to `host:port` (over TLS with `tls`), every read and write
    /// bounded by `timeout`.
    pub fn connect(host: &str, port: u16, tls: Option<&Arc<ClientConfig>>, timeout: Duration) -> io::Result<Self> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
        for addr in (bare, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(socket) => {
                    socket.set_read_timeout(Some(timeout))?;
                    socket.set_write_timeout(Some(timeout))?;
                    socket.set_nodelay(true)?;
                    let io: Box<dyn Stream> = match tls {
                        None => Box::new(socket.try_clone()?),
                        Some(config) => {
                            let name = ServerName::try_from(bare.to_owned())
                                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                            let tls = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
                            Box::new(StreamOwned::new(tls, socket.try_clone()?))
                        }
                    };
                    return Ok(Self {
                        out: Vec::new(),
                        io: BufReader::new(io),
                        socket,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A handle on this connection's socket that another thread may shut
    /// down, ending a read in progress here (a subscriber's wait, when the
    /// waiter is cancelled).
    pub fn interrupter(&self) -> io::Result<TcpStream> {
        self.socket.try_clone()
    }

    /// A subscriber's wait for its next message, at most `within`: true
    /// when one came, false when the time ran out (an error is a broken
    /// connection).
    pub fn next_message(&mut self, within: Duration) -> io::Result<bool> {
        self.set_read_timeout(within)?;
        match self.read() {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// How long a read may wait (a subscriber waits longer than a call).
    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
    }

    /// Send one command and read its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.send(args)?;
        self.read()
    }

    /// Send one command, with any queued before it, in one write.
    pub fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        self.queue(args)?;
        self.flush()
    }

    /// Queue one command, to be written with the next [`Conn::send`] or
    /// [`Conn::flush`]: a pipeline in one TCP segment (sent one by one,
    /// with `TCP_NODELAY`, each command woke the server on its own —
    /// measured: about 20 µs of its CPU per command).
    pub fn queue(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let out = &mut self.out;
        write!(out, "*{}\r\n", args.len())?;
        for a in args {
            write!(out, "${}\r\n", a.len())?;
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        Ok(())
    }

    /// Write every queued command.
    pub fn flush(&mut self) -> io::Result<()> {
        let out = std::mem::take(&mut self.out);
        let w = self.io.get_mut();
        w.write_all(&out)?;
        w.flush()
    }

    /// Read one reply (a subscriber reads messages this way too).
    pub fn read(&mut self) -> io::Result<Reply> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(1);
        let len = || -> io::Result<Option<usize>> {
            let n: i64 = rest.parse().map_err(|_| bad(&line))?;
            match usize::try_from(n) {
                Ok(n) if n <= MAX_LEN => Ok(Some(n)),
                Ok(_) => Err(bad(&line)),
                Err(_) => Ok(None),
            }
        };
        Ok(match kind {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(rest.parse().map_err(|_| bad(&line))?),
            "$" => match len()? {
                None => Reply::Nil,
                Some(n) => {
                    let mut buf = vec![0; n + 2];
                    self.io.read_exact(&mut buf)?;
                    buf.truncate(n);
                    Reply::Bulk(buf)
                }
            },
            "*" => match len()? {
                None => Reply::Nil,
                Some(n) => {
                    let mut items = Vec::with_capacity(n.min(1024));
                    for _ in 0..n {
                        items.push(self.read()?);
                    }
                    Reply::Array(items)
                }
            },
            _ => return Err(bad(&line)),
        })
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        let n = (&mut self.io).take(MAX_LEN as u64).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        if !line.ends_with(b"\r\n") || line.len() < 3 {
            return Err(bad(&String::from_utf8_lossy(&line)));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|e| bad(&String::from_utf8_lossy(e.as_bytes())))
    }
}

fn bad(line: &str) -> io::Error {
    let shown: String = line.chars().take(60).collect();
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a Redis reply: {shown:?} (is this a Redis server?)"),
    )
}
