//! Which names a request may reach the page by (its `Host` header).
//!
//! A page on another site cannot read this one directly (the browser's
//! same-origin rule), but it can through **DNS rebinding**: its own name
//! comes to resolve to 127.0.0.1, and the browser then sends the page's
//! requests here, with the page's name in `Host`. Without a token every
//! holder's command line and every task's payload would be readable that
//! way. So a request is answered only when its `Host` names this server:
//! an IP address (no name to rebind), `localhost`, the host `--listen`
//! gave, or a name given with `--allow-host`.

use std::net::IpAddr;

/// The names a request's `Host` may give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    names: Vec<String>,
}

impl Hosts {
    /// `localhost`, the host of `listen` (`HOST:PORT`) when it is a name,
    /// and `allowed`.
    #[must_use]
    pub fn new(listen: &str, allowed: &[String]) -> Self {
        let mut names = vec!["localhost".to_owned()];
        let listened = host_of(listen);
        if !listened.is_empty() {
            names.push(listened);
        }
        names.extend(allowed.iter().map(|n| normal(n)));
        Self { names }
    }

    /// Whether a request whose `Host` header is `header` may be answered.
    #[must_use]
    pub fn admits(&self, header: &str) -> bool {
        let host = host_of(header);
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
            || self.names.contains(&host)
    }

    /// The names, for a refusal that says which ones are answered.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// The host of `HOST[:PORT]`, lower-cased, without a final dot; an IPv6
/// address keeps its brackets.
fn host_of(text: &str) -> String {
    let text = text.trim();
    let host = if text.starts_with('[') {
        text.split_once(']').map_or(text, |(h, _)| h).to_owned() + "]"
    } else {
        match text.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h.to_owned(),
            _ => text.to_owned(),
        }
    };
    normal(&host)
}

fn normal(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Why `name` cannot be given to `--allow-host`, if it cannot: a host
/// name, without a port, a scheme or a path.
#[must_use]
pub fn refusal(name: &str) -> Option<String> {
    let bad = name.trim().is_empty()
        || name.len() > 253
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    bad.then(|| {
        format!(
            "--allow-host {} is not a host name: give a name such as status.example.com, without a port, a scheme or a path",
            leasehold::quoted(name)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_rebound_to_loopback_is_refused_and_this_servers_own_are_answered() {
        let hosts = Hosts::new("127.0.0.1:7878", &["Status.Internal".to_owned()]);
        for ok in [
            "127.0.0.1:7878",
            "127.0.0.1",
            "[::1]:7878",
            "localhost:7878",
            "LOCALHOST.",
            "status.internal:80",
            "10.0.0.5:7878",
        ] {
            assert!(hosts.admits(ok), "{ok}");
        }
        for refused in [
            "evil.example.com",
            "evil.example.com:7878",
            "localhost.evil.example.com",
            "",
            "[evil]:1",
        ] {
            assert!(!hosts.admits(refused), "{refused}");
        }
        let by_name = Hosts::new("box.lan:7878", &[]);
        assert!(by_name.admits("box.lan:7878"));
        assert!(refusal("status.example.com").is_none());
        for bad in ["", "http://x", "x:80", "a/b", "a b"] {
            assert!(refusal(bad).is_some(), "{bad:?}");
        }
    }
}
