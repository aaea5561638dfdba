//! What `leasehold --version` says about the build beyond the version: the
//! commit, the target and what kind of build it is. The commit is
//! `$LEASEHOLD_COMMIT` when set (a build from a source archive, which has
//! no git), else git's short hash of HEAD, else "unknown". The kind is
//! `$LEASEHOLD_BUILD` as `scripts/dist` sets it (`release`, or `snapshot`
//! while the repository's address is a placeholder), else `development`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LEASEHOLD_COMMIT");
    println!("cargo:rerun-if-env-changed=LEASEHOLD_BUILD");
    let build = match std::env::var("LEASEHOLD_BUILD").as_deref() {
        Ok(kind @ ("release" | "snapshot")) => kind.to_owned(),
        _ => "development".to_owned(),
    };
    println!("cargo:rustc-env=LEASEHOLD_BUILD={build}");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).current_dir(&dir).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let commit = std::env::var("LEASEHOLD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Built again when HEAD moves: HEAD itself, the branch it names,
            // and the packed refs (a branch's hash may live there). Only
            // files that exist: cargo takes a missing one as always changed.
            let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watched.push(git(&["rev-parse", "--git-path", &branch]));
            }
            watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
            for path in watched.into_iter().flatten() {
                let path = Path::new(&dir).join(path);
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LEASEHOLD_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=LEASEHOLD_TARGET={target}");
}
