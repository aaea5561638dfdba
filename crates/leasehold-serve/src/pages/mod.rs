//! The HTML pages. Every value from the store is interpolated by `maud`,
//! which escapes it, and shown through [`crate::text`], which makes
//! characters that hide or reorder text visible: a hostile lease name,
//! command line, payload or error shows as inert text in its logical order.
//!
//! `leases.rs`: the list of names and the page of one lease;
//! `timeline.rs`: grants side by side as SVG; `queues.rs`: queues, one
//! queue's tasks (paged by key), one task; `schedules.rs`: schedules and
//! what became of their slots.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use leasehold::identity::Liveness;
use leasehold::{Grant, LeaseName, LeaseState};
use maud::{DOCTYPE, Markup, html};

use crate::App;
use crate::http::{Response, percent_encode};
use crate::text::{self, shown};
use crate::watch::Snapshot;

pub mod leases;
pub mod queues;
pub mod schedules;
pub mod timeline;

pub use leases::{lease, leases};
pub use queues::{queue, queues, task};
pub use schedules::{schedule, schedules};
pub use timeline::timeline;

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

    /// The document's title; stored text in it escaped (a browser tab
    /// shows it as plain text).
    pub fn title(&mut self, parts: &[&str]) {
        self.title = parts.iter().map(|p| text::plain(p)).collect::<Vec<_>>().join(" ");
    }
}

fn enc(s: &str) -> String {
    percent_encode(s)
}

/// The whole document around `main`.
#[must_use]
pub fn layout(page: &Page, main: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
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
                        a href="/schedules" { "Schedules" }
                        a href="/metrics" { "Metrics" }
                        span #live title="This page updates itself when the store changes (paused while the tab is hidden)." {
                            "● live"
                        }
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
            "Store " code { (shown(&app.store_label)) } ", read "
            (text::count(snapshot.leases.len() as u64, "name", "names")) " in " (text::duration(snapshot.took))
            ", every " (text::duration(app.shared.refresh)) "."
        }
        @if let Some(e) = &snapshot.error {
            p.error { "The store could not be read: " (shown(e)) " — showing the last reading." }
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

/// The names matching `q` (a substring). With `live`, only the grants
/// whose holder is not provably gone, and only the names left with one —
/// what `leasehold list --live` lists.
#[must_use]
pub fn filtered<'a>(snapshot: &'a Snapshot, q: Option<&str>, live: bool) -> Vec<Cow<'a, LeaseState>> {
    let q = q.unwrap_or("").trim();
    snapshot
        .leases
        .iter()
        .filter(|s| q.is_empty() || s.name.as_str().contains(q))
        .filter_map(|s| {
            if !live {
                return Some(Cow::Borrowed(s));
            }
            if !snapshot.held(s) {
                return None;
            }
            if s.grants.iter().any(|g| snapshot.dead(g)) {
                let mut owned = s.clone();
                owned.grants.retain(|g| !snapshot.dead(g));
                Some(Cow::Owned(owned))
            } else {
                Some(Cow::Borrowed(s))
            }
        })
        .collect()
}

fn countdown(left: Duration) -> Markup {
    html! {
        span.countdown data-ms=(left.as_millis()) { (text::duration(left)) }
    }
}

/// How long ago `t` was; moves without reloading, as countdowns do.
fn since(t: SystemTime, now: SystemTime) -> Markup {
    let exact = leasehold::format_time(t);
    if let Ok(d) = now.duration_since(t) {
        html! { time.ago datetime=(exact) title=(text::clock(t)) data-ms=(d.as_millis()) { (text::ago(t, now)) } }
    } else {
        html! { time datetime=(exact) title=(text::clock(t)) { (text::ago(t, now)) } }
    }
}

/// The holder's host, pid and command line.
fn holder(g: &Grant) -> Markup {
    let h = &g.holder;
    html! {
        span { (shown(&h.host)) " pid " (h.pid) }
        @if !h.cmdline.is_empty() {
            " " code.cmd title=(text::plain(&h.cmdline)) { (shown(&text::shorten(&h.cmdline, 60))) }
        }
    }
}

/// What the page says of a holder, and the class of its row.
fn liveness_words(l: Liveness) -> (&'static str, &'static str, &'static str) {
    match l {
        Liveness::Alive => ("alive", "alive", "Its process runs on this host."),
        Liveness::Dead => (
            "dead: takeable now",
            "dead",
            "Its process is gone (proved on this host): the next acquisition takes the lease over at once.",
        ),
        Liveness::Unbound => (
            "no process",
            "unbound",
            "Not tied to a process (a bare `leasehold acquire`): held until it expires or is released.",
        ),
        Liveness::Unknown => (
            "cannot tell",
            "unknown",
            "Another host, or no evidence either way: held until it expires or is released.",
        ),
    }
}

fn liveness_cell(l: Liveness) -> Markup {
    let (words, class, why) = liveness_words(l);
    html! { span class={ "liveness " (class) } title=(why) { (words) } }
}

/// When the grant ends: a countdown, or "takeable now" for a holder that
/// is provably gone (no countdown: the store's expiry no longer matters).
fn expiry_cell(snapshot: &Snapshot, g: &Grant) -> Markup {
    if snapshot.dead(g) {
        html! { span.dead title={ "The store would expire it in " (text::duration(snapshot.remaining(g.expires_in))) } { "takeable now" } }
    } else {
        countdown(snapshot.remaining(g.expires_in))
    }
}

fn mode_words(g: &Grant) -> String {
    match g.mode {
        leasehold::Mode::Shared { limit: Some(l) } => format!("shared, at most {l}"),
        m => m.label().to_owned(),
    }
}

fn lease_href(name: &LeaseName) -> String {
    format!("/leases/{}", enc(name.as_str()))
}

fn name_link(name: &LeaseName) -> Markup {
    html! { a.name href=(lease_href(name)) { (shown(name.as_str())) } }
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
    Response::new(status, "text/html; charset=utf-8", layout(&page, &main).into_string())
}

#[must_use]
pub fn not_found(why: &str) -> Response {
    Response::new(404, "text/plain; charset=utf-8", format!("{why}\n"))
}
