//! `leasehold schedule ...`: the schedules kept in the store, which
//! `leasehold cron` fires (the library's `leasehold::schedule`).

use std::time::SystemTime;

use leasehold::schedule::{Action, CatchUp, Kept, Overlap, Schedule, ScheduleSpec, SlotOutcome};
use leasehold::{LeaseName, QueueName, format_duration, format_time, json};

use crate::cli::{ScheduleAddArgs, ScheduleCommand, ScheduleNameArg, ScheduleNextArgs, ScheduleShowArgs};
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output::{self, Table};
use crate::run::CliError;

pub fn dispatch(ctx: &Ctx, command: ScheduleCommand) -> anyhow::Result<u8> {
    match command {
        ScheduleCommand::Add(args) => add(ctx, &args),
        ScheduleCommand::List => list(ctx),
        ScheduleCommand::Show(args) => show(ctx, &args),
        ScheduleCommand::Next(args) => next(ctx, &args),
        ScheduleCommand::Pause(args) => pause(ctx, &args, true),
        ScheduleCommand::Resume(args) => pause(ctx, &args, false),
        ScheduleCommand::Remove(args) => remove(ctx, &args),
    }
}

fn usage(message: String) -> anyhow::Error {
    CliError::new(ExitCode::Usage, message).into()
}

fn not_found(name: &LeaseName) -> anyhow::Error {
    CliError::new(
        ExitCode::NotFound,
        format!("no schedule named {name}; `leasehold schedule list` shows what there is"),
    )
    .into()
}

fn add(ctx: &Ctx, args: &ScheduleAddArgs) -> anyhow::Result<u8> {
    let spec = ScheduleSpec::parse(&args.cron, args.tz.as_deref()).map_err(|e| usage(e.to_string()))?;
    let action = match (&args.queue, args.command.is_empty()) {
        (Some(queue), true) => {
            QueueName::new(queue.as_str()).map_err(|e| usage(format!("--queue {queue:?}: {e}")))?;
            let payload = match &args.payload {
                Some(text) => serde_json::from_str(text).map_err(|e| usage(format!("--payload is not JSON: {e}")))?,
                None => serde_json::Value::Null,
            };
            Action::Enqueue {
                queue: queue.clone(),
                payload,
            }
        }
        (None, false) => Action::Run {
            command: args.command.clone(),
        },
        (None, true) => {
            return Err(usage(
                "say what each slot does: a command after `--` (`-- ./report.sh`), or --queue Q to enqueue a task"
                    .into(),
            ));
        }
        (Some(_), false) => return Err(usage("--queue and a command exclude each other".into())),
    };
    // The lease a command runs under must be one `run` could keep.
    leasehold::supervise::Timing::new(args.ttl, None, args.grace, None).map_err(|e| usage(e.to_string()))?;
    let schedule = Schedule {
        name: args.name.clone(),
        spec,
        action,
        overlap: Overlap::from_word(&args.overlap).unwrap_or_default(),
        catch_up: CatchUp::from_word(&args.catch_up).unwrap_or_default(),
        deadline: args.deadline,
        jitter: args.jitter,
        ttl: args.ttl,
        grace: args.grace,
        paused: args.paused,
        created: SystemTime::now(),
    };
    let store = ctx.open_store()?;
    let schedules = store.schedules()?;
    schedules.add(&schedule, args.replace)?;
    let kept = schedules.get(&args.name)?.ok_or_else(|| not_found(&args.name))?;
    let now = schedules.now()?;
    if ctx.global.json {
        output::print_json(&json::schedule(&kept, now));
    } else {
        let next = json::schedule(&kept, now)
            .next
            .unwrap_or_else(|| "none (paused)".into());
        println!(
            "added schedule {}: {} ({}); next slot {next}",
            args.name,
            kept.schedule.spec.text(),
            kept.schedule.spec.zone_name()
        );
    }
    Ok(ExitCode::Success.code())
}

fn list(ctx: &Ctx) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let all = store.schedules()?.list()?;
    let now = store.schedules()?.now()?;
    if ctx.global.json {
        output::print_json(&json::Schedules {
            schedules: all.iter().map(|k| json::schedule(k, now)).collect(),
        });
        return Ok(ExitCode::Success.code());
    }
    let mut table = Table::new(&["name", "cron", "zone", "does", "next", "last slot", "paused"]);
    for kept in &all {
        let doc = json::schedule(kept, now);
        table.row([
            kept.schedule.name.to_string(),
            kept.schedule.spec.text().to_owned(),
            kept.schedule.spec.zone_name().to_owned(),
            does(&kept.schedule.action),
            doc.next.unwrap_or_else(|| "-".into()),
            doc.last_slot.unwrap_or_else(|| "-".into()),
            if kept.schedule.paused { "yes" } else { "no" }.into(),
        ]);
    }
    println!("{table}");
    Ok(ExitCode::Success.code())
}

