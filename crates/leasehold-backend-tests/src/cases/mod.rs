//! The cases, one module per area of the contract. They are re-exported flat
//! so that [`conformance!`](crate::conformance) names each case once, and each
//! `#[test]` is named after its case.

mod evict;
mod expiry;
mod fence;
mod history;
mod inspect;
mod modes;
mod names;
mod reacquire;
mod release;
mod renew;
mod tokens;
mod waiters;

pub use evict::*;
pub use expiry::*;
pub use fence::*;
pub use history::*;
pub use inspect::*;
pub use modes::*;
pub use names::*;
pub use reacquire::*;
pub use release::*;
pub use renew::*;
pub use tokens::*;
pub use waiters::*;
