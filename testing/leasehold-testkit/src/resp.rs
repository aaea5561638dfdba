//! A small RESP2 client of this crate's own, for the Redis servers it
//! starts ([`redis`](crate::redis)) and for a test that looks behind the
//! store: one command at a time, over a plain `TcpStream`, or for TLS
//! through `openssl s_client` (the kit has no TLS library). It shares no
//! code with the Redis store's client, which is why this crate does not
//! use the `redis` crate: a bug they shared would pass its own tests.

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One reply of a server (an error reply is the `Err` of
/// [`Connection::command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`, `+PONG`.
    Status(String),
    Integer(i64),
    /// A bulk string, read as UTF-8 (lossily).
    Bulk(String),
    Array(Vec<Reply>),
    /// A nil bulk string or array (`GET` of a missing key).
    Nil,
}

impl Reply {
    /// The text of a status or bulk string.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(s) => Some(s),
            _ => None,
        }
    }
}

/// A connection to a test server, speaking RESP2.
pub struct Connection {
    reader: BufReader<Box<dyn Read + Send>>,
    writer: Box<dyn Write + Send>,
    /// `openssl s_client`, for TLS: ended with the connection.
    tls: Option<Child>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connect to `127.0.0.1:port` over plain TCP; a reply may take up to
    /// 30 s.
    ///
    /// # Errors
    /// When it cannot connect.
    pub fn plain(port: u16) -> Result<Self, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect to port {port}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let reader = stream.try_clone().map_err(|e| e.to_string())?;
        Ok(Self::new(Box::new(reader), Box::new(stream), None))
    }

    /// Connect to `127.0.0.1:port` over TLS, through `openssl s_client`,
    /// which checks the server's certificate against `ca` and for
    /// 127.0.0.1 (a refused certificate: the first command fails). No
    /// bound on a reply's wait.
    ///
    /// # Errors
    /// When `openssl` cannot be started.
    pub fn tls(port: u16, ca: &Path) -> Result<Self, String> {
        let mut child = Command::new("openssl")
            .args(["s_client", "-quiet", "-verify_return_error", "-verify_ip", "127.0.0.1"])
            .arg("-CAfile")
            .arg(ca)
            .args(["-connect", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("openssl s_client: {e}"))?;
        let (r, w) = (child.stdout.take().expect("piped"), child.stdin.take().expect("piped"));
        Ok(Self::new(Box::new(r), Box::new(w), Some(child)))
    }

    fn new(reader: Box<dyn Read + Send>, writer: Box<dyn Write + Send>, tls: Option<Child>) -> Self {
        Self {
            reader: BufReader::new(reader),
            writer,
            tls,
        }
    }

    /// Send one command, read its reply.
    ///
    /// # Errors
    /// An error reply (its text), or a failure to write or read.
    pub fn command(&mut self, args: &[&str]) -> Result<Reply, String> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        self.writer
            .write_all(&request)
            .and_then(|()| self.writer.flush())
            .map_err(|e| format!("send {}: {e}", args.first().unwrap_or(&"")))?;
        self.read_reply()
    }

    fn read_reply(&mut self) -> Result<Reply, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return Err("the server closed the connection".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(format!("read a reply: {e}")),
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at_checked(1).ok_or("an empty reply line")?;
        let number = || rest.parse::<i64>().map_err(|e| format!("bad reply line {line:?}: {e}"));
        match kind {
            "+" => Ok(Reply::Status(rest.to_owned())),
            "-" => Err(rest.to_owned()),
            ":" => Ok(Reply::Integer(number()?)),
            "$" => match usize::try_from(number()?) {
                Err(_) => Ok(Reply::Nil),
                Ok(len) => {
                    let mut data = vec![0; len + 2];
                    self.reader
                        .read_exact(&mut data)
                        .map_err(|e| format!("read a bulk string: {e}"))?;
                    data.truncate(len);
                    Ok(Reply::Bulk(String::from_utf8_lossy(&data).into_owned()))
                }
            },
            "*" => match usize::try_from(number()?) {
                Err(_) => Ok(Reply::Nil),
                Ok(n) => (0..n)
                    .map(|_| self.read_reply())
                    .collect::<Result<_, _>>()
                    .map(Reply::Array),
            },
            _ => Err(format!("not a RESP2 reply: {line:?}")),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(child) = &mut self.tls {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
