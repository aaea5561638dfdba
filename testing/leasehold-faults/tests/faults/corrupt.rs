//! Bad input (fault cases 21 and 22): corrupt store files and hostile
//! names. A bad file gets a clear error and a distinct exit code (65 bad
//! data, 69 unavailable), never a panic (exit 101), is never overwritten or
//! followed, and the token counter is never silently reset.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold::{Acquire, AcquireOptions, LeaseName, Store};
use leasehold_faults::checker::Report;
use leasehold_faults::proc::{self, Sandbox};
use leasehold_faults::rng::Rng;
use leasehold_faults::tier::{count, figure, soak};
use leasehold_testkit::wait::wait_until;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    case21_corrupt_store_files_get_a_clear_error_and_are_never_reset_or_overwritten,
    case21_a_store_missing_a_table_is_refused_by_every_command_and_left_unchanged,
    case21_a_store_path_that_is_not_utf8_is_no_panic,
    case22_hostile_and_generated_names_are_refused_or_stored_exactly,
];

/// A small store whose token counter of `job` is at 7 (no process has it open).
fn small_store() -> (Sandbox, Vec<u8>) {
    let sb = Sandbox::new();
    for _ in 0..7 {
        let t = sb.try_acquire("job", "60s").unwrap();
        assert_eq!(sb.run(&["release", "job", "--token", &t.to_string()]).0, 0);
    }
    assert_eq!(sb.run(&["task", "add", "q", "--id", "t1"]).0, 0);
    // leasehold keeps the log between calls; the variants are of the store
    // file alone, so fold the log into it (SQLite itself, closing the last
    // connection without keeping the log, then removes it).
    let conn = rusqlite::Connection::open(sb.store_path()).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    assert!(
        !Path::new(&format!("{}-wal", sb.store_path().display())).exists(),
        "the WAL was not checkpointed"
    );
    let bytes = std::fs::read(sb.store_path()).unwrap();
    (sb, bytes)
}

/// What one corrupt variant did.
#[derive(Debug, Default)]
struct Tally {
    variants: usize,
    refused: usize,
    /// Opened and worked with the counter intact (harmless damage).
    harmless: usize,
    /// Opened, and the counter went back (damage SQLite cannot see).
    silent: usize,
}

/// Put `bytes` at the store path and run `acquire job`; judge the outcome.
fn judge(sb: &Sandbox, what: &str, bytes: &[u8], tally: &mut Tally, report: &mut Report, reset_is_violation: bool) {
    let store = sb.store_path();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", store.display()));
    }
    // Write through a fresh file (the variant under test, not leasehold's code).
    let mut f = std::fs::File::create(&store).unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
    drop(f);
    tally.variants += 1;
    let (code, out, err) = run_bounded(sb, &["acquire", "job", "--ttl", "1s"]);
    match code {
        65 | 69 => {
            tally.refused += 1;
            if std::fs::read(&store).unwrap() != bytes {
                report.push("overwritten", format!("{what}: exit {code} but the file was changed"));
            }
            if !err.contains(&store.display().to_string()) && !err.contains("store") {
                report.push(
                    "unclear",
                    format!("{what}: exit {code} without naming the store: {err}"),
                );
            }
        }
        0 => match out.trim().parse::<u64>() {
            Ok(t) if t > 7 => tally.harmless += 1,
            Ok(t) => {
                tally.silent += 1;
                if reset_is_violation {
                    report.push(
                        "counter-reset",
                        format!("{what}: opened, and handed out token {t} (counter was 7)"),
                    );
                }
            }
            Err(_) => report.push("bad-output", format!("{what}: exit 0 but printed {out:?}")),
        },
        101 => report.push("panic", format!("{what}: panicked: {err}")),
        c if c < 0 => report.push("signal", format!("{what}: killed by signal {}: {err}", -c)),
        c => report.push("exit-code", format!("{what}: exit {c}, not 65/69: {err}")),
    }
}

/// Run leasehold, killing it after 20 s (a FIFO must not hang it).
fn run_bounded(sb: &Sandbox, args: &[&str]) -> (i32, String, String) {
    let mut child = sb
        .cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if wait_until(Duration::from_secs(20), || child.try_wait().unwrap().is_some()).is_none() {
        let _ = child.kill();
        return (-999, String::new(), "hung for 20 s".into());
    }
    proc::outcome(&child.wait_with_output().unwrap())
}

