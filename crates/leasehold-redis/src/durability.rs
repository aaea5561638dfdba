//! What the server's settings allow: read at open (`CONFIG GET`, `ROLE`,
//! `INFO`), and again before every write (issue 39: a setting changed
//! under a running holder went unnoticed).
//!
//! A grant the server forgets is a token issued again: the next grant of
//! the name gets the same number. Settings that can forget one:
//!
//! - persistence: only `appendonly yes` with `appendfsync always` keeps an
//!   acknowledged write through a crash of the machine; with `everysec`
//!   (Redis's default when AOF is on) about the last second can be lost,
//!   without AOF everything since the last snapshot; and with
//!   `no-appendfsync-on-rewrite yes` nothing is synced while the AOF is
//!   rewritten (Redis's own docs: up to 30 s of writes on Linux);
//! - eviction: with `maxmemory` set and an `allkeys-*` policy, a full
//!   server deletes keys to make room — a name's hash among them, and with
//!   it the name's newest token. A `volatile-*` policy evicts only keys
//!   with an expiry, and leasehold sets none (its keys are never given a
//!   TTL: expiry is decided from the state, by the server's `TIME`), so a
//!   full server refuses writes (`OOM`, before a script's first write)
//!   instead of forgetting;
//! - a replica: it applies its primary's stream and drops anything else
//!   at the next resync, and with `replica-read-only no` it grants beside
//!   the primary — both issue token 1.
//!
//! The first two are the user's to accept (`durability=relaxed`); a
//! replica is refused always: it is not a weaker copy of the store but
//! another one, granting at the same time.

use crate::resp::Reply;
use crate::{Error, RedisBackend, Result};

/// `CONFIG GET` of every setting judged here: one command (Redis 7 takes
/// several names), about a microsecond of the server's time, so it rides
/// in front of every read that precedes a write.
pub(crate) const CONFIG_GET: &[&[u8]] = &[
    b"CONFIG",
    b"GET",
    b"appendonly",
    b"appendfsync",
    b"no-appendfsync-on-rewrite",
    b"maxmemory",
    b"maxmemory-policy",
];

/// `ROLE`: `master`, or `slave` with the primary's address.
pub(crate) const ROLE: &[&[u8]] = &[b"ROLE"];

/// A write refused on the server's settings: what is not supported, and
/// why (what it risks, what to set, how to accept it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub what: &'static str,
    pub reason: String,
}

/// The persistence and eviction settings, as `CONFIG GET` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    appendonly: String,
    appendfsync: String,
    no_fsync_on_rewrite: String,
    maxmemory: u64,
    policy: String,
}

/// The server's role: a primary, or a replica of `primary` (host:port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    Primary,
    Replica { primary: String },
}

/// What the judged settings are, or why each could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub config: std::result::Result<Config, Unread>,
    pub role: std::result::Result<Role, Unread>,
}

