//! A second test host on this machine: a network namespace joined to the
//! host by a veth pair, with private addresses only (10.231.X.1 on the
//! host's end, 10.231.X.2 inside, a /30 between them and no route out), so
//! nothing the tests send leaves the machine. [`TestNet::cut`] takes the
//! link down — a network partition: packets are lost, not refused, as when
//! a switch or a cable fails — and [`TestNet::heal`] brings it back.
//!
//! Made with `ip netns` and `ip link` (Debian: iproute2), as root; where
//! it cannot be made, [`TestNet::for_case`] ends the case as one that
//! cannot run here (ignored with the reason, a failure under `CI=true`). The namespace and its veth pair are removed on drop;
//! ones left by a test process that was killed are removed by the next
//! test.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A namespace and its link to the host (see the module docs).
#[derive(Debug)]
pub struct TestNet {
    /// The namespace's name (`lh-PID-N`).
    pub ns: String,
    /// The host's end of the veth pair.
    host_if: String,
    /// The host's address on the link, and the namespace's.
    pub host_addr: String,
    pub ns_addr: String,
    /// Both, as one network (`10.231.X.Y/30`).
    pub cidr: String,
}

/// `ip ARGS...`; its error output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` ({e}): install iproute2"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Remove namespaces `lh-PID-N` whose test process is gone (killed before
/// its drop ran); their veth pairs go with them.
fn remove_leftovers() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let pid = name
            .strip_prefix("lh-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid
            && !crate::process::alive(pid)
        {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

impl TestNet {
    /// A new namespace linked to the host, both ends up.
    ///
    /// # Errors
    /// Why it cannot be made (not root, no `ip`, no namespaces).
    pub fn create() -> Result<Self, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        remove_leftovers();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A /30 per namespace of the 16,384 in 10.231.0.0/16: the first
        // one no link of the host has, from a start spread by pid and
        // counter (`ip addr add` would not refuse an address another link
        // has, and routing would then be ambiguous). Names carry the pid
        // (interface names: IFNAMSIZ, 15 characters).
        ip(&["-V"])?;
        let start = pid.wrapping_mul(31).wrapping_add(n * 7);
        let subnet = (0..16_384)
            .map(|k| start.wrapping_add(k) % 16_384)
            .find(|&subnet| {
                let cidr = format!("10.231.{}.{}/30", subnet / 64, (subnet % 64) * 4);
                Command::new("ip")
                    .args(["-o", "addr", "show", "to", &cidr])
                    .output()
                    .is_ok_and(|out| out.status.success() && out.stdout.is_empty())
            })
            .ok_or("no free /30 in 10.231.0.0/16 on this host")?;
        let (third, fourth) = (subnet / 64, (subnet % 64) * 4);
        let net = Self {
            ns: format!("lh-{pid}-{n}"),
            host_if: format!("lhh{}", pid % 1_000_000 * 10 + n % 10),
            host_addr: format!("10.231.{third}.{}", fourth + 1),
            ns_addr: format!("10.231.{third}.{}", fourth + 2),
            cidr: format!("10.231.{third}.{fourth}/30"),
        };
        let ns_if = format!("lhn{}", pid % 1_000_000 * 10 + n % 10);
        ip(&["netns", "add", &net.ns])?;
        // From here on, drop removes what was made.
        ip(&["link", "add", &net.host_if, "type", "veth", "peer", "name", &ns_if])?;
        ip(&["link", "set", &ns_if, "netns", &net.ns])?;
        ip(&["addr", "add", &format!("{}/30", net.host_addr), "dev", &net.host_if])?;
        ip(&["link", "set", &net.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", net.ns.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{}/30", net.ns_addr), "dev", &ns_if])?;
        inside(&["link", "set", &ns_if, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// A new test network for the running case; where none can be made,
    /// the case cannot run here (see the module docs).
    #[must_use]
    pub fn for_case() -> Self {
        crate::need_root("to make a network namespace");
        crate::need_program("ip", "iproute2");
        Self::create().unwrap_or_else(|why| crate::unavailable(format!("no test network: {why}")))
    }

    /// `ip netns exec NS`: the prefix that runs a command inside (`ip`
    /// execs the command: its pid is the command's).
    #[must_use]
    pub fn exec_prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.ns]
    }

    /// Partition: the link goes down (in flight and later packets are lost).
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]).expect("cut the test network");
    }

    /// Heal the partition.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn heal(&self) {
        ip(&["link", "set", &self.host_if, "up"]).expect("heal the test network");
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth pair, and
        // with it the host's end.
        let _ = ip(&["netns", "del", &self.ns]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}
