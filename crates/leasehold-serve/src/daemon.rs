//! A daemon's own metrics (`work` and `cron --metrics-listen ADDR`): this
//! process's counters (`leasehold::telemetry`) at `/metrics`, on the
//! status page's HTTP server — its limits on slow clients, its check of
//! the `Host` a request names — and in its exposition code. Loopback
//! only: a daemon has no token to ask for.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use leasehold::telemetry::COUNTERS;

use crate::http::{self, Request, Response};
use crate::{ServeError, all_loopback, hosts, metrics, resolve, secure};

/// Listen on `listen` (loopback only) and answer `/metrics` on a thread
/// of its own for as long as the process lives. Returns the address
/// listened on (`listen` may name port 0).
///
/// # Errors
/// [`ServeError::MetricsNotLoopback`] for an address not all loopback;
/// those of a `listen` that does not resolve or cannot be bound.
pub fn serve_metrics(listen: &str) -> Result<SocketAddr, ServeError> {
    let addresses = resolve(listen)?;
    if !all_loopback(&addresses) {
        return Err(ServeError::MetricsNotLoopback {
            listen: listen.to_owned(),
            addresses,
        });
    }
    let listener = TcpListener::bind(&addresses[..]).map_err(|error| ServeError::Listen {
        listen: listen.to_owned(),
        error,
    })?;
    let address = listener.local_addr().map_err(ServeError::Serving)?;
    let hosts = hosts::Hosts::new(listen, &[]);
    let handler: http::Handler = Arc::new(move |r: Request| answer(&hosts, &r));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            if let Err(e) = http::serve(&listener, &handler) {
                tracing::warn!(target: "leasehold", event = "metrics.failed", "the metrics listener failed: {e}");
            }
        })
        .map_err(ServeError::Serving)?;
    Ok(address)
}

fn answer(hosts: &hosts::Hosts, r: &Request) -> Response {
    if r.header("host").is_some_and(|h| !hosts.admits(h)) {
        return secure(Response::text(
            421,
            "this daemon's metrics answer to its own address only",
        ));
    }
    match (r.method.as_str(), r.segments().as_slice()) {
        ("GET" | "HEAD", [metrics]) if metrics == "metrics" => {
            Response::new(200, metrics::CONTENT_TYPE, metrics::render_process(&COUNTERS))
        }
        _ => secure(Response::text(404, "only /metrics is here")),
    }
}
