//! The history checker: the one judge of the fault suite.
//!
//! It reads a history — what every process of a test recorded, one event
//! per line — and says which safety rules the history breaks. It shares no
//! code with what it judges: it uses nothing of leasehold (not the plans,
//! not the rules, not the fences), nothing of the recorder
//! ([`crate::history`]) or the resources ([`crate::resource`]) but the
//! text format below, which it parses itself. Resources record and decide
//! nothing; leasehold decides (its fences answer, its stores grant); this
//! module judges the answers. (Jepsen's checkers are the model: they read
//! histories and never take part in them.)
//!
//! # The history
//!
//! One event per line, `KIND key=value ...`; values hold no spaces. Times
//! (`NS`) are nanoseconds of the boot clock (`CLOCK_BOOTTIME`), which every
//! process of the host shares — and which the SQLite store keeps its expiry
//! on, so a time the test read from that store is on the same clock.
//!
//! ```text
//! grant   name=N token=T grant=G mode=x|s by=B asked=NS|- answered=NS [granted=NS] [acts=own|fenced]
//! end     name=N grant=G at=NS
//! expires name=N grant=G at=NS
//! write   id=K name=N grant=G token=T resource=R fence=store|record|none start=NS value=V
//! answer  id=K end=NS answer=accepted|refused|failed
//! read    resource=R at=NS value=V
//! lost    name=N at=NS [until=NS]
//! ```
//!
//! - `grant`: the grant `G` (its identity: leasehold's grant id, or another
//!   label unique in the history) of `name` with fencing `token`
//!   (`-`: none), exclusive (`x`) or shared (`s`), held by `B`. `asked`:
//!   when the acquisition was asked for (`-`: not known), a moment before
//!   the store could have issued it; `answered`: when the holder learnt of
//!   it, a moment after; `granted`: when the store issued it, on its own
//!   clock, when the test could read that. `acts=own` (the default): the
//!   holder acts on its own between `answered` and its `end` — that
//!   activity is judged by time. `acts=fenced`: every effect of the holder
//!   goes through a fence — only its writes' answers are judged.
//! - `end`: the holder stopped acting (logged by the holder, or by the test
//!   once it saw the holder dead).
//! - `expires`: the earliest moment the store could expire the grant
//!   (read from the store).
//! - `write`/`answer`: one attempt on a resource `R`, begun at `start`
//!   and answered at `end`: `accepted`, `refused` (a fence said no), or
//!   `failed` (an error: it may or may not have taken effect). An attempt
//!   with no `answer` line has an unknown outcome (its process died).
//!   `fence=store`: the store's fence gate was asked (it knows every
//!   grant) — with a `value`, it also changed the resource (a task's
//!   completion), `-` when it only checked; `fence=record`: a fence record that keeps the highest token it
//!   accepted (a state file's fence, `write --fence-token`); `fence=none`:
//!   nothing was asked — the holder's own activity, recorded.
//! - `read`: the content of `R` after everything (`-`: empty or missing).
//! - `lost`: the test made the store lose what it knew of `name` at `NS`
//!   (wiped, flushed, its file replaced), or at some moment between `at`
//!   and `until` (the command that did it was sent and answered). The
//!   store may then issue tokens
//!   again: the token rules, the gate's passes and holders' activity are
//!   judged within each stretch between losses (a grant whose acquisition,
//!   from asked to answered, meets a loss belongs to neither and is left
//!   out of them); the fence records' rules and the final reads, across them —
//!   what a sink that keeps its mark must still refuse.
//!
//! # The rules
//!
//! Each is judged only where the history proves it broken: an event is an
//! interval between two readings of the clock, and an order counts only
//! when the intervals do not overlap.
//!
//! | kind | what never happens |
//! |---|---|
//! | `token-reissued` | two grants of a name with one token |
//! | `token-order` | a grant answered before another was asked for has a token that is not lower |
//! | `overlap` | a holder acting on its own after a grant of its name that began later was issued (one of the two exclusive): two holders at once, or a stopped holder whose last activity came after the next grant |
//! | `outlived` | a holder acting on its own after the store could expire its grant |
//! | `never-ended` | a holder acting on its own that was never seen to stop (its activity cannot be judged) |
//! | `stale-pass` | the store's fence gate passing a grant's write begun after a newer grant of the name was issued |
//! | `fence-went-back` | a fence record accepting a write whose token is not above one it accepted earlier from another grant |
//! | `refused-without-cause` | a fence record refusing a write when no other grant had presented an equal or higher token |
//! | `lost` | a resource's final content is not the value of an acknowledged write that nothing acknowledged came after |
//! | `refused-applied` | a resource's final content is the value of a refused write |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

/// A boot-clock reading in nanoseconds as seconds with milliseconds (`12.345 s`).
#[must_use]
pub fn secs(ns: u64) -> String {
    format!("{}.{:03} s", ns / 1_000_000_000, ns % 1_000_000_000 / 1_000_000)
}

