//! `sqlite://PATH` URLs: how the `leasehold` crate opens this store by URL
//! ([`STORE`]).

use std::path::PathBuf;

use leasehold_backend::{
    Backend, BackendError, StoreKind, StoreLocation, StoreOpenOptions, StoreRegistration, redact_password,
};
use leasehold_host as host;

use crate::{SqliteBackend, SqliteOptions};

/// The SQLite store, as the store list describes it: always built in.
pub const KIND: StoreKind = StoreKind {
    schemes: &["sqlite"],
    name: "the SQLite store",
    feature: None,
    example: "sqlite:///path/to/leasehold.db",
    queue: true,
    schedules: true,
    local_file: true,
};

/// The SQLite store, by `sqlite:///absolute/path.db`, `sqlite://relative.db`
/// or `sqlite://~/path.db`.
pub const STORE: StoreRegistration = StoreRegistration {
    kind: KIND,
    parse,
    redact: redact_password,
    open,
};

fn parse(url: &str) -> Result<StoreLocation, BackendError> {
    let refused = |reason: &str| BackendError::invalid_url(redact_password(url), reason);
    let path = url.split_once("://").map_or(url, |(_, path)| path);
    if path.is_empty() {
        return Err(refused(
            "the path is empty; write sqlite:///absolute/path.db or sqlite://relative.db",
        ));
    }
    Ok(StoreLocation::File(match path.strip_prefix("~/") {
        Some(tail) => host::home_dir()
            .ok_or_else(|| refused("~ used but $HOME is not set"))?
            .join(tail),
        None => PathBuf::from(path),
    }))
}

fn open(location: &StoreLocation, options: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    let options = SqliteOptions {
        allow_network_fs: options.allow_network_fs,
        must_exist: options.must_exist,
        ..SqliteOptions::default()
    };
    Ok(Box::new(SqliteBackend::open(location.file(STORE.kind.name)?, options)?))
}