/// fault case 21: a store file truncated at every length (CI: a stride), with
/// bit flips, with each page overwritten by garbage, and other things at
/// the store path (FIFO, directory, symlink, huge sparse file, bad UTF-8
/// path, a future schema).
fn case21_corrupt_store_files_get_a_clear_error_and_are_never_reset_or_overwritten() {
    let (sb, good) = small_store();
    let mut report = Report::new("corrupt store files");
    let mut trunc = Tally::default();
    let stride = if soak() { 1 } else { 509 };
    for len in (0..good.len()).step_by(stride).chain([1, 99, 100, 512]) {
        judge(
            &sb,
            &format!("truncated to {len} bytes"),
            &good[..len],
            &mut trunc,
            &mut report,
            true,
        );
    }
    let mut flips = Tally::default();
    let mut rng = Rng::from_env("case 21 bit flips");
    for _ in 0..count(60, 3000) {
        let mut bytes = good.clone();
        let bit = rng.below(bytes.len() as u64 * 8);
        bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
        // SQLite keeps no page checksums: a flip inside a stored value can
        // change it unseen. Counted (`silent`), not a violation.
        judge(
            &sb,
            &format!("bit {bit} flipped"),
            &bytes,
            &mut flips,
            &mut report,
            false,
        );
    }
    let mut pages = Tally::default();
    let page_size = usize::from(u16::from_be_bytes([good[16], good[17]])).max(512);
    for page in 0..good.len() / page_size {
        let mut bytes = good.clone();
        for (i, b) in bytes[page * page_size..(page + 1) * page_size].iter_mut().enumerate() {
            *b = (i * 31 + 7) as u8;
        }
        judge(
            &sb,
            &format!("page {} overwritten", page + 1),
            &bytes,
            &mut pages,
            &mut report,
            false,
        );
    }
    let others = other_things_at_the_store_path(&mut report);
    figure(
        21,
        &format!(
            "{} violations (panics, silent resets, overwrites, follows); truncations: {} lengths, {} refused, {} silent; \
             bit flips: {}, {} refused, {} harmless, {} changed a value unseen (no page checksums in SQLite); \
             damaged pages: {}, {} refused, {} harmless, {} unseen; {others} other things at the path",
            report.total(),
            trunc.variants,
            trunc.refused,
            trunc.silent,
            flips.variants,
            flips.refused,
            flips.harmless,
            flips.silent,
            pages.variants,
            pages.refused,
            pages.harmless,
            pages.silent
        ),
    );
    report.assert_clean();
}

fn other_things_at_the_store_path(report: &mut Report) -> usize {
    let mut n = 0;
    let mut check = |what: &str, sb: &Sandbox| {
        n += 1;
        let (code, _, err) = run_bounded(sb, &["acquire", "job"]);
        if code != 65 && code != 69 {
            report.push("exit-code", format!("{what}: exit {code}, not 65/69: {err}"));
        }
    };
    let sb = Sandbox::new();
    // mkfifo(1), not mknodat: macOS has no mknodat for a FIFO, and this
    // suite type-checks there too (scripts/check-macos).
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(sb.store_path())
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo failed");
    check("a FIFO", &sb);
    let sb = Sandbox::new();
    std::fs::create_dir(sb.store_path()).unwrap();
    check("a directory", &sb);
    let sb = Sandbox::new();
    let (victim, _) = small_store();
    symlink(victim.store_path(), sb.store_path()).unwrap();
    let before = std::fs::read(victim.store_path()).unwrap();
    check("a symlink to a store", &sb);
    let followed = std::fs::read(victim.store_path()).unwrap() != before;
    let sb = Sandbox::new();
    let f = std::fs::File::create(sb.store_path()).unwrap();
    f.set_len(1 << 40).unwrap(); // a 1 TiB sparse file of zeros
    check("a huge sparse file", &sb);
    // A future schema: user_version above this build's.
    let (sb, _) = small_store();
    let conn = rusqlite::Connection::open(sb.store_path()).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    check("a future schema", &sb);
    if followed {
        report.push("followed", "the symlink's target was changed".to_owned());
    }
    n
}

/// The store's tables; each is dropped in turn by case 21.
const TABLES: [&str; 5] = ["lease_name", "lease_grant", "lease_waiter", "lease_history", "task"];

/// Every command that opens the store, with arguments it accepts (for the
/// store of `small_store`).
const STORE_COMMANDS: &[&[&str]] = &[
    &["acquire", "job"],
    &["renew", "job", "--token", "7"],
    &["release", "job", "--token", "7"],
    &["fence", "job", "--token", "7"],
    &["status", "job"],
    &["list"],
    &["history", "job"],
    &["run", "job", "--", "true"],
    &["migrate"],
    &["task", "add", "q", "--id", "t2"],
    &["task", "claim", "q"],
    &["task", "heartbeat", "q", "t1", "--token", "1"],
    &["task", "done", "q", "t1", "--token", "1"],
    &["task", "fail", "q", "t1", "--token", "1"],
    &["task", "retry", "q", "t1"],
    &["task", "list", "q"],
    &["task", "show", "q", "t1"],
    &["task", "stats"],
    &["task", "purge", "q", "--state", "done", "--older-than", "1s"],
    &["work", "q", "--", "true"],
];

