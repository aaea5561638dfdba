//! The proxy for Google's HTTPS endpoints, read from the environment as
//! curl and Go's `net/http` read it: `https_proxy` (or `HTTPS_PROXY`)
//! names an HTTP proxy, `http://[USER:PASSWORD@]HOST[:PORT]` (port 80 when
//! none is given); `no_proxy` (or `NO_PROXY`) lists hosts reached directly:
//! comma-separated names, each matching itself and its subdomains (a
//! leading `.` is the same; a `:PORT` is ignored), `*` for every host.
//! Requests go through the proxy in a tunnel (`CONNECT HOST:443`), so TLS
//! is still end to end with Google. The emulator and the metadata server
//! are plain HTTP on the local network and always reached directly, as
//! Google's client libraries reach them.

use std::io::{self, Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// An HTTP proxy that opens tunnels.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The variable it was read from (`HTTPS_PROXY`), for messages.
    pub var: String,
    pub host: String,
    pub port: u16,
    /// `Basic …` from the URL's user and password.
    authorization: Option<String>,
}

/// Without the password.
impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.shown())
    }
}

impl Proxy {
    /// `http://HOST:PORT (HTTPS_PROXY)`: never the password.
    pub fn shown(&self) -> String {
        format!("http://{}:{} ({})", self.host, self.port, self.var)
    }

    /// A TCP connection to `host:port` through a tunnel of this proxy:
    /// what comes after is the caller's (TLS).
    pub fn tunnel(&self, host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
        let shown = self.shown();
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("the proxy {shown} has no address"));
        let mut socket = None;
        for addr in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(s) => {
                    socket = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut socket =
            socket.ok_or_else(|| io::Error::new(last.kind(), format!("cannot reach the proxy {shown}: {last}")))?;
        socket.set_read_timeout(Some(timeout))?;
        socket.set_write_timeout(Some(timeout))?;
        let mut request = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n");
        if let Some(auth) = &self.authorization {
            request = format!("{request}Proxy-Authorization: {auth}\r\n");
        }
        request.push_str("\r\n");
        socket.write_all(request.as_bytes())?;
        // The answer's head, a byte at a time: nothing of the tunnel after
        // it may be read here.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if socket.read(&mut byte)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the proxy {shown} closed the connection before answering CONNECT {host}:{port}"),
                ));
            }
            head.push(byte[0]);
            if head.len() > 16 << 10 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the proxy {shown} answered CONNECT with more than 16 KiB of headers"),
                ));
            }
        }
        let status_line = String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or_default()).into_owned();
        let code = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok());
        match code {
            Some(200..=299) => Ok(socket),
            Some(407) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the proxy {shown} wants credentials for CONNECT {host}:{port} ({}): give them in the variable as http://USER:PASSWORD@HOST:PORT",
                    status_line.trim()
                ),
            )),
            _ => Err(io::Error::other(format!(
                "the proxy {shown} refused CONNECT {host}:{port}: {}",
                leasehold_backend::quoted(status_line.trim())
            ))),
        }
    }
}

/// The proxy to reach `host` through, from the variables `var` gives (the
/// process's environment, or a test's).
///
/// # Errors
/// A proxy variable that is not an `http://` proxy URL: what is wrong with
/// it, never its password.
pub fn for_host(host: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Option<Proxy>, ProxyError> {
    let set = |names: [&'static str; 2]| {
        names.into_iter().find_map(|n| {
            var(n)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (n, v.trim().to_owned()))
        })
    };
    let Some((name, value)) = set(["https_proxy", "HTTPS_PROXY"]) else {
        return Ok(None);
    };
    if let Some((_, list)) = set(["no_proxy", "NO_PROXY"])
        && bypassed(host, &list)
    {
        return Ok(None);
    }
    parse(name, &value).map(Some)
}

/// Whether `no_proxy`'s `list` names `host`.
fn bypassed(host: &str, list: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).any(|entry| {
        if entry == "*" {
            return true;
        }
        // `[::1]:8080`, `example.com:443`: the port is not compared.
        let entry = match entry.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest),
            None if entry.matches(':').count() == 1 => entry.split(':').next().unwrap_or(entry),
            None => entry,
        };
        let entry = entry
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .to_ascii_lowercase();
        !entry.is_empty() && (host == entry || host.ends_with(&format!(".{entry}")))
    })
}

