//! What `leasehold --version` (`-V`) says: the version on the first line,
//! as before, then what a bug report needs — the commit, the target and
//! the stores built in (`--json`: the same as one document).

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// See build.rs.
const COMMIT: &str = env!("LEASEHOLD_COMMIT");
const TARGET: &str = env!("LEASEHOLD_TARGET");

pub fn text() -> String {
    format!(
        "leasehold {VERSION}\ncommit: {COMMIT}\ntarget: {TARGET}\nstores: {}\n",
        leasehold::built_in_stores().join(", ")
    )
}

pub fn document() -> leasehold::json::Version<'static> {
    leasehold::json::Version {
        name: "leasehold",
        version: VERSION,
        commit: COMMIT,
        target: TARGET,
        stores: leasehold::built_in_stores(),
    }
}
