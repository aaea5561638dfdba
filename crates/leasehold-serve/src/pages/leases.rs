//! `/`: every name with its holders; `/leases/NAME`: one lease.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::time::SystemTime;

use leasehold::{LeaseName, LeaseState};
use maud::{Markup, html};

use super::{
    Page, enc, expiry_cell, filtered, holder, liveness_cell, mode_words, name_link, since, status_line,
    timeline::{range_of_label, timeline_of, timeline_section},
};
use crate::http::Request;
use crate::text::{self, shown};
use crate::watch::Snapshot;
use crate::{App, paging};

/// The columns the list sorts by: `(parameter, header)`.
const SORTS: [(&str, &str); 4] = [
    ("name", "name"),
    ("expires", "expires in"),
    ("since", "held since"),
    ("waiters", "waiters"),
];

/// Order two names by `sort`; free names after held ones for every
/// column but the name.
fn compare(snapshot: &Snapshot, sort: &str, a: &LeaseState, b: &LeaseState) -> Ordering {
    let by_name = || a.name.as_str().cmp(b.name.as_str());
    let held = |s: &LeaseState| !s.grants.is_empty();
    let key = |s: &LeaseState| match sort {
        "expires" => s
            .grants
            .iter()
            .map(|g| {
                if snapshot.dead(g) {
                    0
                } else {
                    g.expires_in.as_millis() + 1
                }
            })
            .min(),
        "since" => s
            .grants
            .iter()
            .map(|g| {
                g.acquired_at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis()
            })
            .min(),
        _ => None,
    };
    match sort {
        "waiters" => b.waiters.len().cmp(&a.waiters.len()).then_with(by_name),
        "expires" | "since" => held(b).cmp(&held(a)).then(key(a).cmp(&key(b))).then_with(by_name),
        _ => by_name(),
    }
}

