//! `leasehold backup DEST`: a consistent copy of the store while it is in
//! use (`Store::backup`), for README.md's "Restoring a store".

use leasehold::{ErrorKind, format_time};

use crate::cli::BackupArgs;
use crate::commands::Ctx;
use crate::exit_codes::{ExitCode, Subject};
use crate::output;
use crate::run::{CliError, remedy_words};

pub fn run(ctx: &Ctx, args: &BackupArgs) -> anyhow::Result<u8> {
    let store = ctx.open_store()?;
    let copy = match store.backup(&args.dest) {
        Ok(copy) => copy,
        // The store opened and was read: a full disk, a read-only
        // filesystem or a permission refused is DEST's, a local file — as
        // under a state file, 1, not the store's 69, which would mislead.
        Err(leasehold::Error::Store(e))
            if matches!(
                e.kind(),
                ErrorKind::DiskFull | ErrorKind::ReadOnly | ErrorKind::Permission
            ) =>
        {
            return Err(CliError::new(ExitCode::of(e.kind(), Subject::File), e.message_with(remedy_words)).into());
        }
        Err(e) => return Err(e.into()),
    };
    let url = store.url().redacted();
    let taken_at = format_time(copy.taken_at);
    if ctx.global.json {
        output::print_json(&leasehold::json::BackedUp {
            location: &url,
            path: &copy.path,
            bytes: copy.bytes,
            taken_at,
        });
    } else {
        println!(
            "backed up {url} to {} ({} bytes, as of {taken_at})",
            copy.path.display(),
            copy.bytes
        );
    }
    Ok(ExitCode::Success.code())
}
