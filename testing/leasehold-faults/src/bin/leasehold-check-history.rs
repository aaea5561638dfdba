//! The history checker as a command, for suites in other languages (the
//! Node.js package's races): judges each history file named and prints
//! what it held and every rule it breaks.
//!
//! ```text
//! leasehold-check-history HISTORY...
//! ```
//!
//! Exit 0: every history judged and clean; 1: a rule broken; 2: a history
//! that cannot be read or parsed (it cannot be judged: never a pass).

use std::path::Path;

use leasehold_faults::checker::check_file;

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: leasehold-check-history HISTORY...");
        std::process::exit(2);
    }
    let mut broken = false;
    for file in &files {
        match check_file(Path::new(file)) {
            Err(e) => {
                eprintln!("leasehold-check-history: {e}");
                std::process::exit(2);
            }
            Ok(report) => {
                println!("{}", report.checked);
                for v in &report.violations {
                    println!("  {v}");
                }
                broken |= !report.is_clean();
            }
        }
    }
    std::process::exit(i32::from(broken));
}
