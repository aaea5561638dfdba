//! Black-box tests of the real `leasehold` binary: one integration test
//! target (as ripgrep's and just's), one module per area.

mod clock;
#[path = "../../../leasehold-etcd/tests/support/mod.rs"]
mod etcd;
#[path = "../faketime/mod.rs"]
mod faketime;
mod files;
mod json;
mod lease;
mod limits;
mod lock;
mod mutants;
#[path = "../../../leasehold-postgres/tests/support/mod.rs"]
mod postgres;
mod race;
mod restore;
mod run;
mod serve;
mod task;
mod util;
mod waiters;
mod work;
