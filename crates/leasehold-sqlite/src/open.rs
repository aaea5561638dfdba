//! Opening a store: where its file is, what is already at the path, and
//! the connection's set-up — each thing found wrong refused before SQLite
//! could write to it.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_backend::{BackendError, ErrorKind, Remedy};
use leasehold_host as host;
use leasehold_host::symlinks;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

use crate::classify::{damaged_schema, io_kind, is_busy, map_error};
use crate::{SqliteBackend, SqliteOptions, files, log_file, origin, schema};

impl SqliteBackend {
    /// Open (creating if needed) the store at `path`.
    ///
    /// # Errors
    /// A [`BackendError`] whose [`kind`](BackendError::kind) says what
    /// happened:
    /// - the directory or file cannot be created or opened (the kind of
    ///   the operating system's error: [`ErrorKind::Permission`],
    ///   [`ErrorKind::ReadOnly`], …), the path or a file SQLite keeps beside
    ///   it is a symlink, a directory link in the path may have been
    ///   planted, the filesystem is a network one (and not allowed), or the
    ///   store stays locked;
    /// - [`ErrorKind::Corrupt`]: the file is not a leasehold store (not
    ///   SQLite, another application's database, damaged pages, or not a
    ///   regular file), or one written by a newer leasehold. The file is
    ///   left untouched.
    ///
    /// [`ErrorKind::Permission`]: leasehold_backend::ErrorKind::Permission
    /// [`ErrorKind::ReadOnly`]: leasehold_backend::ErrorKind::ReadOnly
    /// [`ErrorKind::Corrupt`]: leasehold_backend::ErrorKind::Corrupt
    pub fn open(path: &Path, options: SqliteOptions) -> Result<Self, BackendError> {
        let store = path.display().to_string();
        let given = path;
        let (dir, path) = if options.must_exist {
            existing_place(given).map_err(|e| missing(&store, &e.to_string()))?
        } else {
            place(given).map_err(|(reason, hint)| unavailable(&store, reason, hint))?
        };
        let path = path.as_path();
        if !options.allow_network_fs {
            refuse_network_fs(&store, &dir)?;
        }
        inspect_or_create(&store, path, &dir, &options)?;
        refuse_linked_siblings(&store, path)?;
        // The file SQLite opens, to tell at every call whether it is still
        // the one at the path (`SqliteBackend::replaced`): looked at before
        // and after SQLite opens it, and refused if the two differ (a file
        // swapped in meanwhile could be either). Only two swaps inside that
        // moment, the second undoing the first, would go unseen.
        let look = || {
            std::fs::symlink_metadata(path)
                .map(|m| crate::FileId::of(&m))
                .map_err(|e| {
                    BackendError::new(io_kind(&e), &store, format!("cannot look at its file: {e}"))
                        .hint("check the path")
                        .with_source(e)
                })
        };
        let before = look()?;
        let (mut conn, log_frames) = connect(&store, path, &dir, &options)?;
        let opened_file = look()?;
        if opened_file != before {
            return Err(unavailable(
                &store,
                "its file was replaced while it was being opened".into(),
                "retry; find what replaces the store's file",
            ));
        }
        // A store made before it recorded its file records it now, once
        // (one read at every later open).
        origin::remember_if_missing(&mut conn, opened_file.ino);
        Ok(Self {
            path: given.to_path_buf(),
            file: path.to_path_buf(),
            waker: std::sync::OnceLock::new(),
            shm: files::suffixed(path, "-shm"),
            opened: Instant::now(),
            log_frames,
            checkpointer: std::sync::OnceLock::new(),
            options,
            opened_file,
            conn: Mutex::new(conn),
        })
    }
}

/// The error of a store that must exist and does not (`must_exist`):
/// unavailable (exit 69) — a script must not read it as "nobody holds" —
/// naming what is missing and that nothing was created.
fn missing(store: &str, what: &str) -> BackendError {
    unavailable(
        store,
        format!("{what}; nothing was created, as this command only reads a store"),
        "check the path (--store, LEASEHOLD_STORE); a store is created by the first command that writes to it (acquire, run, ...)",
    )
}

