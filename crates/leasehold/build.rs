//! The guard's build ([`GUARD_BUILD`](leasehold::supervise::GUARD_BUILD)):
//! the version and a hash of this crate's sources, which hold the guard
//! and its protocol. A supervisor passes it to the guard program it starts,
//! and a guard program built from other sources — left beside a program
//! that was upgraded alone, found on `$PATH`, a stale build in `target/` —
//! starts nothing. A hash, not a commit: a build from a source archive
//! has no git, and an uncommitted change must count too.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    files.sort();
    // FNV-1a: the same on every toolchain (std's hasher is not promised to be).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for path in &files {
        let content = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let name = path.to_string_lossy();
        for byte in name
            .as_bytes()
            .iter()
            .chain([0u8].iter())
            .chain(&content)
            .chain([0u8].iter())
        {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=LEASEHOLD_GUARD_BUILD={version}-{hash:016x}");
}

fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            sources(&path, files);
        } else {
            files.push(path);
        }
    }
}