/// Why a setting could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unread {
    #[error("not read yet")]
    NotYet,
    /// An error reply to `command`.
    #[error("{command} was refused: {words}")]
    Refused { command: &'static str, words: String },
    /// An answer of another form: `what`, as it was.
    #[error("{command} answered {what}")]
    Answered { command: &'static str, what: String },
    #[error("CONFIG GET did not answer {0}")]
    NoSetting(String),
    #[error("CONFIG GET answered no number for maxmemory")]
    NoMaxmemory,
    #[error("ROLE answered nothing")]
    NoRole,
}

impl Settings {
    /// Before the server was asked.
    pub fn unread() -> Self {
        Self {
            config: Err(Unread::NotYet),
            role: Err(Unread::NotYet),
        }
    }

    /// From the replies to [`CONFIG_GET`] and [`ROLE`] (an error reply or
    /// an odd answer is a setting unknown, which is a risk).
    pub fn parse(config: &Reply, role: &Reply) -> Self {
        Self {
            config: parse_config(config),
            role: parse_role(role),
        }
    }

    /// Each way these settings can lose an acknowledged grant (persistence
    /// and eviction: what `durability=relaxed` accepts), one sentence each.
    pub fn risks(&self) -> Vec<(&'static str, String)> {
        const REISSUE: &str = "and the next grants reissue their tokens";
        let c = match &self.config {
            Ok(c) => c,
            Err(why) => {
                return vec![(
                    "durability",
                    format!(
                        "the server's persistence and eviction settings could not be read ({why}): it may forget acknowledged grants, {REISSUE}"
                    ),
                )];
            }
        };
        let mut risks = Vec::new();
        if c.appendonly == "yes" {
            if c.appendfsync != "always" {
                risks.push((
                    "durability",
                    format!(
                        "the server syncs its append-only file {} (appendfsync {}), not at every write: a crash can lose the last acknowledged grants, {REISSUE}",
                        if c.appendfsync == "everysec" { "once a second" } else { "when the OS does" },
                        c.appendfsync
                    ),
                ));
            }
            if c.no_fsync_on_rewrite != "no" {
                risks.push((
                    "rewrite",
                    format!(
                        "the server does not sync its append-only file while it rewrites it (no-appendfsync-on-rewrite {}): a crash during a rewrite can lose acknowledged grants, {REISSUE}",
                        c.no_fsync_on_rewrite
                    ),
                ));
            }
        } else {
            risks.push((
                "durability",
                format!(
                    "the server runs without its append-only file (appendonly {}): a crash loses every grant since its last snapshot, {REISSUE}",
                    c.appendonly
                ),
            ));
        }
        if c.maxmemory > 0 && c.policy.starts_with("allkeys-") {
            risks.push((
                "eviction",
                format!(
                    "the server evicts any key when it reaches its memory limit (maxmemory {}, maxmemory-policy {}): a live grant's name can be deleted, its lease forgotten while held, {REISSUE}",
                    c.maxmemory, c.policy
                ),
            ));
        }
        risks
    }

    /// What to set instead, for a refusal.
    pub fn remedy() -> &'static str {
        "Set `appendonly yes`, `appendfsync always`, `no-appendfsync-on-rewrite no`, and `maxmemory-policy noeviction` (or a volatile-* policy) or `maxmemory 0` on the server (docs/REDIS.md), or accept the risk with ?durability=relaxed"
    }

    /// Why this server must not be written to at all, whatever the URL
    /// accepts: a replica; under `strict`, a role that could not be read.
    pub fn not_the_primary(&self, relaxed: bool) -> Option<Refusal> {
        match &self.role {
            Ok(Role::Replica { primary }) => Some(Refusal {
                what: "a replica as the store",
                reason: format!(
                    "the server is a replica (of {primary}), not the primary: what is written on it is not the store's — its primary overwrites it, and with replica-read-only no it grants beside the primary, both issuing the same tokens. Point the URL at the primary ({primary})"
                ),
            }),
            Err(why) if !relaxed => Some(Refusal {
                what: "a server whose role cannot be read",
                reason: format!(
                    "ROLE could not be read ({why}): the server may be a replica, granting beside its primary. Let the user run ROLE (docs/REDIS.md), or accept the risk with ?durability=relaxed"
                ),
            }),
            Ok(Role::Primary) | Err(_) => None,
        }
    }

    /// Why a write must not be made on these settings (`None`: it may):
    /// a replica always; a risk unless `relaxed`.
    pub fn refusal(&self, relaxed: bool) -> Option<Refusal> {
        if let Some(refusal) = self.not_the_primary(relaxed) {
            return Some(refusal);
        }
        let risks = self.risks();
        (!relaxed && !risks.is_empty()).then(|| {
            let said: Vec<String> = risks.into_iter().map(|(_, r)| r).collect();
            Refusal {
                what: "a server whose settings can lose acknowledged grants",
                reason: format!("{}. {}", said.join("; "), Self::remedy()),
            }
        })
    }

    fn summary(&self) -> (String, String) {
        let config = match &self.config {
            Ok(c) => format!(
                "appendonly {}, appendfsync {}, no-appendfsync-on-rewrite {}; maxmemory {}, maxmemory-policy {}",
                c.appendonly, c.appendfsync, c.no_fsync_on_rewrite, c.maxmemory, c.policy
            ),
            Err(why) => format!("unknown ({why})"),
        };
        let role = match &self.role {
            Ok(Role::Primary) => "primary".to_owned(),
            Ok(Role::Replica { primary }) => format!("replica of {primary}"),
            Err(why) => format!("unknown ({why})"),
        };
        (config, role)
    }
}

fn parse_config(reply: &Reply) -> std::result::Result<Config, Unread> {
    const COMMAND: &str = "CONFIG GET";
    let pairs = match reply {
        Reply::Array(kv) => kv,
        Reply::Error(words) => {
            return Err(Unread::Refused {
                command: COMMAND,
                words: words.clone(),
            });
        }
        other => {
            return Err(Unread::Answered {
                command: COMMAND,
                what: format!("{other:?}"),
            });
        }
    };
    let get = |name: &str| -> std::result::Result<String, Unread> {
        pairs
            .chunks(2)
            .find(|kv| kv[0].text() == Some(name))
            .and_then(|kv| kv.get(1)?.text())
            .map(str::to_owned)
            .ok_or_else(|| Unread::NoSetting(name.to_owned()))
    };
    Ok(Config {
        appendonly: get("appendonly")?,
        appendfsync: get("appendfsync")?,
        no_fsync_on_rewrite: get("no-appendfsync-on-rewrite")?,
        maxmemory: get("maxmemory")?.parse().map_err(|_| Unread::NoMaxmemory)?,
        policy: get("maxmemory-policy")?,
    })
}

