//! The bugs scripts/mutants plants (`leasehold_backend::mutant`) exist
//! only in a build with the `mutants` feature.

use leasehold_backend::mutant;

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] =
    leasehold_testkit::tests![a_mutant_named_in_the_environment_is_planted_only_by_a_build_with_the_feature];

/// `LEASEHOLD_MUTANT` plants nothing in a build without the feature — the
/// `leasehold` binary `cargo test --workspace` builds, like every build
/// for use — and in a build with it (scripts/mutants) plants the bug it
/// names in the binary: a mutant run tests what it says it does.
fn a_mutant_named_in_the_environment_is_planted_only_by_a_build_with_the_feature() {
    let env = Env::new();
    let acquire = || {
        let out = env
            .cmd(&["acquire", "job", "--ttl", "2m"])
            .env("LEASEHOLD_MUTANT", "second-exclusive")
            .output()
            .expect("run leasehold");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (first, err) = acquire();
    assert_eq!(first, Some(0), "{err}");
    let (second, err) = acquire();
    if mutant::COMPILED_IN {
        assert_eq!(
            second,
            Some(0),
            "the mutants build did not plant a second exclusive holder: {err}"
        );
    } else {
        assert_eq!(
            second,
            Some(11),
            "a build without the mutants feature admitted a second exclusive holder: {err}"
        );
    }
}
