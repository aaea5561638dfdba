//! A name's grants over time, from its history: bars from grant to end
//! (released, expired, taken over by proof of death, or lapsed without a
//! record yet), labelled with their tokens, and marks for what happened
//! between (re-acquisitions, refusals, fence verdicts, takeovers).
//!
//! One model, two drawings: SVG for the status page (`leasehold-serve`)
//! and Unicode blocks for the terminal (`leasehold history --timeline`).
//! It shows only what the history holds: the store keeps the newest
//! entries of each name (1000), and `serve` adds what it followed since it
//! started. [`words`]: how it says durations, times and counts to people,
//! the same on the page and in the terminal.

#![allow(clippy::cast_precision_loss, reason = "columns and seconds, far below 2^52")]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::{Grant, HistoryEntry, HistoryEvent, LeaseName, Token};

pub mod words;

/// The most a store keeps of one name (`HISTORY_PER_NAME`, with the slack a
/// store may prune late): what a timeline reads of a name's history.
pub const HISTORY_MAX: u32 = 1100;

/// How a bar ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Still live; the store expires it after this long unless renewed.
    Live(Duration),
    Released,
    /// Its TTL ran out (recorded by the next operation on the name).
    Expired,
    /// Its holder was proved dead and the grant taken over.
    TakenOver,
    /// No longer live, and not yet recorded: its TTL ran out at about
    /// this end (seen by `serve`, or at least its TTL after the grant).
    Lapsed,
    /// Still in the store, but its holder is provably gone: the next
    /// acquisition takes it over at once (the store would expire it after
    /// this long).
    Dead(Duration),
}

impl End {
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            End::Live(_) => "live",
            End::Released => "released",
            End::Expired => "expired",
            End::TakenOver => "taken over (holder proved dead)",
            End::Lapsed => "lapsed (expiry not yet recorded)",
            End::Dead(_) => "holder proved dead: takeable now",
        }
    }

    #[must_use]
    pub fn class(self) -> &'static str {
        match self {
            End::Live(_) => "live",
            End::Released => "released",
            End::Expired => "expired",
            End::TakenOver => "takenover",
            End::Lapsed => "lapsed",
            End::Dead(_) => "dead",
        }
    }

    /// Whether the grant is still in the store (live, or held by a dead
    /// holder until someone takes it over).
    #[must_use]
    pub fn open(self) -> bool {
        matches!(self, End::Live(_) | End::Dead(_))
    }
}

/// One grant.
#[derive(Debug, Clone)]
pub struct Bar {
    pub token: Token,
    pub owner: String,
    /// The `granted` entry's words (mode, TTL, holder).
    pub detail: String,
    pub start: SystemTime,
    /// False when the grant began before the oldest entry kept.
    pub start_known: bool,
    pub end_at: SystemTime,
    pub end: End,
    /// It began by taking over after the previous grant expired.
    pub after_expiry: bool,
    pub lane: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    Reacquired,
    StaleRefused,
    FencePassed,
    FenceRefused,
    /// A grant taken over by proof of its holder's death.
    TakeoverByProof,
    /// A grant given right after the previous one's expiry was recorded.
    TakeoverByExpiry,
}

impl MarkKind {
    #[must_use]
    pub fn glyph(self) -> char {
        match self {
            MarkKind::Reacquired => '↻',
            MarkKind::StaleRefused => '!',
            MarkKind::FencePassed => '✓',
            MarkKind::FenceRefused => '✗',
            MarkKind::TakeoverByProof => '⚡',
            MarkKind::TakeoverByExpiry => '◇',
        }
    }

    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            MarkKind::Reacquired => "reacquired",
            MarkKind::StaleRefused => "stale token refused",
            MarkKind::FencePassed => "fence passed",
            MarkKind::FenceRefused => "fence refused",
            MarkKind::TakeoverByProof => "takeover by proof of death",
            MarkKind::TakeoverByExpiry => "takeover after expiry",
        }
    }

    #[must_use]
    pub fn class(self) -> &'static str {
        match self {
            MarkKind::Reacquired => "reacquired",
            MarkKind::StaleRefused => "stale",
            MarkKind::FencePassed => "passed",
            MarkKind::FenceRefused => "refused",
            MarkKind::TakeoverByProof => "proof",
            MarkKind::TakeoverByExpiry => "byexpiry",
        }
    }

    /// Bad news is drawn in red.
    #[must_use]
    pub fn alarming(self) -> bool {
        matches!(
            self,
            MarkKind::StaleRefused | MarkKind::FenceRefused | MarkKind::TakeoverByProof | MarkKind::TakeoverByExpiry
        )
    }
}

