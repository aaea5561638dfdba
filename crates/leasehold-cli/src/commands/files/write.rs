use std::io::Read as _;

use anyhow::Context as _;

use crate::cli::WriteArgs;
use crate::commands::Ctx;
use crate::exit_codes::ExitCode;

pub fn run(ctx: &Ctx, args: &WriteArgs) -> anyhow::Result<u8> {
    let args = &args.file;
    let mut data = Vec::new();
    std::io::stdin().lock().read_to_end(&mut data).with_context(|| {
        format!(
            "cannot read the new content of {} from standard input; it is unchanged",
            args.file.display()
        )
    })?;
    let options = super::options(ctx, args);
    let fence = super::fence(args)?;
    match fence {
        Some(fence) => super::fenced(args).write(fence, &data, &options)?,
        None => leasehold::files::write_locked(&args.file, &data, &options)?,
    }
    super::written(ctx, args, fence, data.len());
    Ok(ExitCode::Success.code())
}
