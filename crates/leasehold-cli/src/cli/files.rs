//! The state-file commands' arguments: write and update.

use std::path::PathBuf;

use clap::{Args, ValueHint};
use leasehold::{LeaseName, Token};

use super::values::{Wait, parse_fence_token, parse_grant, parse_name, parse_wait};

// What `write` and `update` share.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// The state file. A symlink here is refused (write to the resolved path).
    pub file: PathBuf,

    /// Permission bits in octal (644, 0600). Default: the existing file's;
    /// 0644 less the umask for a new file.
    #[arg(long, value_parser = parse_mode, value_name = "OCTAL", value_hint = ValueHint::Other)]
    pub mode: Option<u32>,

    /// Refuse (exit 13, nothing changed) if a higher token was already
    /// written to FILE; otherwise record TOKEN durably first, then write.
    #[arg(long, value_parser = parse_fence_token, value_name = "TOKEN", value_hint = ValueHint::Other)]
    pub fence_token: Option<Token>,

    /// The lease TOKEN is of, recorded with it: a token of another lease is
    /// then refused (exit 13), naming both. Under `leasehold run`,
    /// `LEASEHOLD_NAME` is used when TOKEN is `LEASEHOLD_TOKEN`.
    #[arg(long, requires = "fence_token", value_parser = parse_name, value_name = "NAME", value_hint = ValueHint::Other)]
    pub fence_lease: Option<LeaseName>,

    /// FILE now belongs to the lease of --fence-lease: a record of another
    /// lease is replaced by TOKEN, whatever the tokens.
    #[arg(long, requires = "fence_lease")]
    pub fence_new_lease: bool,

    /// Replace FILE even when it has other hard links (they keep the old
    /// content). Without it such a FILE is refused (exit 65), unchanged.
    #[arg(long)]
    pub break_hard_links: bool,

    /// When another writer or update holds FILE.lock, wait at most DUR
    /// (then exit 11, FILE unchanged). Default: as long as it takes, saying
    /// on stderr who holds it.
    #[arg(long, value_name = "DUR", value_parser = parse_wait, value_hint = ValueHint::Other)]
    pub wait: Option<Wait>,

    /// The fence record (default: FILE.fence). Files sharing one record are
    /// fenced together.
    #[arg(long, requires = "fence_token", value_name = "PATH")]
    pub fence_file: Option<PathBuf>,

    /// The grant holding TOKEN (16 hex digits), recorded with it: another
    /// grant with the same token (a store restored from a backup) is then
    /// refused. Under `leasehold run`, `LEASEHOLD_GRANT` is used when TOKEN
    /// is `LEASEHOLD_TOKEN`.
    #[arg(long, requires = "fence_token", value_parser = parse_grant, value_name = "GRANT", value_hint = ValueHint::Other)]
    pub fence_grant: Option<leasehold::GrantId>,
}

pub(super) fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 && !digits.starts_with('+') => Ok(mode),
        _ => Err(format!(
            "{} is not a file mode; write octal permission bits such as 644 or 0600",
            leasehold::quoted(s)
        )),
    }
}

// `lock`, `write` and `update` open no store: `--store` (global, so
// accepted, e.g. from LEASEHOLD_STORE) is left out of their help.
#[derive(Debug, Args)]
#[command(mut_arg("store", |a| a.hide(true)))]
pub struct WriteArgs {
    #[command(flatten)]
    pub file: FileArgs,
}

#[derive(Debug, Args)]
#[command(mut_arg("store", |a| a.hide(true)))]
pub struct UpdateArgs {
    #[command(flatten)]
    pub file: FileArgs,

    /// What the filter reads when FILE does not exist yet. Default: `null`
    /// with --json (so `jq '.runs += 1'` starts from nothing), else empty.
    #[arg(long, value_name = "CONTENT", value_hint = ValueHint::Other)]
    pub init: Option<String>,

    /// The filter and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "FILTER")]
    pub filter: Vec<std::ffi::OsString>,
}
