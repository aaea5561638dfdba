//! The README's examples, run as written — with their paths put in a temp
//! folder, the programs they start (`./agent.sh`, `my-agent`, …) standing
//! in as small scripts, and the PostgreSQL, etcd and Firestore examples
//! pointed at the tests' own throwaway servers on 127.0.0.1 (Firestore:
//! the emulator). The cron line and the systemd
//! unit are checked for syntax only. The build commands at the top
//! (`cargo run`, `scripts/test`) are what CI runs, so they are left out.
//!
//! Each example line must exit 0 — or exit N where its own comment says
//! "exit N" (`# exit 11 if held`).

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use leasehold_testkit::{etcd, postgres};

fn main() {
    leasehold_testkit::main(&[leasehold_testkit::tests![
        the_embedded_store_examples_run_as_written,
        the_postgres_examples_run_against_a_throwaway_server,
        the_etcd_examples_run_against_a_throwaway_server,
        the_firestore_examples_run_against_the_emulator,
        the_redis_examples_run_against_a_throwaway_server,
        the_cron_line_is_valid,
        the_systemd_unit_is_valid,
        every_install_line_names_what_scripts_dist_builds,
    ]]);
}

/// A block of the README: where it starts, its fence language (`None`: an
/// indented block), and its lines.
#[derive(Debug)]
struct Block {
    line: usize,
    lang: Option<String>,
    lines: Vec<String>,
}

fn blocks(readme: &str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut fence: Option<Block> = None;
    let mut previous_blank = true;
    let mut indented: Option<Block> = None;
    for (i, line) in readme.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("```") {
            match fence.take() {
                Some(block) => blocks.push(block),
                None => {
                    fence = Some(Block {
                        line: i + 1,
                        lang: Some(rest.trim().to_owned()),
                        lines: Vec::new(),
                    });
                }
            }
            continue;
        }
        if let Some(block) = &mut fence {
            block.lines.push(line.to_owned());
            continue;
        }
        match (line.strip_prefix("    "), &mut indented) {
            (Some(code), Some(block)) => block.lines.push(code.to_owned()),
            (Some(code), None) if previous_blank => {
                indented = Some(Block {
                    line: i + 1,
                    lang: None,
                    lines: vec![code.to_owned()],
                });
            }
            _ => {
                if let Some(block) = indented.take() {
                    blocks.push(block);
                }
            }
        }
        previous_blank = line.trim().is_empty();
    }
    blocks.extend(indented);
    blocks
}

fn readme() -> Vec<Block> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    blocks(&text)
}

/// The exit codes an example line may end with: 0, and any its comment
/// names as "exit N".
fn allowed(line: &str) -> Vec<i32> {
    let mut codes = vec![0];
    if line.contains("leasehold serve") {
        // Serves until stopped: the test's SIGTERM ends it (128 + 15).
        codes.push(143);
    }
    if let Some((_, comment)) = line.split_once(" # ") {
        let words: Vec<&str> = comment.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        for pair in words.windows(2) {
            if pair[0] == "exit"
                && let Ok(n) = pair[1].parse()
            {
                codes.push(n);
            }
        }
    }
    codes
}

/// A `leasehold serve` line as the test runs it: stopped (SIGTERM) after
/// two seconds, on a free loopback port instead of the README's fixed one
/// (other tests may run beside this one), with the sandbox's token file.
/// The README's `0.0.0.0` is not bound: tests listen on loopback only; the
/// line still runs with a token file, as a non-loopback address needs.
fn serving(line: &str) -> String {
    let line = line.replacen("leasehold serve", "LH_TIMEOUT=2 leasehold serve", 1);
    if line.contains("--listen") {
        line.replace("0.0.0.0:7878", "127.0.0.1:0")
            .replace("/etc/leasehold/ui-token", "ui-token")
    } else {
        line.replacen("leasehold serve", "leasehold serve --listen 127.0.0.1:0", 1)
    }
}

