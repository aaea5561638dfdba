//! `leasehold schedule ...`: the schedules kept in the store, which
//! `leasehold cron` fires (the library's `leasehold::schedule`).

use std::time::SystemTime;

use leasehold::schedule::clock::StoreClock;
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
    none_named(std::slice::from_ref(name))
}

/// Exit 14 naming the schedules that are not there (`cron NAME...` too).
pub fn none_named(names: &[LeaseName]) -> anyhow::Error {
    let names: Vec<&str> = names.iter().map(LeaseName::as_str).collect();
    CliError::new(
        ExitCode::NotFound,
        format!(
            "no schedule named {}; `leasehold schedule list` shows what there is",
            names.join(", ")
        ),
    )
    .into()
}

/// The command as the daemons will find it: a relative path with a `/`
/// in it (`./report.sh`, `bin/sync`) is resolved now, against this
/// process's working directory, and must be a program there — each daemon
/// would otherwise look it up in its own working directory (under a
/// service unit, `/`). A bare name (`python3`) stays a name, looked up on
/// each daemon's `PATH`; an absolute path is kept as given (it may exist
/// on the daemons' machines only).
fn resolve_command(command: &[String]) -> anyhow::Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut command = command.to_vec();
    let Some(program) = command.first_mut() else {
        return Ok(command);
    };
    let given = std::path::Path::new(program.as_str());
    if !program.contains('/') || given.is_absolute() {
        return Ok(command);
    }
    let refuse = |why: String| {
        usage(format!(
            "the command {program} {why}; nothing was changed. A relative command is resolved against the directory \
             `schedule add` runs in: run it where the program is, or give its absolute path"
        ))
    };
    // `absolute`, not `canonicalize`: a symbolic link on the way
    // (`current/` → `releases/42/`) is kept, so a deployment that moves it
    // moves the schedule's program too.
    let absolute = std::path::absolute(given).map_err(|e| refuse(format!("cannot be resolved ({e})")))?;
    let shown = absolute.display();
    match std::fs::metadata(&absolute) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(refuse(format!("is not there: no {shown}"))),
        Err(e) => return Err(refuse(format!("cannot be read at {shown} ({e})"))),
        Ok(meta) if !meta.is_file() => return Err(refuse(format!("is not a file: {shown}"))),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
            return Err(refuse(format!("is not executable: {shown} (chmod +x it)")));
        }
        Ok(_) => {}
    }
    *program = absolute
        .to_str()
        .ok_or_else(|| refuse(format!("resolves to a path that is not UTF-8: {shown}")))?
        .to_owned();
    Ok(command)
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
        (None, false) => {
            if args.payload.is_some() {
                return Err(usage(
                    "--payload goes with --queue: a command's slots have no payload (it gets LEASEHOLD_SLOT); nothing was changed"
                        .into(),
                ));
            }
            Action::Run {
                command: resolve_command(&args.command)?,
            }
        }
        (None, true) => {
            return Err(usage(
                "say what each slot does: a command after `--` (`-- ./report.sh`), or --queue Q to enqueue a task"
                    .into(),
            ));
        }
        (Some(_), false) => return Err(usage("--queue and a command exclude each other".into())),
    };
    // The lease a command runs under must be one `run` could keep.
    leasehold::supervise::Timing::new(args.ttl, None, args.grace).map_err(|e| usage(e.to_string()))?;
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
    // One reading, for the warning and for the next slot shown.
    let clock = StoreClock::read(&store)?;
    tell_skew(&clock);
    schedules.add(&schedule, args.replace)?;
    let kept = schedules.get(&args.name)?.ok_or_else(|| not_found(&args.name))?;
    let now = clock.latest();
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
    // A paused schedule has no next slot (as `list` and `show` say): its
    // slots pass unfired, and a resume starts it afresh from then.
    let paused = kept.schedule.paused;
    let count = if paused { 0 } else { args.count as usize };
    let slots: Vec<SystemTime> = spec.slots_after(from).take(count).collect();
    if ctx.global.json {
        output::print_json(&json::ScheduleNext {
            name: &args.name,
            zone: spec.zone_name(),
            paused,
            slots: slots.iter().map(|t| format_time(*t)).collect(),
        });
        return Ok(ExitCode::Success.code());
    }
    if paused {
        eprintln!(
            "schedule {} is paused: no slot fires until `leasehold schedule resume {}`",
            args.name, args.name
        );
    }
    for slot in slots {
        // The zone's wall clock beside UTC: what the pattern was written in.
        let local = spec.in_zone(slot).map_or_else(String::new, |z| format!("  ({z})"));
        println!("{}{local}", format_time(slot));
    }
    Ok(ExitCode::Success.code())
}

/// Say on stderr when this host's clock is off the store's: the change is
/// dated by the store's clock all the same (docs/SCHEDULES.md, "One
/// clock"), but the operator should know their `date` is wrong.
fn tell_skew(clock: &StoreClock) {
    if let Some(line) = clock.skew_told() {
        eprintln!("leasehold: {line}");
    }
}

fn pause(ctx: &Ctx, args: &ScheduleNameArg, paused: bool) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    if let Ok(clock) = StoreClock::read(&store) {
        tell_skew(&clock);
    }
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
