//! One owner label under racing supervisors (case 43, issue 39): an owner
//! label never lets a second live process act under a grant another holds.

use std::sync::Arc;
use std::time::Duration;

use leasehold_faults::proc::Sandbox;
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure};
use leasehold_testkit::wait::wait_until;

use crate::common::{grants, judge, resource_of};
use crate::firestore::{Holding, Racers};

pub const TESTS: &[leasehold_testkit::Test] =
    leasehold_testkit::tests![case43_racing_runs_under_one_owner_never_share_a_grant];

/// A racer's clear answers: done (0), held (11), stopped when its lease was
/// lost (75).
const ANSWERS: &[i32] = &[0, 11, 75];

/// fault case 43: eight `leasehold run --owner svc` processes race for one
/// name on SQLite (holding 1.5 s or 0.2 s by turns, a refused one trying
/// again within 0.1 s) until 20 grants are recorded (400 in the soak
/// tier). One owner label is not one holder: each `run` is a process of
/// its own, so a second one is refused while the first holds, and none
/// shares, renews or releases another's grant. The checker: no token
/// issued twice (a shared grant is two holders with one token), no two
/// holders at once, the fence never going back.
fn case43_racing_runs_under_one_owner_never_share_a_grant() {
    let grants_wanted = count(20, 400);
    let sb = Arc::new(Sandbox::new());
    let url = sb.store_url();
    let mut rng = Rng::from_env("case 43");
    let holding = Holding {
        owner: Some("svc"),
        ..Holding::default()
    };
    let racers = Racers::start_holding(&sb, &url, 8, &mut rng, ANSWERS, holding);
    let raced = wait_until(Duration::from_secs(180), || grants(&sb, "job").len() >= grants_wanted);
    let (outcomes, unexpected) = racers.stop();
    assert!(
        raced.is_some(),
        "fewer than {grants_wanted} grants in 180 s: {outcomes:?}"
    );
    let mut report = judge(&sb, &[&resource_of(&sb, "job")]);
    for v in unexpected {
        report.push("unclear-outcome", v);
    }
    figure(
        43,
        &format!(
            "{} runs by 8 racers under one --owner on one name (exit codes {outcomes:?}); {} grants, {} writes \
             accepted by the fence; {} tokens issued twice, {} overlapping holdings; {} violations",
            outcomes.values().sum::<usize>(),
            report.counts.grants,
            report.counts.accepted,
            report.count("token-reissued"),
            report.count("overlap"),
            report.total()
        ),
    );
    report.assert_clean();
}