/// A sandbox with the programs and files the examples use.
fn sandbox() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let script = |path: &Path, body: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::File::create(path).unwrap();
        std::io::Write::write_all(&mut f, format!("#!/bin/sh\n{body}\n").as_bytes()).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for name in ["agent.sh", "publish.sh", "backup.sh", "sync.sh"] {
        script(&d.join(name), "echo \"$0 ran with token ${LEASEHOLD_TOKEN:-none}\"");
    }
    script(&d.join("crawl-one.sh"), "cat >/dev/null; echo '{\"pages\":1}'");
    script(&d.join("bin/my-agent"), "echo my-agent \"$@\"");
    script(&d.join("bin/agent-state"), "echo '{\"runs\":0}'");
    let file = |name: &str, text: &str| {
        std::fs::create_dir_all(d.join(name).parent().unwrap()).unwrap();
        let mut f = std::fs::File::create(d.join(name)).unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    };
    file("report.json", "{\"report\":1}\n");
    file("ui-token", "a-token-of-at-least-sixteen-bytes\n");
    file(
        "urls.json",
        "{\"url\":\"https://example.org/b\"}\n{\"url\":\"https://example.org/c\"}\n",
    );
    std::fs::create_dir_all(d.join("out")).unwrap();
    std::fs::create_dir_all(d.join("run/lock")).unwrap();
    dir
}

/// Run `lines` in order as one bash script in `dir` (variables carry from
/// line to line, as a reader pasting them would have them), with `leasehold`
/// the binary under test, and check each line's exit code.
fn run_lines(dir: &Path, store: &str, lines: &[(usize, String)]) {
    run_lines_with(dir, store, lines, &[]);
}

/// [`run_lines`] with more variables in the script's environment.
fn run_lines_with(dir: &Path, store: &str, lines: &[(usize, String)], vars: &[(&str, String)]) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_leasehold"));
    let mut script = String::from(
        "leasehold() { timeout --preserve-status -s TERM \"${LH_TIMEOUT:-60}\" \"$LEASEHOLD_BIN\" \"$@\"; }\n",
    );
    for (i, (_, line)) in lines.iter().enumerate() {
        // A daemon's metrics on a free port: other tests run the same
        // lines beside this one.
        let line = &line.replace("--metrics-listen 127.0.0.1:9464", "--metrics-listen 127.0.0.1:0");
        // A worker that runs until stopped is stopped (SIGTERM: it drains
        // and exits 0) after a few seconds.
        let line = if line.contains("leasehold work") && !line.contains("--drain") && !line.contains("--until-empty") {
            line.replacen("leasehold work", "LH_TIMEOUT=3 leasehold work", 1)
        } else if line.contains("leasehold serve") {
            serving(line)
        } else if line.contains("leader") && line.contains("--observe") {
            // Observes until stopped: SIGTERM after two seconds (exit 0).
            line.replacen("leasehold ", "LH_TIMEOUT=2 leasehold ", 1)
        } else {
            line.clone()
        };
        let _ = writeln!(script, "{line}\necho \"{i} $?\" >&3");
    }
    let codes = dir.join(".codes");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("exec 3>{}; {script}", codes.display()))
        .current_dir(dir)
        .env("LEASEHOLD_BIN", &bin)
        .env("LEASEHOLD_STORE", store)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .env(
            "PATH",
            format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap()),
        )
        .env_remove("LEASEHOLD_LOG")
        .output()
        .expect("run bash");
    let log = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let codes = std::fs::read_to_string(&codes).unwrap();
    let codes: Vec<i32> = codes
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert_eq!(codes.len(), lines.len(), "every line ran\n{log}");
    for ((readme_line, line), code) in lines.iter().zip(codes) {
        assert!(
            allowed(line).contains(&code),
            "README.md:{readme_line}: `{line}` exited {code}\n{log}"
        );
    }
}

/// The lines of the README's shell examples, each with its line number,
/// `select`ed by block and rewritten by `edit`.
fn example_lines(select: impl Fn(&Block) -> bool, edit: impl Fn(&str) -> String) -> Vec<(usize, String)> {
    readme()
        .into_iter()
        .filter(|b| b.lang.is_none() && select(b))
        .flat_map(|b| {
            let start = b.line;
            b.lines
                .into_iter()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(move |(i, l)| (start + i, l))
        })
        .map(|(n, l)| (n, edit(&l)))
        .collect()
}

fn mentions(b: &Block, what: &str) -> bool {
    b.lines.iter().any(|l| l.contains(what))
}

fn is_shell(b: &Block) -> bool {
    b.lines.iter().any(|l| l.contains("leasehold "))
        && !b
            .lines
            .iter()
            .any(|l| l.starts_with("cargo ") || l.starts_with("scripts/"))
        && !b.lines.iter().any(|l| l.contains("::"))
}

