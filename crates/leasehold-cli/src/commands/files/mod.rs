//! State file commands: write, update.

pub mod update;
pub mod write;

use leasehold::files::{Fence, FencedFile, WriteOptions};

use crate::cli::FileArgs;
use crate::commands::Ctx;

/// `--json` means the content is JSON (validated) and the report is JSON.
fn options(ctx: &Ctx, args: &FileArgs) -> WriteOptions {
    WriteOptions {
        mode: args.mode,
        json: ctx.global.json,
    }
}

fn fenced(args: &FileArgs) -> FencedFile {
    let file = FencedFile::new(&args.file);
    match &args.fence_file {
        Some(fence) => file.with_fence_record(fence),
        None => file,
    }
}

/// The fence of `--fence-token` and `--fence-grant` (see
/// [`crate::commands::fence_of`]).
fn fence(args: &FileArgs) -> anyhow::Result<Option<Fence>> {
    args.fence_token
        .map(|token| {
            crate::commands::fence_of(token, args.fence_grant, || {
                format!("{} is unchanged (pass --fence-grant, or unset it)", args.file.display())
            })
        })
        .transpose()
}

/// Success is quiet, as `cp`; with `--json`, one document saying what was written.
fn written(ctx: &Ctx, args: &FileArgs, fence: Option<Fence>, bytes: usize) {
    if ctx.global.json {
        crate::output::print_json(&leasehold::json::Written {
            file: &args.file,
            written: true,
            bytes,
            fence_token: args.fence_token,
            fence_grant: fence.and_then(|f| f.grant).map(|g| g.to_string()),
            fence_file: args.fence_token.map(|_| fenced(args).fence_path()),
        });
    }
}
