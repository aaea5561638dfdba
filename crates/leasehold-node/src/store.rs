//! `Store`: a store named by URL as the CLI's `--store` takes it, opened
//! on first use (on a thread of its own: `calls.rs`) and shared by every
//! call after. Leases, the queue and the rest reach the library through
//! [`NativeStore::handle`].

use std::sync::{Arc, Mutex, PoisonError};

use leasehold::{ChosenUrlError, StoreOptions, StoreUrl};
use napi::bindgen_prelude::Object;
use napi::{Either, Env};
use napi_derive::napi;

use crate::calls::on_thread;
use crate::convert;
use crate::errors::{self, OrThrow as _};

/// What every call on a store needs: where it is and how to open it.
#[derive(Debug)]
pub struct Opener {
    url: StoreUrl,
    options: StoreOptions,
    /// `None` until first used; closed stores refuse calls.
    open: Mutex<Opened>,
}

#[derive(Debug)]
enum Opened {
    No,
    Yes(Arc<leasehold::Store>),
    Closed,
}

impl Opener {
    /// The open store: opened now if it was not (blocking: call it on a
    /// call's thread).
    pub fn handle(&self) -> napi::Result<Arc<leasehold::Store>> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        match &*open {
            Opened::Yes(store) => Ok(store.clone()),
            Opened::Closed => Err(errors::invalid(format!(
                "the store {} is closed; open it again with new Store(url)",
                self.url.redacted()
            ))),
            Opened::No => {
                // Held across the open: the calls that wait for it need it.
                let store = Arc::new(leasehold::Store::open(&self.url, &self.options).or_throw()?);
                *open = Opened::Yes(store.clone());
                Ok(store)
            }
        }
    }
}

/// The native half of `Store` (index.js).
#[derive(Debug)]
#[napi]
pub struct NativeStore {
    opener: Arc<Opener>,
}

impl NativeStore {
    pub fn opener(&self) -> Arc<Opener> {
        self.opener.clone()
    }
}

#[napi]
impl NativeStore {
    /// `url`: a store URL, or `undefined` for `$LEASEHOLD_STORE`, else the
    /// embedded store. `path`: a SQLite file, named as is (`Store.sqlite`).
    #[napi(constructor)]
    pub fn new(url: Option<String>, path: Option<String>, allow_network_fs: Option<bool>) -> napi::Result<Self> {
        let url = match path {
            Some(path) => StoreUrl::sqlite(path),
            None => StoreUrl::chosen(url.as_deref(), "use Store.sqlite(PATH)").map_err(|e| match e {
                ChosenUrlError::Refused(message) => errors::invalid(message),
                ChosenUrlError::Store(e) => errors::backend(&e),
            })?,
        };
        let options = StoreOptions {
            allow_network_fs: allow_network_fs.unwrap_or(false),
            ..StoreOptions::default()
        };
        Ok(Self {
            opener: Arc::new(Opener {
                url,
                options,
                open: Mutex::new(Opened::No),
            }),
        })
    }

    /// The URL, any password in it replaced by `***`.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.opener.url.redacted()
    }

    /// Open the store now (a promise); calls open it when first used.
    #[napi]
    pub fn open<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let opener = self.opener();
        on_thread(env, move || opener.handle().map(drop))
    }

    /// Close the store: later calls are refused; leases and tasks held
    /// keep their own handle until they end.
    #[napi]
    pub fn close(&self) {
        let taken = std::mem::replace(
            &mut *self.opener.open.lock().unwrap_or_else(PoisonError::into_inner),
            Opened::Closed,
        );
        // Closing may wait for a connection's goodbye: not on this thread.
        if let Opened::Yes(store) = taken {
            let _ = std::thread::Builder::new()
                .name("leasehold-close".into())
                .spawn(move || drop(store));
        }
    }

    /// `name`'s state as `leasehold status NAME --json` prints it (JSON
    /// text), or `null` for a name never granted.
    #[napi]
    pub fn status<'env>(&self, env: &'env Env, name: String) -> napi::Result<Object<'env>> {
        let name = convert::lease_name(&name)?;
        let opener = self.opener();
        on_thread(env, move || {
            let state = opener.handle()?.status(&name).or_throw()?;
            Ok(state.map(|s| leasehold::json::value(&leasehold::json::lease_state(&s)).to_string()))
        })
    }

    /// Every name's state, as `leasehold list --json` prints it (JSON text).
    #[napi]
    pub fn list<'env>(&self, env: &'env Env, live: Option<bool>) -> napi::Result<Object<'env>> {
        let opener = self.opener();
        on_thread(env, move || {
            let states = opener.handle()?.list(live.unwrap_or(false)).or_throw()?;
            Ok(leasehold::json::value(&leasehold::json::leases(&states)).to_string())
        })
    }

    /// Resolves when `token` is still `name`'s newest (or newer than any
    /// seen); rejects with `StaleToken` otherwise — the check a sink makes
    /// before it accepts a write.
    #[napi]
    pub fn fence<'env>(&self, env: &'env Env, name: String, token: f64) -> napi::Result<Object<'env>> {
        let name = convert::lease_name(&name)?;
        let token = convert::token(token)?;
        let opener = self.opener();
        on_thread(env, move || {
            match opener.handle()?.fence(&name, token).or_throw()?.refusal(&name, token) {
                None => Ok(()),
                Some(refusal) => Err(errors::of_kind(leasehold::ErrorKind::Stale, refusal)),
            }
        })
    }

    /// A duration as this package reads it, in ms (for index.js's checks).
    #[napi]
    pub fn duration_ms(value: Either<f64, String>, what: String) -> napi::Result<f64> {
        Ok(convert::duration(&value, &what)?.as_secs_f64() * 1000.0)
    }
}