/// fault case 21, a damaged schema: each of the store's tables dropped in turn
/// (as `sqlite3 store.db 'drop table …'`). Every command refuses with exit
/// 65 (bad data, not 69 "retry"), names what is missing, and leaves the
/// file byte for byte as it was — nothing is recreated, which for
/// `lease_name` would restart the token counters.
fn case21_a_store_missing_a_table_is_refused_by_every_command_and_left_unchanged() {
    let mut report = Report::new("dropped tables");
    let mut runs = 0;
    for table in TABLES {
        let (sb, _) = small_store();
        let conn = rusqlite::Connection::open(sb.store_path()).unwrap();
        conn.execute_batch(&format!("DROP TABLE {table}")).unwrap();
        drop(conn);
        let before = std::fs::read(sb.store_path()).unwrap();
        for args in STORE_COMMANDS {
            runs += 1;
            let what = format!("{table} dropped, `{}`", args.join(" "));
            let (code, _, err) = run_bounded(&sb, args);
            if code != 65 {
                report.push("exit-code", format!("{what}: exit {code}, not 65: {err}"));
            } else if !err.contains(&format!("missing {table}")) || !err.contains("backup") {
                report.push(
                    "unclear",
                    format!("{what}: does not say what is missing and what to do: {err}"),
                );
            }
            if std::fs::read(sb.store_path()).unwrap() != before {
                report.push("overwritten", format!("{what}: the store file was changed"));
            }
        }
    }
    figure(
        21,
        &format!(
            "dropped tables: {} violations (exit other than 65, unclear message, file changed) in {runs} runs ({} tables x {} commands)",
            report.total(),
            TABLES.len(),
            STORE_COMMANDS.len()
        ),
    );
    report.assert_clean();
}

/// A non-UTF-8 store path works or is refused clearly (never a panic).
fn case21_a_store_path_that_is_not_utf8_is_no_panic() {
    use std::os::unix::ffi::OsStrExt as _;
    let sb = Sandbox::new();
    let path = sb.path().join(std::ffi::OsStr::from_bytes(b"st\xffore.db"));
    let mut url = b"sqlite://".to_vec();
    url.extend_from_slice(path.as_os_str().as_bytes());
    let out = sb
        .cmd(&["acquire", "job"])
        .env("LEASEHOLD_STORE", std::ffi::OsStr::from_bytes(&url))
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        matches!(code, 0 | 2 | 65 | 69),
        "exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Names hostile to a path, a line format or SQL, then generated ones.
fn hostile() -> Vec<String> {
    let mut v: Vec<String> = [
        "../../etc/passwd",
        "/abs",
        "",
        "job",
        "job/1",
        "job\ntoken=999",
        "a\0b",
        "'; DROP TABLE lease_name; --",
        "\"",
        ".",
        "..",
        "-rf",
        " job",
        "job ",
        "\u{202e}job",
        "jöb",
        "%00",
        "*",
        "job\r",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    v.push("a".repeat(255));
    v.push("a".repeat(256));
    v.push("é".repeat(200));
    v
}

/// fault case 22: 100,000 generated names (plus the hostile classics) through
/// `LeaseName::new`; every accepted one is stored exactly (a sample of them
/// through a real store, CI: 300, soak: 10,000); nothing is written
/// outside the store's directory; no two names collide.
fn case22_hostile_and_generated_names_are_refused_or_stored_exactly() {
    let mut rng = Rng::from_env("case 22");
    let mut names = hostile();
    for _ in 0..100_000 {
        let bytes = rng.bytes(40);
        names.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    let mut report = Report::new(format!("{} names", names.len()));
    let mut accepted = std::collections::BTreeSet::new();
    for n in &names {
        if let Ok(name) = LeaseName::new(n.clone()) {
            if name.as_str() != n {
                report.push("altered", format!("{n:?} became {:?}", name.as_str()));
            }
            accepted.insert(n.clone());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(&dir.path().join("db").join("leasehold.db")).unwrap();
    let sample: Vec<&String> = accepted.iter().take(count(300, 10_000)).collect();
    for n in &sample {
        let name = LeaseName::new((*n).clone()).unwrap();
        let Acquire::Acquired(g) = store.try_acquire(&name, &AcquireOptions::default()).unwrap() else {
            report.push(
                "collision",
                format!("{n:?} was already held: it collided with another name"),
            );
            continue;
        };
        if g.name.as_str() != n.as_str() {
            report.push("altered", format!("{n:?} stored as {:?}", g.name.as_str()));
        }
    }
    let listed: std::collections::BTreeSet<String> = store
        .list(true)
        .unwrap()
        .into_iter()
        .map(|s| s.name.as_str().to_owned())
        .collect();
    let wanted: std::collections::BTreeSet<String> = sample.iter().map(|s| (*s).clone()).collect();
    if listed != wanted {
        report.push("list", format!("{} listed, {} stored", listed.len(), wanted.len()));
    }
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    if outside != [std::ffi::OsString::from("db")] {
        report.push("escape", format!("files beside the store's directory: {outside:?}"));
    }
    for hostile in [
        "../../etc/passwd",
        "/abs",
        "job\ntoken=999",
        "a\0b",
        "'; DROP TABLE lease_name; --",
    ] {
        if accepted.contains(hostile) {
            eprintln!("accepted (and stored exactly): {hostile:?}");
        }
    }
    figure(
        22,
        &format!(
            "{} escapes/injections/collisions/alterations in {} names ({} accepted, {} stored and listed back exactly)",
            report.total(),
            names.len(),
            accepted.len(),
            sample.len()
        ),
    );
    report.assert_clean();
}
