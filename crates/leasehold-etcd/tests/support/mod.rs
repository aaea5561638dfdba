//! The part of the etcd test support that needs this crate's types: a
//! store on a test server. The servers themselves are
//! `leasehold_testkit::etcd`'s.

use leasehold_etcd::{EtcdBackend, EtcdOptions};
use leasehold_testkit::etcd::EtcdServer;

/// A store on `server` under `prefix`.
pub fn open(server: &EtcdServer, prefix: &str) -> EtcdBackend {
    EtcdBackend::open(
        &[server.endpoint()],
        &EtcdOptions {
            prefix: prefix.to_owned(),
            ..EtcdOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("open the etcd store on {}: {e}", server.endpoint()))
}