/// The error of a store that cannot be opened where it is.
fn unavailable(store: &str, reason: String, hint: &str) -> BackendError {
    BackendError::new(ErrorKind::Unavailable, store, reason).hint(hint)
}

/// Refuse a store on a network filesystem: SQLite's locking is not
/// reliable there.
fn refuse_network_fs(store: &str, dir: &Path) -> Result<(), BackendError> {
    match host::network_filesystem(dir) {
        Ok(Some(fs)) => Err(unavailable(
            store,
            format!("it is on a network filesystem ({fs}), where SQLite's locking and durability cannot be trusted"),
            "put the store on a local disk, or use a postgres:// or etcd:// store for many machines",
        )
        .remedy(Remedy::AllowNetworkFs)),
        Ok(None) => Ok(()),
        Err(e) => Err(unavailable(
            store,
            format!("cannot inspect directory {}: {e}", dir.display()),
            "check the path",
        )),
    }
}

/// Refuse what is at `path` unless it can be a store file (a link, a
/// directory, a file cut short); create the store if nothing is there.
fn inspect_or_create(store: &str, path: &Path, dir: &Path, options: &SqliteOptions) -> Result<(), BackendError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(unavailable(
            store,
            "the path is a symbolic link, which leasehold never follows at a store path".into(),
            "name the real file",
        )
        .remedy(Remedy::AnotherStore)),
        Ok(meta) if !meta.is_file() => {
            let what = if meta.is_dir() {
                "a directory"
            } else if meta.file_type().is_fifo() {
                "a FIFO"
            } else {
                "not a regular file"
            };
            Err(
                BackendError::new(ErrorKind::Corrupt, store, format!("the path is {what}"))
                    .hint("name a database file")
                    .remedy(Remedy::AnotherStore),
            )
        }
        Ok(meta) if meta.len() < SQLITE_HEADER_LEN => {
            // A new store is created whole (see `create`), so a file this
            // short was cut off — SQLite would take it for an empty
            // database and start the token counters again at 1.
            Err(BackendError::new(
                ErrorKind::Corrupt,
                store,
                format!(
                    "it is {} bytes long, shorter than a SQLite header: truncated (or left by an interrupted first start of leasehold 0.1)",
                    meta.len()
                ),
            )
            .hint("restore it from a backup; only if no token of this store was ever used, remove it to start a new store (tokens restart at 1)"))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A log left without its store (the file deleted) is said as
            // such before anything else, by every command.
            log_file::refuse_orphan(path).map_err(|reason| {
                BackendError::new(ErrorKind::Corrupt, store, reason.to_string())
                    .hint(
                        "put the store file back beside its log; only if the store is meant to go, remove the -wal and -shm files too to start a new store (tokens restart at 1)",
                    )
                    .remedy(Remedy::AnotherStore)
            })?;
            if options.must_exist {
                return Err(missing(store, &format!("there is no store file at {}", path.display())));
            }
            // A warning, not a refusal: a store in memory is fine for
            // tests and for leases that need not outlive the machine's
            // boot — but nothing else says its tokens restart.
            if let Ok(Some(fs)) = host::memory_filesystem(dir) {
                tracing::warn!("creating store {store}: {}", host::memory_filesystem_risk(dir, fs));
            }
            create(path, dir, options).map_err(|e| {
                BackendError::new(io_kind(&e), store, format!("cannot create the database file: {e}"))
                    .hint("check the directory's permissions and free space")
                    .with_source(e)
            })
        }
        Err(e) => Err(
            BackendError::new(io_kind(&e), store, format!("cannot inspect the database file: {e}"))
                .hint("check the path")
                .with_source(e),
        ),
    }
}

