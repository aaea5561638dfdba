//! What several case modules share: the history of a sandbox, holders that
//! record into it, grants the test takes itself, and the checker's verdict.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_faults::checker::{self, Report};
use leasehold_faults::history::{self, Acts, GrantRecord, History};
use leasehold_faults::proc::{Sandbox, boot_ns};
use leasehold_faults::resource::FencedResource;
use leasehold_testkit::wait::wait_until;

/// The client process of this crate (see `src/bin/faults-client.rs`).
pub fn client() -> &'static str {
    env!("CARGO_BIN_EXE_faults-client")
}

/// The sandbox's history: every process of the trial records into it.
pub fn history_path(sb: &Sandbox) -> PathBuf {
    sb.file("history")
}

/// The resource the sandbox's holders write to (through leasehold's fence).
pub fn resource_path(sb: &Sandbox) -> PathBuf {
    sb.file("resource")
}

/// The sandbox's history, opened for the test's own records.
pub fn history(sb: &Sandbox) -> History {
    History::open(&history_path(sb)).expect("open the history")
}

/// `leasehold run NAME OPTIONS... -- faults-client hold HISTORY RESOURCE HOLD_MS`,
/// in the background; the command acts on its own (judged by time too).
pub fn spawn_holder(sb: &Sandbox, name: &str, options: &[&str], hold_ms: u64) -> Child {
    spawn_holder_acting(sb, name, options, hold_ms, Acts::Own)
}

/// [`spawn_holder`], saying how the command acts: `Acts::Fenced` for a
/// command the case pauses together with everything that could stop it
/// (only the fence protects what it writes).
pub fn spawn_holder_acting(sb: &Sandbox, name: &str, options: &[&str], hold_ms: u64, acts: Acts) -> Child {
    let flags: &[&str] = if acts == Acts::Fenced { &["fenced"] } else { &[] };
    spawn_holder_with(sb, name, options, hold_ms, flags)
}

/// [`spawn_holder`] with `faults-client hold`'s FLAGS (`fenced`, `deaf`).
pub fn spawn_holder_with(sb: &Sandbox, name: &str, options: &[&str], hold_ms: u64, flags: &[&str]) -> Child {
    let history = history_path(sb).display().to_string();
    let resource = resource_path(sb).display().to_string();
    let hold = hold_ms.to_string();
    let mut args = vec!["run", name];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", client(), "hold", &history, &resource, &hold]);
    args.extend_from_slice(flags);
    asked_now(&mut sb.cmd(&args))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leasehold run")
}

/// The resource the holders of `name` write to, where each name has its own.
pub fn resource_of(sb: &Sandbox, name: &str) -> PathBuf {
    sb.file(&format!("resource-{name}"))
}

/// `WRAPPER... leasehold run NAME --ttl 3s -- faults-client hold HISTORY
/// RESOURCE HOLD_MS` on `store` (3 s: etcd's shortest lease is 2 s),
/// recording into the sandbox's history and writing to the resource of
/// `name`; not yet started.
pub fn store_holder(sb: &Sandbox, wrapper: &[&str], store: &str, name: &str, hold_ms: u64) -> Command {
    store_holder_with(sb, wrapper, store, name, hold_ms, &[], &[])
}

