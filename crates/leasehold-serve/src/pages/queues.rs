//! `/queues`: every queue's counts; `/queues/NAME`: one queue, its running
//! claims and a page of its tasks of one state (paged by key, so the last
//! page of a million tasks costs what the first does);
//! `/queues/Q/tasks/ID`: one task.

use std::time::{Duration, SystemTime};

use leasehold::{LeaseName, Task, TaskKey, TaskPage, TaskState};
use maud::{Markup, html};

use super::{Page, countdown, enc, since, status_line};
use crate::App;
use crate::http::{Request, percent_encode};
use crate::text::{self, shown};
use crate::watch::{QueueView, Rate, Snapshot};

/// A rate as the page words it: per minute only over a window of at least
/// a minute, and always with the window measured; otherwise how many over
/// how long.
fn rate_words(rate: Rate, what: &str) -> String {
    match rate.per_minute() {
        Some(per_minute) => format!("{per_minute:.1}/min over the last {}", text::duration(rate.over)),
        None if rate.over.is_zero() => "not measured yet".to_owned(),
        None => format!(
            "{} in the last {}",
            text::count(rate.count, what, &format!("{what}s")),
            text::duration(rate.over)
        ),
    }
}

/// When the next pending task became claimable, or `—`.
fn oldest_pending(view: &QueueView, now: SystemTime) -> Markup {
    match (view.oldest_pending_age(now), &view.next) {
        (Some(age), _) => html! { (text::duration(age)) },
        (None, Some(next)) => html! { span.delayed { "next delayed until " (text::time(next.available_at)) } },
        (None, None) => html! { "—" },
    }
}

/// `/queues`: every queue's counts.
pub fn queues(app: &App, page: &mut Page) -> Markup {
    page.title(&["Queues · leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    html! {
        h1 { "Queues" }
        (status_line(app, &snapshot))
        @match &snapshot.queues {
            None => p { "This store has no task queue (use " (leasehold::stores_with(|k| k.queue)) " for queues)." },
            Some(queues) if queues.is_empty() => p { "No tasks yet." },
            Some(queues) => div.scroll { table.queues {
                thead { tr {
                    th { "queue" } th { "pending" } th { "running" } th { "done" } th { "dead" }
                    th { "waiting longest" } th { "late heartbeats" } th { "expired claims" } th { "claims" } th { "completions" }
                } }
                tbody {
                    @for q in queues {
                        tr {
                            td { a href={ "/queues/" (enc(q.stats.queue.as_str())) } { (shown(q.stats.queue.as_str())) } }
                            td.num { (q.stats.pending) } td.num { (q.stats.running) } td.num { (q.stats.done) }
                            td.num.dead[q.stats.dead > 0] { (q.stats.dead) }
                            td { (oldest_pending(q, now)) }
                            td.num.warn[q.late > 0] { (q.late) } td.num.dead[q.expired > 0] { (q.expired) }
                            td.rate { (rate_words(q.claims, "claim")) } td.rate { (rate_words(q.completions, "completion")) }
                        }
                    }
                }
            } }
        }
        p.muted {
            "Counts come from the store at every reading. Waiting longest: how long the next task to be claimed has been claimable. "
            "Late heartbeats: running tasks with less than half their claim's time left. "
            "Claims and completions are what this serve saw since it started, per minute once it has watched a whole minute "
            "(claims are a lower bound: one that starts and fails back between two readings is not seen)."
        }
    }
}

/// A task's place in a page link: `PRIORITY:MICROSECONDS:ID` (the time
/// to the microsecond, as PostgreSQL keeps it).
fn key_param(key: &TaskKey) -> String {
    let micros = key
        .available_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    percent_encode(&format!("{}:{micros}:{}", key.priority, key.id.as_str()))
}

fn parse_key(s: &str) -> Option<TaskKey> {
    let mut parts = s.splitn(3, ':');
    let priority = parts.next()?.parse().ok()?;
    let micros: u64 = parts.next()?.parse().ok()?;
    let id = LeaseName::new(parts.next()?).ok()?;
    Some(TaskKey {
        priority,
        available_at: SystemTime::UNIX_EPOCH + Duration::from_micros(micros),
        id,
    })
}

/// Where the page starts, from `?after=KEY`, `?before=KEY` or `?last=1`.
fn page_of(r: &Request) -> Option<TaskPage> {
    if r.param("last").is_some() {
        Some(TaskPage::Last)
    } else if let Some(key) = r.param("after").and_then(parse_key) {
        Some(TaskPage::After(key))
    } else {
        r.param("before").and_then(parse_key).map(TaskPage::Before)
    }
}

/// Cut a page listed with one task more than `limit` (the one that tells
/// whether there is a page beyond) down to `limit`, at the end away from
/// `from`; whether there are pages before and after it.
fn trim_page(tasks: &mut Vec<Task>, from: Option<&TaskPage>, limit: usize) -> (bool, bool) {
    let more = tasks.len() > limit;
    let backward = matches!(from, Some(TaskPage::Before(_) | TaskPage::Last));
    if more {
        if backward {
            tasks.remove(0);
        } else {
            tasks.truncate(limit);
        }
    }
    match from {
        None => (false, more),
        Some(TaskPage::After(_)) => (true, more),
        Some(TaskPage::Before(_)) => (more, true),
        Some(TaskPage::Last) => (more, false),
    }
}

/// When a task became claimable, was claimed, finished or died: what
/// the list's "when" column says for its state.
fn when(t: &Task, now: SystemTime) -> Markup {
    match t.state {
        TaskState::Pending if t.available_at > now => html! {
            span.delayed title=(text::clock(t.available_at)) { "delayed until " (text::time(t.available_at)) " (" (text::ago(t.available_at, now)) ")" }
        },
        TaskState::Pending => html! { "since " (since(t.available_at, now)) },
        TaskState::Running => t.claimed_at().map_or_else(|| html! { "—" }, |at| since(at, now)),
        TaskState::Done | TaskState::Dead => since(t.updated_at, now),
    }
}

fn when_header(state: TaskState) -> &'static str {
    match state {
        TaskState::Pending => "claimable",
        TaskState::Running => "claimed",
        TaskState::Done => "finished",
        TaskState::Dead => "died",
    }
}

