//! Arguments of the commands about the store and the binary: backup,
//! migrate, serve, completions, man.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueHint};
use leasehold::limits;

use super::values::within;

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The new file to write (its directory must exist).
    pub dest: PathBuf,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// After restoring the store from an older copy: make every name's
    /// next token exceed every token the store may have issued by more
    /// than N — at least the most grants any one name could have had since
    /// the copy (on etcd: every write to the cluster since). Too large
    /// costs nothing. See README.md, "Restoring a store".
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=leasehold::TokensBumpParams::MAX), value_hint = ValueHint::Other)]
    pub bump_tokens: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (it must exist), e.g.
    /// ~/.local/share/man/man1.
    #[arg(value_hint = ValueHint::DirPath)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen: an address or a host name, and a port (127.0.0.1:7878,
    /// `[::1]:7878`, localhost:7878). Anything but loopback needs --token-file.
    #[arg(long, default_value = leasehold_serve::DEFAULT_LISTEN, value_name = "HOST:PORT", value_hint = ValueHint::Other)]
    pub listen: String,

    /// A file whose first line is the token (at least 16 characters):
    /// needed to read on a non-loopback address, and for every action.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Offer retrying dead tasks and purging done ones (always with the token).
    #[arg(long)]
    pub allow_actions: bool,

    /// How often the store is read (one reading serves every viewer).
    #[arg(long, default_value = "1s", value_parser = within(limits::HEARTBEAT), value_name = "DUR", value_hint = ValueHint::Other)]
    pub refresh: Duration,

    /// How long history entries followed by serve are kept in memory, so
    /// timelines reach back further than the store keeps (it prunes each
    /// name to its newest 1000 entries).
    #[arg(long, default_value = "7d", value_parser = within(limits::AGE), value_name = "DUR", value_hint = ValueHint::Other)]
    pub retention: Duration,

    /// Answer requests that reach the page by this name too (repeatable).
    /// Without it only localhost, IP addresses and the --listen host are
    /// answered: a page elsewhere cannot read this one through DNS
    /// rebinding.
    #[arg(long = "allow-host", value_name = "NAME", value_hint = ValueHint::Other)]
    pub allow_hosts: Vec<String>,
}