/// At most this many violations of one kind are kept (the rest counted):
/// a badly broken history would otherwise fill memory.
const KEEP_PER_KIND: usize = 200;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which rule (`token-reissued`, `overlap`, ...; see the module docs),
    /// or what a case itself saw (`trial`, ...).
    pub kind: &'static str,
    /// Tokens, grants, holders and times involved, in words.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}

/// What a history held, for the figures of docs/RELIABILITY.md.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub grants: usize,
    pub writes: usize,
    pub accepted: usize,
    pub refused: usize,
    /// Failed, or never answered.
    pub unknown: usize,
    pub reads: usize,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.grants += o.grants;
        self.writes += o.writes;
        self.accepted += o.accepted;
        self.refused += o.refused;
        self.unknown += o.unknown;
        self.reads += o.reads;
    }
}

/// What the checker found (and what a case adds of its own).
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What was judged (e.g. "history /tmp/x/history: 12 grants of 1 name, ...").
    pub checked: String,
    pub counts: Counts,
    pub violations: Vec<Violation>,
    /// Violations not kept (beyond the first 200 of a kind, `KEEP_PER_KIND`), by kind:
    /// counted all the same.
    pub omitted: BTreeMap<&'static str, usize>,
}

impl Report {
    /// A report on `checked`, so far clean.
    #[must_use]
    pub fn new(checked: impl Into<String>) -> Self {
        Self {
            checked: checked.into(),
            ..Self::default()
        }
    }

    pub fn push(&mut self, kind: &'static str, detail: impl Into<String>) {
        if self.violations.iter().filter(|v| v.kind == kind).count() >= KEEP_PER_KIND {
            *self.omitted.entry(kind).or_default() += 1;
            return;
        }
        self.violations.push(Violation {
            kind,
            detail: detail.into(),
        });
    }

    /// Add another report's violations, counts and what it checked.
    pub fn merge(&mut self, other: Report) {
        if !other.checked.is_empty() {
            self.checked = if self.checked.is_empty() {
                other.checked
            } else {
                format!("{}; {}", self.checked, other.checked)
            };
        }
        self.counts.add(other.counts);
        self.violations.extend(other.violations);
        for (kind, n) in other.omitted {
            *self.omitted.entry(kind).or_default() += n;
        }
    }

