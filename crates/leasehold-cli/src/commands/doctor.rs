//! `leasehold doctor`: check the store and this host, say what is wrong and
//! how to fix it. Exit 0 when every check passes, 1 otherwise. A warning
//! (`warn`: a large write-ahead log, a store file that is a plain copy)
//! passes: it is worth a look, not wrong.

use std::io::Write;
use std::path::Path;

use leasehold::{StoreUrl, host, identity, json, symlinks};

use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    /// Passed, with something worth a look (printed `warn`): it does not
    /// fail `doctor`.
    Warn,
    Fail,
}

struct Check {
    name: &'static str,
    verdict: Verdict,
    detail: String,
}

impl Check {
    fn pass(name: &'static str, detail: String) -> Self {
        Self {
            name,
            verdict: Verdict::Pass,
            detail,
        }
    }

    fn warn(name: &'static str, detail: String) -> Self {
        Self {
            name,
            verdict: Verdict::Warn,
            detail,
        }
    }

    fn fail(name: &'static str, detail: String) -> Self {
        Self {
            name,
            verdict: Verdict::Fail,
            detail,
        }
    }

    fn ok(&self) -> bool {
        self.verdict != Verdict::Fail
    }

    fn document(&self) -> json::DoctorCheck<'_> {
        json::DoctorCheck {
            check: self.name,
            ok: self.ok(),
            detail: &self.detail,
            warning: self.verdict == Verdict::Warn,
        }
    }

    fn mark(&self) -> &'static str {
        match self.verdict {
            Verdict::Fail => "FAIL",
            Verdict::Warn => "warn",
            Verdict::Pass => "ok  ",
        }
    }
}

/// The boot id, which tells a holder's boot from this one.
fn boot_id() -> Check {
    match host::boot_id() {
        Some(id) => Check::pass("boot id", id),
        None => Check::fail(
            "boot id",
            "cannot read /proc/sys/kernel/random/boot_id; mount /proc".to_owned(),
        ),
    }
}

/// What fast takeover reads of a process: its start time and pid namespace.
fn process_identity() -> Check {
    const NAME: &str = "process identity";
    let started = match identity::start_time(std::process::id()) {
        Ok(t) => t,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot read /proc/self/stat ({e}): fast takeover will never fire; mount /proc"),
            );
        }
    };
    match identity::holder(leasehold::Binding::ThisProcess) {
        Ok(me) if me.pid_ns.is_some() => Check::pass(NAME, format!("/proc/self/stat readable (start time {started})")),
        Ok(_) => Check::fail(
            NAME,
            "cannot read /proc/self/ns/pid: fast takeover will never fire".into(),
        ),
        Err(e) => Check::fail(NAME, e.to_string()),
    }
}

pub fn run(ctx: &Ctx) -> u8 {
    let mut checks = vec![boot_id(), process_identity()];
    // Open the store first (never creating it: a mistyped path is a
    // failed check naming it, not a new empty store that passes).
    let url = ctx.store_url();
    if url.is_ok() {
        store_checks(ctx, &mut checks);
    }

    match url.as_ref().map(StoreUrl::local_file) {
        Ok(Some(path)) => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            // Resolved as the store resolves it, so a refusal is explained
            // and the probes below never write through a planted link.
            match symlinks::resolve_dir(dir) {
                Ok(resolved) => {
                    let followed = std::path::absolute(dir).is_ok_and(|d| d != resolved);
                    checks.push(Check::pass(
                        "store path",
                        if followed {
                            format!(
                                "{} resolves to {} (symbolic links in the directory are followed; at the store file never)",
                                dir.display(),
                                resolved.display()
                            )
                        } else {
                            format!("{} has no symbolic links", dir.display())
                        },
                    ));
                    if resolved.is_dir() {
                        checks.extend(directory_checks(&resolved));
                    }
                }
                Err(e) => checks.push(Check::fail("store path", format!("{e}; {}", e.hint()))),
            }
        }
        Ok(None) => {}
        Err(e) => checks.push(Check::fail("store URL", e.to_string())),
    }
    let all_ok = checks.iter().all(Check::ok);
    let details = json::Doctor {
        ok: all_ok,
        checks: checks.iter().map(Check::document).collect(),
    };
    if !ctx.global.json {
        for c in &checks {
            println!("{} {:<17} {}", c.mark(), c.name, c.detail);
        }
    }
    if all_ok {
        if ctx.global.json {
            output::print_json(&details);
        }
        return ExitCode::Success.code();
    }
    let failed: Vec<&str> = checks.iter().filter(|c| !c.ok()).map(|c| c.name).collect();
    let message = format!("{} failed: see each check's detail for what to do", failed.join(", "));
    crate::commands::fail(ctx, details, &message, ExitCode::Failure.code())
}

