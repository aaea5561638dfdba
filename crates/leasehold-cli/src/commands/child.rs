//! What `run` and `lock` share about the command they start: exit codes
//! (128+N for death by signal N, as shells report it), spawn errors
//! (127 not found, 126 not executable) and the terminal's foreground.

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// The shell's exit code for a command's status.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => 1,
    }
}

/// The shell's exit code for a command that could not be started.
pub fn spawn_error_code(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::NotFound => 127,
        _ => 126,
    }
}

/// The command line for messages.
pub fn display(argv: &[OsString]) -> String {
    argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Whether stdin is a terminal whose foreground process group is ours: a
/// ^C typed there reaches every process in our group directly.
pub fn terminal_foreground() -> bool {
    let stdin = io::stdin();
    let fd = stdin.as_fd();
    rustix::termios::isatty(fd) && rustix::termios::tcgetpgrp(fd).ok() == Some(rustix::process::getpgrp())
}
