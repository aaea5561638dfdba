//! Why `serve` cannot start, or stopped: each refusal with the facts it is
//! about, worded once in `Display` (the CLI prints it as it is).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Why `serve` cannot start, or stopped.
#[derive(Debug)]
pub enum ServeError {
    /// `listen` is not `HOST:PORT`, or its host does not resolve.
    Unresolvable { listen: String, error: io::Error },
    /// `listen`'s host resolves to no address.
    NoAddress { listen: String },
    /// The token file cannot be read.
    TokenFile { path: PathBuf, error: io::Error },
    /// The token in `path` is too short to be a secret.
    ShortToken { path: PathBuf, length: usize },
    /// `listen` (resolved to `addresses`) is not all loopback, and no token
    /// is required.
    OpenWithoutToken { listen: String, addresses: Vec<SocketAddr> },
    /// Actions are allowed, and no token is required.
    ActionsWithoutToken,
    /// A daemon's metrics asked on `listen` (resolved to `addresses`),
    /// which is not all loopback.
    MetricsNotLoopback { listen: String, addresses: Vec<SocketAddr> },
    /// How often the store is read lies outside 100 ms to 1 h.
    Refresh { refresh: Duration },
    /// A name given to `--allow-host` is not a host name (why).
    AllowHost(String),
    /// The addresses cannot be listened on.
    Listen { listen: String, error: io::Error },
    /// The listening socket failed.
    Serving(io::Error),
}

impl ServeError {
    /// Arguments that are not safe or not usable (the CLI's exit 2), as
    /// opposed to an address or a file the system refused.
    #[must_use]
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::TokenFile { .. } | Self::Listen { .. } | Self::Serving(_))
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HOST_PORT: &str = "write HOST:PORT, e.g. 127.0.0.1:7878, [::1]:7878 or localhost:7878";
        match self {
            Self::Unresolvable { listen, error } => write!(f, "cannot listen on {listen}: {error}; {HOST_PORT}"),
            Self::NoAddress { listen } => {
                write!(
                    f,
                    "cannot listen on {listen}: the name resolves to no address; {HOST_PORT}"
                )
            }
            Self::TokenFile { path, error } => write!(f, "cannot read the token file {}: {error}", path.display()),
            Self::ShortToken { path, length } => write!(
                f,
                "the token in {} is {length} characters; use at least 16 (e.g. `head -c 32 /dev/urandom | base64 > {}`)",
                path.display(),
                path.display()
            ),
            Self::OpenWithoutToken { listen, addresses } => {
                let shown = shown(listen, addresses);
                write!(
                    f,
                    "refusing to listen on {shown} without a token: anyone who can reach it could read every lease \
                     holder and task payload. Pass --token-file FILE (readers then need the token), or listen on \
                     127.0.0.1 or localhost"
                )
            }
            Self::MetricsNotLoopback { listen, addresses } => write!(
                f,
                "refusing to serve metrics on {}: a daemon's metrics are served on loopback only \
                 (127.0.0.1:PORT, [::1]:PORT or localhost:PORT); scrape them from another host through a proxy \
                 or a tunnel (ssh -L)",
                shown(listen, addresses)
            ),
            Self::ActionsWithoutToken => {
                f.write_str("--allow-actions needs --token-file FILE: retrying and purging tasks always need the token")
            }
            Self::Refresh { .. } => f.write_str("--refresh must lie between 100ms and 1h"),
            Self::AllowHost(why) => f.write_str(why),
            Self::Listen { listen, error } => write!(f, "cannot listen on {listen}: {error}"),
            Self::Serving(error) => error.fmt(f),
        }
    }
}

/// `listen` and, when they differ, the addresses it resolved to.
fn shown(listen: &str, addresses: &[SocketAddr]) -> String {
    let resolved = addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if resolved == listen {
        resolved
    } else {
        format!("{listen} ({resolved})")
    }
}

/// No source: every message prints its cause, which a chain would show
/// twice.
impl std::error::Error for ServeError {}
