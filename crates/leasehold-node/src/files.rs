//! Crash-safe state files: `writeFile`, `writeJson` and `updateJson`
//! (lib/files.js) over `leasehold::files`, as the Python package's
//! `write_atomic`, `write_json` and `update_json` — the temp file, fsyncs,
//! rename, the sidecar `FILE.lock` and the fence record `FILE.fence` are
//! all the library's. Every write takes `FILE.lock` as `leasehold write`
//! does, so it never lands between the read and the write of an update,
//! and runs on a thread of its own (it fsyncs, and may wait for the lock).
//!
//! An update's function is JavaScript, so it runs on the JavaScript thread
//! while the update's thread holds `FILE.lock`: the thread reads the file
//! under the lock and hands it over (`begin`), then waits — the JavaScript
//! thread never does — for the new content (`finish`), writes it and lets
//! go. An update's [`NativeStateFile`]: made ─begin→ reading (a lock wait)
//! ─→ handed over ─finish(text)→ written, or ─finish(null), dropped, or
//! its environment ended→ abandoned (the file unchanged, the lock let go).
//!
//! Re-entry. `flock` locks belong to the open file, so a write of a file
//! whose `FILE.lock` this program holds waits for a release that only this
//! program can make: awaited inside `updateJson`'s function on the same
//! file, or before a `FileLock` of `FILE.lock` is released, it waits for
//! ever. Such a write is refused at once, as Python refuses it;
//! lib/files.js says which locks the program holds ([`WriteArgs::updating`], [`WriteArgs::locks`],
//! by device and inode) and the write's thread compares.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use leasehold::GrantId;
use leasehold::files::{self, Fence, FencedFile, UpdateError, WriteOptions};
use napi::Env;
use napi::bindgen_prelude::{Object, Uint8Array};
use napi_derive::napi;

use crate::calls::{self, Deferred};
use crate::convert;
use crate::envs::{self, LetGo};
use crate::errors;

/// A `{ fence }`, as lib/files.js reads it: a Lease's token, grant and
/// name; a task's (or any object's) token and grant; a plain number.
#[derive(Debug)]
#[napi(object)]
pub struct FenceArgs {
    pub token: f64,
    /// The grant's identity (16 hexadecimal digits), when known.
    pub grant: Option<String>,
    /// A Lease's own name.
    pub lease: Option<String>,
    /// A plain number: when it is the token of the `leasehold run` this
    /// process runs under, that run's grant and lease name it.
    pub plain: bool,
}

/// The options of a write or an update, as lib/files.js passes them.
#[derive(Debug)]
#[napi(object)]
pub struct WriteArgs {
    pub fence: Option<FenceArgs>,
    pub fence_lease: Option<String>,
    pub fence_new_lease: Option<bool>,
    pub mode: Option<f64>,
    /// The lock files (`DEV:INO`) of the updates whose function the call
    /// was made inside.
    pub updating: Vec<String>,
    /// The lock files (`DEV:INO`) this program's `FileLock`s hold.
    pub locks: Vec<String>,
}

/// A fence with the lease its token is of, recorded with it as the CLI's
/// `--fence-lease` records it (`TOKEN[ GRANT][ lease NAME]`, the library's
/// format).
#[derive(Debug)]
struct Fenced {
    fence: Fence,
    lease: Option<String>,
    /// `{ fenceNewLease: true }`: the file now belongs to `lease`.
    new_lease: bool,
}

impl Fenced {
    fn file(&self, path: impl Into<PathBuf>) -> FencedFile {
        FencedFile::new(path).with_lease(self.lease.as_deref(), self.new_lease)
    }
}

/// A write's parts, checked before anything is done.
#[derive(Debug)]
struct Write {
    path: PathBuf,
    fenced: Option<Fenced>,
    options: WriteOptions,
    updating: Vec<String>,
    locks: Vec<String>,
}

/// `{ mode }`: permission bits, as the CLI's `--mode` takes them.
fn mode(mode: Option<f64>) -> napi::Result<Option<u32>> {
    let Some(mode) = mode else { return Ok(None) };
    if mode.fract() != 0.0 || !(0.0..=f64::from(0o7777)).contains(&mode) {
        return Err(errors::invalid(format!(
            "mode: {mode} is not a file mode; give permission bits such as 0o644 or 0o600"
        )));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "checked above")]
    Ok(Some(mode as u32))
}