/// A proxy variable that is not an `http://` proxy URL: the variable and
/// what is wrong with its value (never its password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {problem}; give it as http://HOST:PORT (docs/FIRESTORE.md, \"Behind a proxy\")")]
pub struct ProxyError {
    pub var: &'static str,
    pub problem: ProxyProblem,
}

/// What is wrong with a proxy variable's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyProblem {
    /// A scheme other than `http://` (as `SCHEME://`).
    #[error(
        "a proxy reached by {} is not supported, only an HTTP proxy that opens tunnels (CONNECT)",
        leasehold_backend::quoted(.0)
    )]
    Scheme(String),
    #[error("the port {} is not a number from 1 to 65535", leasehold_backend::quoted(.0))]
    Port(String),
    #[error("it names no host")]
    NoHost,
}

fn parse(name: &'static str, value: &str) -> Result<Proxy, ProxyError> {
    let refused = |problem| ProxyError { var: name, problem };
    let rest = match value.split_once("://") {
        None => value,
        Some(("http" | "HTTP", rest)) => rest,
        Some((scheme, _)) => return Err(refused(ProxyProblem::Scheme(format!("{scheme}://")))),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (
            h,
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| refused(ProxyProblem::Port(p.to_owned())))?,
        ),
        _ => (hostport, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(refused(ProxyProblem::NoHost));
    }
    let authorization = userinfo.map(|u| format!("Basic {}", STANDARD.encode(percent_decoded(u))));
    Ok(Proxy {
        var: name.to_owned(),
        host: host.to_owned(),
        port,
        authorization,
    })
}

/// `%XX` escapes decoded (a password with `@` or `:` in it is written so).
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |j: usize| bytes.get(j).and_then(|c| char::from(*c).to_digit(16));
        match (bytes[at], hex(at + 1), hex(at + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                at += 3;
            }
            (other, _, _) => {
                out.push(other);
                at += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs = pairs.to_vec();
        move |n| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_variables_are_read_as_curl_reads_them() {
        let host = "firestore.googleapis.com";
        assert_eq!(for_host(host, &env(&[])).unwrap(), None);
        let p = for_host(host, &env(&[("HTTPS_PROXY", "http://proxy.corp:3128")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.var.as_str()),
            ("proxy.corp", 3128, "HTTPS_PROXY")
        );
        let p = for_host(
            host,
            &env(&[("https_proxy", "proxy.corp"), ("HTTPS_PROXY", "http://other:1")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.var.as_str()),
            ("proxy.corp", 80, "https_proxy")
        );
        let p = for_host(host, &env(&[("HTTPS_PROXY", "http://u%40x:s%3Acret@10.0.0.1:8080/")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", STANDARD.encode("u@x:s:cret")).as_str())
        );
        assert!(!format!("{p:?}").contains("cret"), "{p:?}");
        for list in [
            "*",
            "googleapis.com",
            ".googleapis.com",
            "localhost, firestore.googleapis.com:443",
            "x,GOOGLEAPIS.COM",
        ] {
            let e = env(&[("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", list)]);
            assert_eq!(for_host(host, &e).unwrap(), None, "{list}");
        }
        for list in ["apis.com", "googleapis.com.evil", "firestore"] {
            let e = env(&[("HTTPS_PROXY", "http://p:1"), ("no_proxy", list)]);
            assert!(for_host(host, &e).unwrap().is_some(), "{list}");
        }
        for (bad, says) in [
            ("https://p:1", "is not supported"),
            ("socks5://p:1", "is not supported"),
            ("http://p:x", "not a number"),
            ("http://:8080", "names no host"),
            ("http://user:secret@:8080", "names no host"),
        ] {
            let e = for_host(host, &env(&[("HTTPS_PROXY", bad)])).unwrap_err().to_string();
            assert!(e.contains(says) && e.starts_with("HTTPS_PROXY: "), "{bad}: {e}");
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
    }
}
