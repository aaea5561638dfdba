//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! `redis-server` started for this test binary; each case gets its own
//! key prefix, so each starts from an empty store.

use leasehold_backend_tests::{PrefixedStore, ServerHarness};
use leasehold_redis::{RedisBackend, RedisUrl};

struct Redis;

impl PrefixedStore for Redis {
    type Backend = RedisBackend;

    fn unique_prefix() -> String {
        leasehold_testkit::redis::unique_prefix("conformance", "case")
    }

    fn open(prefix: &str) -> RedisBackend {
        let url = format!("{}?prefix={prefix}", leasehold_testkit::redis::shared().url());
        RedisBackend::open(&RedisUrl::parse(&url).expect("a URL")).expect("open the store")
    }
}

fn main() {
    leasehold_backend_tests::main::<ServerHarness<Redis>>()
}
