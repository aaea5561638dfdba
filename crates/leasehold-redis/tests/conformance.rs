//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! `redis-server` started for this test binary; each case gets its own
//! key prefix, so each starts from an empty store.

use leasehold_backend::{Backend, ClockSkew};
use leasehold_redis::{RedisBackend, RedisUrl};

fn open(prefix: &str) -> RedisBackend {
    let url = RedisUrl::parse(&format!("{}?prefix={prefix}", leasehold_testkit::redis::shared().url())).expect("a URL");
    RedisBackend::open(&url).expect("open the store")
}

#[derive(Debug)]
struct RedisHarness {
    backend: RedisBackend,
    prefix: String,
    // Never moved: Redis's clock is the server's (`clock_skew: false`).
    skew: ClockSkew,
}

impl leasehold_backend_tests::Harness for RedisHarness {
    fn new() -> Self {
        let prefix = leasehold_testkit::redis::unique_prefix("conformance", "case");
        Self {
            backend: open(&prefix),
            prefix,
            skew: ClockSkew::default(),
        }
    }

    fn backend(&self) -> &dyn Backend {
        &self.backend
    }

    fn skew(&self) -> &ClockSkew {
        &self.skew
    }

    /// A new client of the same server and prefix.
    fn reopen(&mut self) {
        self.backend = open(&self.prefix);
    }
}

fn main() {
    leasehold_backend_tests::main::<RedisHarness>()
}