/// `/queues/NAME`: counts, running claims, a page of one state.
pub fn queue(app: &App, r: &Request, q: &LeaseName, page: &mut Page) -> Markup {
    page.title(&["Queue", q.as_str(), "· leasehold"]);
    let snapshot = app.shared.snapshot();
    let now = SystemTime::now();
    let Some(view) = snapshot
        .queues
        .as_ref()
        .and_then(|qs| qs.iter().find(|v| &v.stats.queue == q))
    else {
        page.status = 404;
        return html! { h1 { "Queue " (shown(q.as_str())) } p { "No such queue (or no tasks in it)." } };
    };
    let counts = |s: TaskState| match s {
        TaskState::Pending => view.stats.pending,
        TaskState::Running => view.stats.running,
        TaskState::Done => view.stats.done,
        TaskState::Dead => view.stats.dead,
    };
    let state = r
        .param("state")
        .and_then(TaskState::parse)
        .unwrap_or(if view.stats.dead > 0 {
            TaskState::Dead
        } else {
            TaskState::Pending
        });
    let limit = r
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(super::PAGE)
        .clamp(1, 1000);
    let from = page_of(r);
    // One more than shown: whether there is a page beyond this one.
    let listed = app
        .store
        .task_page(q, state, from.clone(), u32::try_from(limit + 1).unwrap_or(u32::MAX));
    let qe = enc(q.as_str());
    let base = format!("/queues/{qe}?state={}&limit={limit}", state.as_str());
    html! {
        h1 { "Queue " (shown(q.as_str())) }
        (status_line(app, &snapshot))
        @if let Some(n) = r.param("purged") { p.notice { "Purged " (shown(n)) " done tasks." } }
        @if let Some(id) = r.param("missing") { p.error { "No task " (shown(id)) " in this queue." } }
        dl.counts {
            @for s in TaskState::ALL { dt { (s.as_str()) } dd.dead[s == TaskState::Dead && view.stats.dead > 0] { (counts(s)) } }
            dt { "waiting longest" } dd { (oldest_pending(view, now)) }
            dt { "late heartbeats" } dd.warn[view.late > 0] { (view.late) }
            dt { "expired claims" } dd.dead[view.expired > 0] { (view.expired) }
            dt { "claims" } dd.rate { (rate_words(view.claims, "claim")) }
            dt { "completions" } dd.rate { (rate_words(view.completions, "completion")) }
        }
        h2 { "Running" }
        @if view.running.is_empty() { p.muted { "Nothing is running." } } @else {
            (running_table(&snapshot, view, &qe, now))
        }
        h2 { "Tasks" }
        p.tabs {
            @for s in TaskState::ALL {
                @if s == state { strong { (s.as_str()) " (" (counts(s)) ")" } } @else {
                    a href={ "/queues/" (qe) "?state=" (s.as_str()) } { (s.as_str()) " (" (counts(s)) ")" }
                }
                " "
            }
        }
        form.filter method="get" action={ "/queues/" (qe) } {
            label { "Find a task by id " input type="search" name="find" autocomplete="off"; }
            button type="submit" { "Find" }
        }
        @match listed {
            Err(e) => p.error { "Cannot list the tasks: " (shown(&e.to_string())) }
            Ok(mut tasks) => {
                @let (earlier, later) = trim_page(&mut tasks, from.as_ref(), limit);
                @if tasks.is_empty() { p.muted { "No " (state.as_str()) " tasks here." } } @else {
                    (tasks_table(page, q, state, &tasks, now))
                    p.pager {
                        (text::count(tasks.len() as u64, "task", "tasks")) " of " (counts(state)) " " (state.as_str()) ", in claim order. "
                        @if earlier {
                            a href=(base) { "⇤ first" } " "
                            a href={ (base) "&before=" (key_param(&TaskKey::of(&tasks[0]))) } { "← previous" } " "
                        }
                        @if later {
                            a href={ (base) "&after=" (key_param(&TaskKey::of(&tasks[tasks.len() - 1]))) } { "next →" } " "
                            a href={ (base) "&last=1" } { "last ⇥" }
                        }
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

/// The running claims: attempt, age, time left (late ones marked), owner.
fn running_table(snapshot: &Snapshot, view: &QueueView, qe: &str, now: SystemTime) -> Markup {
    html! {
        div.scroll { table.tasks {
            thead { tr { th { "task" } th { "attempt" } th { "claimed" } th { "claim left" } th { "owner" } th { "token" } } }
            tbody { @for t in &view.running {
                tr.late[t.lease_remaining.zip(t.claim_ttl).is_some_and(|(l, ttl)| l < ttl / 2)] {
                    td { a href={ "/queues/" (qe) "/tasks/" (enc(t.id.as_str())) } { (shown(t.id.as_str())) } }
                    td { (t.attempts) " of " (t.max_attempts) }
                    td { (when(t, now)) }
                    td { @match t.lease_remaining { Some(l) if !l.is_zero() => (countdown(snapshot.remaining(l))), _ => span.dead { "expired" } } }
                    td { (shown(t.owner.as_deref().unwrap_or(""))) }
                    td.token { (t.token) }
                }
            } }
        } }
    }
}

/// A page of the queue's tasks in `state`, with a retry button for dead
/// ones when the page allows actions.
fn tasks_table(page: &Page, q: &LeaseName, state: TaskState, tasks: &[Task], now: SystemTime) -> Markup {
    let qe = enc(q.as_str());
    html! {
        div.scroll { table.tasks {
            thead { tr {
                th { "task" } th { (when_header(state)) } th { "priority" } th { "attempts" } th { "last error" }
                @if page.actions && state == TaskState::Dead { th { span.sr { "retry" } } }
            } }
            tbody { @for t in tasks {
                tr.later[t.state == TaskState::Pending && t.available_at > now] {
                    td { a href={ "/queues/" (qe) "/tasks/" (enc(t.id.as_str())) } { (shown(t.id.as_str())) } }
                    td { (when(t, now)) }
                    td.num { (t.priority) }
                    td { (t.attempts) " of " (t.max_attempts) }
                    td.err { (shown(&text::shorten(t.last_error.as_deref().unwrap_or(""), 120))) }
                    @if page.actions && state == TaskState::Dead {
                        td { (retry_form(page, q, &t.id)) }
                    }
                }
            } }
        } }
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
    page.title(&["Task", id.as_str(), "· leasehold"]);
    let now = SystemTime::now();
    let task = match app.store.task_get(q, id) {
        Ok(Some(t)) => t,
        Ok(None) => {
            page.status = 404;
            return html! { h1 { "Task " (shown(id.as_str())) } p { "No such task in queue " (shown(q.as_str())) "." } };
        }
        Err(e) => return html! { h1 { "Task " (shown(id.as_str())) } p.error { (shown(&e.to_string())) } },
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let delayed = task.state == TaskState::Pending && task.available_at > now;
    html! {
        h1 { "Task " (shown(id.as_str())) }
        p {
            "Queue " a href={ "/queues/" (enc(q.as_str())) } { (shown(q.as_str())) } " · "
            strong.state { (task.state.as_str()) }
            @if delayed { " · " span.delayed { "delayed until " (text::time(task.available_at)) " (" (text::ago(task.available_at, now)) ")" } }
        }
        dl.counts {
            dt { "attempts" } dd { (task.attempts) " of " (task.max_attempts) }
            dt { "of which failed" } dd { (task.failures) }
            dt { "of which the claim expired" } dd title="The worker stopped heartbeating (died or hung) and the claim ran out." { (task.expirations) }
            @if let Some(at) = task.claimed_at() { dt { "claimed" } dd { (since(at, now)) " (" (text::time(at)) ")" } }
            @if let Some(l) = task.lease_remaining { dt { "claim left" } dd { (countdown(l)) } }
            dt { "owner" } dd { (shown(task.owner.as_deref().unwrap_or("—"))) }
            dt { "token" } dd { (task.token) }
            dt { "priority" } dd { (task.priority) }
            dt { (if delayed { "claimable at" } else { "claimable since" }) } dd { (text::time(task.available_at)) }
            dt { "added" } dd { (text::time(task.created_at)) }
            dt { "changed" } dd { (text::time(task.updated_at)) }
        }
        p.muted { "The store keeps each task's counts and its last error, not a record of every attempt." }
        @if let Some(e) = &task.last_error { h2 { "Last error" } pre.err { (shown(e)) } }
        h2 { "Payload" } pre { (shown(&pretty(&task.payload))) }
        @if let Some(res) = &task.result { h2 { "Result" } pre { (shown(&pretty(res))) } }
        @if page.actions && task.state == TaskState::Dead { (retry_form(page, q, id)) }
        p { a href={ "/api/queues/" (enc(q.as_str())) "/tasks/" (enc(id.as_str())) } { "JSON" } }
    }
}