/// Refuse a symlink at a file SQLite keeps beside the store.
fn refuse_linked_siblings(store: &str, path: &Path) -> Result<(), BackendError> {
    // SQLite opens these by name beside the store: through a link it
    // would write someone else's file, or roll a planted "hot journal"
    // back into the store.
    for suffix in ["-wal", "-shm", "-journal"] {
        let sibling = files::suffixed(path, suffix);
        if std::fs::symlink_metadata(&sibling).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(unavailable(
                store,
                format!(
                    "{} is a symbolic link, which leasehold never follows beside a store (SQLite would write through it)",
                    sibling.display()
                ),
                "remove the link (SQLite's own files are never links)",
            )
            .remedy(Remedy::AnotherStore));
        }
    }
    Ok(())
}

/// Open the store file and set its connection up ([`set_up`]), retrying
/// while a process starting beside us makes SQLite give up at once.
fn connect(
    store: &str,
    path: &Path,
    dir: &Path,
    options: &SqliteOptions,
) -> Result<(Connection, Arc<AtomicU32>), BackendError> {
    let flags = files::OPEN_FLAGS;
    // SQLite says only "unable to open database file" on a read-only
    // filesystem (it cannot make the WAL's shared-memory file): name it.
    let read_only = || rustix::fs::statvfs(dir).is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
    let open_error = |e: rusqlite::Error| {
        // SQLite says only "unable to open database file" when this
        // process has no descriptor left either (EMFILE): ask for one, and
        // if that fails the same way, say so with the system's error, which
        // a front end words with the limit.
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen)
            && let Some(emfile) = crate::classify::out_of_descriptors()
        {
            return BackendError::new(
                ErrorKind::Unavailable,
                store,
                format!("cannot open it: this process has no file descriptor left ({emfile})"),
            )
            .with_source(emfile);
        }
        if read_only() {
            BackendError::new(ErrorKind::ReadOnly, store, "it is on a read-only filesystem")
                .hint("remount it read-write; nothing was changed")
                .remedy(Remedy::AnotherStore)
                .with_source(e)
        } else {
            map_error(store, e)
        }
    };
    refuse_forbidden_files(store, path, dir)?;
    let log = crate::log_file::ready(path, dir).map_err(|e| log_error(store, &e, read_only()))?;
    let mut conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
    // Two connections that both read a new file and then both want it
    // exclusively (the first switch to write-ahead logging) get
    // SQLITE_BUSY at once, without waiting out the busy timeout:
    // SQLite's deadlock avoidance. Eight processes starting together
    // on a new store hit it. Setting up is idempotent (every step
    // re-checks what it finds), so try again within the busy timeout.
    let begun = Instant::now();
    let outcome = loop {
        match set_up(&mut conn, options) {
            Err(e) if is_busy(&e) && begun.elapsed() < options.busy_timeout => {
                // Staggered by pid, so the racers do not meet again.
                std::thread::sleep(Duration::from_millis(2 + u64::from(std::process::id() % 13)));
            }
            outcome => break outcome,
        }
    };
    match outcome {
        Ok(Ok(frames)) => {
            crate::log_file::still(path, dir, log).map_err(|e| log_error(store, &e, read_only()))?;
            Ok((conn, frames))
        }
        Ok(Err(problem)) => Err(refusal(store, problem)),
        Err(e) => Err(open_error(e)),
    }
}

/// Refuse a store whose files this user may not read and write, naming
/// the file, its owner and mode: SQLite says only "unable to open
/// database file", and the log (made first) was blamed on the directory.
/// Every command needs both (a reader too: SQLite writes `-shm` to read).
fn refuse_forbidden_files(store: &str, path: &Path, dir: &Path) -> Result<(), BackendError> {
    use rustix::fs::{Access, access};
    let forbidden = |file: &Path, how: Access| matches!(access(file, how), Err(e) if e == rustix::io::Errno::ACCESS || e == rustix::io::Errno::PERM);
    let me = format!(
        "uid {}, gid {}",
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw()
    );
    for file in [
        path.to_path_buf(),
        log_file::path_of(path),
        files::suffixed(path, "-shm"),
    ] {
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            // Not there yet: it is made in the directory, checked below.
            continue;
        };
        if forbidden(&file, Access::READ_OK | Access::WRITE_OK) {
            let may = match (forbidden(&file, Access::READ_OK), forbidden(&file, Access::WRITE_OK)) {
                (true, true) => "neither read nor write",
                (true, false) => "not read",
                _ => "not write",
            };
            return Err(BackendError::new(
                ErrorKind::Permission,
                store,
                format!(
                    "permission denied: this user ({me}) may {may} {} (mode {:04o}, owner uid {}, gid {}), and every command needs to read and write it",
                    file.display(),
                    meta.mode() & 0o7777,
                    meta.uid(),
                    meta.gid()
                ),
            )
            .hint(FORBIDDEN_HINT)
            .remedy(Remedy::AnotherStore));
        }
    }
    if !log_file::path_of(path).exists() && forbidden(dir, Access::WRITE_OK | Access::EXEC_OK) {
        return Err(BackendError::new(
            ErrorKind::Permission,
            store,
            format!(
                "permission denied: this user ({me}) may not create files in {}, where the store's write-ahead log (-wal) must be made",
                dir.display()
            ),
        )
        .hint(FORBIDDEN_HINT)
        .remedy(Remedy::AnotherStore));
    }
    Ok(())
}