fn the_embedded_store_examples_run_as_written() {
    let dir = sandbox();
    let lines = example_lines(
        |b| {
            is_shell(b)
                && !mentions(b, "postgres://")
                && !mentions(b, "etcd://")
                && !mentions(b, "firestore://")
                && !mentions(b, "redis://")
        },
        |l| l.replace("/run/lock/", "run/lock/"),
    );
    assert!(lines.len() >= 25, "the README's examples were found: {lines:?}");
    let store = format!("sqlite://{}", dir.path().join("store/leasehold.db").display());
    run_lines(dir.path(), &store, &lines);
}

fn the_postgres_examples_run_against_a_throwaway_server() {
    let server = postgres::Server::shared();
    let url = server.url("readme");
    let dir = sandbox();
    let lines = example_lines(
        |b| mentions(b, "postgres://"),
        |l| {
            let Some(start) = l.find("'postgres://") else {
                return l.to_owned();
            };
            let end = start + 1 + l[start + 1..].find('\'').expect("a quoted URL");
            format!("{}'{url}'{}", &l[..start], &l[end + 1..])
        },
    );
    assert!(lines.iter().any(|(_, l)| l.contains("127.0.0.1")), "{lines:?}");
    run_lines(dir.path(), "sqlite:///nonexistent/not-used.db", &lines);
}

fn the_etcd_examples_run_against_a_throwaway_server() {
    let endpoint = etcd::shared().endpoint();
    let dir = sandbox();
    let lines = example_lines(
        |b| mentions(b, "etcd://"),
        |l| {
            l.replace("10.0.0.5:2379,10.0.0.6:2379", &endpoint)
                .replace("10.0.0.5:2379", &endpoint)
        },
    );
    assert!(
        lines.len() >= 2 && lines.iter().all(|(_, l)| !l.contains("10.0.0")),
        "{lines:?}"
    );
    run_lines(dir.path(), "sqlite:///nonexistent/not-used.db", &lines);
}

/// The Firestore examples, on the test binary's emulator (the README's
/// project, database and prefix as written: the emulator takes any).
fn the_firestore_examples_run_against_the_emulator() {
    let emulator = leasehold_testkit::firestore::shared();
    let dir = sandbox();
    let lines = example_lines(|b| is_shell(b) && mentions(b, "firestore://"), str::to_owned);
    assert!(lines.len() >= 2, "{lines:?}");
    let vars = [("FIRESTORE_EMULATOR_HOST", emulator.host())];
    run_lines_with(dir.path(), "sqlite:///nonexistent/not-used.db", &lines, &vars);
}

/// The Redis examples, on the test binary's shared server (its port for
/// the README's 6379; the README's prefixes as written).
fn the_redis_examples_run_against_a_throwaway_server() {
    let server = leasehold_testkit::redis::shared();
    let at = format!("127.0.0.1:{}", server.port());
    let dir = sandbox();
    let lines = example_lines(
        |b| is_shell(b) && mentions(b, "redis://"),
        |l| l.replace("127.0.0.1:6379", &at),
    );
    assert!(
        lines.len() >= 2 && lines.iter().all(|(_, l)| !l.contains(":6379")),
        "{lines:?}"
    );
    run_lines(dir.path(), "sqlite:///nonexistent/not-used.db", &lines);
}

/// The cron line: five time fields, then a command bash can parse.
fn the_cron_line_is_valid() {
    let blocks: Vec<Block> = readme()
        .into_iter()
        .filter(|b| b.lang.as_deref() == Some("cron"))
        .collect();
    assert_eq!(blocks.len(), 1);
    for line in blocks[0]
        .lines
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        assert_eq!(fields.len(), 6, "five time fields and a command: {line}");
        for field in &fields[..5] {
            assert!(
                !field.is_empty() && field.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c)),
                "time field {field:?} of {line}"
            );
        }
        bash_parses(fields[5]);
        assert!(fields[5].starts_with("leasehold run "), "{line}");
    }
}

