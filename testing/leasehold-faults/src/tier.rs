//! Counts of the two tiers and the figures cases report.

/// Whether the soak tier is running (`LEASEHOLD_SOAK=1`, set by `scripts/soak`).
#[must_use]
pub fn soak() -> bool {
    std::env::var_os("LEASEHOLD_SOAK").is_some_and(|v| v != "0")
}

/// `ci` in the default test run, `soak` (the docs/RELIABILITY.md count) in the soak tier.
#[must_use]
pub fn count(ci: usize, soak: usize) -> usize {
    if self::soak() { soak } else { ci }
}

/// Print the figure a case reports, one line, for `scripts/soak` to collect.
pub fn figure(case: u32, text: &str) {
    let tier = if soak() { "soak" } else { "ci" };
    eprintln!("FIGURE case {case} [{tier}]: {text}");
}
