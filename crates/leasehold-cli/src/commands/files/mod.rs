//! State file commands: write, update.

pub mod update;
pub mod write;

use leasehold::files::{Fence, FencedFile, LockWait, WriteOptions};

use crate::cli::FileArgs;
use crate::commands::Ctx;

/// `--json` means the content is JSON (validated) and the report is JSON.
fn options(ctx: &Ctx, args: &FileArgs) -> WriteOptions {
    WriteOptions {
        mode: args.mode,
        json: ctx.global.json,
        break_hard_links: args.break_hard_links,
        wait: args.wait.and_then(crate::cli::Wait::timeout),
        on_wait: Some(say_waiting),
    }
}

/// A write that must wait for FILE.lock says so, naming the holder: a
/// hung filter of another `update` must not block it silently.
fn say_waiting(wait: &LockWait<'_>) {
    eprintln!("leasehold: {wait}");
}

fn fenced(args: &FileArgs) -> FencedFile {
    let file = FencedFile::new(&args.file);
    let file = match &args.fence_file {
        Some(fence) => file.with_fence_record(fence),
        None => file,
    };
    // The lease: named, or that of the `run` whose token this is.
    let lease = args
        .fence_lease
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| args.fence_token.and_then(leasehold::files::lease_from_env));
    file.with_lease(lease, args.fence_new_lease)
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