/// `/`: every name with its holders.
pub fn leases(app: &App, r: &Request, page: &mut Page) -> Markup {
    page.title(&["Leases · leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    let q = r.param("q").unwrap_or("");
    let live = r.param("live").is_some_and(|v| v != "0");
    let sort = r
        .param("sort")
        .and_then(|s| SORTS.iter().find(|(p, _)| *p == s))
        .map_or("name", |(p, _)| *p);
    let desc = r.param("order") == Some("desc");
    let mut states: Vec<Cow<'_, LeaseState>> = filtered(&snapshot, Some(q), live);
    if sort != "name" || desc {
        states.sort_by(|a, b| {
            let o = compare(&snapshot, sort, a, b);
            if desc { o.reverse() } else { o }
        });
    }
    let (offset, limit) = paging(r, super::PAGE);
    let limit = limit.min(1000);
    let shown_states: Vec<&LeaseState> = states.iter().skip(offset).take(limit).map(AsRef::as_ref).collect();
    let held = snapshot.leases.iter().filter(|s| snapshot.held(s)).count();
    let dead_only = snapshot
        .leases
        .iter()
        .filter(|s| !s.grants.is_empty() && !snapshot.held(s))
        .count();
    let query = |sort: &str, desc: bool, offset: usize| {
        format!(
            "/?q={}&live={}&sort={sort}&order={}&offset={offset}&limit={limit}",
            enc(q),
            u8::from(live),
            if desc { "desc" } else { "asc" }
        )
    };
    html! {
        h1 { "Leases" }
        (status_line(app, &snapshot))
        p.summary {
            strong { (held) } " of " (text::count(snapshot.leases.len() as u64, "name", "names")) " held now"
            @if dead_only > 0 {
                ", and " strong.dead { (dead_only) } " more held only by a holder that is provably dead (takeable now)"
            }
            "."
        }
        form.filter method="get" action="/" {
            label { "Name contains " input type="search" name="q" value=(q) autocomplete="off"; }
            label { input type="checkbox" name="live" value="1" checked[live]; " held only" }
            input type="hidden" name="sort" value=(sort);
            button type="submit" { "Filter" }
        }
        form method="get" action="/timeline" {
            div.scroll {
                table.leases {
                    thead { (header_row(sort, desc, &query)) }
                    tbody {
                        @for s in &shown_states { (name_rows(&snapshot, s, now)) }
                        @if shown_states.is_empty() { tr { td colspan="10" .muted { "No names match." } } }
                    }
                }
            }
            p.pager {
                "Names " (if states.is_empty() { 0 } else { offset + 1 }) "–" (offset + shown_states.len()) " of " (states.len()) ". "
                @if offset > 0 { a href=(query(sort, desc, offset.saturating_sub(limit))) { "← previous" } " " }
                @if offset + shown_states.len() < states.len() { a href=(query(sort, desc, offset + limit)) { "next →" } }
            }
            button type="submit" { "Timeline of the selected names, side by side" }
        }
    }
}

/// The list's column headers, the sortable ones as links.
fn header_row(sort: &str, desc: bool, query: &dyn Fn(&str, bool, usize) -> String) -> Markup {
    html! {
        tr {
            th { span.sr { "select" } }
            @for (param, header) in SORTS.iter().take(1) {
                th { (sort_link(sort, desc, param, header, query)) }
            }
            th { "holder state" }
            @for (param, header) in SORTS.iter().skip(1).take(2) {
                th { (sort_link(sort, desc, param, header, query)) }
            }
            th { "mode" } th { "token" } th { "owner" } th { "holder" }
            @for (param, header) in SORTS.iter().skip(3) {
                th { (sort_link(sort, desc, param, header, query)) }
            }
        }
    }
}

/// A name's rows in the list: one per grant, or one saying it is free.
fn name_rows(snapshot: &Snapshot, s: &LeaseState, now: SystemTime) -> Markup {
    html! {
        @if s.grants.is_empty() {
            tr.free {
                td { input type="checkbox" name="name" value=(s.name.as_str()); }
                td { (name_link(&s.name)) }
                td.muted { "free" }
                td {} td {}
                td {} td.muted { "last " (s.last_token) }
                td {} td {}
                td.num { (s.waiters.len()) }
            }
        }
        @for g in &s.grants {
            tr.held.takeable[snapshot.dead(g)] {
                td { input type="checkbox" name="name" value=(s.name.as_str()); }
                td { (name_link(&s.name)) }
                td { (liveness_cell(snapshot.liveness(g))) }
                td { (expiry_cell(snapshot, g)) }
                td { (since(g.acquired_at, now)) }
                td { (mode_words(g)) }
                td.token { (g.token) }
                td { (shown(&g.owner)) }
                td { (holder(g)) }
                td.num { (s.waiters.len()) }
            }
        }
    }
}

/// A column header that sorts by it (again: the other way).
fn sort_link(sort: &str, desc: bool, param: &str, header: &str, query: &dyn Fn(&str, bool, usize) -> String) -> Markup {
    let current = sort == param;
    let next_desc = current && !desc;
    html! {
        a.sort href=(query(param, next_desc, 0)) aria-sort=(if !current { "none" } else if desc { "descending" } else { "ascending" }) {
            (header) @if current { (if desc { " ▼" } else { " ▲" }) }
        }
    }
}

/// `/leases/NAME`: who holds it and since when, who waits, and its last
/// hour.
pub fn lease(app: &App, r: &Request, name: &LeaseName, page: &mut Page) -> Markup {
    page.title(&["Lease", name.as_str(), "· leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    let Some(state) = snapshot.lease(name) else {
        page.status = 404;
        return html! {
            h1 { "Lease " (shown(name.as_str())) }
            p { "Never granted (or not yet seen by this serve, which reads the store every "
                (text::duration(app.shared.refresh)) ")." }
            p { a href="/" { "All leases" } }
        };
    };
    let (range_label, range) = range_of_label(r.param("range").unwrap_or("1h"));
    let live = state.grants.iter().filter(|g| !snapshot.dead(g)).count();
    let dead = state.grants.len() - live;
    html! {
        h1 { "Lease " (shown(name.as_str())) }
        p.summary {
            @if state.grants.is_empty() {
                "Free. "
            } @else if live == 0 {
                strong.dead { "Held only by a holder that is provably dead" } ": the next acquisition takes it over at once. "
            } @else {
                "Held by " (text::count(live as u64, "holder", "holders"))
                @if dead > 0 { " (and " (dead) " provably dead, takeable)" }
                ". "
            }
            (text::count(state.waiters.len() as u64, "waiter", "waiters")) " in line. "
            "The newest token is " (state.last_token) "."
        }
        @if !state.grants.is_empty() {
            div.scroll {
                table.holders {
                    thead { tr {
                        th { "holder state" } th { "expires in" } th { "held since" } th { "mode" } th { "token" } th { "owner" } th { "holder" }
                    } }
                    tbody {
                        @for g in &state.grants {
                            tr.held.takeable[snapshot.dead(g)] {
                                td { (liveness_cell(snapshot.liveness(g))) }
                                td { (expiry_cell(&snapshot, g)) }
                                td { (since(g.acquired_at, now)) " " span.muted { "(" (text::time(g.acquired_at)) ")" } }
                                td { (mode_words(g)) }
                                td.token { (g.token) }
                                td { (shown(&g.owner)) }
                                td { (holder(g)) }
                            }
                        }
                    }
                }
            }
        }
        @match timeline_of(app, name, range) {
            Err(e) => p.error { "Cannot read the history of " (shown(name.as_str())) ": " (shown(&e.to_string())) }
            Ok((tl, followed)) => {
                h2 { "The last " (range_label) }
                (timeline_section(&tl, followed, false))
            }
        }
        p {
            a href={ "/timeline?name=" (enc(name.as_str())) "&range=" (range_label) } { "Timeline with zoom" } " · "
            a href={ "/api/leases/" (enc(name.as_str())) } { "JSON" } " · "
            a href={ "/api/leases/" (enc(name.as_str())) "/history?limit=1100" } { "history as JSON" }
        }
    }
}
