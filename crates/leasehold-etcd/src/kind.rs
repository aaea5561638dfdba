//! What messages say of the etcd store and what it can do: compiled
//! in every build of this crate, also one without its backend (the
//! feature `backend` off), so that a build of leasehold that leaves the
//! store out still parses its URLs and says how to get it.

use leasehold_backend::StoreKind;

/// The etcd store, as the store list (`leasehold-stores`) describes it.
pub const KIND: StoreKind = StoreKind {
    schemes: &["etcd"],
    name: "the etcd store",
    feature: Some("etcd"),
    example: "etcd://host:2379",
    queue: false,
    schedules: true,
    local_file: false,
};
