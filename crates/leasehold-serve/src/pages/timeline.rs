//! `/timeline?name=A&name=B&range=1h`: grants side by side, drawn as SVG
//! by the server (no chart library, nothing fetched), with one
//! chronological list of what happened.

#![allow(
    clippy::cast_precision_loss,
    reason = "pixels from lane and row counts, far below 2^52"
)]

use std::time::{Duration, SystemTime};

use leasehold::{Grant, LeaseName};
use maud::{Markup, html};

use super::{Page, aged, enc, lease_href};
use crate::App;
use crate::http::Request;
use crate::text::{self, shown};
use crate::watch::HISTORY_MAX;
use leasehold::timeline::{self, EventKind, RANGES, Timeline};

/// The zoom level named `label` (1h when there is no such level).
#[must_use]
pub fn range_of_label(label: &str) -> (&'static str, Duration) {
    RANGES.iter().copied().find(|(l, _)| *l == label).unwrap_or(RANGES[3])
}

/// Build the timeline of `name` from the store's history, what `serve`
/// followed before it, and the grants of the last reading.
///
/// # Errors
/// The store's, when its history cannot be read.
pub fn timeline_of(app: &App, name: &LeaseName, range: Duration) -> leasehold::Result<(Timeline, usize)> {
    let snapshot = app.shared.snapshot();
    let mut entries = app.store.history(name, HISTORY_MAX)?;
    entries.reverse();
    let mut kept = app.shared.kept_before(name, entries.first().map(|e| e.at));
    let followed = kept.len();
    kept.extend(entries);
    let live: Vec<Grant> = snapshot
        .lease(name)
        .map(|s| aged(&snapshot, s).grants)
        .unwrap_or_default();
    let ends = app.shared.observed_ends(name);
    Ok((
        timeline::build(
            name,
            &kept,
            &live,
            &|g| snapshot.dead(g),
            &ends,
            SystemTime::now(),
            range,
        ),
        followed,
    ))
}

/// `/timeline?name=A&name=B&range=1h`.
pub fn timeline(app: &App, r: &Request, page: &mut Page) -> Markup {
    let mut names: Vec<&str> = Vec::new();
    for n in r.params("name").map(str::trim).filter(|n| !n.is_empty()) {
        if !names.contains(&n) && names.len() < 20 {
            names.push(n);
        }
    }
    let (range_label, range) = range_of_label(r.param("range").unwrap_or("1h"));
    let mut title = vec!["Timeline"];
    title.extend(names.iter().copied());
    title.push("· leasehold");
    page.title(&title);
    let query_names: String = names.iter().fold(String::new(), |mut q, n| {
        q.push_str("name=");
        q.push_str(&enc(n));
        q.push('&');
        q
    });
    html! {
        h1 { "Timeline" }
        form.filter.names method="get" action="/timeline" {
            fieldset {
                legend { "Names" }
                @for n in &names {
                    label.chip title="Untick to leave this name out" {
                        input type="checkbox" name="name" value=(n) checked;
                        " " (shown(n))
                    }
                }
                label { span.sr { "Add a name" } input type="search" name="name" placeholder="add a name" autocomplete="off"; }
                input type="hidden" name="range" value=(range_label);
                button type="submit" { "Show" }
            }
        }
        p.zoom {
            "Zoom: "
            @for (label, _) in RANGES {
                @if label == range_label { strong { (label) } } @else {
                    a href={ "/timeline?" (query_names) "range=" (label) } { (label) }
                }
                " "
            }
        }
        @if names.is_empty() {
            p { "Choose a name above, or select several on the " a href="/" { "leases page" } "." }
        }
        @for n in &names {
            @match LeaseName::new(*n) {
                Err(e) => p.error { "Not a lease name: " (shown(n)) ": " (e.to_string()) }
                Ok(name) => @match timeline_of(app, &name, range) {
                    Err(e) => p.error { "Cannot read the history of " (shown(name.as_str())) ": " (shown(&e.to_string())) }
                    Ok((tl, followed)) => (timeline_section(&tl, followed, true))
                }
            }
        }
        p.muted {
            "The store keeps the newest " (leasehold::HISTORY_PER_NAME) " history entries of each name; this serve adds what it followed since it started, for "
            (text::duration(app.shared.retention)) ". Hover a bar for its holder and times."
        }
    }
}

