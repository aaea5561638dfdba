//! Black-box tests of the real `leasehold` binary: one integration test
//! target (as ripgrep's and just's), one module per area.

mod clock;
#[path = "../faketime/mod.rs"]
mod faketime;
mod files;
mod json;
mod lease;
mod limits;
mod lock;
mod race;
mod restore;
mod run;
mod serve;
mod task;
mod util;
mod work;
