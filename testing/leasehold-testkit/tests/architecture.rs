//! docs/ARCHITECTURE.md is the contract the next engineer reads first: every
//! path it cites must exist, and every test or function it names must be
//! in the tree's code. A file moved or a test renamed without
//! the map following fails here, with the line of the map to fix.
//!
//! What counts as a citation, read from the text between backticks:
//! - a path: rooted (`crates/…`, `docs/…`), a crate's (`leasehold-faults/src/checker/`)
//!   or a file by its extension. A rooted or a crate's path must exist as
//!   written; any other must end a path inside the crate whose section it
//!   is in (a heading `### crates/NAME` in backticks), or, outside such a
//!   section, inside the tree. `*` matches within a name and `{a,b}` spells
//!   alternatives.
//! - a name: a `snake_case` word with two underscores or more (or the last
//!   part of `a::b::name`, `file.py::name`), which must be a word of the
//!   tree's code; a trailing `*` matches by prefix.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const EXTENSIONS: [&str; 7] = [".rs", ".py", ".md", ".toml", ".sh", ".sql", ".txt"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file and directory of the tree, relative to the root, without
/// build output and version control.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if matches!(
                name.as_str(),
                "target" | ".git" | "node_modules" | "__pycache__" | ".venv"
            ) {
                continue;
            }
            let path = rel.join(&name);
            out.push(path.to_string_lossy().into_owned());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out
}

/// `{a,b}` spelled out.
fn alternatives(pattern: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (pattern.find('{'), pattern.find('}')) else {
        return vec![pattern.to_owned()];
    };
    if close < open {
        return vec![pattern.to_owned()];
    }
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| alternatives(&format!("{}{alt}{}", &pattern[..open], &pattern[close + 1..])))
        .collect()
}

/// `text` matches `pattern`, where `*` stands for any run of characters
/// but `/`.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .take_while(|&i| !rest[..i].contains('/'))
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| glob(tail, &rest[i..]))
        }
    }
}

const ROOTS: [&str; 7] = ["crates/", "testing/", "vendor/", "docs/", "scripts/", "bench/", ".ci/"];

/// A path inside one of the tree's crates, by the crate's name
/// (`leasehold/src/…`, `leasehold-faults/src/…`).
fn is_crates(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(krate, _)| krate == "leasehold" || krate.starts_with("leasehold-"))
}

/// A path of the tree: rooted (`crates/…`), a crate's (`leasehold-x/…`),
/// or a file by its extension. Not a store's key (`acquire/token`), a
/// placeholder (`PREFIX/record/`, `crates/leasehold-NAME/`) nor build
/// output (`target/…`).
fn looks_like_path(s: &str) -> bool {
    let plain = s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-*{},".contains(c));
    let placeholder = s.split(['/', '-', '.']).any(|part| {
        part.len() >= 3 && part.chars().all(|c| c.is_ascii_uppercase()) && !["README", "CHANGELOG"].contains(&part)
    });
    let anchored = ROOTS.iter().any(|r| s.starts_with(r)) || is_crates(s);
    plain && !placeholder && (anchored || EXTENSIONS.iter().any(|e| s.ends_with(e)))
}

/// The name a citation of a test or function gives, if it is one.
fn cited_name(s: &str) -> Option<&str> {
    let last = s.rsplit("::").next()?;
    let word = last.strip_suffix("()").unwrap_or(last);
    let body = word.strip_suffix('*').unwrap_or(word);
    let snake = !body.is_empty()
        && body
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && body.starts_with(|c: char| c.is_ascii_lowercase());
    (snake && body.matches('_').count() >= 2).then_some(word)
}

struct Map {
    files: Vec<String>,
    /// Every word of the tree's code (Rust, Python, Lua, SQL, JavaScript):
    /// a name cited must be one of them — defined, or called when it is
    /// another crate's (`lock_py_attached`).
    words: BTreeSet<String>,
}