/// One name's timeline: where its history reaches, the chart, the legend
/// and the events in range as one list, newest first.
pub fn timeline_section(tl: &Timeline, followed: usize, heading: bool) -> Markup {
    let events = tl.events();
    html! {
        section.timeline {
            @if heading {
                h2 { a href=(lease_href(&tl.name)) { (shown(tl.name.as_str())) } }
            }
            p.muted {
                @match tl.reach {
                    Some(r) => { "History reaches back to " (text::time(r)) " (" (text::count(tl.entries as u64, "entry", "entries"))
                        @if followed > 0 { ", " (followed) " of them followed by this serve" } ")." }
                    None => "No history kept for this name.",
                }
                " " a href={ "/api/leases/" (enc(tl.name.as_str())) "/history?limit=1100" } { "JSON" }
            }
            div.scroll { (svg(tl)) }
            (legend(tl))
            @if !events.is_empty() {
                details.events {
                    summary { "What happened in this range (" (events.len().min(EVENTS_SHOWN)) @if events.len() > EVENTS_SHOWN { " newest of " (events.len()) } ")" }
                    div.scroll {
                        table.events {
                            thead { tr { th { "when" } th { span.sr { "kind" } } th { "token" } th { "what" } } }
                            tbody {
                                @for e in events.iter().take(EVENTS_SHOWN) {
                                    tr {
                                        td { (text::time(e.at)) }
                                        td { (swatch(e.kind)) }
                                        td.token { @if let Some(t) = e.token { (t) } }
                                        td { (shown(&e.what)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Events listed at most per name.
const EVENTS_SHOWN: usize = 100;

/// The colour key of an event: its bar's colour, or its mark.
fn swatch(kind: EventKind) -> Markup {
    match kind {
        EventKind::Granted(end) => {
            html! { span class={ "swatch " (end.class()) } title={ "grant, " (end.label()) } { "█" } }
        }
        EventKind::Ended(end) => html! { span class={ "swatch ended " (end.class()) } title=(end.label()) { "▏" } },
        EventKind::Mark(m) => {
            html! { span class={ "glyph " (m.class()) } title=(m.label()) { (m.glyph().to_string()) } }
        }
    }
}

fn legend(tl: &Timeline) -> Markup {
    let after_expiry = tl.bars.iter().any(|b| b.after_expiry);
    html! {
        p.legend {
            span.key.live { "live" } span.key.dead { "holder proved dead, takeable now" }
            span.key.released { "released" } span.key.expired { "expired" } span.key.takenover { "taken over" }
            span.key.lapsed { "lapsed, not yet recorded" }
            @if after_expiry {
                span.key.afterexpiry title="The grant began by taking over one whose time had run out (◇)." {
                    "outlined: began after the previous grant expired"
                }
            }
            " ⚡ takeover by proof of death · ◇ takeover after expiry · ↻ reacquired · ✓ fence passed · ✗ fence refused · ! stale token refused"
        }
    }
}

const SVG_W: f64 = 1000.0;
const LANE_H: f64 = 24.0;
const TOP: f64 = 22.0;
/// The height of a row of marks, and the least distance between two marks
/// in one row (a glyph is about 14 wide): marks closer than this go to the
/// next row instead of drawing over each other.
const MARK_ROW_H: f64 = 18.0;
const MARK_GAP: f64 = 16.0;
/// Rows of marks at most; marks that find no room in them are counted
/// (`+N`) in a row below, so a burst of a thousand fence checks does not
/// make the chart a thousand rows tall (the list below names them all).
const MARK_ROWS: usize = 5;

/// The timeline drawn by the server: no chart library, nothing fetched.
fn svg(tl: &Timeline) -> Markup {
    let x = |t: SystemTime| -> f64 { (tl.fraction(t) * SVG_W * 100.0).round() / 100.0 };
    // Each mark in the first row where it keeps its distance from the
    // mark before it (marks come oldest first); past the last row, counted.
    let mut row_ends: Vec<f64> = Vec::new();
    let mut marks: Vec<(f64, usize, &timeline::Mark)> = Vec::new();
    let mut crowded: Vec<(f64, usize)> = Vec::new();
    for m in &tl.marks {
        let mx = x(m.at);
        match row_ends.iter().position(|end| mx - end >= MARK_GAP) {
            Some(row) => {
                row_ends[row] = mx;
                marks.push((mx, row, m));
            }
            None if row_ends.len() < MARK_ROWS => {
                row_ends.push(mx);
                marks.push((mx, row_ends.len() - 1, m));
            }
            None => match crowded.last_mut() {
                Some((at, n)) if mx - *at < 2.0 * MARK_GAP => *n += 1,
                _ => crowded.push((mx, 1)),
            },
        }
    }
    let rows = row_ends.len().max(1) + usize::from(!crowded.is_empty());
    let range = tl.to.duration_since(tl.from).unwrap_or_default();
    let marks_y = TOP + LANE_H * tl.lanes as f64 + 4.0;
    let height = marks_y + MARK_ROW_H * rows as f64 + 8.0;
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let t = tl.from + range.mul_f64(f64::from(i) / 5.0);
            (x(t), timeline::axis_label(t, range))
        })
        .collect();
    html! {
        svg.chart viewBox={ "0 0 " (SVG_W) " " (height) } role="img" aria-label={ "timeline of " (text::plain(tl.name.as_str())) } xmlns="http://www.w3.org/2000/svg" {
            @for (i, (tx, label)) in ticks.iter().enumerate() {
                line.tick x1=(tx) x2=(tx) y1="16" y2=(height - 4.0) {}
                text.axis x=(tx) y="12" text-anchor=(if i == 0 { "start" } else if i == 5 { "end" } else { "middle" }) { (label) }
            }
            @for b in &tl.bars {
                @let x0 = x(b.start);
                @let w = (x(b.end_at) - x0).max(2.0);
                @let y = TOP + LANE_H * b.lane as f64;
                g class={ "bar " (b.end.class()) @if b.after_expiry { " afterexpiry" } } data-token=(b.token.0) {
                    title { (timeline::describe(b)) }
                    rect x=(x0) y=(y) width=(w) height=(LANE_H - 6.0) rx="3" {}
                    @if w > 28.0 {
                        text x=(x0 + 4.0) y=(y + 13.0) { (b.token) }
                    }
                    @if b.end.open() {
                        path.arrow d={ "M" (x0 + w) " " (y) " l6 " ((LANE_H - 6.0) / 2.0) " l-6 " ((LANE_H - 6.0) / 2.0) "z" } {}
                    }
                }
            }
            @for (mx, row, m) in &marks {
                g class={ "mark " (m.kind.class()) } {
                    title {
                        (m.kind.label()) " · " (text::clock(m.at))
                        @if let Some(t) = m.token { " · token " (t) }
                        @if let Some(o) = &m.owner { " · " (text::plain(o)) }
                        " · " (text::plain(&text::reword(&m.detail)))
                    }
                    text x=(mx) y=(marks_y + 14.0 + MARK_ROW_H * *row as f64) text-anchor="middle" { (m.kind.glyph().to_string()) }
                }
            }
            @for (cx, n) in &crowded {
                g.mark.more {
                    title { (n) " more marks here: the list below has them all" }
                    text x=(cx) y=(marks_y + 14.0 + MARK_ROW_H * MARK_ROWS as f64) text-anchor="middle" { "+" (n) }
                }
            }
            line.now x1=(SVG_W - 0.5) x2=(SVG_W - 0.5) y1="16" y2=(height - 4.0) {}
        }
    }
}
