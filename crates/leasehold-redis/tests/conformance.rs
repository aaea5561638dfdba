//! The backend conformance suite (`leasehold-backend-tests`) on a real
//! `redis-server` started for this test binary; each case gets its own
//! key prefix, so each starts from an empty store.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use leasehold_backend::{Backend, ClockSkew};
use leasehold_redis::{RedisBackend, RedisUrl};
use leasehold_testkit::redis::RedisServer;

/// One server for the whole binary (append-only file synced at every
/// write, as the store asks), stopped by pid once the binary has exited.
fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let server = RedisServer::start();
        let pid = server.pid().expect("running");
        leasehold_testkit::process::after_exit(&format!("kill -KILL {pid} 2>/dev/null"));
        server
    })
}

fn open(prefix: &str) -> RedisBackend {
    let url = RedisUrl::parse(&format!("{}?prefix={prefix}", server().url())).expect("a URL");
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
        static N: AtomicU32 = AtomicU32::new(0);
        let prefix = format!(
            "conformance-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
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
