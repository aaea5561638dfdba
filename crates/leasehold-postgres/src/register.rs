//! `postgres://` and `postgresql://` URLs: how the `leasehold` crate opens
//! this store by URL ([`STORE`]).

use leasehold_backend::{Backend, BackendError, StoreLocation, StoreOpenOptions, StoreRegistration, redact_password};

use crate::{PostgresBackend, PostgresOptions};

/// The PostgreSQL store, by a libpq URL (see [`PostgresBackend::open`]).
pub const STORE: StoreRegistration = StoreRegistration {
    kind: crate::KIND,
    parse,
    redact: redact_password,
    open,
};

/// Taken as written: the URL is checked when the store is opened (its
/// certificates read then, its password taken from `PGPASSWORD` then).
#[allow(clippy::unnecessary_wraps, reason = "the signature of every store's parse")]
fn parse(url: &str) -> Result<StoreLocation, BackendError> {
    Ok(StoreLocation::Url(url.to_owned()))
}

fn open(location: &StoreLocation, _: &StoreOpenOptions) -> Result<Box<dyn Backend>, BackendError> {
    Ok(Box::new(PostgresBackend::open(
        location.url(STORE.kind.name)?,
        PostgresOptions::default(),
    )?))
}
