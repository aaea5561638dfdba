//! `/schedules`: every schedule — when it fires, what it does, its next
//! slot and a row of marks for what became of its latest slots;
//! `/schedules/NAME`: one schedule, its policies and its slot records.
//!
//! Both draw from the follower's reading (the newest slot records of each
//! schedule: `watch::ScheduleView`), so neither reads the store.

use std::fmt::Write as _;
use std::time::SystemTime;

use leasehold::LeaseName;
use leasehold::schedule::{Action, SlotOutcome, SlotRecord};
use maud::{Markup, html};

use super::{Page, enc, lease_href, status_line};
use crate::App;
use crate::http::Request;
use crate::text::{self, shown};
use crate::watch::{OUTCOMES, ScheduleView};

/// Marks drawn per schedule on the list.
const MARKS: usize = 30;
/// Marks drawn on a schedule's page.
const MARKS_ONE: usize = 100;

/// What a slot's outcome means, for its mark's tooltip and the legend.
fn meaning(outcome: SlotOutcome) -> &'static str {
    match outcome {
        SlotOutcome::Ran => "its command exited 0",
        SlotOutcome::Failed => "its command failed, could not start, or was stopped with its daemon",
        SlotOutcome::Stopped => "stopped for the next slot (--overlap stop-previous)",
        SlotOutcome::Skipped => "not run: the previous slot's command still ran",
        SlotOutcome::Missed => "not run: no daemon fired it in time",
        SlotOutcome::Enqueued => "its task was added",
        SlotOutcome::Lost => "its daemon died before reporting",
        SlotOutcome::Claimed => "claimed by a daemon that has not reported since",
        SlotOutcome::Running => "its command runs",
    }
}

/// What a slot does, in a few words: the command, or the queue it adds a
/// task to.
fn does(action: &Action) -> Markup {
    match action {
        Action::Run { command } => {
            let line = command.join(" ");
            html! { code.cmd title=(text::plain(&line)) { (shown(&text::shorten(&line, 60))) } }
        }
        Action::Enqueue { queue, .. } => html! {
            "adds a task to " a href={ "/queues/" (enc(queue)) } { (shown(queue)) }
        },
    }
}

/// The outcome in words: `missed ×3` for a record of several missed slots.
fn outcome_words(r: &SlotRecord) -> String {
    if r.count > 1 {
        format!("{} ×{}", r.outcome, r.count)
    } else {
        r.outcome.to_string()
    }
}

/// One record's mark: coloured by its outcome, a record of several missed
/// slots with their count; what it says in its tooltip.
fn mark(r: &SlotRecord) -> Markup {
    let mut title = format!("{}: {}", text::clock(r.slot), outcome_words(r));
    if r.count > 1 {
        let _ = write!(title, " (through {})", text::clock(r.through));
    }
    if let Some(d) = &r.daemon {
        let _ = write!(title, ", {} pid {}", d.host, d.pid);
    }
    if !r.detail.is_empty() {
        title.push_str(" — ");
        title.push_str(&r.detail);
    }
    let class = if r.count > 1 { "slot many " } else { "slot " };
    html! {
        span class={ (class) (r.outcome.as_str()) } title=(text::plain(&title)) {
            span.sr { (r.outcome.as_str()) " " } @if r.count > 1 { "×" (r.count) }
        }
    }
}

/// The newest `n` records' marks, newest last (as time runs on a
/// timeline).
fn marks(view: &ScheduleView, n: usize) -> Markup {
    html! {
        span.slots {
            @for r in view.slots.iter().take(n).rev() { (mark(r)) }
        }
    }
}

fn legend() -> Markup {
    html! {
        p.legend {
            @for o in OUTCOMES {
                span.outcome title=(meaning(o)) { span class={ "slot " (o.as_str()) } {} " " (o.as_str()) }
            }
            " A mark is one slot, newest on the right; "
            span class="slot many missed" { "×3" } " stands for 3 slots missed in a row."
        }
    }
}

/// When the next slot is due: its time and a countdown, or "paused".
fn next_cell(view: &ScheduleView, now: SystemTime) -> Markup {
    if view.kept.schedule.paused {
        return html! { span.warn { "paused" } };
    }
    let Some(next) = view.kept.next_slot(now) else {
        return html! { "never" };
    };
    let left = next.duration_since(now).unwrap_or_default();
    html! {
        (text::time(next)) " ("
        span.countdown.next data-ms=(left.as_millis()) data-zero="due" { (text::duration(left)) }
        ")"
    }
}

fn schedule_href(name: &LeaseName) -> String {
    format!("/schedules/{}", enc(name.as_str()))
}

