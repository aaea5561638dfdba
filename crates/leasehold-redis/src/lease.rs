//! Lease operations on Redis: a name is one hash (`PREFIX:name:NAME`: `s`
//! the document's state as JSON, `n` the newest token, `v` its version,
//! one more per commit) and its history a list (`PREFIX:history:NAME`,
//! the newest `HISTORY_PER_NAME` entries). The algorithm is the shared
//! one for a name kept as one document (`leasehold_backend::document`):
//! one script reads the hash and the server's `TIME`, the plan decides
//! here, and one script commits only if the version is still the one read.
//!
//! **The clock is the server's**: `TIME`, read inside the script that reads
//! the name, is the `now` of the decision. It is the server's wall clock:
//! docs/REDIS.md says what a step of it does.

use leasehold_backend::document::{self, DocStore, Draft, Snapshot, State};
use leasehold_backend::plan::HISTORY_PER_NAME;
use leasehold_backend::{
    HistoryEntry, LeaseHistoryParams, LeaseListParams, LeaseName, LeaseState, Token, TokensBumpParams,
    TokensBumpRefused, TokensBumped,
};

use crate::resp::Reply;
use crate::{Error, RedisBackend, Result, Script};

/// Read a name: the server's time, the name's hash fields and the floor.
pub const READ: Script = Script::new(
    "local t = redis.call('TIME')
     local d = redis.call('HMGET', KEYS[1], 's', 'v', 'n')
     return {t[1], t[2], d[1], d[2], d[3], redis.call('GET', KEYS[2])}",
);

/// Commit a name's new document if its version is still the one read (and,
/// for a new name, the floor too, which a bump raises) and, when ARGV[8]
/// is not empty (a decision made on the document as last committed:
/// `Committed`), the server's time is within [ARGV[8], ARGV[9]) — the
/// times at which that decision stands — and the document is still,
/// byte for byte, ARGV[10], the one this handle wrote (a store flushed
/// and written again counts its versions from 1 again); append its new
/// history entries (ARGV[12 + ARGV[11]] on), keep the newest ARGV[7], tell
/// the name's waiters on the channel ARGV[6] (none when it is empty: a
/// commit that changes nothing they wait on, `Draft::changes_the_queue`),
/// and tell the waiter behind each waiter that left the queue on that
/// waiter's own channel (the ARGV[11] channels from ARGV[12]:
/// `Keys::left`). It answers 0 when it wrote nothing, else `{1, seconds,
/// microseconds}`: the server's time of the commit.
///
/// A script that fails after its first write keeps what it wrote (Redis
/// does not roll back), so nothing that can fail comes after it (issue
/// 39): every key it writes is checked for its type first, and the
/// waiters are told only if the user may publish on the channel
/// (`redis.acl_check_cmd`, Redis 7) — else its waiters poll. What remains
/// is what no script can check: a server killed in the middle, which its
/// AOF replays whole or not at all (a script is one `MULTI` in the AOF).
pub const COMMIT: Script = Script::new(
    "local types = {'hash', 'list', 'set', 'string'}
     for i, want in ipairs(types) do
       local got = redis.call('TYPE', KEYS[i])['ok']
       if got ~= 'none' and got ~= want then
         return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. got .. ' where leasehold keeps a ' .. want .. '; nothing was written')
       end
     end
     local v = redis.call('HGET', KEYS[1], 'v')
     if (v or '') ~= ARGV[1] then return 0 end
     local t = redis.call('TIME')
     if ARGV[8] ~= '' then
       local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
       if now < tonumber(ARGV[8]) or now >= tonumber(ARGV[9]) then return 0 end
       if redis.call('HGET', KEYS[1], 's') ~= ARGV[10] then return 0 end
     end
     if ARGV[1] == '' then
       if (redis.call('GET', KEYS[4]) or '0') ~= ARGV[2] then return 0 end
       redis.call('SADD', KEYS[3], ARGV[5])
     end
     redis.call('HSET', KEYS[1], 's', ARGV[3], 'n', ARGV[4], 'v', tostring((tonumber(ARGV[1]) or 0) + 1))
     local left = tonumber(ARGV[11])
     if #ARGV > 11 + left then
       redis.call('RPUSH', KEYS[2], unpack(ARGV, 12 + left))
       redis.call('LTRIM', KEYS[2], -tonumber(ARGV[7]), -1)
     end
     if ARGV[6] ~= '' and redis.acl_check_cmd('PUBLISH', ARGV[6], 'changed') then
       redis.call('PUBLISH', ARGV[6], 'changed')
     end
     for i = 12, 11 + left do
       if redis.acl_check_cmd('PUBLISH', ARGV[i], 'left') then
         redis.call('PUBLISH', ARGV[i], 'left')
       end
     end
     return {1, t[1], t[2]}",
);

