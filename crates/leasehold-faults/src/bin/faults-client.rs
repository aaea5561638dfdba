//! The process fault cases run under `leasehold run` (or by hand):
//!
//! ```text
//! faults-client hold LOG SINK HOLD_MS [x|s]   # log the grant of $LEASEHOLD_TOKEN (or, under
//!                                             # `work`, $LEASEHOLD_TASK_TOKEN), write to the
//!                                             # sink every 2 ms for HOLD_MS, log the end
//! faults-client sink-write SINK TOKEN WRITER  # one fenced write: exit 0 accepted, 13 refused
//! ```
//!
//! `hold` logs the end of its holding also when it gets SIGTERM (as the
//! supervisor or its guard sends when stopping it), then exits 143. Sink
//! writes that fail (not refusals) are exit 1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold_faults::grants::GrantLog;
use leasehold_faults::sink::{FencedSink, Verdict};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["hold", log, sink, hold_ms, ref mode @ ..] => hold(log, sink, hold_ms, mode.first() != Some(&"s")),
        ["sink-write", sink, token, writer] => {
            let mut sink = FencedSink::open(sink.as_ref()).expect("open sink");
            match sink.write(token.parse().expect("token"), writer, "data") {
                Ok(Verdict::Accepted) => 0,
                Ok(Verdict::Refused { .. }) => 13,
                Err(e) => {
                    eprintln!("faults-client: sink write failed: {e}");
                    1
                }
            }
        }
        _ => {
            eprintln!("usage: faults-client hold LOG SINK HOLD_MS [x|s] | sink-write SINK TOKEN WRITER");
            2
        }
    };
    std::process::exit(code);
}

fn hold(log: &str, sink: &str, hold_ms: &str, exclusive: bool) -> i32 {
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone()).expect("SIGTERM handler");
    // A lease's token under `leasehold run`, a claim's under `leasehold work`.
    let token: u64 = std::env::var("LEASEHOLD_TOKEN")
        .or_else(|_| std::env::var("LEASEHOLD_TASK_TOKEN"))
        .expect("LEASEHOLD_TOKEN or LEASEHOLD_TASK_TOKEN (run me under `leasehold run` or `leasehold work`)")
        .parse()
        .expect("a numeric token");
    let pid = std::process::id();
    let hold = Duration::from_millis(hold_ms.parse().expect("HOLD_MS"));
    let mut log = GrantLog::open(log.as_ref()).expect("open grant log");
    let mut sink = (!sink.is_empty()).then(|| FencedSink::open(sink.as_ref()).expect("open sink"));
    log.start(token, pid, exclusive).expect("log start");
    let writer = format!("pid {pid} token {token}");
    let began = Instant::now();
    while began.elapsed() < hold && !term.load(Ordering::Relaxed) {
        if let Some(sink) = &mut sink
            && let Err(e) = sink.write(token, &writer, "data")
        {
            eprintln!("faults-client: sink write failed: {e}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    log.end(token, pid, exclusive).expect("log end");
    if term.load(Ordering::Relaxed) { 143 } else { 0 }
}