/// What a slot does, in a few words.
fn does(action: &Action) -> String {
    match action {
        Action::Run { command } => leasehold::shorten(&command.join(" "), 40),
        Action::Enqueue { queue, .. } => format!("enqueue to {queue}"),
    }
}

fn get(ctx: &Ctx, name: &LeaseName) -> anyhow::Result<(leasehold::Store, Kept)> {
    let store = ctx.open_store()?;
    let kept = store.schedules()?.get(name)?.ok_or_else(|| not_found(name))?;
    Ok((store, kept))
}

fn show(ctx: &Ctx, args: &ScheduleShowArgs) -> anyhow::Result<u8> {
    let (store, kept) = get(ctx, &args.name)?;
    let slots = store.schedules()?.slots(&args.name, args.slots.max(1))?;
    let now = store.schedules()?.now()?;
    if ctx.global.json {
        output::print_json(&json::ScheduleShown {
            schedule: json::schedule(&kept, now),
            slots: slots.iter().map(|r| json::slot(&args.name, r)).collect(),
        });
        return Ok(ExitCode::Success.code());
    }
    let s = &kept.schedule;
    let doc = json::schedule(&kept, now);
    println!("schedule {}", s.name);
    println!("  cron      {} ({})", s.spec.text(), s.spec.zone_name());
    println!("  does      {}", does(&s.action));
    println!(
        "  overlap   {}   catch-up {}   deadline {}   jitter {}   ttl {}",
        s.overlap,
        s.catch_up,
        s.deadline.map_or_else(|| "none".into(), format_duration),
        format_duration(s.jitter),
        format_duration(s.ttl)
    );
    println!("  paused    {}", if s.paused { "yes" } else { "no" });
    println!("  next      {}", doc.next.unwrap_or_else(|| "-".into()));
    println!("  created   {}", format_time(s.created));
    // A state behind its newest record would make every claim conflict: a
    // daemon moves it past the record (and says so in its log).
    if let Some(newest) = slots.first()
        && newest.through > kept.accounted_until()
    {
        println!(
            "  problem   its state is behind the record of slot {}; a running `leasehold cron` moves it past that record",
            format_time(newest.through)
        );
    }
    let mut table = Table::new(&["slot", "outcome", "host", "pid", "token", "late", "took", "detail"]);
    for r in &slots {
        let mut outcome = r.outcome.to_string();
        if r.outcome == SlotOutcome::Missed && r.count > 1 {
            outcome = format!("missed ×{}", r.count);
        }
        table.row([
            format_time(r.slot),
            outcome,
            r.daemon.as_ref().map_or_else(|| "-".into(), |d| d.host.clone()),
            r.daemon.as_ref().map_or_else(|| "-".into(), |d| d.pid.to_string()),
            r.token.map_or_else(|| "-".into(), |t| t.to_string()),
            r.lateness().map_or_else(|| "-".into(), format_duration),
            r.duration().map_or_else(|| "-".into(), format_duration),
            output::for_terminal(&leasehold::shorten(&r.detail, 80)),
        ]);
    }
    println!();
    println!("{table}");
    Ok(ExitCode::Success.code())
}

fn next(ctx: &Ctx, args: &ScheduleNextArgs) -> anyhow::Result<u8> {
    let (store, kept) = get(ctx, &args.name)?;
    let spec = &kept.schedule.spec;
    let from = kept.accounted_until().max(store.schedules()?.now()?);
    let slots: Vec<SystemTime> = spec.slots_after(from).take(args.count as usize).collect();
    if ctx.global.json {
        output::print_json(&json::ScheduleNext {
            name: &args.name,
            zone: spec.zone_name(),
            slots: slots.iter().map(|t| format_time(*t)).collect(),
        });
        return Ok(ExitCode::Success.code());
    }
    for slot in slots {
        // The zone's wall clock beside UTC: what the pattern was written in.
        let local = spec.in_zone(slot).map_or_else(String::new, |z| format!("  ({z})"));
        println!("{}{local}", format_time(slot));
    }
    Ok(ExitCode::Success.code())
}

fn pause(ctx: &Ctx, args: &ScheduleNameArg, paused: bool) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    if !store.schedules()?.set_paused(&args.name, paused)? {
        return Err(not_found(&args.name));
    }
    changed(
        ctx,
        &args.name,
        paused,
        false,
        if paused { "paused" } else { "resumed" },
    );
    Ok(ExitCode::Success.code())
}

fn remove(ctx: &Ctx, args: &ScheduleNameArg) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    if !store.schedules()?.remove(&args.name)? {
        return Err(not_found(&args.name));
    }
    changed(ctx, &args.name, false, true, "removed");
    Ok(ExitCode::Success.code())
}

fn changed(ctx: &Ctx, name: &LeaseName, paused: bool, removed: bool, word: &str) {
    if ctx.global.json {
        output::print_json(&json::ScheduleChanged { name, paused, removed });
    } else {
        println!("{word} schedule {name}");
    }
}
