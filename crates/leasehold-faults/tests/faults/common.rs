//! What several case modules share.

use std::process::{Child, Stdio};
use std::time::Duration;

use leasehold_faults::proc::Sandbox;

/// The client process of this crate (see `src/bin/faults-client.rs`).
pub fn client() -> &'static str {
    env!("CARGO_BIN_EXE_faults-client")
}

/// `leasehold run NAME OPTIONS... -- faults-client hold LOG SINK HOLD_MS`, in the background.
pub fn spawn_holder(sb: &Sandbox, name: &str, options: &[&str], hold_ms: u64) -> Child {
    let log = sb.file("grants").display().to_string();
    let sink = sb.file("sink.db").display().to_string();
    let hold = hold_ms.to_string();
    let mut args = vec!["run", name];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", client(), "hold", &log, &sink, &hold]);
    sb.cmd(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn leasehold run")
}

/// Wait for a child, killing it (and failing) after `limit`.
pub fn finish(mut child: Child, limit: Duration) -> (i32, String) {
    if leasehold_faults::proc::wait_until(limit, || child.try_wait().expect("try_wait").is_some()).is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!(
            "process did not exit within {limit:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (code, _, err) = leasehold_faults::proc::outcome(&child.wait_with_output().expect("output"));
    (code, err)
}

/// The number of lines in a grant log that start a holding.
pub fn starts(sb: &Sandbox) -> usize {
    std::fs::read_to_string(sb.file("grants"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("start "))
        .count()
}

/// Percentile `p` (0..=100) of `values` (sorted here).
pub fn percentile(values: &mut [Duration], p: usize) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    values[(values.len() - 1) * p / 100]
}
