//! What messages say of the PostgreSQL store and what it can do: compiled
//! in every build of this crate, also one without its backend (the
//! feature `backend` off), so that a build of leasehold that leaves the
//! store out still parses its URLs and says how to get it.

use leasehold_backend::StoreKind;

/// The PostgreSQL store, as the store list (`leasehold-stores`) describes it.
pub const KIND: StoreKind = StoreKind {
    schemes: &["postgres", "postgresql"],
    name: "the PostgreSQL store",
    feature: Some("postgres"),
    example: "postgres://host/db",
    queue: true,
    schedules: true,
    local_file: false,
};
