//! Help and completions say what the commands take (issue 41, item 12).

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    store_help_lists_every_store_of_the_build,
    commands_that_open_no_store_do_not_offer_store,
    bash_completes_file_names_only_for_options_that_take_a_path,
];

/// `--store`'s help listed sqlite, postgres and etcd only; Redis and
/// Firestore were left out. Every scheme the build opens is named.
fn store_help_lists_every_store_of_the_build() {
    let env = Env::new();
    let (code, help, err) = env.run(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let help: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for scheme in [
        "sqlite",
        "postgres",
        "postgresql",
        "etcd",
        "firestore",
        "redis",
        "rediss",
    ] {
        assert!(
            help.contains(&format!("`{scheme}://`")),
            "--help leaves out {scheme}://: {help}"
        );
    }
}

/// `lock`, `write` and `update` showed `--store` though they open none;
/// it is still accepted there (`LEASEHOLD_STORE` is set for every command).
fn commands_that_open_no_store_do_not_offer_store() {
    let env = Env::new();
    for verb in ["lock", "write", "update"] {
        let (code, help, err) = env.run(&[verb, "--help"]);
        assert_eq!(code, 0, "{err}");
        assert!(!help.contains("--store"), "`{verb} --help` offers --store: {help}");
    }
    for verb in ["acquire", "run", "list"] {
        assert!(
            env.run(&[verb, "--help"]).1.contains("--store"),
            "`{verb} --help` lost --store"
        );
    }
    let f = env.file("f");
    let (code, _, err) = env.run(&["write", f.to_str().unwrap(), "--store", "sqlite:///nowhere/x.db"]);
    assert_eq!(code, 0, "{err}");
}

/// Bash completion offered file names after `--ttl`, `--state`,
/// `--fence-token`, `--owner` (clap's default for a value of unknown kind).
/// Only options whose value is a path (or a store URL, which may be one)
/// complete file names now.
fn bash_completes_file_names_only_for_options_that_take_a_path() {
    let env = Env::new();
    let (code, script, err) = env.run(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = script.lines().collect();
    let mut with_files = std::collections::BTreeSet::new();
    for pair in lines.windows(2) {
        let option = pair[0].trim();
        if option.starts_with("--") && option.ends_with(')') && pair[1].contains("compgen -f") {
            with_files.insert(option.trim_end_matches(')').to_owned());
        }
    }
    let paths = ["--fence-file", "--progress-file", "--store", "--token-file"];
    assert_eq!(
        with_files,
        paths.iter().map(|s| (*s).to_owned()).collect(),
        "options completing file names"
    );
    for option in ["--ttl", "--state", "--fence-token", "--owner"] {
        assert!(script.contains(&format!("{option})")), "{option} is not in the script");
    }
}
