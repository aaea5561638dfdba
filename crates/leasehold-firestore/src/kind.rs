//! What messages say of the Firestore store and what it can do: compiled
//! in every build of this crate, also one without its backend (the
//! feature `backend` off), so that a build of leasehold that leaves the
//! store out still parses its URLs and says how to get it.

use leasehold_backend::StoreKind;

/// The Firestore store, as the store list (`leasehold-stores`) describes it.
pub const KIND: StoreKind = StoreKind {
    schemes: &["firestore"],
    name: "the Firestore store",
    feature: Some("firestore"),
    example: "firestore://my-project",
    queue: false,
    schedules: true,
    local_file: false,
};
