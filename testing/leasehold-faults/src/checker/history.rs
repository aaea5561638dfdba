//! The history as the checker reads it: grants, writes, reads and the
//! store's losses, parsed from the text format the module docs give, by
//! this parser alone.

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub(super) struct Grant {
    pub(super) line: usize,
    pub(super) name: String,
    pub(super) token: Option<u64>,
    pub(super) id: String,
    pub(super) exclusive: bool,
    pub(super) by: String,
    pub(super) asked: Option<u64>,
    pub(super) answered: u64,
    pub(super) granted: Option<u64>,
    pub(super) acts_own: bool,
    pub(super) end: Option<u64>,
    pub(super) expires: Option<u64>,
}

impl Grant {
    /// The latest moment the grant was surely issued by.
    pub(super) fn issued_by(&self) -> u64 {
        self.granted.map_or(self.answered, |g| g.min(self.answered))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FenceKind {
    Store,
    Record,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Accepted,
    Refused,
    /// Failed, or never answered: it may or may not have taken effect.
    Unknown,
}

#[derive(Debug, Clone)]
pub(super) struct Write {
    pub(super) line: usize,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) grant: String,
    pub(super) token: Option<u64>,
    pub(super) resource: String,
    pub(super) fence: FenceKind,
    pub(super) start: u64,
    /// `None`: never answered.
    pub(super) end: Option<u64>,
    pub(super) answer: Answer,
    pub(super) value: String,
}

impl Write {
    /// The last moment the attempt could have had an effect.
    pub(super) fn latest(&self) -> u64 {
        self.end.unwrap_or(u64::MAX)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Read {
    pub(super) resource: String,
    pub(super) at: u64,
    pub(super) value: String,
}

#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) grants: Vec<Grant>,
    pub(super) writes: Vec<Write>,
    pub(super) reads: Vec<Read>,
    /// `lost` events: a name and the interval its store lost it in.
    pub(super) losses: Vec<(String, u64, u64)>,
}

/// `key=value` fields of one line.
pub(super) struct Fields<'a> {
    pub(super) line: usize,
    pub(super) map: HashMap<&'a str, &'a str>,
}

impl<'a> Fields<'a> {
    pub(super) fn text(&self, key: &str) -> Result<&'a str, String> {
        self.map
            .get(key)
            .copied()
            .ok_or_else(|| format!("line {}: no {key}=", self.line))
    }

    pub(super) fn ns(&self, key: &str) -> Result<u64, String> {
        let v = self.text(key)?;
        v.parse()
            .map_err(|_| format!("line {}: {key}={v} is not a number", self.line))
    }

    /// A number, `-` (none), or absent (none).
    pub(super) fn maybe(&self, key: &str) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None | Some(&"-") => Ok(None),
            Some(_) => self.ns(key).map(Some),
        }
    }
    /// The event kind and fields of history line number `line`; `None`
    /// for a blank line.
    pub(super) fn of_line(line: usize, raw: &'a str) -> Result<Option<(&'a str, Self)>, String> {
        let mut parts = raw.split(' ').filter(|p| !p.is_empty());
        let Some(kind) = parts.next() else {
            return Ok(None);
        };
        let mut map = HashMap::new();
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("line {line}: {part:?} is not key=value in {raw:?}"))?;
            map.insert(k, v);
        }
        Ok(Some((kind, Fields { line, map })))
    }
}

pub(super) fn parse(text: &str) -> Result<History, String> {
    let mut parser = Parser::default();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let Some((kind, f)) = Fields::of_line(line, raw)? else {
            continue;
        };
        match kind {
            "grant" => parser.grant(&f)?,
            "end" | "expires" => parser.grant_end(kind, &f)?,
            "write" => parser.write(&f)?,
            "answer" => parser.answer(&f)?,
            "read" => parser.history.reads.push(Read {
                resource: f.text("resource")?.to_owned(),
                at: f.ns("at")?,
                value: f.text("value")?.to_owned(),
            }),
            "lost" => {
                let at = f.ns("at")?;
                let until = f.maybe("until")?.unwrap_or(at);
                parser.history.losses.push((f.text("name")?.to_owned(), at, until));
            }
            other => return Err(format!("line {line}: unknown event {other:?}")),
        }
    }
    Ok(parser.history)
}

