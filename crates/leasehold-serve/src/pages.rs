//! The HTML pages. Every value from the store is interpolated by `maud`,
//! which escapes it: a hostile lease name, payload or error shows as text.

#![allow(clippy::cast_precision_loss, reason = "pixels from lane counts, far below 2^52")]

use std::time::{Duration, SystemTime};

use leasehold::{Grant, LeaseName, LeaseState, TaskState};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::http::{Request, Response, percent_encode};
use crate::timeline::{self, End, RANGES, Timeline};
use crate::watch::{HISTORY_MAX, Snapshot};
use crate::{App, paging};

/// Rows per page of the lease and task lists.
pub const PAGE: usize = 100;

/// What a page decides besides its body.
#[derive(Debug)]
pub struct Page {
    pub title: String,
    pub status: u16,
    /// Show the retry and purge forms.
    pub actions: bool,
    csrf: String,
}

impl Page {
    #[must_use]
    pub fn new(actions: bool, csrf: &str) -> Self {
        Self {
            title: "leasehold".to_owned(),
            status: 200,
            actions,
            csrf: csrf.to_owned(),
        }
    }
}

fn enc(s: &str) -> String {
    percent_encode(s)
}

/// A duration for people: `1m 5s`, `250ms`.
fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

/// The whole document around `main`.
#[must_use]
pub fn layout(page: &Page, main: &Markup, snapshot: &Snapshot) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (page.title) }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header {
                    nav {
                        strong { "leasehold" }
                        a href="/" { "Leases" }
                        a href="/timeline" { "Timeline" }
                        a href="/queues" { "Queues" }
                        a href="/metrics" { "Metrics" }
                        span #live title="updates arrive by server-sent events; paused while this tab is hidden" {
                            "● live"
                        }
                        span.muted { "generation " span #generation { (snapshot.generation) } }
                    }
                }
                main #main { (main) }
            }
        }
    }
}

fn status_line(app: &App, snapshot: &Snapshot) -> Markup {
    html! {
        p.muted {
            "Store " code { (app.store_label) } ", read "
            (snapshot.leases.len()) " names in " (human(snapshot.took))
            ", every " (human(app.shared.refresh)) "."
        }
        @if let Some(e) = &snapshot.error {
            p.error { "The store could not be read: " (e) " — showing the last reading." }
        }
    }
}

/// A grant as of now: its time left reduced by the reading's age.
#[must_use]
pub fn aged(snapshot: &Snapshot, state: &LeaseState) -> LeaseState {
    let mut s = state.clone();
    for g in &mut s.grants {
        g.expires_in = snapshot.remaining(g.expires_in);
    }
    s
}

/// The names matching `q` (a substring), with a live grant if `live`.
#[must_use]
pub fn filtered<'a>(snapshot: &'a Snapshot, q: Option<&str>, live: bool) -> Vec<&'a LeaseState> {
    let q = q.unwrap_or("").trim();
    snapshot
        .leases
        .iter()
        .filter(|s| !live || !s.grants.is_empty())
        .filter(|s| q.is_empty() || s.name.as_str().contains(q))
        .collect()
}

fn countdown(left: Duration) -> Markup {
    html! {
        span.countdown data-ms=(left.as_millis()) { (human(left)) }
    }
}

fn holder(g: &Grant) -> Markup {
    let h = &g.holder;
    html! {
        span { (h.host) " pid " (h.pid) }
        @if !h.cmdline.is_empty() { " " code.cmd title=(h.cmdline) { (shorten(&h.cmdline, 60)) } }
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max - 1).collect();
        out.push('…');
        out
    }
}

fn name_link(name: &LeaseName) -> Markup {
    html! { a.name href={ "/timeline?name=" (enc(name.as_str())) } { (name.as_str()) } }
}