#[derive(Debug, Clone)]
pub struct Mark {
    pub at: SystemTime,
    pub kind: MarkKind,
    pub token: Option<Token>,
    pub owner: Option<String>,
    pub detail: String,
}

/// The timeline of one name over `[from, to]`.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub name: LeaseName,
    pub from: SystemTime,
    pub to: SystemTime,
    pub bars: Vec<Bar>,
    pub marks: Vec<Mark>,
    pub lanes: usize,
    /// The oldest entry kept, and how many there are.
    pub reach: Option<SystemTime>,
    pub entries: usize,
}

/// Whether `e` is a grant given right after the expiry of another grant
/// was recorded (`previous`): a takeover by expiry. The acquisition that
/// finds a grant expired records both in one transaction.
#[must_use]
pub fn after_expiry(previous: &HistoryEntry, e: &HistoryEntry) -> bool {
    e.event == HistoryEvent::Granted
        && previous.event == HistoryEvent::Expired
        && previous.token != e.token
        && e.at.duration_since(previous.at).unwrap_or_default() < Duration::from_secs(1)
}

/// The TTL a `granted` entry's words name ("exclusive for 120.0s to …").
fn granted_ttl(detail: &str) -> Option<Duration> {
    let rest = detail.split_once(" for ")?.1;
    let secs = rest.split_once("s to ")?.0;
    secs.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// How a live grant's bar ends now: live, or takeable at once when its
/// holder is provably gone.
fn still(g: &Grant, dead: &dyn Fn(&Grant) -> bool) -> End {
    if dead(g) {
        End::Dead(g.expires_in)
    } else {
        End::Live(g.expires_in)
    }
}

/// End the bars the history left `open`: live grants run to now, the
/// others lapsed (when seen to end, else at their TTL). Then add the live
/// grants the history does not show (granted before its reach).
fn close_open_bars(
    bars: &mut Vec<Bar>,
    open: HashMap<Token, usize>,
    live: &[Grant],
    dead: &dyn Fn(&Grant) -> bool,
    ends: &HashMap<Token, SystemTime>,
    now: SystemTime,
) {
    for (token, i) in open {
        let bar = &mut bars[i];
        if let Some(g) = live.iter().find(|g| g.token == token) {
            bar.end = still(g, dead);
            bar.end_at = now;
        } else {
            let by_ttl = granted_ttl(&bar.detail).map(|ttl| crate::later(bar.start, ttl));
            bar.end_at = ends.get(&token).copied().or(by_ttl).unwrap_or(now).min(now);
        }
    }
    for g in live {
        if !bars.iter().any(|b| b.token == g.token) {
            bars.push(Bar {
                token: g.token,
                owner: g.owner.clone(),
                detail: String::new(),
                start: g.acquired_at,
                start_known: true,
                end_at: now,
                end: still(g, dead),
                after_expiry: false,
                lane: 0,
            });
        }
    }
}

/// Put each bar (sorted by start) in the first lane free at its start, so
/// overlapping grants never share one; how many lanes that took.
fn assign_lanes(bars: &mut [Bar]) -> usize {
    let mut lane_ends: Vec<SystemTime> = Vec::new();
    for b in bars {
        let lane = lane_ends
            .iter()
            .position(|end| *end <= b.start)
            .unwrap_or(lane_ends.len());
        if lane == lane_ends.len() {
            lane_ends.push(b.end_at);
        } else {
            lane_ends[lane] = b.end_at;
        }
        b.lane = lane;
    }
    lane_ends.len()
}

/// Build the timeline of `name` over the `range` before `now`.
///
/// `entries`: its history, oldest first; `live`: its live grants now, and
/// `dead` which of them have a holder that is provably gone; `ends`: when
/// grants that lapsed unrecorded were seen to end.
#[must_use]
#[allow(clippy::implicit_hasher, reason = "the follower's map")]
pub fn build(
    name: &LeaseName,
    entries: &[HistoryEntry],
    live: &[Grant],
    dead: &dyn Fn(&Grant) -> bool,
    ends: &HashMap<Token, SystemTime>,
    now: SystemTime,
    range: Duration,
) -> Timeline {
    let from = now.checked_sub(range).unwrap_or(SystemTime::UNIX_EPOCH);
    let reach = entries.first().map(|e| e.at);
    let mut bars: Vec<Bar> = Vec::new();
    let mut open: HashMap<Token, usize> = HashMap::new();
    let mut marks = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let mark = |kind| Mark {
            at: e.at,
            kind,
            token: e.token,
            owner: e.owner.clone(),
            detail: e.detail.clone(),
        };
        let Some(token) = e.token else { continue };
        match e.event {
            HistoryEvent::Granted => {
                let after_expiry = i > 0 && after_expiry(&entries[i - 1], e);
                if after_expiry {
                    marks.push(mark(MarkKind::TakeoverByExpiry));
                }
                open.insert(token, bars.len());
                bars.push(Bar {
                    token,
                    owner: e.owner.clone().unwrap_or_default(),
                    detail: e.detail.clone(),
                    start: e.at,
                    start_known: true,
                    end_at: now,
                    end: End::Lapsed,
                    after_expiry,
                    lane: 0,
                });
            }
            HistoryEvent::Released | HistoryEvent::Expired | HistoryEvent::FastTakeover => {
                let end = match e.event {
                    HistoryEvent::Released => End::Released,
                    HistoryEvent::Expired => End::Expired,
                    _ => End::TakenOver,
                };
                if e.event == HistoryEvent::FastTakeover {
                    marks.push(mark(MarkKind::TakeoverByProof));
                }
                let i = open.remove(&token).unwrap_or_else(|| {
                    // Granted before the oldest entry kept.
                    bars.push(Bar {
                        token,
                        owner: e.owner.clone().unwrap_or_default(),
                        detail: String::new(),
                        start: reach.unwrap_or(e.at),
                        start_known: false,
                        end_at: e.at,
                        end,
                        after_expiry: false,
                        lane: 0,
                    });
                    bars.len() - 1
                });
                bars[i].end_at = e.at;
                bars[i].end = end;
            }
            HistoryEvent::Reacquired => marks.push(mark(MarkKind::Reacquired)),
            HistoryEvent::StaleRefused => marks.push(mark(MarkKind::StaleRefused)),
            HistoryEvent::FencePassed => marks.push(mark(MarkKind::FencePassed)),
            HistoryEvent::FenceRefused => marks.push(mark(MarkKind::FenceRefused)),
        }
    }
    close_open_bars(&mut bars, open, live, dead, ends, now);
    bars.retain(|b| b.end_at >= from && b.start <= now);
    bars.sort_by_key(|b| (b.start, b.token));
    let lanes = assign_lanes(&mut bars);
    marks.retain(|m| m.at >= from && m.at <= now);
    Timeline {
        name: name.clone(),
        from,
        to: now,
        bars,
        marks,
        lanes: lanes.max(1),
        reach,
        entries: entries.len(),
    }
}

