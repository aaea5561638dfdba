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

struct Check {
    name: &'static str,
    ok: bool,
    /// Passed, with something worth a look (printed `warn`).
    warning: bool,
    detail: String,
}

impl Check {
    fn document(&self) -> json::DoctorCheck<'_> {
        json::DoctorCheck {
            check: self.name,
            ok: self.ok,
            detail: &self.detail,
            warning: self.warning,
        }
    }

    fn mark(&self) -> &'static str {
        match (self.ok, self.warning) {
            (false, _) => "FAIL",
            (true, true) => "warn",
            (true, false) => "ok  ",
        }
    }
}

fn check(name: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            name,
            ok: true,
            warning: false,
            detail,
        },
        Err(detail) => Check {
            name,
            ok: false,
            warning: false,
            detail,
        },
    }
}

/// A check that passes with a warning: it does not fail `doctor`.
fn warning(name: &'static str, detail: String) -> Check {
    Check {
        name,
        ok: true,
        warning: true,
        detail,
    }
}

pub fn run(ctx: &Ctx) -> u8 {
    let mut checks = vec![
        check(
            "boot id",
            host::boot_id().ok_or_else(|| "cannot read /proc/sys/kernel/random/boot_id; mount /proc".to_owned()),
        ),
        check(
            "process identity",
            identity::start_time(std::process::id())
                .map(|t| format!("/proc/self/stat readable (start time {t})"))
                .map_err(|e| format!("cannot read /proc/self/stat ({e}): fast takeover will never fire; mount /proc"))
                .and_then(|d| {
                    let me = identity::holder(leasehold::Binding::ThisProcess).map_err(|e| e.to_string())?;
                    if me.pid_ns.is_some() {
                        Ok(d)
                    } else {
                        Err("cannot read /proc/self/ns/pid: fast takeover will never fire".into())
                    }
                }),
        ),
    ];
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
                    checks.push(check(
                        "store path",
                        Ok(if followed {
                            format!(
                                "{} resolves to {} (symbolic links in the directory are followed; at the store file never)",
                                dir.display(),
                                resolved.display()
                            )
                        } else {
                            format!("{} has no symbolic links", dir.display())
                        }),
                    ));
                    if resolved.is_dir() {
                        checks.extend(directory_checks(&resolved));
                    }
                }
                Err(e) => checks.push(check("store path", Err(format!("{e}; {}", e.hint())))),
            }
        }
        Ok(None) => {}
        Err(e) => checks.push(check("store URL", Err(e.to_string()))),
    }
    let all_ok = checks.iter().all(|c| c.ok);
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
    let failed: Vec<&str> = checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
    let message = format!("{} failed: see each check's detail for what to do", failed.join(", "));
    crate::commands::fail(ctx, details, &message, ExitCode::Failure.code())
}

/// What the store says of itself: its kind, place and schema, its
/// identity, its facts, problems and warnings.
fn store_checks(ctx: &Ctx, checks: &mut Vec<Check>) {
    match ctx.open_existing_store() {
        Ok(store) => match store.backend().describe() {
            Ok(info) => {
                checks.push(check(
                    "store",
                    Ok(format!(
                        "{} at {}, {}",
                        info.kind,
                        info.location,
                        crate::output::schema_words(info.schema_version)
                    )),
                ));
                checks.push(identity_check(&store));
                for (label, value) in info.facts {
                    checks.push(check("store fact", Ok(format!("{label}: {value}"))));
                }
                for (label, problem) in info.problems {
                    checks.push(check("store check", Err(format!("{label}: {problem}"))));
                }
                for (label, text) in info.warnings {
                    checks.push(warning("store warning", format!("{label}: {text}")));
                }
            }
            Err(e) => checks.push(check("store", Err(e.to_string()))),
        },
        Err(e) => checks.push(check("store", Err(format!("{e:#}")))),
    }
}

/// The store's identity (`Store::identity`): what a holder compares to
/// tell a store that lost its data.
fn identity_check(store: &leasehold::Store) -> Check {
    check(
        "store identity",
        match store.identity() {
            Ok(Some(identity)) => Ok(identity.to_string()),
            Ok(None) => Ok("none yet: made at the first renewal of a kept grant (`run`, a library holder); a holder that finds it changed says the store lost data".into()),
            Err(e) => Err(e.to_string()),
        },
    )
}

/// The checks of the store's directory: its filesystem (a network one
/// fails; one in memory is warned about, as its store is lost at reboot
/// and its tokens restart) and fsync.
fn directory_checks(dir: &Path) -> Vec<Check> {
    let mut checks = vec![check("filesystem", filesystem(dir))];
    if let Ok(Some(fs)) = host::memory_filesystem(dir) {
        checks.push(warning("filesystem", host::memory_filesystem_risk(dir, fs)));
    }
    checks.push(check("fsync", fsync_works(dir)));
    checks
}

fn filesystem(dir: &Path) -> Result<String, String> {
    match host::network_filesystem(dir) {
        Ok(None) => Ok(format!("{} is on a local filesystem", dir.display())),
        Ok(Some(fs)) => Err(format!(
            "{} is on a network filesystem ({fs}): SQLite locking is unreliable there; move the store to a local disk or use {}",
            dir.display(),
            leasehold::stores_with(|k| !k.local_file)
        )),
        Err(e) => Err(format!("cannot statfs {}: {e}", dir.display())),
    }
}

fn fsync_works(dir: &Path) -> Result<String, String> {
    let probe = dir.join(format!(".leasehold-doctor-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
        f.write_all(b"leasehold doctor fsync probe\n")?;
        f.sync_all()?;
        std::fs::File::open(dir)?.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    result
        .map(|()| format!("fsync of a file and of {} works", dir.display()))
        .map_err(|e| {
            format!(
                "fsync in {} failed ({e}): the store cannot be durable there",
                dir.display()
            )
        })
}
