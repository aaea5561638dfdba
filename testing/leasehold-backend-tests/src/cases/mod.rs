//! The cases, one module per area of the contract. They are re-exported flat
//! so that [`cases()`](crate::cases()) names each case once, with the
//! capabilities it needs.

mod evict;
mod expiry;
mod fence;
mod history;
mod inspect;
mod limits;
mod modes;
mod names;
mod reacquire;
mod records;
mod release;
mod renew;
mod task_add;
mod task_claim;
mod task_complete;
mod task_fail;
mod task_inspect;
mod task_lifecycle;
mod task_release;
mod task_retry;
mod task_support;
mod tokens;
mod waiters;

pub use evict::*;
pub use expiry::*;
pub use fence::*;
pub use history::*;
pub use inspect::*;
pub use limits::*;
pub use modes::*;
pub use names::*;
pub use reacquire::*;
pub use records::*;
pub use release::*;
pub use renew::*;
pub use task_add::*;
pub use task_claim::*;
pub use task_complete::*;
pub use task_fail::*;
pub use task_inspect::*;
pub use task_lifecycle::*;
pub use task_release::*;
pub use task_retry::*;
pub use tokens::*;
pub use waiters::*;