/// Whether the waiter of ticket ARGV[1] is in the name's document
/// (expired or not): its record, `{"ticket":N,...}` as `document`
/// writes it, is looked for in the JSON as it is — a waiter far back
/// asks this once per waiter ahead of it, and decoding a document of
/// 200 waiters here or in the client costs far more. Inside a JSON
/// string a quote is escaped, so the pattern matches a record's key only.
pub const QUEUED: Script = Script::new(
    "local s = redis.call('HGET', KEYS[1], 's')
     if not s then return 0 end
     if string.find(s, '{\"ticket\":' .. ARGV[1] .. ',', 1, true) then return 1 end
     return 0",
);

/// Raise the store's floor from ARGV[1] (as read) to ARGV[2].
pub const RAISE_FLOOR: Script = Script::new(
    "if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
     redis.call('SET', KEYS[1], ARGV[2])
     return 1",
);

/// What a snapshot carries for its commit: the version read (`None` for a
/// name without a hash yet), the store's floor as read, why the server's
/// settings, read in the same round trip, refuse a write (`None`: they do
/// not), and — for a snapshot of the document as last committed, not read
/// — the server times its decision stands for.
#[derive(Debug)]
pub struct Read {
    version: Option<String>,
    floor: u64,
    refused: Option<crate::durability::Refusal>,
    expected: Option<Expected>,
}

/// The document the commit expects, byte for byte, beside the times
/// ([`Stands`]) of a decision made on it as last committed.
#[derive(Debug, Clone)]
struct Expected {
    stands: Stands,
    written: String,
}

/// The server times, in microseconds, at which a decision made on a
/// document as last committed is the one a fresh read would make: from its
/// `now` (the server's time of that commit, plus the time this process has
/// counted since its answer) until the first expiry after it, of a grant
/// or a waiter — whatever was live at `now` is live until then, and what
/// had expired stays expired. The commit script refuses outside them, and
/// the release reads afresh.
#[derive(Debug, Clone, Copy)]
struct Stands {
    from_us: i64,
    until_us: i64,
}

/// A document as this handle last committed it: the release of a grant it
/// holds decides on it instead of reading the name again (one round trip
/// fewer per lease cycle; `DocStore::snapshot_to_release`). Its version,
/// the document itself and the times it stands for ([`Stands`]) go to the
/// commit, which refuses when any has moved on.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The document as written (the hash's `s`).
    written: String,
    newest: u64,
    version: String,
    floor: u64,
    /// The server's time of the commit, and when this process had its
    /// answer: the snapshot's `now` counts on from them.
    at_us: i64,
    answered: std::time::Instant,
}

/// How many names' documents a handle keeps at most; past it they are all
/// forgotten (the next release of each reads afresh).
const COMMITTED_KEPT: usize = 1024;

type Snap = Snapshot<Read>;

/// What a snapshot is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A decision that may commit: the server's settings are read with it
    /// (`durability`), and a commit refused on them.
    Commit,
    /// Only to be shown or judged (`lease_get`, a waiter's reading): the
    /// settings are not asked — three commands fewer per reading, which a
    /// crowd of waiters makes many times a second.
    Show,
}

/// A commit or floor script answers 1 (the commit with the server's time
/// beside it) when it wrote.
fn wrote(reply: &Reply) -> bool {
    match reply {
        Reply::Array(fields) => fields.first().and_then(Reply::int) == Some(1),
        r => r.int() == Some(1),
    }
}

