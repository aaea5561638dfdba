//! The one conformance suite every leasehold backend runs.
