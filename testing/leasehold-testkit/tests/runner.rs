//! The rule of leasehold-testkit, seen from outside: this binary runs
//! itself as a child (`LEASEHOLD_TESTKIT_DEMO=1`) with tests that pass, one
//! that needs a program no machine has, one that needs root (hidden in the
//! child) and one that needs `sh`, and reads the child's output and exit
//! status as a user or CI reads them — libtest's lines and summary line,
//! not the runner's own state.
//!
//! What must never happen: a test that cannot run counted as passed, or
//! hiding the tests after it, or passing under `CI=true`.

use std::process::Command;

use leasehold_testkit::{Test, tests};

const DEMO: &str = "LEASEHOLD_TESTKIT_DEMO";
const NO_SUCH_PROGRAM: &str = "leasehold-testkit-no-such-program";

fn demo_passes() {
    assert!(std::env::var_os(DEMO).is_some(), "runs only as the demo");
}

fn demo_needs_a_program_no_machine_has() {
    leasehold_testkit::need_program(NO_SUCH_PROGRAM, "none");
    panic!("need_program let a test go on without its program");
}

fn demo_needs_root() {
    leasehold_testkit::need_root("to show the rule");
}

fn demo_needs_sh() {
    leasehold_testkit::need_program("sh", "dash");
}

fn demo_passes_after_them() {
    demo_passes();
}

const DEMO_TESTS: &[Test] = tests![
    demo_passes,
    demo_needs_a_program_no_machine_has,
    demo_needs_root,
    demo_needs_sh,
    demo_passes_after_them,
];

/// The demo's output (stdout, then stderr) and whether it exited 0, run
/// with `env` after `CI` and `LEASEHOLD_TEST_*` were cleared (the rule is
/// checked, not the caller's environment) and root hidden.
fn run_demo(env: &[(&str, &str)], args: &[&str]) -> (String, bool) {
    let mut command = Command::new(std::env::current_exe().expect("the path of this test binary"));
    command
        .args(["--test-threads", "1", "--color", "never"])
        .args(args)
        .env(DEMO, "1")
        .env_remove("CI")
        .env_remove("LEASEHOLD_TEST_ROOT_LATER")
        .env_remove("LEASEHOLD_TEST_ONLY")
        .env("LEASEHOLD_TEST_HIDE", "root");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("run the demo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (text, out.status.success())
}

/// (passed, failed, ignored) of the one summary line of a libtest run:
/// `test result: ok. 2 passed; 0 failed; 2 ignored; ...`.
fn counts(output: &str) -> (u32, u32, u32) {
    let lines: Vec<&str> = output.lines().filter(|l| l.starts_with("test result: ")).collect();
    assert_eq!(lines.len(), 1, "one summary line:\n{output}");
    let (_, figures) = lines[0].split_once(". ").expect("`test result: ok. ...`");
    let count = |what: &str| -> u32 {
        figures
            .split("; ")
            .find_map(|part| part.strip_suffix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count of `{what}` in {}", lines[0]))
    };
    (count("passed"), count("failed"), count("ignored"))
}

/// What the run said of test `name`: the text after `test NAME ... `.
fn outcome<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| {
            let (test, outcome) = line.strip_prefix("test ")?.split_once(" ... ")?;
            (test.trim_end() == name).then_some(outcome)
        })
        .unwrap_or_else(|| panic!("no line for {name} in:\n{output}"))
}

fn without_ci_a_test_that_cannot_run_is_ignored_with_its_reason() {
    let (out, ok) = run_demo(&[], &[]);
    assert!(ok, "ignored tests do not fail the run:\n{out}");
    assert_eq!(counts(&out), (3, 0, 2), "passed, failed, ignored:\n{out}");
    assert!(
        outcome(&out, "demo_needs_a_program_no_machine_has")
            .starts_with(&format!("ignored (no `{NO_SUCH_PROGRAM}` on PATH")),
        "{out}"
    );
    assert_eq!(
        outcome(&out, "demo_needs_root"),
        "ignored (needs root: to show the rule)"
    );
    assert_eq!(outcome(&out, "demo_needs_sh"), "ok");
    assert_eq!(outcome(&out, "demo_passes_after_them"), "ok");
    for line in [
        "ignored at run time, by reason:",
        "    1 × needs root: to show the rule",
    ] {
        assert!(out.lines().any(|l| l == line), "no `{line}` in:\n{out}");
    }
    assert!(
        !out.contains("need_program let a test go on"),
        "the test went on:\n{out}"
    );
}

fn with_ci_a_test_that_cannot_run_fails() {
    let (out, ok) = run_demo(&[("CI", "true")], &[]);
    assert!(!ok, "CI=true passed with tests that could not run:\n{out}");
    assert_eq!(counts(&out), (3, 2, 0), "passed, failed, ignored:\n{out}");
    assert!(
        out.contains("CI=true, and this test cannot run here: needs root: to show the rule"),
        "the reason of the failure:\n{out}"
    );
}

fn a_program_hidden_by_name_is_missing() {
    let (out, ok) = run_demo(&[("LEASEHOLD_TEST_HIDE", "root,sh")], &["--exact", "demo_needs_sh"]);
    assert!(ok, "{out}");
    assert_eq!(counts(&out), (0, 0, 1), "passed, failed, ignored:\n{out}");
    assert!(
        outcome(&out, "demo_needs_sh").starts_with("ignored (no `sh` (hidden by LEASEHOLD_TEST_HIDE)"),
        "{out}"
    );
}

fn root_tests_are_left_for_the_pass_as_root_even_under_ci() {
    let dir = std::env::temp_dir().join(format!("leasehold-testkit-root-later-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("root-later.tsv");
    let file_str = file.to_str().expect("a UTF-8 temp path");
    let (out, _) = run_demo(&[("CI", "true"), ("LEASEHOLD_TEST_ROOT_LATER", file_str)], &[]);
    // The missing program still fails; root is left for the pass as root.
    assert_eq!(counts(&out), (3, 1, 1), "passed, failed, ignored:\n{out}");
    assert_eq!(
        outcome(&out, "demo_needs_root"),
        "ignored (needs root: to show the rule; left for the pass as root)"
    );
    let recorded = std::fs::read_to_string(&file).expect("the root-later file");
    let names: Vec<&str> = recorded.lines().filter_map(|l| l.rsplit('\t').next()).collect();
    assert_eq!(names, ["demo_needs_root"], "{recorded}");
    // The pass as root runs exactly what was recorded, and nothing else.
    let (out, _) = run_demo(&[("LEASEHOLD_TEST_HIDE", ""), ("LEASEHOLD_TEST_ONLY", file_str)], &[]);
    let (passed, failed, ignored) = counts(&out);
    assert_eq!(passed + failed + ignored, 1, "only the recorded test runs:\n{out}");
    outcome(&out, "demo_needs_root");
    let _ = std::fs::remove_dir_all(&dir);
}

const TESTS: &[Test] = tests![
    without_ci_a_test_that_cannot_run_is_ignored_with_its_reason,
    with_ci_a_test_that_cannot_run_fails,
    a_program_hidden_by_name_is_missing,
    root_tests_are_left_for_the_pass_as_root_even_under_ci,
];

fn main() {
    if std::env::var_os(DEMO).is_some() {
        leasehold_testkit::main(&[DEMO_TESTS]);
    }
    leasehold_testkit::main(&[TESTS]);
}