/// `/schedules`: every schedule.
pub fn schedules(app: &App, page: &mut Page) -> Markup {
    page.title(&["Schedules · leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    html! {
        h1 { "Schedules" }
        (status_line(app, &snapshot))
        @match &snapshot.schedules {
            None => p { "This store keeps no schedules (" (leasehold::stores_with(|k| k.schedules)) " keeps them)." },
            Some(views) if views.is_empty() => p { "No schedules yet: " code { "leasehold schedule add" } " adds one (docs/SCHEDULES.md)." },
            Some(views) => {
                div.scroll { table.schedules {
                    thead { tr {
                        th { "schedule" } th { "cron" } th { "zone" } th { "does" } th { "next" } th { "last slots" }
                    } }
                    tbody { @for v in views {
                        @let s = &v.kept.schedule;
                        tr.paused[s.paused] {
                            td { a.name href=(schedule_href(&s.name)) { (shown(s.name.as_str())) } }
                            td { code { (shown(s.spec.text())) } }
                            td { (shown(s.spec.zone_name())) }
                            td { (does(&s.action)) }
                            td { (next_cell(v, now)) }
                            td { @if v.slots.is_empty() { span.muted { "none yet" } } @else { (marks(v, MARKS)) } }
                        }
                    } }
                } }
                (legend())
            }
        }
        p.muted {
            "Each slot fires once across every " code { "leasehold cron" } " daemon sharing the store. "
            "Next: the first slot after the last one accounted for and after now. "
            "The store keeps the newest 1000 slot records of each schedule."
        }
    }
}

/// `/schedules/NAME`: one schedule and its slot records (`?limit=`, 100
/// by default, at most the 1000 the store keeps).
pub fn schedule(app: &App, r: &Request, name: &LeaseName, page: &mut Page) -> Markup {
    page.title(&["Schedule", name.as_str(), "· leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    let Some(view) = snapshot.schedule(name) else {
        page.status = 404;
        return html! { h1 { "Schedule " (shown(name.as_str())) } p { "No such schedule." } };
    };
    let s = &view.kept.schedule;
    let limit = r
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(super::PAGE)
        .clamp(1, 1000);
    let duration_or =
        |d: Option<std::time::Duration>, none: &'static str| d.map_or_else(|| none.to_owned(), text::duration);
    html! {
        h1 { "Schedule " (shown(name.as_str())) }
        (status_line(app, &snapshot))
        dl.counts {
            dt { "cron" } dd { code { (shown(s.spec.text())) } " in " (shown(s.spec.zone_name())) }
            dt { "does" } dd { (does(&s.action)) }
            dt { "next" } dd { (next_cell(view, now)) }
            dt { "last slot" } dd { @match &view.kept.state { Some((state, _)) => (text::time(state.last_slot)), None => "none yet" } }
            dt { "overlap" } dd { (s.overlap.as_str()) }
            dt { "catch-up" } dd { (s.catch_up.as_str()) }
            dt { "deadline" } dd { (duration_or(s.deadline, "none")) }
            dt { "jitter" } dd { (text::duration(s.jitter)) }
            dt { "lease TTL" } dd { (text::duration(s.ttl)) }
            dt { "added" } dd { (text::time(s.created)) }
        }
        @if matches!(s.action, Action::Run { .. }) {
            p { "Its commands run under the lease " a href=(lease_href(name)) { (shown(name.as_str())) } "." }
        }
        h2 { "Last slots" }
        @if view.slots.is_empty() { p.muted { "No slot accounted for yet." } } @else {
            p { (marks(view, MARKS_ONE)) }
            (legend())
            div.scroll { table.records {
                thead { tr {
                    th { "slot" } th { "outcome" } th { "daemon" } th { "token" } th { "late" } th { "took" } th { "why" }
                } }
                tbody { @for r in view.slots.iter().take(limit) {
                    tr {
                        td { (text::time(r.slot)) @if r.count > 1 { " through " (text::time(r.through)) } }
                        td { (mark(r)) " " (outcome_words(r)) }
                        td { @match &r.daemon { Some(d) => { (shown(&d.host)) " pid " (d.pid) }, None => "—" } }
                        td.token { @match r.token { Some(t) => (t), None => "—" } }
                        td { (duration_or(r.lateness(), "—")) }
                        td { (duration_or(r.duration(), "—")) }
                        td.err { (shown(&text::shorten(&r.detail, 120))) }
                    }
                } }
            } }
            p.pager {
                (text::count(view.slots.len().min(limit) as u64, "record", "records")) " of " (view.slots.len()) ", newest first. "
                @if view.slots.len() > limit {
                    a href={ (schedule_href(name)) "?limit=1000" } { "all the store keeps" }
                }
            }
        }
        p { a href={ "/api" (schedule_href(name)) } { "JSON" } }
    }
}