/// What to do about a store file this user may not use.
const FORBIDDEN_HINT: &str = "give every user of the store read and write access to its file, the -wal and -shm files beside it and their directory (a shared group: chgrp GROUP FILES; chmod g+rw FILES), or run as the store's owner";

/// The error of a store whose log cannot be made ready (`log_file`).
fn log_error(store: &str, e: &std::io::Error, read_only: bool) -> BackendError {
    if read_only {
        return BackendError::new(ErrorKind::ReadOnly, store, "it is on a read-only filesystem")
            .hint("remount it read-write; nothing was changed")
            .remedy(Remedy::AnotherStore);
    }
    BackendError::new(io_kind(e), store, format!("cannot make its write-ahead log ready: {e}"))
        .hint("check the directory's permissions and free space")
}

/// Check the file is a leasehold store and set the connection up:
/// write-ahead logging kept between calls, full sync, stable plans, the
/// schema migrated.
fn set_up(conn: &mut Connection, options: &SqliteOptions) -> rusqlite::Result<Result<Arc<AtomicU32>, schema::Problem>> {
    conn.busy_timeout(options.busy_timeout)?;
    // Reading the schema first makes a non-database fail with
    // NotADatabase before any pragma could write to it.
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
    // Judge the file before changing anything in it: switching the
    // journal mode rewrites the header of someone else's database.
    if let Err(problem) = schema::check(conn)? {
        return Ok(Err(problem));
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(Err(schema::Problem::NoWal(mode)));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    // One fsync per committed command: the log stays between calls and is
    // checkpointed by long-lived processes or past a size (`checkpoint`).
    let frames = crate::checkpoint::keep_the_log(conn)?;
    // The same plan whatever the bound values. Without it, SQLite
    // marks the parameters its planner weighed (most `column = ?`)
    // as worth re-planning for, and clearing bindings — which the
    // statement cache does after every use — then makes the next
    // use prepare the statement again: half of a lease cycle's
    // instructions (bench/callgrind). Our plans do not depend on
    // values: they follow keys, and the partial indexes are
    // matched by literals.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(schema::prepare(conn)?.map(|()| frames))
}

/// The error for a file that is not a store this leasehold can use.
fn refusal(store: &str, problem: schema::Problem) -> BackendError {
    match problem {
        schema::Problem::TooNew(found) => BackendError::schema_too_new(store, found, schema::VERSION),
        schema::Problem::Foreign(reason) => BackendError::new(ErrorKind::Corrupt, store, reason)
            .hint("name a leasehold database (or a new path)")
            .remedy(Remedy::AnotherStore),
        schema::Problem::Damaged(reason) => damaged_schema(store, reason),
        schema::Problem::NoWal(mode) => BackendError::new(
            ErrorKind::Unavailable,
            store,
            format!("SQLite cannot use write-ahead logging there (journal mode stays {mode:?})"),
        )
        .hint("put the store on a local filesystem that supports shared memory"),
    }
}

/// Where the store given as `given` is: its directory resolved (links
/// followed, planted ones refused: SQLite's NOFOLLOW refuses a link
/// anywhere in the path) and created if missing (private, with its
/// parents: [`symlinks::create_dir`]), and the file's path in it. The file
/// itself is never resolved. Errors are (reason, hint).
fn place(given: &Path) -> Result<(PathBuf, PathBuf), (String, &'static str)> {
    let dir_error = |e: symlinks::DirError| (format!("its directory: {e}"), e.hint());
    let (dir, path) = if let Some(name) = given.file_name() {
        let dir = symlinks::create_dir(symlinks::parent_of(given)).map_err(dir_error)?;
        let path = dir.join(name);
        (dir, path)
    } else {
        // "/" or "x/..": a directory, refused as such by the caller.
        let path = symlinks::resolve_dir(given).map_err(dir_error)?;
        let dir = symlinks::create_dir(path.parent().unwrap_or(&path)).map_err(dir_error)?;
        (dir, path)
    };
    Ok((dir, path))
}

/// [`place`] for a store that must exist: its directory resolved, never
/// created.
fn existing_place(given: &Path) -> Result<(PathBuf, PathBuf), symlinks::DirError> {
    if let Some(name) = given.file_name() {
        let dir = symlinks::existing_dir(symlinks::parent_of(given))?;
        let path = dir.join(name);
        Ok((dir, path))
    } else {
        let path = symlinks::existing_dir(given)?;
        Ok((path.parent().unwrap_or(&path).to_path_buf(), path))
    }
}

/// The length of a SQLite database header; a store file is never shorter.
const SQLITE_HEADER_LEN: u64 = 100;

/// Create a new store at `path` whole: build it under a temporary name in
/// the same directory (private, schema in place), then link it into place
/// and fsync the directory. A crash leaves no half-made store at `path`,
/// so a short file there is always damage. If another process created the
/// store first, its store is kept and ours discarded.
fn create(path: &Path, dir: &Path, options: &SqliteOptions) -> std::io::Result<()> {
    let temp = files::temp_beside(dir, path.file_name().unwrap_or_default(), "new");
    let result = (|| {
        let inode = files::create_private(&temp)?.metadata()?.ino();
        let mut conn = Connection::open_with_flags(&temp, files::OPEN_FLAGS).map_err(std::io::Error::other)?;
        conn.busy_timeout(options.busy_timeout).map_err(std::io::Error::other)?;
        // A rollback journal, not the WAL, while it is made: each commit is
        // then in the file itself, so nothing can be left behind in a WAL
        // whose checkpoint failed (a full disk) when the file is linked.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(std::io::Error::other)?;
        // Its journal in memory: the file is not in place yet, so a crash
        // or a failure while it is made leaves nothing anyone opens (it is
        // removed, or never linked), and a journal file beside it would be
        // one more thing a nearly full disk must hold (the store's file
        // record is a second transaction: on a filesystem just large
        // enough for the store and its -shm, its journal did not fit).
        conn.pragma_update(None, "journal_mode", "MEMORY")
            .map_err(std::io::Error::other)?;
        match schema::prepare(&mut conn).map_err(std::io::Error::other)? {
            Ok(()) => {}
            Err(problem) => return Err(std::io::Error::other(format!("{problem:?}"))),
        }
        // The file it is: the temporary file's inode is the store's once
        // linked into place (`origin.rs`).
        let tx = conn.transaction().map_err(std::io::Error::other)?;
        origin::record(&tx, &origin::Recorded { inode, backup: None }).map_err(|e| match e {
            crate::lease::Error::Sqlite(e) => std::io::Error::other(e),
            crate::lease::Error::BadRow(reason) | crate::lease::Error::Counter(reason) => std::io::Error::other(reason),
        })?;
        tx.commit().map_err(std::io::Error::other)?;
        conn.close().map_err(|(_, e)| std::io::Error::other(e))?;
        std::fs::File::open(&temp)?.sync_all()?;
        match std::fs::hard_link(&temp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        files::sync_dir(dir)
    })();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(files::suffixed(&temp, suffix));
    }
    result
}