/// The fence of `{ fence, fenceLease, fenceNewLease }`, as Python's
/// `fence=`, `fence_lease=`, `fence_new_lease=` are read.
fn fenced(args: &WriteArgs) -> napi::Result<Option<Fenced>> {
    let new_lease = args.fence_new_lease.unwrap_or(false);
    let Some(given) = &args.fence else {
        if args.fence_lease.is_some() || new_lease {
            return Err(errors::invalid(
                "fenceLease and fenceNewLease name the lease of fence; give fence (a Lease, a task or a token) too",
            ));
        }
        return Ok(None);
    };
    let named = args
        .fence_lease
        .as_deref()
        .map(|name| convert::lease_name(name).map(|n| n.to_string()))
        .transpose()?;
    let token = convert::token(given.token)?;
    let fence = if given.plain {
        Fence::with_grant_from_env(token).map_err(|e| errors::invalid(e.to_string()))?
    } else {
        let grant = given
            .grant
            .as_deref()
            .map(|g| {
                g.parse::<GrantId>()
                    .map_err(|e| errors::invalid(format!("fence: grant: {e}")))
            })
            .transpose()?;
        Fence { token, grant }
    };
    let own = match &given.lease {
        Some(lease) => Some(lease.clone()),
        None if given.plain && named.is_none() => files::lease_from_env(token),
        None => None,
    };
    let lease = files::writer_lease(own, named).map_err(|e| {
        errors::invalid(format!(
            "fence is a grant of lease {}, but fenceLease names {}; leave fenceLease out (a Lease names itself)",
            leasehold::escape_hidden(&e.own),
            leasehold::escape_hidden(&e.named)
        ))
    })?;
    if new_lease && lease.is_none() {
        return Err(errors::invalid(
            "fenceNewLease needs the lease's name: give fence a Lease, or fenceLease: NAME",
        ));
    }
    Ok(Some(Fenced {
        fence,
        lease,
        new_lease,
    }))
}

impl Write {
    fn new(path: String, args: WriteArgs, json: bool) -> napi::Result<Self> {
        let options = WriteOptions {
            mode: mode(args.mode)?,
            json,
            ..WriteOptions::default()
        };
        Ok(Self {
            path: PathBuf::from(path),
            fenced: fenced(&args)?,
            options,
            updating: args.updating,
            locks: args.locks,
        })
    }

    /// Refuse `what` when this program holds `PATH.lock` (see the module
    /// docs). On the write's thread: a `stat`.
    fn refuse_reentry(&self, what: &str) -> napi::Result<()> {
        let lock = lock_path(&self.path);
        let Some(key) = key_of(&lock) else { return Ok(()) };
        let (how, remedy) = if self.updating.contains(&key) {
            (
                "inside updateJson's function on the same file would wait for ever for",
                "which that updateJson holds until its function returns: return the new value from the function instead",
            )
        } else if self.locks.contains(&key) {
            (
                "would wait for",
                "which a FileLock of this program holds — for ever if awaited before its release(): release it first",
            )
        } else {
            return Ok(());
        };
        Err(errors::invalid(format!(
            "{what}({}) {how} {}, {remedy}",
            self.path.display(),
            lock.display()
        )))
    }

    /// Replace the file with `data` under `PATH.lock` (blocking).
    fn write(&self, data: &[u8]) -> napi::Result<()> {
        match &self.fenced {
            Some(fenced) => fenced.file(&self.path).write(fenced.fence, data, &self.options),
            None => files::write_locked(&self.path, data, &self.options),
        }
        .map_err(|e| errors::file(&e))
    }

    /// Read-modify-write under `PATH.lock` (blocking), fenced if asked.
    fn update<E>(&self, filter: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, E>) -> Result<(), UpdateError<E>> {
        match &self.fenced {
            Some(fenced) => fenced.file(&self.path).update(fenced.fence, &self.options, filter),
            None => files::update(&self.path, &self.options, filter),
        }
    }
}

/// `PATH.lock`, spelled as `path` is.
fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    lock.into()
}

/// A lock file's identity, `DEV:INO`.
pub fn key(meta: &std::fs::Metadata) -> String {
    format!("{}:{}", meta.dev(), meta.ino())
}

/// The identity of the lock file at `lock` (`None` when there is none yet).
fn key_of(lock: &Path) -> Option<String> {
    std::fs::symlink_metadata(lock).ok().map(|meta| key(&meta))
}

/// What an update's thread hands over once it holds the lock.
#[derive(Debug)]
#[napi(object)]
pub struct Begun {
    /// The file's content, `None` when there is no file.
    pub old: Option<String>,
    /// `PATH.lock`'s identity (`DEV:INO`), held until `finish`.
    pub lock: String,
}

/// What the JavaScript thread answers an update's thread: the new
/// content, or `None` (the function threw: nothing is written).
struct Reply {
    text: Option<String>,
    done: Deferred<()>,
}

/// The update's side of the channel; let go (dropped), the thread writes
/// nothing and unlocks.
struct Answer {
    reply: Mutex<Option<Sender<Reply>>>,
}

