//! `task add`: one task, or a batch of JSON lines (all or nothing).

use std::io::{BufRead, IsTerminal};

use anyhow::Context as _;
use leasehold::{Available, NewTask, TaskAdd};

use crate::cli::TaskAddArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

fn parse_batch(args: &TaskAddArgs, input: impl BufRead, available: Available) -> Result<Vec<NewTask>, CliError> {
    let bad =
        |n: usize, why: String| CliError::new(ExitCode::DataError, format!("stdin line {n}: {why}; nothing was added"));
    let defaults = NewTask {
        id: None,
        payload: serde_json::Value::Null,
        priority: args.priority,
        available,
        max_attempts: args.max_attempts,
    };
    let mut tasks = Vec::new();
    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message("reading tasks");
        bar
    });
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| bad(n, format!("cannot read ({e})")))?;
        if line.trim().is_empty() {
            continue;
        }
        tasks.push(NewTask::parse_batch_line(&line, &defaults).map_err(|why| bad(n, why.to_string()))?);
        if let Some(bar) = &progress
            && n % 10_000 == 0
        {
            bar.set_message(format!("read {n} lines"));
            bar.tick();
        }
    }
    if let Some(bar) = progress {
        bar.finish_with_message(format!("adding {} tasks", tasks.len()));
    }
    Ok(tasks)
}

pub fn run(ctx: &Ctx, args: &TaskAddArgs) -> anyhow::Result<u8> {
    // A delay is the store's to measure: this host's clock may be off.
    let available = match (args.at, args.delay) {
        (Some(at), _) => Available::At(at),
        (None, Some(delay)) => Available::After(delay),
        (None, None) => Available::Now,
    };
    let tasks = if args.batch {
        parse_batch(args, std::io::stdin().lock(), available)?
    } else {
        vec![NewTask {
            id: args.id.clone(),
            payload: args.payload.clone().unwrap_or_default(),
            priority: args.priority,
            available,
            max_attempts: args.max_attempts,
        }]
    };
    let store = ctx.open_store()?;
    // The tasks are moved, not copied: the outcomes carry every id.
    let outcomes = store
        .task_add(&args.queue, tasks)
        .with_context(|| format!("cannot add tasks to queue {}", args.queue))?;
    // Outcomes come in the order of the tasks: an earlier task of the
    // batch with the same id is the "existing" one (a generated id is
    // never one given).
    if let Some((i, (id, TaskAdd::Conflict { differences, .. }))) = outcomes
        .iter()
        .enumerate()
        .find(|(_, (_, o))| matches!(o, TaskAdd::Conflict { .. }))
    {
        let differences = leasehold::differences_text(differences);
        let twice = outcomes[..i].iter().any(|(earlier, _)| earlier == id);
        let message = if twice {
            format!(
                "task {id} appears twice in the batch, the first time with {differences}; nothing was added. \
                 Give each task its own id, or repeat it exactly (payload, priority, max attempts)"
            )
        } else {
            format!(
                "task {id} already exists in queue {} with {differences}; nothing was added. \
                 Use another id, or add it exactly as it was (payload, priority, max attempts) to make adding idempotent",
                args.queue
            )
        };
        return Err(CliError::new(ExitCode::DataError, message).into());
    }
    let added = outcomes.iter().filter(|(_, o)| *o == TaskAdd::Added).count();
    if ctx.global.json {
        output::print_json(&leasehold::json::TasksAdded {
            queue: &args.queue,
            added,
            existing: outcomes.len() - added,
            ids: outcomes.iter().map(|(id, _)| id).collect(),
        });
    } else if args.batch {
        eprintln!(
            "added {added} tasks to {} ({} already there)",
            args.queue,
            outcomes.len() - added
        );
    } else {
        println!("{}", outcomes[0].0);
    }
    Ok(ExitCode::Success.code())
}
