//! What `leasehold --version` (`-V`) says: the version on the first line,
//! as before, then what a bug report needs — the commit, the target, the
//! kind of build and the stores built in (`--json`: the same as one
//! document).

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// See build.rs.
const COMMIT: &str = env!("LEASEHOLD_COMMIT");
const TARGET: &str = env!("LEASEHOLD_TARGET");
/// `release`, `snapshot` (scripts/dist, not a release: the repository's
/// address was a placeholder) or `development` (not built by scripts/dist).
const BUILD: &str = env!("LEASEHOLD_BUILD");

pub fn text() -> String {
    format!(
        "leasehold {VERSION}\ncommit: {COMMIT}\ntarget: {TARGET}\nbuild: {BUILD}\nstores: {}\n",
        leasehold::built_in_stores().join(", ")
    )
}

pub fn document() -> leasehold::json::Version<'static> {
    leasehold::json::Version {
        name: "leasehold",
        version: VERSION,
        commit: COMMIT,
        target: TARGET,
        build: BUILD,
        stores: leasehold::built_in_stores(),
    }
}
