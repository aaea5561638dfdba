//! The backend conformance suite (`leasehold-backend-tests`) on a SQLite
//! store in a temporary directory.

use leasehold_backend::{Backend, ClockSkew};
use leasehold_sqlite::{SqliteBackend, SqliteOptions};
use tempfile::TempDir;

#[derive(Debug)]
struct SqliteHarness {
    // `None` only inside `reopen`, between closing and opening.
    backend: Option<SqliteBackend>,
    skew: ClockSkew,
    // Dropped last: removes the store's directory after the backend closed it.
    dir: TempDir,
}

impl SqliteHarness {
    fn open(dir: &TempDir, skew: &ClockSkew) -> SqliteBackend {
        let options = SqliteOptions {
            skew: skew.clone(),
            ..SqliteOptions::default()
        };
        SqliteBackend::open(&dir.path().join("leasehold.db"), options).expect("open the test store")
    }
}

impl leasehold_backend_tests::Harness for SqliteHarness {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let skew = ClockSkew::default();
        let backend = Some(Self::open(&dir, &skew));
        Self { backend, skew, dir }
    }

    fn backend(&self) -> &dyn Backend {
        self.backend.as_ref().expect("the store is open")
    }

    fn skew(&self) -> &ClockSkew {
        &self.skew
    }

    fn reopen(&mut self) {
        // Close first, so that the reopened store starts from what the last
        // connection left on disk (WAL checkpointed), as after a restart.
        drop(self.backend.take());
        self.backend = Some(Self::open(&self.dir, &self.skew));
    }
}

fn main() {
    leasehold_backend_tests::main::<SqliteHarness>()
}
