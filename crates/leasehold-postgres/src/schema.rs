//! Versioned schema in the table `leasehold_schema` of the store's
//! PostgreSQL schema, migrated in one transaction under a transaction-scoped
//! advisory lock, so two first starts do not race (the second waits, then
//! finds the work done). A schema migrated by a newer leasehold is refused,
//! and a schema holding someone else's tables of the same names is refused
//! rather than adopted (`CREATE TABLE` without `IF NOT EXISTS`).
//!
//! A store missing a table or index of its version (dropped by hand, or
//! lost) is refused as damaged at every open, in one catalog query, and
//! never recreated: a new `lease_name` would restart every token counter.

use leasehold_backend::migration::{self, Migration};
use postgres::Client;

use crate::url::quote_ident;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[Migration] = &[
    // 1: leases.
    Migration {
        objects: &[
            "lease_name",
            "lease_grant",
            "lease_grant_expires",
            "lease_waiter",
            "lease_waiter_name",
            "lease_history",
            "lease_history_name",
        ],
        sql: "
    -- The token counter of every name ever granted. Never deleted: tokens
    -- must grow across release, expiry and takeover. Incremented in the
    -- granting transaction (not a sequence: sequences are not
    -- transactional and can go backwards after a crash or failover).
    CREATE TABLE lease_name (
        name text PRIMARY KEY,
        last_token bigint NOT NULL
    );

    CREATE TABLE lease_grant (
        name text NOT NULL,
        token bigint NOT NULL,
        owner text NOT NULL,
        owner_explicit boolean NOT NULL,
        exclusive boolean NOT NULL,
        shared_limit bigint,
        holder jsonb NOT NULL,
        acquired_at timestamptz NOT NULL,
        ttl_ms bigint NOT NULL,
        -- On the server's clock.
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (name, token)
    );
    CREATE INDEX lease_grant_expires ON lease_grant (expires_at);

    -- FIFO of waiters per name; ids are taken under the name's lock, so
    -- they grow in queue order.
    CREATE TABLE lease_waiter (
        id bigserial PRIMARY KEY,
        name text NOT NULL,
        exclusive boolean NOT NULL,
        shared_limit bigint,
        holder jsonb NOT NULL,
        expires_at timestamptz NOT NULL
    );
    CREATE INDEX lease_waiter_name ON lease_waiter (name, id);

    CREATE TABLE lease_history (
        id bigserial PRIMARY KEY,
        name text NOT NULL,
        at timestamptz NOT NULL,
        event text NOT NULL,
        token bigint,
        owner text,
        detail text NOT NULL
    );
    CREATE INDEX lease_history_name ON lease_history (name, id);
    ",
    },
    // 2: the task queue.
    Migration {
        objects: &["task", "task_claim", "task_running", "task_state"],
        sql: "
    CREATE TABLE task (
        seq bigserial PRIMARY KEY,              -- insertion order
        queue text NOT NULL,
        id text NOT NULL,
        payload jsonb NOT NULL,
        priority bigint NOT NULL,
        state text NOT NULL CHECK (state IN ('pending', 'running', 'done', 'dead')),
        attempts integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL,
        token bigint NOT NULL DEFAULT 0,       -- only grows, even across a retry
        owner text,
        available_at timestamptz NOT NULL,
        lease_until timestamptz,               -- the claim's lease, on the server's clock
        ttl_ms bigint,                         -- the claim's TTL (the default for heartbeats)
        expirations integer NOT NULL DEFAULT 0,
        failures integer NOT NULL DEFAULT 0,
        last_error text,
        result jsonb,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        UNIQUE (queue, id)
    );
    -- Serves the claim query in claim order over pending tasks only, so
    -- neither finished tasks nor the queue's length slow a claim down.
    CREATE INDEX task_claim ON task (queue, priority DESC, available_at, seq) WHERE state = 'pending';
    -- Finds expired claims among the running tasks (one per worker).
    CREATE INDEX task_running ON task (queue, lease_until) WHERE state = 'running';
    -- Listing by state and purging old finished tasks.
    CREATE INDEX task_state ON task (queue, state, updated_at);
    ",
    },
    // 3: the token floor.
    Migration {
        objects: &["lease_token_floor"],
        sql: "
    -- `leasehold migrate --bump-tokens`: no token is issued at or below
    -- the floor, for any name (one row, or none before the first bump).
    CREATE TABLE lease_token_floor (
        id int PRIMARY KEY CHECK (id = 1),
        floor bigint NOT NULL
    );
    ",
    },
    // 4: records (schedules and their slots).
    Migration {
        objects: &["record", "record_version"],
        sql: "
    -- Small documents written by compare-and-swap (leasehold_backend::record).
    -- COLLATE \"C\": keys are ordered and bounded bytewise, as the
    -- other stores order them, whatever the database's collation.
    CREATE TABLE record (
        key text COLLATE \"C\" PRIMARY KEY,
        version bigint NOT NULL,
        body text NOT NULL
    );
    -- The last version given to any record: versions come from this one
    -- counter so that a key deleted and written again never gets a
    -- version it had, and every write locks its row first, so writes of
    -- records take turns (see record.rs). Its one row exists from the
    -- start, so there is always a row to lock.
    CREATE TABLE record_version (
        id int PRIMARY KEY CHECK (id = 1),
        last bigint NOT NULL
    );
    INSERT INTO record_version (id, last) VALUES (1, 0);
    ",
    },
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

#[derive(Debug)]
pub(crate) enum Error {
    Pg(postgres::Error),
    TooNew(i64),
    Foreign(String),
    /// What a store of its version lacks.
    Damaged(String),
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Self {
        Error::Pg(e)
    }
}

/// The version of the store in `schema`, `None` when it has none yet.
fn version(client: &mut Client, schema: &str) -> Result<Option<i64>, postgres::Error> {
    let table = format!("{}.leasehold_schema", quote_ident(schema));
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = client.query_opt(&format!("SELECT version FROM {table}"), &[])?;
    Ok(row.map(|r| i64::from(r.get::<_, i32>(0))))
}

/// Bring the store in `schema` up to [`VERSION`]; returns the version it
/// had before (0 for a new store).
///
/// The common case — already current — costs two catalog lookups and one
/// read, and takes no lock.
pub(crate) fn prepare(client: &mut Client, schema: &str) -> Result<i64, Error> {
    match version(client, schema)? {
        Some(v) if v > VERSION => return Err(Error::TooNew(v)),
        Some(v) => {
            if let Some(missing) = missing_objects(client, schema, v)? {
                return Err(Error::Damaged(missing));
            }
            if v == VERSION {
                return Ok(v);
            }
        }
        None => {}
    }
    let mut tx = client.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&format!("leasehold/migrate/{schema}")],
    )?;
    // Only create the schema when it is missing: CREATE SCHEMA IF NOT
    // EXISTS needs CREATE on the database even when the schema exists.
    let has_schema: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )?
        .get(0);
    if !has_schema {
        tx.batch_execute(&format!("CREATE SCHEMA {}", quote_ident(schema)))?;
    }
    tx.batch_execute(&format!("SET LOCAL search_path = {}, pg_catalog", quote_ident(schema)))?;
    // Re-read under the lock: another process may have migrated meanwhile.
    let table = format!("{}.leasehold_schema", quote_ident(schema));
    let has_table: bool = tx.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])?.get(0);
    let from = if has_table {
        let v = tx
            .query_opt("SELECT version FROM leasehold_schema FOR UPDATE", &[])?
            .map_or(0, |r| i64::from(r.get::<_, i32>(0)));
        if v > VERSION {
            return Err(Error::TooNew(v));
        }
        v
    } else {
        let foreign: Vec<String> = tx
            .query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 \
                 AND table_name = ANY($2) ORDER BY 1",
                &[&schema, &objects(VERSION)],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !foreign.is_empty() {
            return Err(Error::Foreign(format!(
                "schema {schema} already has tables named {} that leasehold did not create",
                foreign.join(", ")
            )));
        }
        tx.batch_execute(
            "CREATE TABLE leasehold_schema (version integer NOT NULL); INSERT INTO leasehold_schema VALUES (0);",
        )?;
        0
    };
    migration::run(MIGRATIONS, from, VERSION, |sql, _| tx.batch_execute(sql))?;
    tx.execute("UPDATE leasehold_schema SET version = $1", &[&(VERSION as i32)])?;
    tx.commit()?;
    Ok(from)
}

/// The tables and indexes a store of `version` has (the test
/// `the_schema_objects_checked_at_open_are_those_created` compares them
/// with what the migrations create).
#[must_use]
pub fn objects(version: i64) -> Vec<&'static str> {
    migration::objects(MIGRATIONS, version)
}

/// What the store in `schema` (of `version`) lacks of its tables and
/// indexes (see [`migration::missing`]), in one catalog query.
fn missing_objects(client: &mut Client, schema: &str, version: i64) -> Result<Option<String>, postgres::Error> {
    let absent: Vec<String> = client
        .query(
            "SELECT o FROM unnest($1::text[]) AS o WHERE to_regclass(format('%I.%I', $2::text, o)) IS NULL",
            &[&objects(version), &schema],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(migration::missing(MIGRATIONS, version, |name| {
        !absent.iter().any(|a| a == name)
    }))
}