/// The server's time a commit answered with, in microseconds.
fn committed_at(reply: &Reply) -> Option<i64> {
    let Reply::Array(fields) = reply else {
        return None;
    };
    let [_, secs, micros] = fields.as_slice() else {
        return None;
    };
    Some(secs.int()?.saturating_mul(1_000_000).saturating_add(micros.int()?))
}

fn text(r: &Reply) -> Option<String> {
    r.text().map(str::to_owned)
}

/// A value read from a key, for a message: quoted and cut short
/// (`leasehold_backend::quoted`), bytes that are not UTF-8 escaped.
pub(crate) fn shown(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => leasehold_backend::quoted(&String::from_utf8_lossy(b)),
        Reply::Int(i) => i.to_string(),
        Reply::Nil => "nothing".to_owned(),
        _ => "a value of another type".to_owned(),
    }
}

impl RedisBackend {
    /// The snapshot of `name` from a `READ` reply.
    fn decode(&self, name: &LeaseName, reply: &Reply, refused: Option<crate::durability::Refusal>) -> Result<Snap> {
        let corrupt = |what: &str| Error::Corrupt(format!("{}: {what}", self.keys.name(name)));
        let Reply::Array(f) = reply else {
            return Err(corrupt("the read script answered no array"));
        };
        let [secs, micros, state, version, newest, floor] = f.as_slice() else {
            return Err(corrupt("the read script answered the wrong number of fields"));
        };
        let (Some(secs), Some(micros)) = (secs.int(), micros.int()) else {
            return Err(corrupt("TIME answered no numbers"));
        };
        let now_us = secs.saturating_mul(1_000_000).saturating_add(micros);
        let floor = self.floor_of(floor)?;
        // A version the commit script could not count on: damage, said at
        // once (the script would take it for 0, and a version read again
        // would never match — a race lost every round).
        if !matches!(version, Reply::Nil) && version.int().is_none_or(|v| v < 1) {
            return Err(corrupt(&format!(
                "field `v` holds {}, not a version (a positive integer)",
                shown(version)
            )));
        }
        let read = Read {
            version: text(version),
            floor,
            refused,
            expected: None,
        };
        let Some(state) = text(state) else {
            let state = State {
                floor,
                ..State::default()
            };
            return Ok(Snapshot::new(state, 0, now_us, read));
        };
        let state: State =
            serde_json::from_str(&state).map_err(|e| corrupt(&format!("field `s` is unreadable: {e}")))?;
        let newest = newest
            .int()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| corrupt("field `n` is not a token"))?;
        Ok(Snapshot::new(state, newest, now_us, read))
    }

    /// The store's token floor from a `GET` of its key: none is 0;
    /// anything but a non-negative integer is damage (the commit script
    /// compares it as read, so a value taken for 0 here would lose every
    /// round of a creation, for ever).
    pub(crate) fn floor_of(&self, reply: &Reply) -> Result<u64> {
        match reply {
            Reply::Nil => Ok(0),
            r => r.int().and_then(|f| u64::try_from(f).ok()).ok_or_else(|| {
                Error::Corrupt(format!(
                    "{} holds {}, not a token floor (a non-negative integer)",
                    self.keys.floor(),
                    shown(r)
                ))
            }),
        }
    }

    fn read_args(&self, name: &LeaseName) -> [String; 2] {
        [self.keys.name(name), self.keys.floor()]
    }

    pub fn list(&self, p: &LeaseListParams) -> Result<Vec<LeaseState>> {
        let mut out: Vec<LeaseState> = self
            .every_name()?
            .iter()
            .filter_map(|(name, snap)| snap.lease_state(name))
            .filter(|s| !p.live_only || !s.grants.is_empty())
            .collect();
        out.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        Ok(out)
    }

    pub fn history(&self, p: &LeaseHistoryParams) -> Result<Vec<HistoryEntry>> {
        let snap = self.snapshot(&p.name)?;
        self.entries(&p.name, &snap, p.limit)
    }

    /// Every name the store ever made, each with its snapshot (one round
    /// trip for all of them).
    fn every_name(&self) -> Result<Vec<(LeaseName, Snap)>> {
        let names = self.call(&["SMEMBERS", &self.keys.names()])?;
        let Reply::Array(names) = names else {
            return Err(Error::Corrupt(format!("{} is not a set", self.keys.names())));
        };
        let names: Vec<LeaseName> = names
            .iter()
            .map(|n| {
                let stored = n.text().unwrap_or_default();
                LeaseName::stored(stored)
                    .map_err(|e| Error::Corrupt(format!("{} names {stored:?}: {e}", self.keys.names())))
            })
            .collect::<Result<_>>()?;
        let calls: Vec<[String; 2]> = names.iter().map(|n| self.read_args(n)).collect();
        let (settings, replies) = self.eval_checked(&READ, &calls, &[])?;
        let refused = self.refusal(&settings);
        names
            .into_iter()
            .zip(replies)
            .map(|(name, reply)| {
                let snap = self.decode(&name, &reply, refused.clone())?;
                Ok((name, snap))
            })
            .collect()
    }

    /// Raise the floor: first the store's, which every name made from then
    /// on starts above (a creation commits only if the floor is as it read
    /// it), then every existing name's own.
    pub fn tokens_bump(&self, p: &TokensBumpParams) -> Result<std::result::Result<TokensBumped, TokensBumpRefused>> {
        let highest = self.every_name()?.iter().map(|(_, s)| s.newest).max().unwrap_or(0);
        let floor_key = self.keys.floor();
        let raised = document::rounds::<Self, _>(
            || "raising the token floor".to_owned(),
            document::Turn::Prompt,
            || {
                let floor = self.floor_of(&self.call(&["GET", &floor_key])?)?;
                let highest = Token(highest.max(floor));
                let new_floor = match p.floor_above(highest) {
                    Ok(f) => f,
                    Err(refused) => return Ok(Some(Err(refused))),
                };
                let args = [floor.to_string(), new_floor.0.to_string()];
                self.check_settings()?;
                let done = self.eval_replicated(&RAISE_FLOOR, &[&floor_key], &[&args[0], &args[1]], wrote)?;
                Ok(wrote(&done).then_some(Ok(TokensBumped {
                    highest,
                    floor: new_floor,
                })))
            },
        )?;
        let Ok(bumped) = raised else {
            return Ok(raised);
        };
        for (name, snap) in self.every_name()? {
            document::raise_floor(self, &name, Some(snap), bumped.floor.0)?;
        }
        Ok(Ok(bumped))
    }

    /// A snapshot of `name`, for `purpose`.
    pub(crate) fn snapshot_for(&self, name: &LeaseName, purpose: Purpose) -> Result<Snap> {
        let args = [self.read_args(name)];
        let (mut replies, refused) = match purpose {
            Purpose::Show => (self.eval_many(&READ, &args, &[])?, None),
            // The settings a write depends on ride in front of the read: a
            // commit is refused on what they were one round trip before it.
            Purpose::Commit => {
                let (settings, replies) = self.eval_checked(&READ, &args, &[])?;
                (replies, self.refusal(&settings))
            }
        };
        self.decode(name, &replies.pop().unwrap_or(Reply::Nil), refused)
    }

    /// The version of a name's hash (`None` while it has none): what a
    /// waiter compares.
    pub fn version(&self, name: &LeaseName) -> Result<Option<String>> {
        Ok(text(&self.call(&["HGET", &self.keys.name(name), "v"])?))
    }
}