/// The history read so far, with where each grant and write is in it (a
/// later `end`, `expires` or `answer` line refers to them).
#[derive(Default)]
pub(super) struct Parser {
    pub(super) history: History,
    pub(super) grant_index: HashMap<(String, String), usize>,
    pub(super) write_index: HashMap<String, usize>,
}

impl Parser {
    /// A `grant` line: one grant answered to one holder.
    pub(super) fn grant(&mut self, f: &Fields<'_>) -> Result<(), String> {
        let line = f.line;
        let name = f.text("name")?.to_owned();
        let id = f.text("grant")?.to_owned();
        let mode = f.text("mode")?;
        if !["x", "s"].contains(&mode) {
            return Err(format!("line {line}: mode={mode} is neither x nor s"));
        }
        let acts = f.map.get("acts").copied().unwrap_or("own");
        if !["own", "fenced"].contains(&acts) {
            return Err(format!("line {line}: acts={acts} is neither own nor fenced"));
        }
        if self.grant_index.contains_key(&(name.clone(), id.clone())) {
            return Err(format!("line {line}: grant {id} of {name} recorded twice"));
        }
        self.grant_index
            .insert((name.clone(), id.clone()), self.history.grants.len());
        self.history.grants.push(Grant {
            line,
            name,
            token: f.maybe("token")?,
            id,
            exclusive: mode == "x",
            by: f.text("by")?.to_owned(),
            asked: f.maybe("asked")?,
            answered: f.ns("answered")?,
            granted: f.maybe("granted")?,
            acts_own: acts == "own",
            end: None,
            expires: None,
        });
        Ok(())
    }

    /// An `end` or `expires` line (`kind`) of a grant read before.
    pub(super) fn grant_end(&mut self, kind: &str, f: &Fields<'_>) -> Result<(), String> {
        let key = (f.text("name")?.to_owned(), f.text("grant")?.to_owned());
        let at = f.ns("at")?;
        let &i = self
            .grant_index
            .get(&key)
            .ok_or_else(|| format!("line {}: {kind} of grant {} of {}, never granted", f.line, key.1, key.0))?;
        let slot = if kind == "end" {
            &mut self.history.grants[i].end
        } else {
            &mut self.history.grants[i].expires
        };
        // Several readings: the holder's own and the test's; the
        // first is the one closest to the fact.
        slot.get_or_insert(at);
        Ok(())
    }

    /// A `write` line: a write to a resource begun under a grant.
    pub(super) fn write(&mut self, f: &Fields<'_>) -> Result<(), String> {
        let line = f.line;
        let id = f.text("id")?.to_owned();
        if self.write_index.contains_key(&id) {
            return Err(format!("line {line}: write id {id} recorded twice"));
        }
        let fence = match f.text("fence")? {
            "store" => FenceKind::Store,
            "record" => FenceKind::Record,
            "none" => FenceKind::None,
            other => return Err(format!("line {line}: fence={other} is not store, record or none")),
        };
        self.write_index.insert(id.clone(), self.history.writes.len());
        self.history.writes.push(Write {
            line,
            id,
            name: f.text("name")?.to_owned(),
            grant: f.text("grant")?.to_owned(),
            token: f.maybe("token")?,
            resource: f.text("resource")?.to_owned(),
            fence,
            start: f.ns("start")?,
            end: None,
            answer: Answer::Unknown,
            value: f.text("value")?.to_owned(),
        });
        Ok(())
    }

    /// An `answer` line: how the resource answered a write begun before.
    pub(super) fn answer(&mut self, f: &Fields<'_>) -> Result<(), String> {
        let line = f.line;
        let id = f.text("id")?;
        let &i = self
            .write_index
            .get(id)
            .ok_or_else(|| format!("line {line}: answer to write {id}, never begun"))?;
        let w = &mut self.history.writes[i];
        if w.end.is_some() {
            return Err(format!("line {line}: write {id} answered twice"));
        }
        w.end = Some(f.ns("end")?);
        w.answer = match f.text("answer")? {
            "accepted" => Answer::Accepted,
            "refused" => Answer::Refused,
            "failed" => Answer::Unknown,
            other => {
                return Err(format!(
                    "line {line}: answer={other} is not accepted, refused or failed"
                ));
            }
        };
        Ok(())
    }
}