/// `/`: every name with its holders.
pub fn leases(app: &App, r: &Request, page: &mut Page) -> Markup {
    "Leases · leasehold".clone_into(&mut page.title);
    let snapshot = app.shared.snapshot();
    let q = r.param("q").unwrap_or("");
    let live = r.param("live").is_some_and(|v| v != "0");
    let states = filtered(&snapshot, Some(q), live);
    let (offset, limit) = paging(r, PAGE);
    let limit = limit.min(1000);
    let shown: Vec<&LeaseState> = states.iter().skip(offset).take(limit).copied().collect();
    let held: usize = snapshot.leases.iter().filter(|s| !s.grants.is_empty()).count();
    let link = |o: usize| format!("/?q={}&live={}&offset={o}&limit={limit}", enc(q), u8::from(live));
    html! {
        h1 { "Leases" }
        (status_line(app, &snapshot))
        p { (held) " of " (snapshot.leases.len()) " names held now." }
        form.filter method="get" action="/" {
            label { "Name contains " input type="search" name="q" value=(q) autocomplete="off"; }
            label { input type="checkbox" name="live" value="1" checked[live]; " held only" }
            button type="submit" { "Filter" }
        }
        form method="get" action="/timeline" {
            table.leases {
                thead { tr {
                    th { span.sr { "select" } } th { "name" } th { "mode" } th { "token" } th { "owner" }
                    th { "holder" } th { "alive?" } th { "waiters" } th { "expires in" }
                } }
                tbody {
                    @for s in &shown {
                        @if s.grants.is_empty() {
                            tr.free {
                                td { input type="checkbox" name="name" value=(s.name.as_str()); }
                                td { (name_link(&s.name)) }
                                td.muted { "free" } td.muted { "last " (s.last_token) }
                                td {} td {} td {} td { (s.waiters.len()) } td {}
                            }
                        }
                        @for g in &s.grants {
                            tr.held {
                                td { input type="checkbox" name="name" value=(s.name.as_str()); }
                                td { (name_link(&s.name)) }
                                td { (g.mode.label()) @if let leasehold::Mode::Shared { limit: Some(l) } = g.mode { " ≤" (l) } }
                                td.token { (g.token) }
                                td { (g.owner) }
                                td { (holder(g)) }
                                td { (leasehold::json::alive(g)) }
                                td { (s.waiters.len()) }
                                td { (countdown(snapshot.remaining(g.expires_in))) }
                            }
                        }
                    }
                    @if shown.is_empty() { tr { td colspan="9" .muted { "No names match." } } }
                }
            }
            p.pager {
                "Names " (if states.is_empty() { 0 } else { offset + 1 }) "–" (offset + shown.len()) " of " (states.len()) ". "
                @if offset > 0 { a href=(link(offset.saturating_sub(limit))) { "← previous" } " " }
                @if offset + shown.len() < states.len() { a href=(link(offset + limit)) { "next →" } }
            }
            button type="submit" { "Timeline of the selected names, side by side" }
        }
    }
}

fn range_of(r: &Request) -> (&'static str, Duration) {
    let want = r.param("range").unwrap_or("1h");
    RANGES.iter().copied().find(|(l, _)| *l == want).unwrap_or(RANGES[3])
}

/// Build the timeline of `name` from the store's history, what `serve`
/// followed before it, and the live grants.
pub fn timeline_of(app: &App, name: &LeaseName, range: Duration) -> Result<(Timeline, usize), String> {
    let snapshot = app.shared.snapshot();
    let mut entries = app.store.history(name, HISTORY_MAX).map_err(|e| e.to_string())?;
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
        timeline::build(name, &kept, &live, &ends, SystemTime::now(), range),
        followed,
    ))
}

/// `/timeline?name=A&name=B&range=1h`.
pub fn timeline(app: &App, r: &Request, page: &mut Page) -> Markup {
    let names: Vec<&str> = r.params("name").filter(|n| !n.is_empty()).take(20).collect();
    let (range_label, range) = range_of(r);
    page.title = format!("Timeline {} · leasehold", names.join(", "));
    let query_names: String = names
        .iter()
        .flat_map(|n| ["name=", &enc(n), "&"].map(str::to_owned))
        .collect();
    html! {
        h1 { "Timeline" }
        form.filter method="get" action="/timeline" {
            label { "Names " input type="search" name="name" value=(names.first().copied().unwrap_or("")) autocomplete="off"; }
            @for n in names.iter().skip(1) { input type="hidden" name="name" value=(n); }
            input type="hidden" name="range" value=(range_label);
            button type="submit" { "Show" }
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
                Err(e) => p.error { "Not a lease name: " (e.to_string()) }
                Ok(name) => @match timeline_of(app, &name, range) {
                    Err(e) => p.error { "Cannot read the history of " (name.as_str()) ": " (e) }
                    Ok((tl, followed)) => (timeline_section(&tl, followed))
                }
            }
        }
        p.muted {
            "The store keeps the newest " (leasehold::HISTORY_PER_NAME) " history entries of each name; this serve adds what it followed since it started, for "
            (human(app.shared.retention)) ". Bars: grants labelled with their tokens; hover one for its holder and times."
        }
    }
}