/// What an event in the chronological list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A grant began (drawn in the colour of how it ended).
    Granted(End),
    /// A grant ended (released, expired, taken over).
    Ended(End),
    Mark(MarkKind),
}

/// One line of the events list.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: SystemTime,
    pub kind: EventKind,
    pub token: Option<Token>,
    /// What happened, for people (stored text in it as stored).
    pub what: String,
}

impl Timeline {
    /// Where `t` falls in the range, from 0 (`from`) to 1 (`to`), clamped:
    /// the one placing of a time both drawings use.
    #[must_use]
    pub fn fraction(&self, t: SystemTime) -> f64 {
        let span = self
            .to
            .duration_since(self.from)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-9);
        let at = t
            .max(self.from)
            .min(self.to)
            .duration_since(self.from)
            .unwrap_or_default();
        at.as_secs_f64() / span
    }

    /// Everything in the range as one list, newest first: grants, their
    /// ends and the marks.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        for b in &self.bars {
            if b.start_known && b.start >= self.from {
                let mut what = format!("granted to {}", b.owner);
                if !b.detail.is_empty() {
                    let _ = write!(what, " ({})", words::reword(&b.detail));
                }
                out.push(Event {
                    at: b.start,
                    kind: EventKind::Granted(b.end),
                    token: Some(b.token),
                    what,
                });
            }
            if matches!(b.end, End::Released | End::Expired | End::TakenOver) {
                out.push(Event {
                    at: b.end_at,
                    kind: EventKind::Ended(b.end),
                    token: Some(b.token),
                    what: b.end.label().to_owned(),
                });
            }
        }
        for m in &self.marks {
            let mut what = m.kind.label().to_owned();
            if !m.detail.is_empty() {
                let _ = write!(what, ": {}", words::reword(&m.detail));
            }
            out.push(Event {
                at: m.at,
                kind: EventKind::Mark(m.kind),
                token: m.token,
                what,
            });
        }
        // Newest first; at one instant, a grant's end before the next grant.
        out.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| rank(b.kind).cmp(&rank(a.kind))));
        out
    }
}