impl DocStore for RedisBackend {
    type Read = Read;
    type Error = Error;

    fn snapshot(&self, name: &LeaseName) -> Result<Snap> {
        self.snapshot_for(name, Purpose::Commit)
    }

    /// The document as this handle last committed it, when it holds
    /// `token`'s grant (taken: a second round reads afresh); else read.
    /// Its `now` is the server's time of that commit plus the time counted
    /// here since; the commit refuses if the server's clock is not within
    /// the times the decision stands for (`Stands`), or the version or
    /// the document moved on.
    fn snapshot_to_release(&self, name: &LeaseName, token: Token) -> Result<Snap> {
        let kept = self
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name.as_str());
        let kept = kept.and_then(|c| {
            let state = serde_json::from_str::<State>(&c.written).ok()?;
            state.grants.iter().any(|g| g.token == token.0).then_some((c, state))
        });
        let Some((c, state)) = kept else {
            return self.snapshot(name);
        };
        let counted = i64::try_from(c.answered.elapsed().as_micros()).unwrap_or(i64::MAX);
        let now_us = c.at_us.saturating_add(counted);
        let read = Read {
            version: Some(c.version),
            floor: c.floor,
            refused: None,
            expected: None,
        };
        let mut snap = Snapshot::new(state, c.newest, now_us, read);
        let until_us = snap
            .state
            .grants
            .iter()
            .map(|g| g.expires_us)
            .chain(snap.state.waiters.iter().map(|w| w.expires_us))
            .filter(|&expires| expires > now_us)
            .min()
            .unwrap_or(i64::MAX);
        snap.read.expected = Some(Expected {
            stands: Stands {
                from_us: now_us,
                until_us,
            },
            written: c.written,
        });
        Ok(snap)
    }

    fn commit(&self, name: &LeaseName, snap: &Snap, mut draft: Draft) -> Result<bool> {
        if let Some(refused) = &snap.read.refused {
            return Err(refused.clone().into());
        }
        let history: Vec<String> = draft.state.recent.drain(..).map(|r| document::to_json(&r)).collect();
        let keys = [
            self.keys.name(name),
            self.keys.history(name),
            self.keys.names(),
            self.keys.floor(),
        ];
        let fixed = [
            snap.read.version.clone().unwrap_or_default(),
            snap.read.floor.to_string(),
            document::to_json(&draft.state),
            draft.newest.to_string(),
            name.as_str().to_owned(),
            if draft.changes_the_queue(snap) {
                self.keys.channel(name)
            } else {
                String::new()
            },
            HISTORY_PER_NAME.to_string(),
            snap.read
                .expected
                .as_ref()
                .map(|e| e.stands.from_us.to_string())
                .unwrap_or_default(),
            snap.read
                .expected
                .as_ref()
                .map(|e| e.stands.until_us.to_string())
                .unwrap_or_default(),
            snap.read
                .expected
                .as_ref()
                .map(|e| e.written.clone())
                .unwrap_or_default(),
        ];
        let left: Vec<String> = snap
            .state
            .waiters
            .iter()
            .filter(|w| !draft.state.waiters.iter().any(|d| d.ticket == w.ticket))
            .map(|w| self.keys.left(name, w.ticket))
            .collect();
        let count = left.len().to_string();
        let args: Vec<&str> = fixed
            .iter()
            .chain([&count])
            .chain(&left)
            .chain(&history)
            .map(String::as_str)
            .collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let reply = self.eval_replicated(&COMMIT, &keys, &args, wrote);
        let mut committed = self.committed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Whatever happened, what was kept of this name is as old as what
        // this commit decided on, or older.
        committed.remove(name.as_str());
        let reply = reply?;
        let Some(at_us) = committed_at(&reply) else {
            return Ok(wrote(&reply));
        };
        if committed.len() >= COMMITTED_KEPT {
            committed.clear();
        }
        let version = snap
            .read
            .version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        committed.insert(
            name.as_str().to_owned(),
            Committed {
                written: fixed[2].clone(),
                newest: draft.newest,
                version: version.to_string(),
                floor: snap.read.floor,
                at_us,
                answered: std::time::Instant::now(),
            },
        );
        Ok(true)
    }

    fn entries(&self, name: &LeaseName, _: &Snap, limit: u32) -> Result<Vec<HistoryEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = self.keys.history(name);
        let reply = self.call(&["LRANGE", &key, &format!("-{limit}"), "-1"])?;
        let Reply::Array(items) = reply else {
            return Err(Error::Corrupt(format!("{key} is not a list")));
        };
        items
            .iter()
            .rev()
            .map(|item| {
                let rec: document::HistoryRec = serde_json::from_slice(match item {
                    Reply::Bulk(b) => b,
                    _ => &[],
                })
                .map_err(|e| Error::Corrupt(format!("{key} holds an unreadable entry: {e}")))?;
                rec.entry().map_err(|e| Error::Corrupt(e.to_string()))
            })
            .collect()
    }

    fn corrupt(what: String) -> Error {
        Error::Corrupt(what)
    }

    fn contended(what: String) -> Error {
        Error::Contended(what)
    }
}