fn timeline_section(tl: &Timeline, followed: usize) -> Markup {
    html! {
        section.timeline {
            h2 { (name_link_plain(&tl.name)) }
            p.muted {
                @match tl.reach {
                    Some(r) => { "History reaches back to " time { (leasehold::format_time(r)) } " (" (tl.entries) " entries"
                        @if followed > 0 { ", " (followed) " of them followed by this serve" } ")." }
                    None => "No history kept for this name.",
                }
                " " a href={ "/api/leases/" (enc(tl.name.as_str())) "/history?limit=1100" } { "JSON" }
            }
            (svg(tl))
            @if !tl.marks.is_empty() || !tl.bars.is_empty() {
                details {
                    summary { "Events in this range" }
                    table.events {
                        thead { tr { th { "at" } th { "" } th { "token" } th { "what" } } }
                        tbody {
                            @for b in tl.bars.iter().rev().take(50) {
                                tr { td { (leasehold::format_time(b.start)) } td { "█" } td { (b.token) } td { (timeline::describe(b)) } }
                            }
                            @for m in tl.marks.iter().rev().take(50) {
                                tr { td { (leasehold::format_time(m.at)) } td { (m.kind.glyph().to_string()) }
                                     td { @if let Some(t) = m.token { (t) } } td { (m.kind.label()) ": " (m.detail) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn name_link_plain(name: &LeaseName) -> Markup {
    html! { (name.as_str()) }
}

const SVG_W: f64 = 1000.0;
const LANE_H: f64 = 24.0;
const TOP: f64 = 22.0;

/// The timeline drawn by the server: no chart library, nothing fetched.
fn svg(tl: &Timeline) -> Markup {
    let span = tl
        .to
        .duration_since(tl.from)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-9);
    let x = |t: SystemTime| -> f64 {
        let s = t
            .max(tl.from)
            .min(tl.to)
            .duration_since(tl.from)
            .unwrap_or_default()
            .as_secs_f64();
        (s / span * SVG_W * 100.0).round() / 100.0
    };
    let range = tl.to.duration_since(tl.from).unwrap_or_default();
    let marks_y = TOP + LANE_H * tl.lanes as f64 + 4.0;
    let height = marks_y + 26.0;
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let t = tl.from + range.mul_f64(f64::from(i) / 5.0);
            (x(t), timeline::axis_label(t, range))
        })
        .collect();
    html! {
        svg.chart viewBox={ "0 0 " (SVG_W) " " (height) } role="img" aria-label={ "timeline of " (tl.name.as_str()) } xmlns="http://www.w3.org/2000/svg" {
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
                    @if let End::Live(_) = b.end {
                        path.arrow d={ "M" (x0 + w) " " (y) " l6 " ((LANE_H - 6.0) / 2.0) " l-6 " ((LANE_H - 6.0) / 2.0) "z" } {}
                    }
                }
            }
            @for m in &tl.marks {
                g class={ "mark " (m.kind.class()) } {
                    title {
                        (m.kind.label()) " · " (leasehold::format_time(m.at))
                        @if let Some(t) = m.token { " · token " (t) }
                        @if let Some(o) = &m.owner { " · " (o) }
                        " · " (m.detail)
                    }
                    text x=(x(m.at)) y=(marks_y + 14.0) text-anchor="middle" { (m.kind.glyph().to_string()) }
                }
            }
            line.now x1=(SVG_W - 0.5) x2=(SVG_W - 0.5) y1="16" y2=(height - 4.0) {}
        }
        p.legend {
            span.key.released { "released" } span.key.expired { "expired" } span.key.takenover { "taken over" }
            span.key.live { "live" } span.key.lapsed { "lapsed, not yet recorded" }
            " ⚡ takeover by proof of death · ◇ takeover after expiry · ↻ reacquired · ✓ fence passed · ✗ fence refused · ! stale token refused"
        }
        (PreEscaped(""))
    }
}

/// `/queues`: every queue's counts.
pub fn queues(app: &App, page: &mut Page) -> Markup {
    "Queues · leasehold".clone_into(&mut page.title);
    let snapshot = app.shared.snapshot();
    html! {
        h1 { "Queues" }
        (status_line(app, &snapshot))
        @match &snapshot.queues {
            None => p { "This store has no task queue (etcd keeps leases only; use a sqlite:// or postgres:// store for queues)." },
            Some(queues) if queues.is_empty() => p { "No tasks yet." },
            Some(queues) => table.queues {
                thead { tr {
                    th { "queue" } th { "pending" } th { "running" } th { "done" } th { "dead" }
                    th { "oldest pending" } th { "late claims" } th { "expired claims" } th { "claims/min" } th { "completions/min" }
                } }
                tbody {
                    @for q in queues {
                        tr {
                            td { a href={ "/queues/" (enc(q.stats.queue.as_str())) } { (q.stats.queue.as_str()) } }
                            td.num { (q.stats.pending) } td.num { (q.stats.running) } td.num { (q.stats.done) }
                            td.num.dead[q.stats.dead > 0] { (q.stats.dead) }
                            td { @if let Some(age) = q.oldest_pending_age(SystemTime::now()) { (human(age)) } @else { "—" } }
                            td.num.warn[q.late > 0] { (q.late) } td.num.dead[q.expired > 0] { (q.expired) }
                            td.num { (format!("{:.1}", q.claims_per_minute)) } td.num { (format!("{:.1}", q.completions_per_minute)) }
                        }
                    }
                }
            }
        }
        p.muted { "Counts come from the store's indexes at every refresh; claims and completions per minute are measured by this serve over the last minute (claims are a lower bound: one that starts and fails back within a refresh is not seen)." }
    }
}

/// `/queues/NAME`: counts, running claims, dead tasks, a page of one state.
pub fn queue(app: &App, r: &Request, q: &LeaseName, page: &mut Page) -> Markup {
    page.title = format!("Queue {} · leasehold", q.as_str());
    let snapshot = app.shared.snapshot();
    let Some(view) = snapshot
        .queues
        .as_ref()
        .and_then(|qs| qs.iter().find(|v| &v.stats.queue == q))
    else {
        page.status = 404;
        return html! { h1 { "Queue " (q.as_str()) } p { "No such queue (or no tasks in it)." } };
    };
    let state = r.param("state").and_then(TaskState::parse).unwrap_or(TaskState::Dead);
    let (offset, limit) = paging(r, PAGE);
    let limit = limit.min(1000);
    let listed = app
        .store
        .task_list(Some(q), Some(state), u32::try_from(offset + limit).unwrap_or(u32::MAX));
    let qe = enc(q.as_str());
    html! {
        h1 { "Queue " (q.as_str()) }
        (status_line(app, &snapshot))
        @if let Some(n) = r.param("purged") { p.notice { "Purged " (n) " done tasks." } }
        dl.counts {
            dt { "pending" } dd { (view.stats.pending) }
            dt { "running" } dd { (view.stats.running) }
            dt { "done" } dd { (view.stats.done) }
            dt { "dead" } dd.dead[view.stats.dead > 0] { (view.stats.dead) }
            dt { "oldest pending" } dd { @if let Some(age) = view.oldest_pending_age(SystemTime::now()) { (human(age)) } @else { "—" } }
            dt { "late claims" } dd.warn[view.late > 0] { (view.late) }
            dt { "expired claims" } dd.dead[view.expired > 0] { (view.expired) }
            dt { "claims/min" } dd { (format!("{:.1}", view.claims_per_minute)) }
            dt { "completions/min" } dd { (format!("{:.1}", view.completions_per_minute)) }
        }
        h2 { "Running" }
        @if view.running.is_empty() { p.muted { "Nothing is running." } } @else {
            table.tasks {
                thead { tr { th { "task" } th { "attempt" } th { "owner" } th { "token" } th { "claim left" } } }
                tbody { @for t in &view.running {
                    tr.late[t.lease_remaining.zip(t.claim_ttl).is_some_and(|(l, ttl)| l < ttl / 2)] {
                        td { a href={ "/queues/" (qe) "/tasks/" (enc(t.id.as_str())) } { (t.id.as_str()) } }
                        td { (t.attempts) "/" (t.max_attempts) }
                        td { (t.owner.as_deref().unwrap_or("")) }
                        td.token { (t.token) }
                        td { @match t.lease_remaining { Some(l) if !l.is_zero() => (countdown(snapshot.remaining(l))), _ => span.dead { "expired" } } }
                    }
                } }
            }
        }
        h2 { "Tasks" }
        p.tabs {
            @for s in TaskState::ALL {
                @if s == state { strong { (s.as_str()) } } @else { a href={ "/queues/" (qe) "?state=" (s.as_str()) } { (s.as_str()) } }
                " "
            }
        }
        @match listed {
            Err(e) => p.error { "Cannot list the tasks: " (e.to_string()) }
            Ok(tasks) => {
                @let shown: Vec<_> = tasks.iter().skip(offset).collect();
                @if shown.is_empty() { p.muted { "No " (state.as_str()) " tasks." } } @else {
                    table.tasks {
                        thead { tr { th { "task" } th { "priority" } th { "attempts" } th { "available" } th { "last error" } @if page.actions && state == TaskState::Dead { th { "" } } } }
                        tbody { @for t in &shown {
                            tr {
                                td { a href={ "/queues/" (qe) "/tasks/" (enc(t.id.as_str())) } { (t.id.as_str()) } }
                                td.num { (t.priority) }
                                td { (t.attempts) "/" (t.max_attempts) }
                                td { (leasehold::format_time(t.available_at)) }
                                td.err { (shorten(t.last_error.as_deref().unwrap_or(""), 120)) }
                                @if page.actions && state == TaskState::Dead {
                                    td { (retry_form(page, q, &t.id)) }
                                }
                            }
                        } }
                    }
                    p.pager {
                        "Tasks " (offset + 1) "–" (offset + shown.len()) ". "
                        @if offset > 0 { a href={ "/queues/" (qe) "?state=" (state.as_str()) "&offset=" (offset.saturating_sub(limit)) } { "← previous" } " " }
                        @if tasks.len() == offset + limit { a href={ "/queues/" (qe) "?state=" (state.as_str()) "&offset=" (offset + limit) } { "next →" } }
                    }
                }
            }
        }
        @if page.actions {
            h2 { "Purge" }
            form.action method="post" action={ "/queues/" (qe) "/purge" } {
                input type="hidden" name="csrf" value=(page.csrf);
                label { "Delete done tasks older than " input name="older_than" value="7d" size="6"; }
                button type="submit" { "Purge" }
            }
        }
    }
}

fn retry_form(page: &Page, q: &LeaseName, id: &LeaseName) -> Markup {
    html! {
        form.action method="post" action={ "/queues/" (enc(q.as_str())) "/tasks/" (enc(id.as_str())) "/retry" } {
            input type="hidden" name="csrf" value=(page.csrf);
            button type="submit" { "Retry" }
        }
    }
}

/// `/queues/Q/tasks/ID`: one task and its attempts.
pub fn task(app: &App, q: &LeaseName, id: &LeaseName, page: &mut Page) -> Markup {
    page.title = format!("Task {} · leasehold", id.as_str());
    let task = match app.store.task_get(q, id) {
        Ok(Some(t)) => t,
        Ok(None) => {
            page.status = 404;
            return html! { h1 { "Task " (id.as_str()) } p { "No such task in queue " (q.as_str()) "." } };
        }
        Err(e) => return html! { h1 { "Task " (id.as_str()) } p.error { (e.to_string()) } },
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    html! {
        h1 { "Task " (id.as_str()) }
        p { "Queue " a href={ "/queues/" (enc(q.as_str())) } { (q.as_str()) } " · state " strong.state { (task.state.as_str()) } }
        dl.counts {
            dt { "attempts" } dd { (task.attempts) " of " (task.max_attempts) }
            dt { "failures" } dd { (task.failures) }
            dt { "expired claims" } dd { (task.expirations) }
            dt { "token" } dd { (task.token) }
            dt { "owner" } dd { (task.owner.as_deref().unwrap_or("—")) }
            dt { "priority" } dd { (task.priority) }
            dt { "available at" } dd { (leasehold::format_time(task.available_at)) }
            @if let Some(l) = task.lease_remaining { dt { "claim left" } dd { (countdown(l)) } }
            dt { "created" } dd { (leasehold::format_time(task.created_at)) }
            dt { "updated" } dd { (leasehold::format_time(task.updated_at)) }
        }
        @if let Some(e) = &task.last_error { h2 { "Last error" } pre.err { (e) } }
        h2 { "Payload" } pre { (pretty(&task.payload)) }
        @if let Some(res) = &task.result { h2 { "Result" } pre { (pretty(res)) } }
        @if page.actions && task.state == TaskState::Dead { (retry_form(page, q, id)) }
        p { a href={ "/api/queues/" (enc(q.as_str())) "/tasks/" (enc(id.as_str())) } { "JSON" } }
    }
}

/// The token form (a non-loopback serve, or to use actions).
#[must_use]
pub fn login(status: u16, next: &str, problem: Option<&str>) -> Response {
    let page = Page::new(false, "");
    let main = html! {
        h1 { "Token needed" }
        @if let Some(p) = problem { p.error { (p) } }
        form.login method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label { "Token " input type="password" name="token" autocomplete="current-password" autofocus; }
            button type="submit" { "Log in" }
        }
        p.muted { "The token is the one in the file given to " code { "leasehold serve --token-file" } "." }
    };
    let empty = Snapshot::placeholder();
    Response::new(
        status,
        "text/html; charset=utf-8",
        layout(&page, &main, &empty).into_string(),
    )
}

#[must_use]
pub fn not_found(why: &str) -> Response {
    Response::new(404, "text/plain; charset=utf-8", format!("{why}\n"))
}
