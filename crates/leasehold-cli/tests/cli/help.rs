//! Help, completions and manual pages say what the commands take (issue
//! 41, item 12; issue 42, item 3).

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    store_help_lists_every_store_of_the_build,
    commands_that_open_no_store_do_not_offer_store,
    bash_completes_file_names_only_for_options_that_take_a_path,
    man_writes_a_page_per_command_and_never_through_a_link,
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

/// `leasehold man DIR` writes `leasehold.1` and a page for every command
/// `--help` lists (roff, each naming its command), into a directory that
/// exists — a missing one is a usage error that creates nothing — and
/// never through a link planted in a page's place: the link's target
/// keeps its contents and the command says which page it could not write.
#[allow(clippy::disallowed_methods, reason = "test fixtures, not state")]
fn man_writes_a_page_per_command_and_never_through_a_link() {
    let env = Env::new();
    let dir = env.file("man1");
    let (code, _, err) = env.run(&["man", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "a missing directory: {err}");
    assert!(err.contains("is not a directory"), "{err}");
    assert!(!dir.exists(), "the missing directory was created");
    std::fs::create_dir(&dir).unwrap();
    let (code, out, err) = env.run(&["man", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("wrote "), "{out}");
    let (_, help, _) = env.run(&["--help"]);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A command's line, not its description's continuation.
        .filter_map(|l| {
            l.strip_prefix("  ")
                .filter(|rest| rest.starts_with(|c: char| c.is_ascii_lowercase()))
        })
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 20, "{help}");
    for page in std::iter::once("leasehold".to_owned()).chain(commands.iter().map(|c| format!("leasehold-{c}"))) {
        let text = std::fs::read_to_string(dir.join(format!("{page}.1"))).unwrap_or_else(|e| panic!("{page}.1: {e}"));
        assert!(
            text.contains(".TH") && text.contains(&page),
            "{page}.1 is not its page: {text:.200}"
        );
    }
    let target = env.file("precious");
    std::fs::write(&target, "keep").unwrap();
    let page = dir.join("leasehold-acquire.1");
    std::fs::remove_file(&page).unwrap();
    std::os::unix::fs::symlink(&target, &page).unwrap();
    let (code, _, err) = env.run(&["man", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "a link in a page's place: {err}");
    assert!(err.contains("leasehold-acquire.1"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "keep",
        "written through the link"
    );
}