/// [`store_holder`], `run` given `run_options` too (`--owner ID`), the
/// client told `extra` (`fenced`: it acts only through the fence record,
/// and is judged by its writes' answers).
pub fn store_holder_with(
    sb: &Sandbox,
    wrapper: &[&str],
    store: &str,
    name: &str,
    hold_ms: u64,
    run_options: &[&str],
    extra: &[&str],
) -> Command {
    let history = history_path(sb).display().to_string();
    let resource = resource_of(sb, name).display().to_string();
    let hold = hold_ms.to_string();
    let mut args = vec!["run", name, "--ttl", "3s"];
    args.extend_from_slice(run_options);
    args.extend_from_slice(&["--", client(), "hold", &history, &resource, &hold]);
    args.extend_from_slice(extra);
    let mut cmd = sb.cmd_via(wrapper, &args);
    asked_now(&mut cmd)
        .env("LEASEHOLD_STORE", store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Tell the command under `run` when its grant was asked for (now, just
/// before the spawn): the history's `asked`, which orders grants in real time.
pub fn asked_now(cmd: &mut Command) -> &mut Command {
    cmd.env("FAULTS_ASKED_NS", boot_ns().to_string())
}

/// Wait for a child, killing it (and failing) after `limit`.
pub fn finish(mut child: Child, limit: Duration) -> (i32, String) {
    if wait_until(limit, || child.try_wait().expect("try_wait").is_some()).is_none() {
        let whereabouts = leasehold_faults::proc::whereabouts(child.id());
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!(
            "process did not exit within {limit:?}; stderr: {}\nwhere it was:\n{whereabouts}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (code, _, err) = leasehold_faults::proc::outcome(&child.wait_with_output().expect("output"));
    (code, err)
}

/// The grants of `name` recorded in the sandbox's history so far.
pub fn grants(sb: &Sandbox, name: &str) -> Vec<history::Recorded> {
    match history::grants_of(&history_path(sb), name) {
        Ok(g) => g,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("the history {} cannot be read: {e}", history_path(sb).display()),
    }
}

/// The number of grants of `name` recorded so far.
pub fn starts(sb: &Sandbox, name: &str) -> usize {
    grants(sb, name).len()
}

/// A grant the test takes itself: `leasehold --json acquire NAME ARGS...`,
/// recorded in `history` as held by `by` (asked for before the process
/// started, answered after it exited); `None` when held (exit 11).
pub fn acquire_recorded(
    sb: &Sandbox,
    history: &mut History,
    by: &str,
    name: &str,
    args: &[&str],
) -> Option<(u64, String)> {
    let mut all = vec!["--json", "acquire", name];
    all.extend_from_slice(args);
    let asked = boot_ns();
    let (code, out, err) = sb.run(&all);
    let answered = boot_ns();
    match code {
        0 => {
            let (token, id) = record_acquired(history, name, &out, by, asked, answered);
            Some((token.expect("a token"), id))
        }
        11 => None,
        _ => panic!("acquire {name}: exit {code}: {err}"),
    }
}

/// Record what a granted `leasehold --json acquire NAME` printed (`out`)
/// in `history`: a grant held by `by`, the holder acting on its own,
/// asked for at `asked` and answered at `answered` (boot clock). Returns
/// its token and grant id.
pub fn record_acquired(
    history: &mut History,
    name: &str,
    out: &str,
    by: &str,
    asked: u64,
    answered: u64,
) -> (Option<u64>, String) {
    let grant: serde_json::Value = serde_json::from_str(out).expect("acquire --json prints JSON");
    let token = grant["token"].as_u64();
    let id = grant["grant_id"].as_str().expect("a grant id").to_owned();
    history
        .grant(&GrantRecord {
            name: name.to_owned(),
            token,
            grant: id.clone(),
            exclusive: grant["mode"] != "shared",
            by: by.to_owned(),
            asked: Some(asked),
            answered,
            granted: None,
            acts: Acts::Own,
        })
        .expect("record the grant");
    (token, id)
}

/// Record what each resource holds, then judge the sandbox's history. A
/// history that cannot be read fails the case: no check is ever skipped.
pub fn judge(sb: &Sandbox, resources: &[&Path]) -> Report {
    let mut history = history(sb);
    for r in resources {
        FencedResource::new(r)
            .record_final(&mut history)
            .unwrap_or_else(|e| panic!("read {} back: {e}", r.display()));
    }
    checker::check_file(&history_path(sb)).unwrap_or_else(|e| panic!("{e}"))
}

/// [`judge`] with the sandbox's one resource, when something wrote to it.
pub fn judge_sandbox(sb: &Sandbox) -> Report {
    let resource = resource_path(sb);
    if resource.exists() || resource_path_fence(&resource).exists() {
        judge(sb, &[&resource])
    } else {
        judge(sb, &[])
    }
}

fn resource_path_fence(resource: &Path) -> PathBuf {
    let mut p = resource.as_os_str().to_owned();
    p.push(".fence");
    p.into()
}

/// Percentile `p` (0..=100) of `values` (sorted here).
pub fn percentile(values: &mut [Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    values[(values.len() - 1) * p / 100]
}
