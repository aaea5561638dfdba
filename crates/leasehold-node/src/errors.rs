//! Failures as JavaScript errors. The classes are defined in JavaScript
//! (`index.js`: `Held`, `LeaseLost`, … each with a stable `code`); this
//! module picks the class ([`ErrorKind::class_name`], the names the
//! Python package's exceptions have too) and words the message, as the Python package's
//! `errors.rs` does. A native error's message is `CLASS: message`; the
//! package's JavaScript turns it into an instance of `CLASS` with the
//! message after the colon — so every error the package throws, sync or
//! from a promise, is one of its classes. Messages are the library's;
//! where the next step is an option of the caller's (a [`Remedy`]), it
//! is worded in this package's terms.

use leasehold::lock::LockError;
use leasehold::{BackendError, ErrorKind, NameError, Remedy};
use napi::{Error, Status};

/// An error of the class named `class`.
pub fn new(class: &str, message: impl AsRef<str>) -> Error {
    Error::new(Status::GenericFailure, format!("{class}: {}", message.as_ref()))
}

/// An error of the class of `kind`.
pub fn of_kind(kind: ErrorKind, message: impl AsRef<str>) -> Error {
    new(kind.class_name(), message)
}

/// `InvalidInput`: an argument refused before anything was done.
pub fn invalid(message: impl AsRef<str>) -> Error {
    of_kind(ErrorKind::InvalidInput, message)
}

/// A remedy in the words of this package's API.
fn node_words(remedy: Remedy) -> String {
    match remedy {
        Remedy::AnotherStore => "open another store (new Store(url))".into(),
        Remedy::AllowNetworkFs => "pass { allowNetworkFs: true } if you accept the risk".into(),
        _ => remedy.library_words().into(),
    }
}

/// A store's failure, with its remedy in this package's words.
pub fn backend(e: &BackendError) -> Error {
    of_kind(e.kind(), e.message_with(node_words))
}

/// Any failure of the library.
pub fn library(e: &leasehold::Error) -> Error {
    match e {
        leasehold::Error::Store(inner) => backend(inner),
        _ => of_kind(e.kind(), e.to_string()),
    }
}

pub fn lock(e: &LockError) -> Error {
    let mut message = e.to_string();
    if let Some(remedy) = e.remedy() {
        message = format!("{message}, or {}", node_words(remedy));
    }
    of_kind(e.kind(), message)
}

/// A state file's failure, an option it names spelled as this API's
/// (`{ fenceNewLease: true }`).
pub fn file(e: &leasehold::files::FileError) -> Error {
    of_kind(e.kind(), e.message_with(&leasehold::spelling::Options))
}

/// A refused name: `what` says which (lease, queue, task id).
pub fn name(what: &str, given: &str, e: &NameError) -> Error {
    new("InvalidName", format!("invalid {what} {given:?}: {e}"))
}

/// Library results as this package's results.
pub trait OrThrow<T> {
    fn or_throw(self) -> napi::Result<T>;
}

impl<T> OrThrow<T> for Result<T, leasehold::Error> {
    fn or_throw(self) -> napi::Result<T> {
        self.map_err(|e| library(&e))
    }
}

impl<T> OrThrow<T> for Result<T, BackendError> {
    fn or_throw(self) -> napi::Result<T> {
        self.map_err(|e| backend(&e))
    }
}

impl<T> OrThrow<T> for Result<T, LockError> {
    fn or_throw(self) -> napi::Result<T> {
        self.map_err(|e| lock(&e))
    }
}

impl<T> OrThrow<T> for Result<T, leasehold::files::FileError> {
    fn or_throw(self) -> napi::Result<T> {
        self.map_err(|e| file(&e))
    }
}