/// The order of events at the same instant: an end, then a mark about
/// the takeover, then the grant that followed.
fn rank(kind: EventKind) -> u8 {
    match kind {
        EventKind::Ended(_) => 0,
        EventKind::Mark(_) => 1,
        EventKind::Granted(_) => 2,
    }
}

/// The zoom levels offered, from the last minute to the last week.
pub const RANGES: [(&str, Duration); 8] = [
    ("1m", Duration::from_secs(60)),
    ("5m", Duration::from_secs(300)),
    ("15m", Duration::from_secs(900)),
    ("1h", Duration::from_secs(3600)),
    ("6h", Duration::from_secs(6 * 3600)),
    ("1d", Duration::from_secs(86_400)),
    ("3d", Duration::from_secs(3 * 86_400)),
    ("7d", Duration::from_secs(7 * 86_400)),
];

/// A clock time for an axis: seconds for short ranges, dates for long.
#[must_use]
pub fn axis_label(t: SystemTime, range: Duration) -> String {
    let full = crate::format_time(t); // 2025-01-02T03:04:05.678Z
    if full.len() < 19 {
        return full;
    }
    if range <= Duration::from_secs(600) {
        full[11..19].to_owned()
    } else if range <= Duration::from_secs(86_400) {
        full[11..16].to_owned()
    } else {
        format!("{} {}", &full[5..10], &full[11..16])
    }
}

/// What a bar says when hovered (and in the terminal's right column).
/// Stored text in it is escaped (`text::plain`): it goes into a
/// tooltip, which cannot hold markup.
#[must_use]
pub fn describe(bar: &Bar) -> String {
    let mut s = format!("token {} · {}", bar.token, crate::escape_hidden(&bar.owner));
    if !bar.detail.is_empty() {
        let _ = write!(s, " · {}", crate::escape_hidden(&words::reword(&bar.detail)));
    }
    let _ = write!(
        s,
        " · granted {}{}",
        if bar.start_known { "" } else { "before " },
        words::clock(bar.start)
    );
    match bar.end {
        End::Live(left) => {
            let _ = write!(s, " · live, expires in {}", words::duration(left));
        }
        End::Dead(left) => {
            let _ = write!(
                s,
                " · {} (the store would expire it in {})",
                bar.end.label(),
                words::duration(left)
            );
        }
        end => {
            let _ = write!(s, " · {} {}", end.label(), words::clock(bar.end_at));
        }
    }
    if bar.after_expiry {
        s.push_str(" · took over after the previous grant expired");
    }
    s
}