    /// Violations of `kind`.
    #[must_use]
    pub fn count(&self, kind: &str) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count() + self.omitted.get(kind).copied().unwrap_or(0)
    }

    /// Every violation, kept or not.
    #[must_use]
    pub fn total(&self) -> usize {
        self.violations.len() + self.omitted.values().sum::<usize>()
    }

    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.omitted.is_empty()
    }

    /// Panic, listing every violation (at most 50), unless clean.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        write!(f, "{}: {total} violation(s)", self.checked)?;
        for v in self.violations.iter().take(50) {
            write!(f, "\n  - {v}")?;
        }
        if total > 50 {
            write!(f, "\n  ... and {} more", total - 50)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The history, as this module reads it.

#[derive(Debug, Clone)]
struct Grant {
    line: usize,
    name: String,
    token: Option<u64>,
    id: String,
    exclusive: bool,
    by: String,
    asked: Option<u64>,
    answered: u64,
    granted: Option<u64>,
    acts_own: bool,
    end: Option<u64>,
    expires: Option<u64>,
}

impl Grant {
    /// The latest moment the grant was surely issued by.
    fn issued_by(&self) -> u64 {
        self.granted.map_or(self.answered, |g| g.min(self.answered))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FenceKind {
    Store,
    Record,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Accepted,
    Refused,
    /// Failed, or never answered: it may or may not have taken effect.
    Unknown,
}

#[derive(Debug, Clone)]
struct Write {
    line: usize,
    id: String,
    name: String,
    grant: String,
    token: Option<u64>,
    resource: String,
    fence: FenceKind,
    start: u64,
    /// `None`: never answered.
    end: Option<u64>,
    answer: Answer,
    value: String,
}

impl Write {
    /// The last moment the attempt could have had an effect.
    fn latest(&self) -> u64 {
        self.end.unwrap_or(u64::MAX)
    }
}

#[derive(Debug, Clone)]
struct Read {
    resource: String,
    at: u64,
    value: String,
}

#[derive(Debug, Default)]
struct History {
    grants: Vec<Grant>,
    writes: Vec<Write>,
    reads: Vec<Read>,
    /// `lost` events: a name and the interval its store lost it in.
    losses: Vec<(String, u64, u64)>,
}

/// `key=value` fields of one line.
struct Fields<'a> {
    line: usize,
    map: HashMap<&'a str, &'a str>,
}

impl<'a> Fields<'a> {
    fn text(&self, key: &str) -> Result<&'a str, String> {
        self.map
            .get(key)
            .copied()
            .ok_or_else(|| format!("line {}: no {key}=", self.line))
    }

    fn ns(&self, key: &str) -> Result<u64, String> {
        let v = self.text(key)?;
        v.parse()
            .map_err(|_| format!("line {}: {key}={v} is not a number", self.line))
    }

    /// A number, `-` (none), or absent (none).
    fn maybe(&self, key: &str) -> Result<Option<u64>, String> {
        match self.map.get(key) {
            None | Some(&"-") => Ok(None),
            Some(_) => self.ns(key).map(Some),
        }
    }
    /// The event kind and fields of history line number `line`; `None`
    /// for a blank line.
    fn of_line(line: usize, raw: &'a str) -> Result<Option<(&'a str, Self)>, String> {
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

fn parse(text: &str) -> Result<History, String> {
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
struct Parser {
    history: History,
    grant_index: HashMap<(String, String), usize>,
    write_index: HashMap<String, usize>,
}

impl Parser {
    /// A `grant` line: one grant answered to one holder.
    fn grant(&mut self, f: &Fields<'_>) -> Result<(), String> {
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
    fn grant_end(&mut self, kind: &str, f: &Fields<'_>) -> Result<(), String> {
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
    fn write(&mut self, f: &Fields<'_>) -> Result<(), String> {
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
    fn answer(&mut self, f: &Fields<'_>) -> Result<(), String> {
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

// ---------------------------------------------------------------------------
// Judging.

fn token_text(t: Option<u64>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn describe(g: &Grant) -> String {
    let mode = if g.exclusive { "exclusive" } else { "shared" };
    format!(
        "grant {} of {} (token {}, {mode}, {}, answered {}{}; history line {})",
        g.id,
        g.name,
        token_text(g.token),
        g.by,
        secs(g.answered),
        g.granted
            .map(|t| format!(", granted {} on the store's clock", secs(t)))
            .unwrap_or_default(),
        g.line
    )
}

fn describe_write(w: &Write) -> String {
    let end = w.end.map_or_else(|| "never answered".to_owned(), secs);
    let answer = match w.answer {
        Answer::Accepted => "accepted",
        Answer::Refused => "refused",
        Answer::Unknown => "outcome unknown",
    };
    format!(
        "write {} to {} by grant {} with token {} ({} .. {end}, {answer}; history line {})",
        w.id,
        w.resource,
        w.grant,
        token_text(w.token),
        secs(w.start),
        w.line
    )
}

/// Judge the history in `text` (`source` names it in the report).
///
/// # Errors
/// A history that does not parse: it cannot be judged, and a case must
/// fail rather than count zero checks.
pub fn check_text(source: &str, text: &str) -> Result<Report, String> {
    let h = parse(text).map_err(|e| format!("history {source}: {e}"))?;
    let names: BTreeSet<&str> = h.grants.iter().map(|g| g.name.as_str()).collect();
    let counts = Counts {
        grants: h.grants.len(),
        writes: h.writes.len(),
        accepted: h.writes.iter().filter(|w| w.answer == Answer::Accepted).count(),
        refused: h.writes.iter().filter(|w| w.answer == Answer::Refused).count(),
        unknown: h.writes.iter().filter(|w| w.answer == Answer::Unknown).count(),
        reads: h.reads.len(),
    };
    let mut report = Report::new(format!(
        "history {source}: {} grants of {} names; {} writes ({} accepted, {} refused, {} unknown); {} reads",
        counts.grants,
        names.len(),
        counts.writes,
        counts.accepted,
        counts.refused,
        counts.unknown,
        counts.reads
    ));
    report.counts = counts;
    let mut by_name: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in &h.grants {
        by_name.entry(&g.name).or_default().push(g);
    }
    let mut writes_of: HashMap<(&str, &str), Vec<&Write>> = HashMap::new();
    for w in &h.writes {
        writes_of.entry((&w.name, &w.grant)).or_default().push(w);
    }
    for (name, grants) in &by_name {
        let losses: Vec<(u64, u64)> = h
            .losses
            .iter()
            .filter(|(n, ..)| n == name)
            .map(|&(_, at, until)| (at, until))
            .collect();
        for stretch in stretches(grants, &losses) {
            tokens(&stretch, &mut report);
            activity(&stretch, &writes_of, &mut report);
            store_passes(&stretch, &h.writes, &mut report);
        }
    }
    record_fences(&h.writes, &mut report);
    final_reads(&h, &mut report);
    Ok(report)
}

/// Judge the history file at `path`.
///
/// # Errors
/// A file that cannot be read or does not parse.
pub fn check_file(path: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("history {}: cannot be read: {e}", path.display()))?;
    check_text(&path.display().to_string(), &text)
}

/// The grants of one name in the stretches between the store's losses of
/// it (`losses`: the boot-clock interval of each), each in the order
/// given; a grant whose acquisition (asked to answered) meets a loss is in
/// none.
fn stretches<'g>(grants: &[&'g Grant], losses: &[(u64, u64)]) -> Vec<Vec<&'g Grant>> {
    let mut stretches = vec![Vec::new(); losses.len() + 1];
    for g in grants {
        let asked = g.asked.unwrap_or(g.answered);
        // Losses surely over before it was asked for, and surely begun
        // before it was answered: the same count puts it in one stretch.
        let over = losses.iter().filter(|&&(_, until)| until < asked).count();
        let begun = losses.iter().filter(|&&(at, _)| at < g.answered).count();
        if over == begun {
            stretches[over].push(*g);
        }
    }
    stretches
}

/// `token-reissued` and `token-order` for the grants of one name.
fn tokens(grants: &[&Grant], report: &mut Report) {
    let mut first: HashMap<u64, &Grant> = HashMap::new();
    for g in grants {
        let Some(t) = g.token else { continue };
        match first.get(&t) {
            Some(f) => report.push(
                "token-reissued",
                format!(
                    "{} and {}: the store issued token {t} twice (restored from an older copy?)",
                    describe(f),
                    describe(g)
                ),
            ),
            None => {
                first.insert(t, g);
            }
        }
    }
    // Real-time order: sorted by `answered`, the highest token answered
    // so far; every grant asked for later must have a higher one.
    let mut answered: Vec<&Grant> = grants.iter().copied().filter(|g| g.token.is_some()).collect();
    answered.sort_by_key(|g| g.answered);
    let mut highest: Vec<&Grant> = Vec::with_capacity(answered.len());
    for g in &answered {
        let best = match highest.last() {
            Some(b) if b.token >= g.token => b,
            _ => g,
        };
        highest.push(best);
    }
    for h in grants {
        let (Some(asked), Some(token)) = (h.asked, h.token) else {
            continue;
        };
        let before = answered.partition_point(|g| g.answered < asked);
        if before == 0 {
            continue;
        }
        let g = highest[before - 1];
        // An equal token is reported as reissued above.
        if g.token > Some(token) {
            report.push(
                "token-order",
                format!(
                    "{} was asked for at {}, after {} was answered, yet its token is not higher",
                    describe(h),
                    secs(asked),
                    describe(g)
                ),
            );
        }
    }
    // Without `asked`: exclusive holdings one after the other must carry
    // rising tokens (a later holding with a lower token was issued later).
    let mut excl: Vec<&Grant> = grants
        .iter()
        .copied()
        .filter(|g| g.exclusive && g.token.is_some())
        .collect();
    excl.sort_by_key(|g| g.answered);
    for (i, h) in excl.iter().enumerate() {
        if h.asked.is_some() {
            continue;
        }
        if let Some(g) = excl[..i]
            .iter()
            .filter(|g| g.end.is_some_and(|e| e < h.answered) && g.token > h.token)
            .max_by_key(|g| g.token)
        {
            report.push(
                "token-order",
                format!(
                    "{} began after {} had ended, yet its token is lower",
                    describe(h),
                    describe(g)
                ),
            );
        }
    }
}

/// `overlap`, `outlived` and `never-ended` for the grants of one name.
fn activity(grants: &[&Grant], writes_of: &HashMap<(&str, &str), Vec<&Write>>, report: &mut Report) {
    // The last moment each holder acting on its own was seen acting: its
    // end, or the end of its last unfenced action (the start of one never
    // answered). Its fenced attempts are judged by their answers instead:
    // a refused one did nothing (and a test may make them on purpose, late).
    let last = |g: &Grant| -> (u64, String) {
        let mut last = (g.answered, "its grant was answered".to_owned());
        if let Some(end) = g.end
            && end > last.0
        {
            last = (end, "it logged its end".to_owned());
        }
        let writes = writes_of.get(&(g.name.as_str(), g.id.as_str())).into_iter().flatten();
        for w in writes.filter(|w| w.fence == FenceKind::None) {
            let seen = w.end.unwrap_or(w.start);
            if seen > last.0 {
                last = (seen, describe_write(w));
            }
        }
        last
    };
    let mut own: Vec<(&Grant, (u64, String))> = grants
        .iter()
        .copied()
        .filter(|g| g.acts_own)
        .map(|g| (g, last(g)))
        .collect();
    own.sort_by_key(|(g, _)| g.answered);
    for (g, (seen, what)) in &own {
        if g.end.is_none() {
            report.push(
                "never-ended",
                format!(
                    "{}: never logged its end (last seen at {}: {what})",
                    describe(g),
                    secs(*seen)
                ),
            );
        }
        if let Some(expires) = g.expires
            && *seen > expires
        {
            report.push(
                "outlived",
                format!(
                    "{} still acted at {} ({what}), {} ms after the store could expire its grant ({})",
                    describe(g),
                    secs(*seen),
                    (seen - expires) / 1_000_000,
                    secs(expires)
                ),
            );
        }
    }
    // A holder acting on its own that began first must be done before a
    // later one's grant was issued (unless both are shared).
    for h in grants {
        for (g, (seen, what)) in &own {
            if g.id == h.id || g.answered > h.answered || (!g.exclusive && !h.exclusive) {
                continue;
            }
            if *seen > h.issued_by() {
                report.push(
                    "overlap",
                    format!(
                        "{} still acted at {} ({what}), {} ms after {} was issued",
                        describe(g),
                        secs(*seen),
                        (seen - h.issued_by()) / 1_000_000,
                        describe(h)
                    ),
                );
            }
        }
    }
}

/// Whether `h` is a newer grant than the one `w` wrote for (`g`, when the
/// history has it): asked for after `g` was answered, or — when that is
/// not known — holding a higher token.
fn newer(h: &Grant, g: Option<&Grant>, w: &Write) -> bool {
    if h.id == w.grant {
        return false;
    }
    match (h.asked, g) {
        (Some(asked), Some(g)) => asked > g.answered,
        _ => h.token.is_some() && w.token.is_some() && h.token > w.token,
    }
}

/// `stale-pass`: the store's gate knows every grant, so once a newer grant
/// of the name was issued it passes no older grant's write (unless both
/// are shared).
fn store_passes(grants: &[&Grant], writes: &[Write], report: &mut Report) {
    let Some(name) = grants.first().map(|g| g.name.as_str()) else {
        return;
    };
    for w in writes
        .iter()
        .filter(|w| w.name == name && w.fence == FenceKind::Store && w.answer == Answer::Accepted)
    {
        let g = grants.iter().copied().find(|g| g.id == w.grant);
        let shared = g.is_some_and(|g| !g.exclusive);
        if let Some(h) = grants
            .iter()
            .find(|h| (h.exclusive || !shared) && h.issued_by() < w.start && newer(h, g, w))
        {
            report.push(
                "stale-pass",
                format!(
                    "{} passed the store's fence, begun {} ms after {} was issued",
                    describe_write(w),
                    (w.start - h.issued_by()) / 1_000_000,
                    describe(h)
                ),
            );
        }
    }
}

/// `fence-went-back` and `refused-without-cause` for each resource whose
/// fence keeps a record.
fn record_fences(writes: &[Write], report: &mut Report) {
    let mut by_resource: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.fence == FenceKind::Record) {
        by_resource.entry(&w.resource).or_default().push(w);
    }
    for writes in by_resource.values() {
        let mut accepted: Vec<&Write> = writes
            .iter()
            .copied()
            .filter(|w| w.answer == Answer::Accepted && w.token.is_some())
            .collect();
        accepted.sort_by_key(|w| w.latest());
        // Sweep by start: the highest token accepted before it (answered
        // before it began), and the highest from a grant other than that one's.
        let mut later: Vec<&Write> = accepted.clone();
        later.sort_by_key(|w| w.start);
        let (mut best, mut other): (Option<&Write>, Option<&Write>) = (None, None);
        let mut i = 0;
        for w in &later {
            while i < accepted.len() && accepted[i].latest() < w.start {
                let a = accepted[i];
                i += 1;
                match best {
                    Some(b) if b.grant == a.grant => {
                        if a.token > b.token {
                            best = Some(a);
                        }
                    }
                    Some(b) if a.token > b.token => {
                        other = best;
                        best = Some(a);
                    }
                    Some(_) => {
                        if other.is_none_or(|o| a.token > o.token) {
                            other = Some(a);
                        }
                    }
                    None => best = Some(a),
                }
            }
            let before = match best {
                Some(b) if b.grant != w.grant => Some(b),
                _ => other,
            };
            if let Some(b) = before
                && b.token >= w.token
            {
                report.push(
                    "fence-went-back",
                    format!("{} accepted after {} was", describe_write(w), describe_write(b)),
                );
            }
        }
        // A refusal needs a cause: another grant's equal or higher token
        // presented (and not refused) before the refusal was answered.
        for w in writes.iter().filter(|w| w.answer == Answer::Refused) {
            let caused = writes.iter().any(|c| {
                c.grant != w.grant && c.answer != Answer::Refused && c.token >= w.token && c.start < w.latest()
            });
            if !caused {
                report.push(
                    "refused-without-cause",
                    format!(
                        "{} refused, though no other grant had presented token {} or higher",
                        describe_write(w),
                        token_text(w.token)
                    ),
                );
            }
        }
    }
}

/// `lost` and `refused-applied`: the final content of a resource is the
/// value of an acknowledged (or unanswered) write that no acknowledged
/// write certainly came after.
fn final_reads(h: &History, report: &mut Report) {
    for r in &h.reads {
        let writes: Vec<&Write> = h
            .writes
            .iter()
            // A store gate's check changes nothing (`-`); a completion does.
            .filter(|w| w.resource == r.resource && w.value != "-" && w.start < r.at)
            .collect();
        let accepted: Vec<&Write> = writes
            .iter()
            .copied()
            .filter(|w| w.answer == Answer::Accepted)
            .collect();
        let superseded = |w: &Write| accepted.iter().any(|a| a.start > w.latest());
        let may_hold: Vec<&Write> = writes
            .iter()
            .copied()
            .filter(|w| w.answer != Answer::Refused && !superseded(w))
            .collect();
        if may_hold.iter().any(|w| w.value == r.value) || (may_hold.is_empty() && r.value == "-") {
            continue;
        }
        if let Some(w) = writes
            .iter()
            .find(|w| w.answer == Answer::Refused && w.value == r.value)
        {
            report.push(
                "refused-applied",
                format!(
                    "{} holds {:?} at {}: the value of {}",
                    r.resource,
                    r.value,
                    secs(r.at),
                    describe_write(w)
                ),
            );
            continue;
        }
        let expected: Vec<String> = may_hold.iter().map(|w| describe_write(w)).collect();
        report.push(
            "lost",
            format!(
                "{} holds {:?} at {}, but the last acknowledged write{} {}",
                r.resource,
                r.value,
                secs(r.at),
                if expected.len() == 1 { " was" } else { "s were" },
                if expected.is_empty() {
                    "— none: it should be empty".to_owned()
                } else {
                    expected.join(" or ")
                }
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    /// A grant line: exclusive, asked 1 ms before `answered` (ms).
    fn grant(name: &str, token: u64, id: &str, answered_ms: u64) -> String {
        format!(
            "grant name={name} token={token} grant={id} mode=x by=pid:{token} asked={} answered={}\n",
            (answered_ms - 1) * 1_000_000,
            answered_ms * 1_000_000
        )
    }

    fn end(name: &str, id: &str, at_ms: u64) -> String {
        format!("end name={name} grant={id} at={}\n", at_ms * 1_000_000)
    }

    /// A write begun at `start_ms`, answered 1 ms later with `answer` (or never, with "").
    #[allow(clippy::too_many_arguments)]
    fn write(
        id: &str,
        grant: &str,
        token: u64,
        resource: &str,
        fence: &str,
        start_ms: u64,
        answer: &str,
        value: &str,
    ) -> String {
        let mut s = format!(
            "write id={id} name=job grant={grant} token={token} resource={resource} fence={fence} start={} value={value}\n",
            start_ms * 1_000_000
        );
        if !answer.is_empty() {
            let _ = writeln!(s, "answer id={id} end={} answer={answer}", (start_ms + 1) * 1_000_000);
        }
        s
    }

    fn kinds(text: &str) -> Vec<&'static str> {
        let report = check_text("test", text).unwrap();
        report.violations.iter().map(|v| v.kind).collect()
    }

    /// Two holders one after the other, each writing through a fence record
    /// and the store's gate, the resource read back: nothing to report.
    fn clean() -> String {
        let mut h = String::new();
        h += &grant("job", 1, "a", 10);
        h += &write("a1", "a", 1, "file", "record", 11, "accepted", "a1");
        h += &write("a2", "a", 1, "gate", "store", 12, "accepted", "-");
        h += &end("job", "a", 20);
        h += &grant("job", 2, "b", 30);
        h += &write("b1", "b", 2, "file", "record", 31, "accepted", "b1");
        // The old holder, resumed late: refused by both.
        h += &write("a3", "a", 1, "file", "record", 40, "refused", "a3");
        h += &write("a4", "a", 1, "gate", "store", 41, "refused", "-");
        h += &end("job", "b", 50);
        h += "read resource=file at=60000000 value=b1\n";
        h
    }

    #[test]
    fn a_clean_history_passes_and_is_counted() {
        let report = check_text("test", &clean()).unwrap();
        report.assert_clean();
        assert_eq!(
            report.counts,
            Counts {
                grants: 2,
                writes: 5,
                accepted: 3,
                refused: 2,
                unknown: 0,
                reads: 1
            }
        );
    }

    #[test]
    fn a_token_issued_twice_is_reported() {
        let mut h = grant("job", 1, "a", 10);
        h += &end("job", "a", 20);
        h += &grant("job", 1, "b", 30);
        h += &end("job", "b", 40);
        assert_eq!(kinds(&h), ["token-reissued"]);
    }

    /// A store that lost its data issues token 1 again: the token rules
    /// are judged on each side of the `lost` event, never across it — but
    /// a fence record that took the reissued token across it still went
    /// back, and one that refused it had cause.
    #[test]
    fn a_loss_of_the_store_splits_the_token_rules_not_the_fence_records() {
        let mut h = grant("job", 1, "a", 10);
        h += &write("a1", "a", 1, "file", "record", 11, "accepted", "a1");
        h += &end("job", "a", 20);
        h += "lost name=job at=25000000\n";
        h += &grant("job", 1, "b", 30);
        h += &write("b1", "b", 1, "file", "record", 31, "refused", "b1");
        h += &end("job", "b", 40);
        h += "read resource=file at=60000000 value=a1\n";
        assert_eq!(kinds(&h), Vec::<&str>::new(), "judged across the loss");
        // Without the loss: the reissue is reported.
        assert_eq!(kinds(&h.replace("lost name=job at=25000000\n", "")), ["token-reissued"]);
        // The fence record is judged across it: taking the reissued token
        // is going back.
        let took = h
            .replace("answer=refused", "answer=accepted")
            .replace("value=a1\n", "value=b1\n");
        assert_eq!(kinds(&took), ["fence-went-back"]);
        // Two reissues within one stretch are still reported, and a grant
        // asked for before the loss and answered after it is in neither.
        let mut after = h.clone();
        after += &grant("job", 1, "c", 50);
        after += &end("job", "c", 55);
        assert_eq!(kinds(&after), ["token-reissued"]);
        let spanning = format!(
            "{h}grant name=job token=1 grant=d mode=x by=pid:9 asked=24000000 answered=26000000\nend name=job grant=d at=27000000\n"
        );
        assert_eq!(kinds(&spanning), Vec::<&str>::new());
    }

    #[test]
    fn a_token_lower_than_one_answered_before_it_was_asked_for_is_reported() {
        let mut h = grant("job", 5, "a", 10);
        h += &end("job", "a", 20);
        h += &grant("job", 4, "b", 30);
        h += &end("job", "b", 40);
        let report = check_text("test", &h).unwrap();
        assert_eq!(report.count("token-order"), 1, "{report}");
        assert!(report.to_string().contains("grant b of job (token 4"), "{report}");
        // Asked for before the other was answered: no order is proven.
        let concurrent = h.replace("asked=29000000", "asked=9000000");
        assert_eq!(kinds(&concurrent), Vec::<&str>::new());
        // Without `asked`, holdings one after the other are the evidence.
        let unknown = h.replace("asked=29000000", "asked=-");
        assert_eq!(kinds(&unknown), ["token-order"]);
    }

    #[test]
    fn a_holder_acting_after_the_next_grant_is_an_overlap() {
        let mut h = grant("job", 1, "a", 10);
        h += &grant("job", 2, "b", 30);
        h += &end("job", "a", 35); // a acted until 35, b was issued by 30
        h += &end("job", "b", 40);
        let report = check_text("test", &h).unwrap();
        assert_eq!(kinds(&h), ["overlap"], "{report}");
        assert!(report.to_string().contains("5 ms after grant b"), "{report}");
        // The store's own grant time, earlier than the answer, narrows it.
        let mut precise = grant("job", 1, "a", 10);
        precise += &end("job", "a", 29);
        precise += &grant("job", 2, "b", 30).replace('\n', " granted=28000000\n");
        precise += &end("job", "b", 40);
        assert_eq!(kinds(&precise), ["overlap"]);
        // Both shared: no overlap.
        let shared = h.replace("mode=x", "mode=s");
        assert_eq!(kinds(&shared), Vec::<&str>::new());
        // A holder that acts only through fences is not judged by time.
        let fenced = h.replacen("answered=10000000", "answered=10000000 acts=fenced", 1);
        assert_eq!(kinds(&fenced), Vec::<&str>::new());
    }

    #[test]
    fn an_unfenced_action_after_the_next_grant_is_an_overlap() {
        let mut h = grant("job", 1, "a", 10);
        h += &end("job", "a", 20);
        h += &grant("job", 2, "b", 30);
        // Recorded as the old holder's, after its end: still its activity.
        h += &write("a9", "a", 1, "disk", "none", 31, "accepted", "x");
        h += &end("job", "b", 40);
        let report = check_text("test", &h).unwrap();
        assert_eq!(kinds(&h), ["overlap"], "{report}");
        assert!(report.to_string().contains("write a9 to disk"), "{report}");
    }

    #[test]
    fn acting_after_the_store_could_expire_the_grant_is_reported() {
        let mut h = grant("job", 1, "a", 10);
        h += "expires name=job grant=a at=25000000\n";
        h += &end("job", "a", 26);
        assert_eq!(kinds(&h), ["outlived"]);
        let in_time = h.replace("at=26000000", "at=24000000");
        assert_eq!(kinds(&in_time), Vec::<&str>::new());
    }

    #[test]
    fn a_holder_never_seen_to_stop_is_reported() {
        let h = grant("job", 1, "a", 10);
        assert_eq!(kinds(&h), ["never-ended"]);
    }

    #[test]
    fn the_store_gate_passing_an_older_grant_after_a_newer_one_is_reported() {
        let mut h = grant("job", 1, "a", 10);
        h += &end("job", "a", 20);
        h += &grant("job", 2, "b", 30);
        h += &end("job", "b", 40);
        let late = write("a5", "a", 1, "gate", "store", 35, "accepted", "-");
        let report = check_text("test", &(h.clone() + &late)).unwrap();
        assert_eq!(kinds(&(h.clone() + &late)), ["stale-pass"], "{report}");
        assert!(report.to_string().contains("begun 5 ms after grant b"), "{report}");
        // Refused, or begun before the newer grant was answered: fine.
        let refused = write("a5", "a", 1, "gate", "store", 35, "refused", "-");
        assert_eq!(kinds(&(h.clone() + &refused)), Vec::<&str>::new());
        let early = write("a5", "a", 1, "gate", "store", 29, "accepted", "-");
        assert_eq!(kinds(&(h.clone() + &early)), Vec::<&str>::new());
        // Both shared: the older may still pass.
        let shared = h.replace("mode=x", "mode=s") + &late;
        assert_eq!(kinds(&shared), Vec::<&str>::new());
    }

    #[test]
    fn a_fence_record_accepting_a_lower_or_reissued_token_went_back() {
        let mut h = String::new();
        h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
        h += &write("b1", "b", 4, "file", "record", 20, "accepted", "b1");
        assert_eq!(kinds(&h), ["fence-went-back"]);
        // The same token from another grant (a store rolled back).
        let mut h = String::new();
        h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
        h += &write("b1", "b", 5, "file", "record", 20, "accepted", "b1");
        let report = check_text("test", &h).unwrap();
        assert_eq!(kinds(&h), ["fence-went-back"], "{report}");
        assert!(
            report.to_string().contains("write b1 to file by grant b with token 5"),
            "{report}"
        );
        // The same grant again, or a higher token: fine.
        let mut h = String::new();
        h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
        h += &write("a2", "a", 5, "file", "record", 20, "accepted", "a2");
        h += &write("b1", "b", 6, "file", "record", 30, "accepted", "b1");
        assert_eq!(kinds(&h), Vec::<&str>::new());
        // Overlapping attempts prove no order.
        let mut h = String::new();
        h += "write id=a1 name=job grant=a token=5 resource=file fence=record start=10 value=a1\n";
        h += "write id=b1 name=job grant=b token=4 resource=file fence=record start=11 value=b1\n";
        h += "answer id=a1 end=20 answer=accepted\nanswer id=b1 end=21 answer=accepted\n";
        assert_eq!(kinds(&h), Vec::<&str>::new());
    }

    #[test]
    fn a_fence_record_refusing_without_a_cause_is_reported() {
        let mut h = String::new();
        h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
        h += &write("b1", "b", 6, "file", "record", 20, "refused", "b1");
        assert_eq!(kinds(&h), ["refused-without-cause"]);
    }

    #[test]
    fn an_acknowledged_write_missing_from_the_resource_is_lost() {
        let mut h = String::new();
        h += &write("a1", "a", 5, "file", "record", 10, "accepted", "a1");
        h += &write("a2", "a", 5, "file", "record", 20, "accepted", "a2");
        let read = |v: &str| format!("read resource=file at=30000000 value={v}\n");
        assert_eq!(kinds(&(h.clone() + &read("a2"))), Vec::<&str>::new());
        assert_eq!(kinds(&(h.clone() + &read("a1"))), ["lost"]);
        assert_eq!(kinds(&(h.clone() + &read("-"))), ["lost"]);
        // A write never answered may or may not have landed.
        let unknown = "write id=a3 name=job grant=a token=5 resource=file fence=record start=25000000 value=a3\n";
        assert_eq!(kinds(&(h.clone() + unknown + &read("a3"))), Vec::<&str>::new());
        assert_eq!(kinds(&(h.clone() + unknown + &read("a2"))), Vec::<&str>::new());
        // A refused write's value must never be there.
        let refused = write("b1", "b", 4, "file", "record", 22, "refused", "b1");
        assert_eq!(kinds(&(h + &refused + &read("b1"))), ["refused-applied"]);
    }

    #[test]
    fn violations_beyond_those_kept_are_still_counted() {
        let grants = KEEP_PER_KIND + 50;
        let mut h = String::new();
        for i in 0..grants as u64 {
            h += &grant("job", 1, &format!("g{i}"), 10 * i + 10);
            h += &end("job", &format!("g{i}"), 10 * i + 15);
        }
        let report = check_text("test", &h).unwrap();
        // Each later grant of token 1 reissues the first one's: all are
        // counted, at most KEEP_PER_KIND kept.
        let reissued = grants - 1;
        assert_eq!(report.count("token-reissued"), reissued);
        assert_eq!(
            report.violations.iter().filter(|v| v.kind == "token-reissued").count(),
            KEEP_PER_KIND
        );
        let mut merged = Report::new("all");
        merged.merge(report.clone());
        merged.merge(report.clone());
        assert_eq!(merged.count("token-reissued"), 2 * reissued);
        assert_eq!(merged.total(), 2 * report.total());
        assert!(!merged.is_clean());
    }

    #[test]
    fn a_history_that_does_not_parse_is_an_error_not_a_pass() {
        for bad in [
            "grant name=job token=1 grant=a mode=x by=p asked=- answered=zero\n",
            "end name=job grant=nobody at=1\n",
            "answer id=nothing end=1 answer=accepted\n",
            "granted name=job\n",
            "write id=w name=job grant=a token=1 resource=f fence=maybe start=1 value=v\n",
        ] {
            let err = check_text("test", bad).unwrap_err();
            assert!(err.starts_with("history test: line 1:"), "{err}");
        }
        let err = check_file(Path::new("/nonexistent/history")).unwrap_err();
        assert!(err.contains("cannot be read"), "{err}");
    }
}
