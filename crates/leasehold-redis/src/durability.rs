//! What the server's persistence and replication settings allow, read at
//! open (`CONFIG GET`, `INFO`).
//!
//! Only `appendonly yes` with `appendfsync always` keeps an acknowledged
//! write through a crash of the server: with `everysec` (Redis's default
//! when AOF is on) about the last second of writes can be lost, without
//! AOF everything since the last snapshot. A lost grant is a reissued
//! token: the next grant of the name gets the same number again.

use crate::resp::Reply;
use crate::{Error, RedisBackend, Result};

/// The settings as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Durability {
    pub version: String,
    /// `CONFIG GET appendonly` / `appendfsync`, or why they could not be read.
    pub settings: std::result::Result<(String, String), String>,
    pub role: String,
    pub replicas: u32,
}

impl Durability {
    /// Before the server was asked.
    pub fn unread() -> Self {
        Self {
            version: String::new(),
            settings: Err("not read yet".to_owned()),
            role: String::new(),
            replicas: 0,
        }
    }

    pub fn read(backend: &RedisBackend) -> Result<Self> {
        let info = backend.call(&["INFO", "server"])?;
        let replication = backend.call(&["INFO", "replication"])?;
        let field = |text: &Reply, key: &str| {
            text.text()
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        // A setting refused or answered oddly is unknown (a risk); a server
        // not reached is unavailable, as for any other call — not a
        // setting to change (it was a connection reset by a server killed
        // while a client opened the store: fault cases 37, 38).
        let config = |key: &str| -> Result<std::result::Result<String, String>> {
            match backend.call(&["CONFIG", "GET", key]) {
                Ok(Reply::Array(kv)) if kv.len() == 2 => Ok(Ok(kv[1].text().unwrap_or_default().to_owned())),
                Ok(other) => Ok(Err(format!("CONFIG GET {key} answered {other:?}"))),
                Err(Error::Server(words)) => Ok(Err(format!("CONFIG GET {key} was refused: {words}"))),
                Err(e) => Err(e),
            }
        };
        let settings = match config("appendonly")? {
            Ok(aof) => config("appendfsync")?.map(|fsync| (aof, fsync)),
            Err(why) => Err(why),
        };
        Ok(Self {
            version: field(&info, "redis_version").unwrap_or_default(),
            settings,
            role: field(&replication, "role").unwrap_or_default(),
            replicas: field(&replication, "connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        })
    }

    /// What these settings can lose, if anything.
    pub fn risk(&self) -> Option<String> {
        match &self.settings {
            Err(why) => Some(format!(
                "the server's persistence settings could not be read ({why}): a crash may lose acknowledged grants and so reissue tokens"
            )),
            Ok((aof, _)) if aof != "yes" => Some(
                "the server runs without its append-only file (appendonly no): a crash loses every grant since its last snapshot, and the next grants reissue their tokens"
                    .to_owned(),
            ),
            Ok((_, fsync)) if fsync != "always" => Some(format!(
                "the server syncs its append-only file {} (appendfsync {fsync}), not at every write: a crash can lose the last acknowledged grants, and the next grants reissue their tokens",
                if fsync == "everysec" { "once a second" } else { "when the OS does" }
            )),
            Ok(_) => None,
        }
    }

    /// `wait=N` asks for more replicas than the server has.
    pub fn replicas_short(&self, wait: u32) -> Option<String> {
        (wait > self.replicas).then(|| {
            format!(
                "wait={wait}, and the server has {} connected replicas: every write will fail as not acknowledged",
                self.replicas
            )
        })
    }

    pub fn facts(&self, wait: u32) -> Vec<(String, String)> {
        let settings = match &self.settings {
            Ok((aof, fsync)) => format!("appendonly {aof}, appendfsync {fsync}"),
            Err(why) => format!("unknown ({why})"),
        };
        vec![
            ("redis version".to_owned(), self.version.clone()),
            ("persistence".to_owned(), settings),
            (
                "replication".to_owned(),
                format!(
                    "{}, {} connected replicas, writes wait for {wait}",
                    self.role, self.replicas
                ),
            ),
        ]
    }
}
