//! The connection pool: a few lazily opened connections ("slots"), each
//! with its session set up once and its own prepared-statement cache.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Instant;

use leasehold_backend::BackendError;
use postgres::{Client, Statement};

use crate::PostgresBackend;
#[cfg(feature = "test-clock")]
use crate::clock::micros;
use crate::url::quote_ident;

/// Prepared statements by SQL text. The texts are long (a claim's is 2 KiB)
/// and looked up at every statement: hashing them with the standard
/// library's hasher was a sixth of a claim's client-side instructions, so
/// they are hashed a word at a time (the mixing of rustc's own hasher); a
/// collision only costs a comparison.
pub(crate) type Statements = HashMap<String, Statement, BuildHasherDefault<WordHasher>>;

#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut last = [0u8; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.add(u64::from_le_bytes(last));
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// One pooled connection and what belongs to it.
#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) client: Option<Client>,
    /// Prepared statements of this connection, by SQL text.
    pub(crate) cache: Statements,
    /// The skew last sent as `leasehold.skew_us`.
    #[cfg(feature = "test-clock")]
    skew_us: Option<i64>,
    /// When the connection last ran an operation.
    pub(crate) used: Option<Instant>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("connected", &self.client.is_some())
            .field("statements", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    pub(crate) fn slot_at(&self, i: usize) -> MutexGuard<'_, Slot> {
        // A panic mid-transaction drops the Transaction, which rolls back.
        self.slots[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The first free connection slot, or (all busy) wait for one. The
    /// first, not the next: a process making one call at a time keeps one
    /// connection. (Taken in turn, each call took the next slot and opened
    /// it: an idle waiter held six connections, and 200 waiters ran a
    /// server with 1,500 slots out of them.)
    pub(crate) fn slot(&self) -> MutexGuard<'_, Slot> {
        for slot in &self.slots {
            match slot.try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        self.slot_at(self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len())
    }

    /// The slot's connection, connecting (and setting the session up) if
    /// needed (with the current test skew sent, under `test-clock`).
    pub(crate) fn connect<'s>(&self, slot: &'s mut Slot) -> std::result::Result<&'s mut Client, BackendError> {
        if slot.client.as_ref().is_some_and(Client::is_closed) {
            slot.client = None;
        }
        if slot.client.is_none() {
            slot.cache.clear();
            #[cfg(feature = "test-clock")]
            {
                slot.skew_us = None;
            }
            let mut client = self.tls.connect(&self.config).map_err(|e| self.map_error(e))?;
            // synchronous_commit on: a token is durable before it is
            // returned, whatever the database's or role's default.
            let setup = format!(
                "SET synchronous_commit = on; SET lock_timeout = {}; \
                 SET idle_in_transaction_session_timeout = '60s'; SET search_path = {}, pg_catalog",
                self.options.lock_timeout.as_millis().max(1),
                quote_ident(&self.schema)
            );
            client.batch_execute(&setup).map_err(|e| self.map_error(e))?;
            slot.client = Some(client);
        }
        #[cfg(feature = "test-clock")]
        {
            let skew = micros(self.options.skew.get());
            let client = slot.client.as_mut().expect("connected above");
            if slot.skew_us != Some(skew) {
                client
                    .execute(
                        "SELECT set_config('leasehold.skew_us', $1, false)",
                        &[&skew.to_string()],
                    )
                    .map_err(|e| self.map_error(e))?;
                slot.skew_us = Some(skew);
            }
        }
        Ok(slot.client.as_mut().expect("connected above"))
    }
}
