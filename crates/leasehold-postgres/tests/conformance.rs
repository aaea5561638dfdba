//! The backend conformance suite (`leasehold-backend-tests`), unchanged, on
//! a throwaway PostgreSQL: every case gets a schema of its own.

use leasehold_backend::{Backend, ClockSkew};
use leasehold_postgres::{PostgresBackend, PostgresOptions};
use leasehold_testkit::postgres::Server;

#[derive(Debug)]
struct PostgresHarness {
    // `None` only inside `reopen`, between closing and opening.
    backend: Option<PostgresBackend>,
    skew: ClockSkew,
    url: String,
}

impl PostgresHarness {
    fn open(url: &str, skew: &ClockSkew) -> PostgresBackend {
        let options = PostgresOptions {
            skew: skew.clone(),
            ..PostgresOptions::default()
        };
        PostgresBackend::open(url, options).unwrap_or_else(|e| panic!("open the test store: {e}"))
    }
}

impl leasehold_backend_tests::Harness for PostgresHarness {
    fn new() -> Self {
        let url = Server::shared().url(&Server::fresh_schema());
        let skew = ClockSkew::default();
        let backend = Some(Self::open(&url, &skew));
        Self { backend, skew, url }
    }

    fn backend(&self) -> &dyn Backend {
        self.backend.as_ref().expect("the store is open")
    }

    fn skew(&self) -> &ClockSkew {
        &self.skew
    }

    fn reopen(&mut self) {
        drop(self.backend.take());
        self.backend = Some(Self::open(&self.url, &self.skew));
    }
}

fn main() {
    leasehold_backend_tests::main::<PostgresHarness>()
}
