//! Black-box tests of the real `leasehold` binary: one integration test
//! target (as ripgrep's and just's), one module per area.

mod lease;
mod lock;
mod run;
mod util;