/// What the store says of itself: its kind, place and schema, its
/// identity, its facts, problems and warnings.
fn store_checks(ctx: &Ctx, checks: &mut Vec<Check>) {
    match ctx.open_existing_store() {
        Ok(store) => match store.backend().describe() {
            Ok(info) => {
                checks.push(Check::pass(
                    "store",
                    format!(
                        "{} at {}, {}",
                        info.kind,
                        info.location,
                        crate::output::schema_words(info.schema_version)
                    ),
                ));
                checks.push(identity_check(&store));
                for (label, value) in info.facts {
                    checks.push(Check::pass("store fact", format!("{label}: {value}")));
                }
                for (label, problem) in info.problems {
                    checks.push(Check::fail("store check", format!("{label}: {problem}")));
                }
                for (label, text) in info.warnings {
                    checks.push(Check::warn("store warning", format!("{label}: {text}")));
                }
            }
            Err(e) => checks.push(Check::fail("store", e.to_string())),
        },
        Err(e) => checks.push(Check::fail("store", format!("{e:#}"))),
    }
}

/// The store's identity (`Store::identity`): what a holder compares to
/// tell a store that lost its data.
fn identity_check(store: &leasehold::Store) -> Check {
    const NAME: &str = "store identity";
    match store.identity() {
        Ok(Some(identity)) => Check::pass(NAME, identity.to_string()),
        Ok(None) => Check::pass(NAME, "none yet: made at the first renewal of a kept grant (`run`, a library holder); a holder that finds it changed says the store lost data".into()),
        Err(e) => Check::fail(NAME, e.to_string()),
    }
}

/// The checks of the store's directory: its filesystem (a network one
/// fails; one in memory is warned about, as its store is lost at reboot
/// and its tokens restart) and fsync.
fn directory_checks(dir: &Path) -> Vec<Check> {
    let mut checks = vec![filesystem(dir)];
    if let Ok(Some(fs)) = host::memory_filesystem(dir) {
        checks.push(Check::warn("filesystem", host::memory_filesystem_risk(dir, fs)));
    }
    checks.push(fsync_works(dir));
    checks
}

fn filesystem(dir: &Path) -> Check {
    const NAME: &str = "filesystem";
    match host::network_filesystem(dir) {
        Ok(None) => Check::pass(NAME, format!("{} is on a local filesystem", dir.display())),
        Ok(Some(fs)) => Check::fail(
            NAME,
            format!(
                "{} is on a network filesystem ({fs}): SQLite locking is unreliable there; move the store to a local disk or use {}",
                dir.display(),
                leasehold::stores_with(|k| !k.local_file)
            ),
        ),
        Err(e) => Check::fail(NAME, format!("cannot statfs {}: {e}", dir.display())),
    }
}

fn fsync_works(dir: &Path) -> Check {
    let probe = dir.join(format!(".leasehold-doctor-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
        f.write_all(b"leasehold doctor fsync probe\n")?;
        f.sync_all()?;
        std::fs::File::open(dir)?.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    match result {
        Ok(()) => Check::pass("fsync", format!("fsync of a file and of {} works", dir.display())),
        Err(e) => Check::fail(
            "fsync",
            format!(
                "fsync in {} failed ({e}): the store cannot be durable there",
                dir.display()
            ),
        ),
    }
}