impl Map {
    fn read(root: &Path) -> Self {
        let files = tree(root);
        let mut words = BTreeSet::new();
        let code = [".rs", ".py", ".lua", ".sql", ".js"];
        // Not this file: its own test cites names that exist nowhere else.
        let this = file!();
        for f in files
            .iter()
            .filter(|f| code.iter().any(|e| f.ends_with(e)) && f.as_str() != this)
        {
            let Ok(text) = std::fs::read_to_string(root.join(f)) else {
                continue;
            };
            words.extend(
                text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| w.contains('_'))
                    .map(str::to_owned),
            );
        }
        Self { files, words }
    }

    fn path_exists(&self, cited: &str, section: Option<&str>) -> bool {
        alternatives(cited).iter().all(|p| {
            let p = p.trim_end_matches('/');
            let rooted = ROOTS.iter().any(|r| format!("{p}/").starts_with(r))
                || ["README.md", "CHANGELOG.md", "Cargo.toml", "clippy.toml"].contains(&p);
            if rooted {
                return self.files.iter().any(|f| glob(p, f));
            }
            if is_crates(p) {
                return self
                    .files
                    .iter()
                    .any(|f| ["crates/", "testing/"].iter().any(|r| glob(&format!("{r}{p}"), f)));
            }
            let within = |f: &&String| section.is_none_or(|s| f.starts_with(&format!("{s}/")));
            self.files.iter().filter(within).any(|f| {
                f.rsplit_once('/').is_some_and(|_| {
                    // `p` ends `f` at a component boundary.
                    (0..f.len())
                        .filter(|&i| i == 0 || f.as_bytes()[i - 1] == b'/')
                        .any(|i| glob(p, &f[i..]))
                })
            })
        })
    }

    fn name_defined(&self, cited: &str) -> bool {
        match cited.strip_suffix('*') {
            Some(prefix) => self.words.iter().any(|d| d.starts_with(prefix)),
            None => self.words.contains(cited),
        }
    }
}

/// Each citation of the map that points at nothing: `line: what`.
fn dangling(map: &Map, doc: &str) -> Vec<String> {
    let mut section: Option<String> = None;
    let mut out = Vec::new();
    let mut in_code = false;
    for (i, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            section = heading
                .strip_prefix('`')
                .and_then(|h| h.split_once('`'))
                .map(|(path, _)| path.to_owned())
                .filter(|p| p.starts_with("crates/"));
        } else if line.starts_with("## ") {
            section = None;
        }
        for (n, cited) in line.split('`').enumerate() {
            if n % 2 == 0 {
                continue;
            }
            for part in cited.split_whitespace() {
                let part = part.trim_end_matches([',', ';', ':', ')']);
                if looks_like_path(part) {
                    if !map.path_exists(part, section.as_deref()) {
                        out.push(format!("line {}: the path `{part}`", i + 1));
                    }
                } else if let Some(name) = cited_name(part)
                    && !map.name_defined(name)
                {
                    out.push(format!("line {}: the name `{name}`", i + 1));
                }
            }
        }
    }
    out
}

#[test]
fn every_path_and_name_the_architecture_cites_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let map = Map::read(&root);
    let missing = dangling(&map, &doc);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md cites what is not in the tree:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_citation_of_nothing_is_found() {
    // The checker itself: a moved file, a renamed test, a file outside its
    // section's crate.
    let map = Map::read(&root());
    let doc = "### `crates/leasehold-backend` — the seam\n\
               - `plan.rs`, `resource.rs`, `crates/leasehold/src/gone.rs`, `tests/cli/{run,nowhere}.rs`\n\
               - `a_test_that_was_never_written`, `keeper::tests::nor_was_this_one`\n\
               ## Invariants\n\
               - `resource.rs`, `fence_*`, `crates/leasehold/src/*.rs`, `leasehold-faults/src/checker/rules.rs`\n";
    assert_eq!(
        dangling(&map, doc),
        [
            "line 2: the path `resource.rs`",
            "line 2: the path `crates/leasehold/src/gone.rs`",
            "line 2: the path `tests/cli/{run,nowhere}.rs`",
            "line 3: the name `a_test_that_was_never_written`",
            "line 3: the name `nor_was_this_one`",
        ]
    );
}
