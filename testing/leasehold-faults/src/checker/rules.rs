//! The rules the checker judges a history by (the module docs' table):
//! tokens, holders' activity, the store's gate, fence records and final
//! reads — each a function that adds its violations to the report.

use std::collections::{BTreeMap, HashMap};

use super::history::{Answer, FenceKind, Grant, History, Write};
use super::{Report, secs};

pub(super) fn token_text(t: Option<u64>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

pub(super) fn describe(g: &Grant) -> String {
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

pub(super) fn describe_write(w: &Write) -> String {
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
/// The grants of one name in the stretches between the store's losses of
/// it (`losses`: the boot-clock interval of each), each in the order
/// given; a grant whose acquisition (asked to answered) meets a loss is in
/// none.
pub(super) fn stretches<'g>(grants: &[&'g Grant], losses: &[(u64, u64)]) -> Vec<Vec<&'g Grant>> {
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
pub(super) fn tokens(grants: &[&Grant], report: &mut Report) {
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
pub(super) fn activity(grants: &[&Grant], writes_of: &HashMap<(&str, &str), Vec<&Write>>, report: &mut Report) {
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
pub(super) fn newer(h: &Grant, g: Option<&Grant>, w: &Write) -> bool {
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
pub(super) fn store_passes(grants: &[&Grant], writes: &[Write], report: &mut Report) {
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
pub(super) fn record_fences(writes: &[Write], report: &mut Report) {
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
pub(super) fn final_reads(h: &History, report: &mut Report) {
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