/// The systemd units (`run` under systemd, `cron` as a service): sections
/// and Key=Value lines of keys systemd knows, and an `ExecStart` bash can
/// parse.
fn the_systemd_unit_is_valid() {
    let blocks: Vec<Block> = readme()
        .into_iter()
        .filter(|b| b.lang.as_deref() == Some("ini"))
        .collect();
    assert_eq!(blocks.len(), 2, "the unit of `run` and the service of `cron`");
    let known = [
        "Type",
        "ExecStart",
        "TimeoutStopSec",
        "RestartForceExitStatus",
        "RestartSec",
        "Restart",
        "KillMode",
        "Description",
        "WantedBy",
        "Wants",
        "After",
        "Environment",
        "User",
    ];
    for block in &blocks {
        let mut exec = None;
        for line in block
            .lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            if line.starts_with('[') {
                assert!(["[Unit]", "[Service]", "[Install]"].contains(&line), "{line}");
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not Key=Value: {line}"));
            assert!(known.contains(&key), "unknown key {key}");
            assert!(!value.is_empty(), "{line}");
            if key == "ExecStart" {
                exec = Some(value.to_owned());
            }
        }
        let exec = exec.expect("an ExecStart");
        assert!(exec.starts_with('/'), "systemd wants an absolute path: {exec}");
        bash_parses(&exec);
    }
}

fn bash_parses(command: &str) {
    let out = Command::new("bash").args(["-n", "-c", command]).output().unwrap();
    assert!(
        out.status.success(),
        "bash cannot parse {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every install line of the README and of the Python pages names what
/// `scripts/dist` builds (issue 42, item 1: `pip install leasehold`
/// installed another project's package — same niche, and its own
/// `leasehold` module and command): `pip`, `pipx` and `uvx --from` name
/// the Python package by `crates/leasehold-py/pyproject.toml`'s name, the
/// wheels scripts/dist makes (and scripts/smoke installs by that name);
/// `uvx` runs the `leasehold` command `--from` it, never a package called
/// `leasehold`; `cargo binstall` and `cargo install` name the crate whose
/// archive scripts/dist builds (`leasehold-cli`, with its binstall
/// metadata). A path (`./crates/leasehold-py`) is a build from source.
fn every_install_line_names_what_scripts_dist_builds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let package = first_name(&read("crates/leasehold-py/pyproject.toml"), "[project]");
    let dist = read("scripts/dist");
    assert!(
        dist.contains(&format!("/{package}-*.whl")) && dist.contains("cd crates/leasehold-py"),
        "scripts/dist does not build the {package} wheels from crates/leasehold-py"
    );
    let cli = read("crates/leasehold-cli/Cargo.toml");
    let crate_name = first_name(&cli, "[package]");
    assert!(
        cli.lines().any(|l| l.trim() == "[package.metadata.binstall]"),
        "{crate_name} has no binstall metadata: cargo binstall would not find scripts/dist's archive"
    );
    let mut seen = 0;
    for page in ["README.md", "docs/PYTHON.md", "crates/leasehold-py/README.md"] {
        for (n, line) in read(page).lines().enumerate() {
            let words: Vec<&str> = line.split('#').next().unwrap_or("").split_whitespace().collect();
            let at = format!("{page}:{}: {}", n + 1, line.trim());
            // The first word after `install`/`binstall` that is not a flag.
            let operand = || words.iter().skip(2).find(|w| !w.starts_with('-')).copied();
            let (tool, name) = match words.as_slice() {
                ["pip" | "pipx", "install", ..] => ("pip", operand()),
                ["uvx", ..] => {
                    // `--from PACKAGE COMMAND ...`
                    let from: Vec<&str> = words
                        .iter()
                        .skip_while(|w| **w != "--from")
                        .skip(1)
                        .take(2)
                        .copied()
                        .collect();
                    let [package, command] = from[..] else {
                        panic!("{at}: uvx without --from runs a package called as the command");
                    };
                    assert_eq!(command, "leasehold", "{at}: uvx runs another command");
                    ("pip", Some(package))
                }
                ["cargo", "binstall" | "install", ..] => ("cargo", operand()),
                _ => continue,
            };
            let Some(name) = name else { continue };
            if name.starts_with('.') || name.starts_with('/') {
                continue; // a build from the repository
            }
            seen += 1;
            let expected = if tool == "pip" { &package } else { &crate_name };
            assert_eq!(
                name, expected,
                "{at}: installs {name}, but scripts/dist builds {expected}"
            );
        }
    }
    assert!(
        seen >= 4,
        "only {seen} install lines found: the pages' install sections moved?"
    );
}

/// The `name = "..."` of a TOML file's `section` (its first key of that
/// name after the section's header).
fn first_name(toml: &str, section: &str) -> String {
    toml.lines()
        .skip_while(|l| l.trim() != section)
        .find_map(|l| l.trim().strip_prefix("name = \"")?.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no name in {section}"))
        .to_owned()
}
