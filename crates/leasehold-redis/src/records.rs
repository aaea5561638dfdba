//! Records (what schedules are kept in) on Redis: a hash per record
//! (`PREFIX:record:KEY`: `body`, `v`), every key in one sorted set
//! (`PREFIX:records`, all scores 0, so Redis orders them bytewise as the
//! contract asks), and versions from one counter (`PREFIX:record-version`)
//! that never repeats a version, even for a key deleted and written again.
//! A batch is one script: the server's `TIME` read and the write's
//! `not_after` judged on it, every expectation checked, then all applied —
//! nothing runs between them on the server, so the time judged is the
//! time of the commit. `record_clock` is `TIME` itself.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_backend::{
    Expect, Record, RecordChange, RecordKey, RecordListParams, RecordVersion, RecordWrite, RecordWriteParams,
};

use crate::resp::Reply;
use crate::{Error, RedisBackend, Result, Script};

/// ARGV: the prefix, the limit `not_after` in µs since the epoch (empty:
/// none), then per change: `put` or `del`, key, expectation (`absent`,
/// `version`, `any`), the version expected, the body. Answers `{3,
/// value}` when the version counter holds no counter (damage: `INCR`
/// would fail after earlier writes of the batch), `{2, secs, µs}` (the
/// server's `TIME`) when the limit has passed, `{0, index, found}` for the
/// first unmet expectation, else `{1, v…}`.
const WRITE: Script = Script::new(
    "local p = ARGV[1]
     local n = (#ARGV - 2) / 5
     local counter = redis.call('GET', p .. ':record-version')
     if counter and not string.match(counter, '^%d+$') then
       return {3, counter}
     end
     if ARGV[2] ~= '' then
       local t = redis.call('TIME')
       if tonumber(t[1]) * 1000000 + tonumber(t[2]) > tonumber(ARGV[2]) then
         return {2, t[1], t[2]}
       end
     end
     for i = 0, n - 1 do
       local b = 3 + i * 5
       local found = redis.call('HGET', p .. ':record:' .. ARGV[b + 1], 'v')
       local e = ARGV[b + 2]
       if (e == 'absent' and found) or (e == 'version' and found ~= ARGV[b + 3]) then
         return {0, i, found}
       end
     end
     local out = {1}
     for i = 0, n - 1 do
       local b = 3 + i * 5
       local key = p .. ':record:' .. ARGV[b + 1]
       if ARGV[b] == 'put' then
         local v = redis.call('INCR', p .. ':record-version')
         redis.call('HSET', key, 'body', ARGV[b + 4], 'v', v)
         redis.call('ZADD', p .. ':records', 0, ARGV[b + 1])
         out[#out + 1] = v
       else
         redis.call('DEL', key)
         redis.call('ZREM', p .. ':records', ARGV[b + 1])
         out[#out + 1] = 0
       end
     end
     return out",
);

/// ARGV: the prefix, the range command, its two bounds, the limit.
/// Answers key, body, version for each record listed.
const LIST: Script = Script::new(
    "local p = ARGV[1]
     local keys = redis.call(ARGV[2], p .. ':records', ARGV[3], ARGV[4], 'LIMIT', 0, tonumber(ARGV[5]))
     local out = {}
     for _, k in ipairs(keys) do
       local r = redis.call('HMGET', p .. ':record:' .. k, 'body', 'v')
       out[#out + 1] = k
       out[#out + 1] = r[1]
       out[#out + 1] = r[2]
     end
     return out",
);

/// A time from `TIME`'s two numbers (seconds, µs).
pub(crate) fn server_time(secs: &Reply, micros: &Reply) -> Option<SystemTime> {
    let secs = u64::try_from(secs.int()?).ok()?;
    let micros = u64::try_from(micros.int()?).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// `at` in µs since the epoch, as the write script compares it (before
/// the epoch: negative).
fn epoch_micros(at: SystemTime) -> i128 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i128,
        Err(e) => -(e.duration().as_micros() as i128),
    }
}

fn version(r: &Reply) -> Option<RecordVersion> {
    r.int()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .map(RecordVersion)
}

impl RedisBackend {
    fn record(&self, key: &str, body: &Reply, v: &Reply) -> Result<Record> {
        let corrupt = |what: &str| Error::Corrupt(format!("{}:record:{key}: {what}", self.keys.prefix));
        Ok(Record {
            key: RecordKey::new(key).map_err(|e| corrupt(&e.to_string()))?,
            version: version(v).ok_or_else(|| corrupt("no version"))?,
            body: body.text().ok_or_else(|| corrupt("no body"))?.to_owned(),
        })
    }

    pub fn record_get(&self, key: &RecordKey) -> Result<Option<Record>> {
        let rec = format!("{}:record:{}", self.keys.prefix, key.as_str());
        match self.call(&["HMGET", &rec, "body", "v"])? {
            Reply::Array(f) if f.len() == 2 && f[1] != Reply::Nil => {
                Ok(Some(self.record(key.as_str(), &f[0], &f[1])?))
            }
            _ => Ok(None),
        }
    }

    pub fn record_list(&self, p: &RecordListParams) -> Result<Vec<Record>> {
        let start = match &p.after {
            Some(after) if p.descending || after.as_str() >= p.prefix.as_str() => format!("({after}"),
            _ if p.prefix.is_empty() => "-".to_owned(),
            _ => format!("[{}", p.prefix),
        };
        let end = p.prefix_end().map_or_else(|| "+".to_owned(), |e| format!("({e}"));
        let (command, low, high) = if p.descending {
            // After a key in descending order: below it, within the prefix.
            let high = match &p.after {
                Some(after) if p.prefix_end().is_none_or(|e| after.as_str() < e.as_str()) => start,
                _ => end,
            };
            let low = if p.prefix.is_empty() {
                "-".to_owned()
            } else {
                format!("[{}", p.prefix)
            };
            ("ZREVRANGEBYLEX", high, low)
        } else {
            ("ZRANGEBYLEX", start, end)
        };
        let limit = p.limit.to_string();
        let reply = self.eval(&LIST, &[], &[&self.keys.prefix, command, &low, &high, &limit])?;
        let Reply::Array(items) = reply else {
            return Err(Error::Corrupt("the list script answered no array".to_owned()));
        };
        items
            .chunks(3)
            .filter_map(|c| match c {
                [k, body, v] => Some(self.record(k.text().unwrap_or_default(), body, v)),
                _ => None,
            })
            .filter(|r| r.as_ref().map_or(true, |r| p.admits(r.key.as_str())))
            .collect()
    }

    pub fn record_write(&self, p: &RecordWriteParams) -> Result<RecordWrite> {
        // Whole µs: `TIME` (whole µs) is past the limit exactly when it is
        // past the limit's whole µs.
        let not_after = p.not_after.map_or_else(String::new, |at| epoch_micros(at).to_string());
        let mut args: Vec<String> = vec![self.keys.prefix.clone(), not_after];
        for change in &p.changes {
            let (op, body) = match change {
                RecordChange::Put { body, .. } => ("put", body.clone()),
                RecordChange::Delete { .. } => ("del", String::new()),
            };
            let (expect, v) = match change.expect() {
                Expect::Absent => ("absent", String::new()),
                Expect::Version(v) => ("version", v.0.to_string()),
                Expect::Anything => ("any", String::new()),
            };
            args.extend([
                op.to_owned(),
                change.key().as_str().to_owned(),
                expect.to_owned(),
                v,
                body,
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.check_settings()?;
        let reply = self.eval_replicated(
            &WRITE,
            &[],
            &args,
            |r| matches!(r, Reply::Array(a) if a.first().and_then(Reply::int) == Some(1)),
        )?;
        let Reply::Array(items) = reply else {
            return Err(Error::Corrupt("the write script answered no array".to_owned()));
        };
        match items.as_slice() {
            [Reply::Int(3), counter] => Err(Error::Corrupt(format!(
                "{}:record-version holds {}, not a version counter (a non-negative integer)",
                self.keys.prefix,
                crate::lease::shown(counter)
            ))),
            [Reply::Int(2), secs, micros] => Ok(RecordWrite::TooLate {
                now: server_time(secs, micros)
                    .ok_or_else(|| Error::Corrupt("TIME answered no numbers in the write script".to_owned()))?,
            }),
            [Reply::Int(1), versions @ ..] => Ok(RecordWrite::Written {
                versions: versions.iter().map(version).collect(),
            }),
            [Reply::Int(0), index, found] | [Reply::Int(0), index, found, ..] => {
                let change = index
                    .int()
                    .and_then(|i| p.changes.get(usize::try_from(i).ok()?))
                    .ok_or_else(|| Error::Corrupt("the write script named no change".to_owned()))?;
                Ok(RecordWrite::Conflict {
                    key: change.key().clone(),
                    found: version(found),
                })
            }
            _ => Err(Error::Corrupt("the write script answered an unknown form".to_owned())),
        }
    }

    /// The server's clock: `TIME`.
    pub fn record_clock(&self) -> Result<SystemTime> {
        match self.call(&["TIME"])? {
            Reply::Array(t) if t.len() == 2 => {
                server_time(&t[0], &t[1]).ok_or_else(|| Error::Corrupt("TIME answered no numbers".to_owned()))
            }
            other => Err(Error::Corrupt(format!("TIME answered {other:?}"))),
        }
    }
}