impl LetGo for Answer {
    fn let_go(&self) {
        drop(self.reply.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
}

/// The update's function did not give a new content: nothing is written.
struct Abandoned;

/// The native half of a `writeFile`, `writeJson` or `updateJson` call
/// (lib/files.js): the file and its options, checked when made; then one
/// `write`, or an update's `begin` and `finish`.
#[napi]
pub struct NativeStateFile {
    write: Mutex<Option<Write>>,
    answer: Arc<Answer>,
    replies: Mutex<Option<Receiver<Reply>>>,
}

impl std::fmt::Debug for NativeStateFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeStateFile")
            .field("write", &self.write)
            .finish_non_exhaustive()
    }
}

#[napi]
impl NativeStateFile {
    /// `json`: the content is JSON (`writeJson`, `updateJson`): checked
    /// before it is written, and an update refuses a file that is not.
    #[napi(constructor)]
    pub fn new(path: String, args: WriteArgs, json: bool) -> napi::Result<Self> {
        let write = Write::new(path, args, json)?;
        let (tx, rx) = mpsc::channel();
        Ok(Self {
            write: Mutex::new(Some(write)),
            answer: Arc::new(Answer {
                reply: Mutex::new(Some(tx)),
            }),
            replies: Mutex::new(Some(rx)),
        })
    }

    /// Replace the file with `data`, atomically, durably, under
    /// `PATH.lock`, fenced when asked: a promise.
    #[napi]
    pub fn write<'env>(&self, env: &'env Env, data: Uint8Array) -> napi::Result<Object<'env>> {
        let Some(write) = self.write.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return Err(errors::invalid("this state file call has begun already"));
        };
        let data = data.to_vec();
        let what = if write.options.json { "writeJson" } else { "writeFile" };
        calls::on_thread(env, move || {
            write.refuse_reentry(what)?;
            write.write(&data)
        })
    }

    /// Lock and read, on a thread: a promise of the old content. A stale
    /// fence is refused here, before anything is read.
    #[napi]
    pub fn begin<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let taken = (
            self.write.lock().unwrap_or_else(PoisonError::into_inner).take(),
            self.replies.lock().unwrap_or_else(PoisonError::into_inner).take(),
        );
        let (Some(write), Some(replies)) = taken else {
            return Err(errors::invalid("this state file call has begun already"));
        };
        // The lock held while JavaScript runs the function is this
        // environment's: let go (nothing written) if it ends first.
        let weak: Weak<dyn LetGo> = Arc::downgrade(&self.answer) as Weak<dyn LetGo>;
        envs::register(*env, weak)?;
        let (begun, promise) = calls::promise::<Begun>(env)?;
        calls::spawn(move || {
            let mut begun = Some(begun);
            let mut done = None;
            let outcome = match write.refuse_reentry("updateJson") {
                Err(e) => Err(e),
                Ok(()) => write
                    .update(|old| {
                        let handed = Begun {
                            old: old.map(|b| String::from_utf8_lossy(b).into_owned()),
                            lock: key_of(&lock_path(&write.path)).unwrap_or_default(),
                        };
                        calls::settle(begun.take().expect("once"), Ok(handed));
                        let Ok(reply) = replies.recv() else {
                            return Err(Abandoned);
                        };
                        done = Some(reply.done);
                        reply.text.map(String::into_bytes).ok_or(Abandoned)
                    })
                    .or_else(|e| match e {
                        UpdateError::Filter(Abandoned) => Ok(()),
                        UpdateError::File(e) => Err(errors::file(&e)),
                    }),
            };
            // A failure before the hand-over rejects `begin`; after it, `finish`.
            if let Some(begun) = begun {
                let e = outcome.err().unwrap_or_else(|| {
                    errors::of_kind(
                        leasehold::ErrorKind::Failed,
                        "the update ended without reading the file",
                    )
                });
                calls::settle(begun, Err(e));
            } else if let Some(done) = done {
                calls::settle(done, outcome);
            }
        })?;
        Ok(promise)
    }

    /// Write `text` (JSON, from the function's result), or with `null`
    /// nothing (the function threw), and let go of the lock: a promise.
    #[napi]
    pub fn finish<'env>(&self, env: &'env Env, text: Option<String>) -> napi::Result<Object<'env>> {
        let (done, promise) = calls::promise::<()>(env)?;
        let sender = self.answer.reply.lock().unwrap_or_else(PoisonError::into_inner).take();
        let reply = Reply { text, done };
        let unsent = match sender {
            Some(sender) => sender.send(reply).err().map(|e| e.0),
            None => Some(reply),
        };
        if let Some(reply) = unsent {
            calls::settle(
                reply.done,
                Err(errors::invalid("this update has ended already; nothing was written")),
            );
        }
        Ok(promise)
    }
}
