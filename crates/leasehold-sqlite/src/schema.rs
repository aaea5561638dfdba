//! Versioned schema in `PRAGMA user_version`, migrated in one
//! `BEGIN IMMEDIATE` transaction (after mozilla/application-services'
//! `open_database.rs`). A store written by a newer leasehold is refused, and
//! a SQLite file that is not a leasehold store is refused — never adopted.
//!
//! A store whose tables or indexes do not match its version (one dropped
//! by hand, or lost to damage) is refused as damaged, never repaired:
//! recreating `lease_name` would restart every token counter. Every open
//! compares the names in `sqlite_schema` with [`Migration::objects`] (one
//! cheap query; each migration's list is kept true by a unit test); `doctor` compares every column with a fresh schema built
//! in memory ([`differences`]).

use std::collections::BTreeSet;

use leasehold_backend::migration::{self, Migration};
use rusqlite::{Connection, TransactionBehavior};

/// `PRAGMA application_id` of a leasehold store ("LSHD").
pub const APPLICATION_ID: i64 = 0x4c53_4844;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[Migration] = &[
    // 1: leases.
    Migration {
        objects: &[
            "lease_name",
            "lease_grant",
            "lease_waiter",
            "lease_waiter_name",
            "lease_history",
        ],
        sql: "
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
    },
    // 2: the task queue.
    Migration {
        objects: &["task", "task_claim", "task_running", "task_state"],
        sql: "
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
    },
    // 3: the token floor.
    Migration {
        objects: &["lease_token_floor"],
        sql: "
    -- `leasehold migrate --bump-tokens`: no token is issued at or below
    -- the floor, for any name (one row, or none before the first bump).
    CREATE TABLE lease_token_floor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        floor INTEGER NOT NULL
    ) STRICT;
    ",
    },
    // 4: records (schedules and their slots).
    Migration {
        objects: &["record", "record_version"],
        sql: "
    -- Small documents written by compare-and-swap (leasehold_backend::record).
    CREATE TABLE record (
        key TEXT PRIMARY KEY NOT NULL,
        version INTEGER NOT NULL,
        body TEXT NOT NULL
    ) STRICT, WITHOUT ROWID;
    -- The last version given to any record: versions come from this one
    -- counter so that a key deleted and written again never gets a
    -- version it had (one row, or none before the first write).
    CREATE TABLE record_version (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        last INTEGER NOT NULL
    ) STRICT;
    ",
    },
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// What `check` or `prepare` found, for the caller to turn into an error.
#[derive(Debug)]
pub enum Problem {
    TooNew(i64),
    Foreign(String),
    /// A leasehold store whose schema does not match its version: what is
    /// missing.
    Damaged(String),
    /// The journal could not be switched to WAL (the mode it stayed in).
    NoWal(String),
}

/// Bring the schema up to [`VERSION`], for a connection that [`check`]
/// passed (or a new, empty file).
///
/// The common case — already current — costs one read of the header and
/// no write transaction.
pub fn prepare(conn: &mut Connection) -> rusqlite::Result<Result<(), Problem>> {
    if user_version(conn)? == VERSION {
        return Ok(Ok(()));
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Re-check under the write lock: another process may have migrated.
    if let Err(problem) = check(&tx)? {
        return Ok(Err(problem));
    }
    migration::run(MIGRATIONS, user_version(&tx)?, VERSION, |sql, version| {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)
    })?;
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
    } else if let Some(missing) = missing_objects(conn, version)? {
        return Ok(Err(Problem::Damaged(missing)));
    }
    Ok(Ok(()))
}

/// What a store of `version` lacks of the tables and indexes it must have
/// (see [`migration::missing`]).
fn missing_objects(conn: &Connection, version: i64) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index')")?;
    let present: BTreeSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(migration::missing(MIGRATIONS, version, |name| present.contains(name)))
}

/// Every way the schema of `conn` differs from a fresh one of its
/// version, column by column (for `doctor`: it costs building that fresh
/// schema in memory). Empty when they match.
pub fn differences(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let version = user_version(conn)?;
    let mut fresh = Connection::open_in_memory()?;
    {
        let tx = fresh.transaction()?;
        migration::run(MIGRATIONS, 0, version, |sql, _| tx.execute_batch(sql))?;
        tx.commit()?;
    }
    let objects = |c: &Connection| -> rusqlite::Result<Vec<(String, String, Option<String>)>> {
        c.prepare(
            "SELECT type, name, sql FROM sqlite_schema WHERE type IN ('table', 'index') \
             AND name NOT LIKE 'sqlite_%' ORDER BY type DESC, name",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect()
    };
    let columns = |c: &Connection, table: &str| -> rusqlite::Result<Vec<(String, String, bool, i64)>> {
        c.prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid")?
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect()
    };
    let found = objects(conn)?;
    let mut out = Vec::new();
    for (kind, name, sql) in objects(&fresh)? {
        let Some((_, _, found_sql)) = found.iter().find(|(k, n, _)| *k == kind && *n == name) else {
            out.push(format!("{kind} {name} is missing"));
            continue;
        };
        if kind == "index" {
            if *found_sql != sql {
                out.push(format!("index {name} is not the one leasehold creates"));
            }
            continue;
        }
        let (want, have) = (columns(&fresh, &name)?, columns(conn, &name)?);
        for column in &want {
            match have.iter().find(|c| c.0 == column.0) {
                None => out.push(format!("column {name}.{} is missing", column.0)),
                Some(c) if c != column => out.push(format!(
                    "column {name}.{} differs (type, NOT NULL or key): {} {}{}",
                    column.0,
                    c.1,
                    if c.2 { "NOT NULL" } else { "NULL" },
                    if c.3 > 0 { " PRIMARY KEY" } else { "" }
                )),
                Some(_) => {}
            }
        }
        for column in have.iter().filter(|c| !want.iter().any(|w| w.0 == c.0)) {
            out.push(format!("column {name}.{} was added by something else", column.0));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_migration_lists_the_objects_it_creates() {
        let conn = Connection::open_in_memory().unwrap();
        for (version, migration) in MIGRATIONS.iter().enumerate() {
            let before: BTreeSet<String> = names(&conn);
            conn.execute_batch(migration.sql).unwrap();
            let created: BTreeSet<String> = names(&conn).difference(&before).cloned().collect();
            let listed: BTreeSet<String> = migration.objects.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(created, listed, "migration {}", version + 1);
        }
    }

    fn names(conn: &Connection) -> BTreeSet<String> {
        conn.prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn a_fresh_store_has_no_differences_and_a_dropped_column_is_found() {
        let mut conn = Connection::open_in_memory().unwrap();
        prepare(&mut conn).unwrap().unwrap();
        assert!(check(&conn).unwrap().is_ok());
        assert_eq!(differences(&conn).unwrap(), Vec::<String>::new());
        conn.execute_batch("ALTER TABLE lease_history DROP COLUMN detail; DROP INDEX task_state")
            .unwrap();
        assert_eq!(
            differences(&conn).unwrap(),
            ["column lease_history.detail is missing", "index task_state is missing"]
        );
        assert!(
            matches!(check(&conn).unwrap(), Err(Problem::Damaged(m)) if m.ends_with("missing task_state")),
            "a missing index is found at open; a missing column only by `differences`"
        );
    }
}
