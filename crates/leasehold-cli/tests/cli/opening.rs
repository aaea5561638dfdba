//! Which stores a command makes (issue 39, item 12): one that only reads
//! never creates a store, and a store in memory is warned about.

use crate::util::Env;

pub const TESTS: &[leasehold_testkit::Test] = leasehold_testkit::tests![
    a_command_that_only_reads_never_creates_a_store,
    a_store_on_tmpfs_is_warned_about_when_made_and_by_doctor,
];

/// A mistyped path (its directory missing, or only its file) is an error
/// naming it — 69, so that `list --live` never tells a script nobody holds
/// — and afterwards nothing is there: no directory, no empty store.
fn a_command_that_only_reads_never_creates_a_store() {
    let env = Env::new();
    env.acquire(&["job"]);
    let dir = env.store_path().parent().unwrap().to_owned();
    for typo in [dir.join("typo").join("leasehold.db"), dir.join("leasehold.bd")] {
        let url = format!("sqlite://{}", typo.display());
        for args in [
            vec!["status", "job"],
            vec!["status"],
            vec!["list"],
            vec!["list", "--live"],
            vec!["history", "job"],
        ] {
            let mut all = vec!["--store", url.as_str()];
            all.extend_from_slice(&args);
            let (code, out, err) = env.run(&all);
            assert_eq!(code, 69, "{args:?} on {url}: {out}{err}");
            assert!(
                err.contains(&typo.display().to_string()) && err.contains("nothing was created"),
                "{args:?}: {err}"
            );
        }
        let (code, out, _) = env.run(&["--store", &url, "doctor"]);
        assert_eq!(code, 1, "doctor on {url}: {out}");
        assert!(
            out.contains("FAIL store") && out.contains("nothing was created"),
            "{out}"
        );
        assert!(!typo.exists(), "{} was created", typo.display());
        assert!(!dir.join("typo").exists(), "the mistyped directory was created");
    }
    // The store itself is still read as ever.
    let (code, out, err) = env.run(&["status", "job"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A store on tmpfs loses everything at reboot and starts its tokens at 1
/// again: said when it is made and by `doctor` (a warning: doctor passes).
fn a_store_on_tmpfs_is_warned_about_when_made_and_by_doctor() {
    let fs = leasehold_testkit::Tmpfs::mount("4m");
    let env = Env::new();
    let url = format!("sqlite://{}", fs.path().join("s.db").display());
    let (code, out, err) = env.run(&["--store", &url, "acquire", "job"]);
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    assert!(
        err.contains("is on tmpfs, a filesystem in memory") && err.contains("tokens restarting at 1"),
        "{err}"
    );
    // Once, when made: later commands on it do not repeat it.
    let (code, _, err) = env.run(&["--store", &url, "acquire", "other"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("tmpfs"), "{err}");
    let (code, out, err) = env.run(&["--store", &url, "doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().any(|l| l.starts_with("warn") && l.contains("tmpfs")),
        "{out}"
    );
}
