//! `leasehold man DIR`: the manual pages, generated from the command's own
//! definition (`clap_mangen`) — `leasehold.1` and one page per subcommand
//! (`leasehold-task-add.1`) — written into DIR. `scripts/dist` puts them
//! in every archive and wheel; a build from source writes them with this.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;
use crate::output;
use crate::run::CliError;

pub fn run(ctx: &Ctx, args: &ManArgs) -> anyhow::Result<u8> {
    let dir = &args.dir;
    if !dir.is_dir() {
        return Err(CliError::new(
            ExitCode::Usage,
            format!(
                "{} is not a directory: create it first (mkdir -p {0}), or name another",
                dir.display()
            ),
        )
        .into());
    }
    let mut written = Vec::new();
    for page in pages() {
        let man = clap_mangen::Man::new(page);
        let name = man.get_filename();
        let mut text = Vec::new();
        man.render(&mut text)?;
        let path = dir.join(&name);
        write(&path, &text).map_err(|e| {
            CliError::new(
                ExitCode::Failure,
                format!("cannot write the manual page {}: {e}", path.display()),
            )
        })?;
        written.push(name);
    }
    if ctx.global.json {
        output::print_json(&leasehold::json::ManPages {
            dir,
            pages: written.iter().map(String::as_str).collect(),
        });
    } else {
        println!("wrote {} manual pages into {}", written.len(), dir.display());
    }
    Ok(ExitCode::Success.code())
}

/// The command and every subcommand a user can type, each named as its
/// page is (`leasehold-task-add`): what `clap_mangen::generate_to` walks,
/// written here so that each page is written without following a link.
fn pages() -> Vec<clap::Command> {
    fn walk(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
        out.push(cmd.clone());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out);
        }
    }
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut out);
    out
}

/// Write `text` to `path`, replacing a page there, never through a link
/// planted in its place (`O_NOFOLLOW`: refused, ELOOP).
fn write(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(text)?;
    file.sync_all()
}