fn parse_role(reply: &Reply) -> std::result::Result<Role, Unread> {
    const COMMAND: &str = "ROLE";
    let answered = |what: String| Unread::Answered { command: COMMAND, what };
    match reply {
        Reply::Array(items) => match items.first().and_then(Reply::text) {
            Some("master") => Ok(Role::Primary),
            Some("slave") => {
                let host = items.get(1).and_then(Reply::text).unwrap_or("?");
                let port = items.get(2).and_then(Reply::int).unwrap_or(0);
                Ok(Role::Replica {
                    primary: format!("{host}:{port}"),
                })
            }
            Some(other) => Err(answered(format!("{other:?}"))),
            None => Err(Unread::NoRole),
        },
        Reply::Error(words) => Err(Unread::Refused {
            command: COMMAND,
            words: words.clone(),
        }),
        other => Err(answered(format!("{other:?}"))),
    }
}

/// What the server is, as read at open (for `doctor`), with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Durability {
    pub version: String,
    pub settings: Settings,
    pub replicas: u32,
}

impl Durability {
    /// Before the server was asked.
    pub fn unread() -> Self {
        Self {
            version: String::new(),
            settings: Settings::unread(),
            replicas: 0,
        }
    }

    pub fn read(backend: &RedisBackend) -> Result<Self> {
        // A setting refused or answered oddly is unknown (a risk); a server
        // not reached is unavailable, as for any other call — not a
        // setting to change (it was a connection reset by a server killed
        // while a client opened the store: fault cases 37, 38).
        let info = |section: &str| -> Result<String> {
            match backend.call(&["INFO", section]) {
                Ok(reply) => Ok(reply.text().unwrap_or_default().to_owned()),
                Err(Error::Server(_)) => Ok(String::new()),
                Err(e) => Err(e),
            }
        };
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let server = info("server")?;
        let replication = info("replication")?;
        Ok(Self {
            version: field(&server, "redis_version").unwrap_or_default(),
            settings: backend.settings(true)?,
            replicas: field(&replication, "connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        })
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
        let (config, role) = self.settings.summary();
        vec![
            ("redis version".to_owned(), self.version.clone()),
            ("persistence and eviction".to_owned(), config),
            (
                "replication".to_owned(),
                format!("{role}, {} connected replicas, writes wait for {wait}", self.replicas),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Reply {
        let mut all = vec![
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("no-appendfsync-on-rewrite", "no"),
            ("maxmemory", "0"),
            ("maxmemory-policy", "noeviction"),
        ];
        for (k, v) in pairs {
            all.retain(|(name, _)| name != k);
            all.push((k, v));
        }
        Reply::Array(
            all.iter()
                .flat_map(|(k, v)| [Reply::Bulk(k.as_bytes().to_vec()), Reply::Bulk(v.as_bytes().to_vec())])
                .collect(),
        )
    }

    fn primary() -> Reply {
        Reply::Array(vec![
            Reply::Bulk(b"master".to_vec()),
            Reply::Int(0),
            Reply::Array(vec![]),
        ])
    }

    #[test]
    fn each_setting_that_can_forget_a_grant_is_named() {
        let safe = Settings::parse(&config(&[]), &primary());
        assert_eq!(safe.refusal(false), None);
        for (set, says) in [
            (("appendfsync", "everysec"), "appendfsync everysec"),
            (("appendonly", "no"), "appendonly no"),
            (("no-appendfsync-on-rewrite", "yes"), "no-appendfsync-on-rewrite yes"),
        ] {
            let s = Settings::parse(&config(&[set]), &primary());
            let refused = s.refusal(false).expect("refused").reason;
            assert!(
                refused.contains(says) && refused.contains("durability=relaxed"),
                "{refused}"
            );
            assert_eq!(s.refusal(true), None, "relaxed accepts {says}");
        }
        let evicting = Settings::parse(
            &config(&[("maxmemory", "1000000"), ("maxmemory-policy", "allkeys-lru")]),
            &primary(),
        );
        assert!(
            evicting
                .refusal(false)
                .is_some_and(|r| r.reason.contains("allkeys-lru"))
        );
        // No TTL on leasehold's keys: volatile-* never evicts them; no limit, no eviction.
        for (limit, policy) in [
            ("1000000", "volatile-lru"),
            ("0", "allkeys-lru"),
            ("1000000", "noeviction"),
        ] {
            let s = Settings::parse(
                &config(&[("maxmemory", limit), ("maxmemory-policy", policy)]),
                &primary(),
            );
            assert_eq!(s.refusal(false), None, "{limit} {policy}");
        }
    }

    #[test]
    fn a_replica_is_refused_even_when_relaxed() {
        let role = Reply::Array(vec![
            Reply::Bulk(b"slave".to_vec()),
            Reply::Bulk(b"10.0.0.1".to_vec()),
            Reply::Int(6379),
            Reply::Bulk(b"connected".to_vec()),
            Reply::Int(1),
        ]);
        let s = Settings::parse(&config(&[]), &role);
        for relaxed in [false, true] {
            let refused = s.refusal(relaxed).expect("refused").reason;
            assert!(
                refused.contains("replica") && refused.contains("10.0.0.1:6379"),
                "{refused}"
            );
        }
        let unknown = Settings::parse(&Reply::Error("NOPERM".into()), &Reply::Error("NOPERM".into()));
        assert!(unknown.refusal(false).is_some());
        assert_eq!(unknown.refusal(true), None);
    }
}
