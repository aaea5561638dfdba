//! Versioned schema in `PRAGMA user_version`, migrated in one
//! `BEGIN IMMEDIATE` transaction (after mozilla/application-services'
//! `open_database.rs`). A store written by a newer leasehold is refused, and
//! a SQLite file that is not a leasehold store is refused — never adopted.

use rusqlite::{Connection, TransactionBehavior};

/// `PRAGMA application_id` of a leasehold store ("LSHD").
pub const APPLICATION_ID: i64 = 0x4c53_4844;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: leases.
    "
    -- The token counter of every name ever granted. Never deleted: tokens
    -- must grow across release, expiry and takeover.
    CREATE TABLE lease_name (
        name TEXT PRIMARY KEY NOT NULL,
        last_token INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE lease_grant (
        name TEXT NOT NULL,
        token INTEGER NOT NULL,
        owner TEXT NOT NULL,
        owner_explicit INTEGER NOT NULL,
        exclusive INTEGER NOT NULL,
        shared_limit INTEGER,
        holder TEXT NOT NULL,
        acquired_ms INTEGER NOT NULL,
        ttl_ms INTEGER NOT NULL,
        -- Expiry on the boot clock of the boot that made the grant.
        boot_id TEXT NOT NULL,
        expires_ns INTEGER NOT NULL,
        PRIMARY KEY (name, token)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE lease_waiter (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        exclusive INTEGER NOT NULL,
        shared_limit INTEGER,
        holder TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        expires_ns INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX lease_waiter_name ON lease_waiter (name, id);

    -- One b-tree keyed by (name, per-name sequence): each event touches
    -- as few pages as possible, since every page is part of the fsync.
    CREATE TABLE lease_history (
        name TEXT NOT NULL,
        id INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        event TEXT NOT NULL,
        token INTEGER,
        owner TEXT,
        detail TEXT NOT NULL,
        PRIMARY KEY (name, id)
    ) STRICT, WITHOUT ROWID;
    ",
    // 2: the task queue.
    "
    CREATE TABLE task (
        seq INTEGER PRIMARY KEY,               -- insertion order
        queue TEXT NOT NULL,
        id TEXT NOT NULL,
        payload TEXT NOT NULL,
        priority INTEGER NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        token INTEGER NOT NULL DEFAULT 0,      -- only grows, even across a retry
        owner TEXT,
        available_ms INTEGER NOT NULL,         -- wall clock: scheduling only
        boot_id TEXT,                          -- the claim's lease, on the boot clock
        lease_until_ns INTEGER,
        ttl_ms INTEGER,                        -- the claim's TTL (the default for heartbeats)
        expirations INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        result TEXT,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        UNIQUE (queue, id)
    ) STRICT;
    -- Serves the claim query in claim order over pending tasks only, so
    -- neither finished tasks nor the queue's length slow a claim down.
    CREATE INDEX task_claim ON task (queue, priority DESC, available_ms, seq) WHERE state = 'pending';
    -- Finds expired claims among the running tasks (one per worker).
    CREATE INDEX task_running ON task (queue) WHERE state = 'running';
    -- Listing by state and purging old finished tasks.
    CREATE INDEX task_state ON task (queue, state, updated_ms);
    ",
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// What `prepare` found, for the caller to turn into an error.
#[derive(Debug)]
pub enum Problem {
    TooNew(i64),
    Foreign(String),
    /// The journal could not be switched to WAL (the mode it stayed in).
    NoWal(String),
}

/// Bring the schema up to [`VERSION`].
///
/// The common case — already current — costs one read of the header and
/// no write transaction.
pub fn prepare(conn: &mut Connection) -> rusqlite::Result<Result<(), Problem>> {
    if let Err(problem) = check(conn)? {
        return Ok(Err(problem));
    }
    if user_version(conn)? == VERSION {
        return Ok(Ok(()));
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Re-check under the write lock: another process may have migrated.
    if let Err(problem) = check(&tx)? {
        return Ok(Err(problem));
    }
    let from = user_version(&tx)?;
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version as i64 + 1)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.commit()?;
    Ok(Ok(()))
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

pub fn check(conn: &Connection) -> rusqlite::Result<Result<(), Problem>> {
    let version = user_version(conn)?;
    let app: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    if version > VERSION && app == APPLICATION_ID {
        return Ok(Err(Problem::TooNew(version)));
    }
    if version == 0 {
        // A new store has no tables yet; a SQLite file of something else has.
        let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        if tables > 0 {
            return Ok(Err(Problem::Foreign(format!(
                "it is a SQLite database with {tables} tables but no leasehold schema"
            ))));
        }
    } else if app != APPLICATION_ID {
        return Ok(Err(Problem::Foreign(format!(
            "it is a SQLite database of another application (application_id {app:#x})"
        ))));
    }
    Ok(Ok(()))
}
