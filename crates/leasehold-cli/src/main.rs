//! The `leasehold` command. `main` only hands over to [`run::run`], which
//! maps every outcome to an exit code in one place.
//!
//! `main` is the C entry point rather than Rust's (`no_main`): Rust's own
//! start-up reads `/proc/self/maps` to place a stack-overflow handler — a
//! seventh of `leasehold --version`'s instructions, and four system calls
//! on every call, for a message on a stack overflow. `main` does the rest
//! of what that start-up does: SIGPIPE ignored (a write to a closed pipe is
//! an error, not death: the guard must outlive its supervisor's pipes),
//! closed stdin, stdout or stderr opened on `/dev/null` (a store or lock
//! file must never become descriptor 1), a panic is exit 101, and stdout is
//! flushed at the end.
//!
//! Not on musl (the static release binaries): musl passes no arguments to
//! `.init_array` functions, where std reads them on glibc, so under
//! `no_main` `std::env::args()` is empty there (seen: the static binary
//! answered `--version` with the usage message). There Rust's own start-up
//! runs, which does all of the above itself.
#![cfg_attr(all(not(test), not(target_env = "musl")), no_main)]
// The unit-test build has libtest's main, and none of this is called.
#![cfg_attr(test, allow(dead_code))]

mod cli;
mod commands;
mod exit_codes;
mod logging;
mod output;
mod run;
mod version;

#[cfg(all(not(test), not(target_env = "musl")))]
#[unsafe(no_mangle)]
#[allow(
    unsafe_code,
    reason = "the C entry point, and the two libc calls Rust's start-up makes before main"
)]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: one thread so far; setting a signal's disposition and
    // opening /dev/null on a closed descriptor number are what the C
    // runtime's users do before anything else runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            }
        }
    }
    let code = std::panic::catch_unwind(run::run).unwrap_or(101);
    // As returning from Rust's main would.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    libc::c_int::from(code)
}

#[cfg(all(not(test), target_env = "musl"))]
fn main() -> std::process::ExitCode {
    // A panic is exit 101 and stdout is flushed by Rust's start-up here.
    std::process::ExitCode::from(run::run())
}
