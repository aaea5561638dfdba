//! What messages say of the Redis store and what it can do: compiled
//! in every build of this crate, also one without its backend (the
//! feature `backend` off), so that a build of leasehold that leaves the
//! store out still parses its URLs and says how to get it.

use leasehold_backend::StoreKind;

/// The Redis store, as the store list (`leasehold-stores`) describes it.
pub const KIND: StoreKind = StoreKind {
    schemes: &["redis", "rediss"],
    name: "the Redis store",
    feature: Some("redis"),
    example: "redis://host:6379",
    queue: false,
    schedules: true,
    local_file: false,
};
