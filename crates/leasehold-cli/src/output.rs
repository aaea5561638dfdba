//! How results look: one JSON document with `--json`, tables and plain
//! lines for people otherwise.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, SystemTime};

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use leasehold::{Grant, LeaseState, duration_millis, format_duration, identity};
use serde_json::{Value, json};

/// Print one JSON document on stdout. A closed stdout (a pipe to `head`) is
/// not an error worth reporting.
pub fn print_json(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, value);
    let _ = writeln!(out);
}

/// A time for people and JSON: RFC 3339, or what it is when RFC 3339
/// cannot write it (a record an old leasehold wrote); never a panic.
pub fn rfc3339(t: SystemTime) -> String {
    leasehold::format_time(t)
}

/// The time `d` from now, as [`rfc3339`].
pub fn from_now(d: Duration) -> String {
    rfc3339(leasehold::later(SystemTime::now(), d))
}

/// Whether a grant's holder is alive, as far as this host can tell.
pub fn alive(grant: &Grant) -> &'static str {
    let h = &grant.holder;
    if !h.bound {
        "ttl"
    } else if identity::provably_gone(h) {
        "no"
    } else if h.host == identity::hostname() && identity::start_time(h.pid).ok() == h.start_time {
        "yes"
    } else {
        "?"
    }
}

pub fn grant_json(grant: &Grant) -> Value {
    json!({
        "name": grant.name,
        "token": grant.token,
        "owner": grant.owner,
        "mode": grant.mode.label(),
        "shared_limit": match grant.mode { leasehold::Mode::Shared { limit } => json!(limit), leasehold::Mode::Exclusive => Value::Null },
        "expires": from_now(grant.expires_in),
        "expires_in_ms": duration_millis(grant.expires_in),
        "ttl_ms": duration_millis(grant.ttl),
        "acquired": rfc3339(grant.acquired_at),
        "alive": alive(grant),
        "holder": grant.holder,
    })
}

pub fn state_json(state: &LeaseState) -> Value {
    json!({
        "name": state.name,
        "last_token": state.last_token,
        "waiters": state.waiters,
        "grants": state.grants.iter().map(grant_json).collect::<Vec<_>>(),
    })
}

pub fn holder_summary(grant: &Grant) -> String {
    let h = &grant.holder;
    let mut s = format!("{} pid {}", h.host, h.pid);
    if !h.cmdline.is_empty() {
        let cmd: String = h.cmdline.chars().take(60).collect();
        let _ = write!(s, " ({cmd})");
    }
    s
}

pub fn expires_in(d: Duration) -> String {
    format_duration(d)
}

/// The people's table of leases: one row per live grant, one row per free name.
pub fn lease_table(states: &[LeaseState]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["name", "mode", "token", "owner", "holder", "alive?", "expires in"]);
    for state in states {
        if state.grants.is_empty() {
            table.add_row([
                state.name.to_string(),
                "free".into(),
                format!("(last {})", state.last_token),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        for g in &state.grants {
            table.add_row([
                state.name.to_string(),
                g.mode.label().into(),
                g.token.to_string(),
                g.owner.clone(),
                holder_summary(g),
                alive(g).into(),
                expires_in(g.expires_in),
            ]);
        }
    }
    table
}

pub fn task_json(t: &leasehold::Task) -> Value {
    json!({
        "queue": t.queue,
        "id": t.id,
        "state": t.state.as_str(),
        "payload": t.payload,
        "priority": t.priority,
        "attempts": t.attempts,
        "max_attempts": t.max_attempts,
        "token": t.token,
        "owner": t.owner,
        "available_at": rfc3339(t.available_at),
        "lease_remaining_ms": t.lease_remaining.map(duration_millis),
        "expirations": t.expirations,
        "failures": t.failures,
        "last_error": t.last_error,
        "result": t.result,
        "created_at": rfc3339(t.created_at),
        "updated_at": rfc3339(t.updated_at),
    })
}
