//! The fault suite of docs/RELIABILITY.md, one module per group of cases. Each case
//! names its number in docs/RELIABILITY.md; counts come from `tier::count` (reduced here,
//! full under `LEASEHOLD_SOAK=1`, see `scripts/soak`); each prints its
//! figure as a `FIGURE case N: ...` line.
//!
//! Cases covered elsewhere (referenced, not repeated): 5, 20 in
//! `crates/leasehold/src/files/tests.rs`; 6, 18 and 19 for state files and
//! the process-level part of 24 in `crates/leasehold-cli/tests/cli/files.rs`;
//! 14 in `crates/leasehold/src/keeper/tests.rs`; 16 in
//! `crates/leasehold-cli/tests/cli/run.rs` and `docs/run-faults.sh`; 23 in
//! `crates/leasehold-cli/tests/cli/{task,work}.rs` (and here at soak size).

mod cluster;
mod common;
mod corrupt;
mod cron;
mod failpoints;
mod firestore;
mod fuzz;
mod leadership;
mod leases;
mod mounts;
mod owners;
mod queue;
mod redis;
mod supervisor;
mod wedge;
mod wipes;

fn main() {
    leasehold_testkit::main(&[
        cluster::TESTS,
        corrupt::TESTS,
        cron::TESTS,
        failpoints::TESTS,
        firestore::TESTS,
        fuzz::TESTS,
        leadership::TESTS,
        leases::TESTS,
        mounts::TESTS,
        owners::TESTS,
        queue::TESTS,
        redis::TESTS,
        supervisor::TESTS,
        wedge::TESTS,
        wipes::TESTS,
    ]);
}
