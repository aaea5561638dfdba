//! Black-box tests of the real `leasehold` binary: one integration test
//! target (as ripgrep's and just's), one module per area.

mod backup;
mod clock;
mod damaged;
mod files;
mod grants;
mod help;
mod identity;
mod json;
mod lease;
mod limits;
mod lock;
mod logs;
mod mutants;
mod opening;
mod race;
mod redis;
mod restore;
mod run;
mod schedule;
mod serve;
mod slot_clock;
mod stop_signals;
mod task;
mod thousand;
mod util;
mod waiters;
mod work;

fn main() {
    leasehold_testkit::main_waiting(
        &[
            backup::TESTS,
            clock::TESTS,
            damaged::TESTS,
            files::TESTS,
            grants::TESTS,
            help::TESTS,
            identity::TESTS,
            json::TESTS,
            lease::TESTS,
            limits::TESTS,
            lock::TESTS,
            logs::TESTS,
            mutants::TESTS,
            opening::TESTS,
            race::TESTS,
            redis::TESTS,
            restore::TESTS,
            run::TESTS,
            schedule::TESTS,
            serve::TESTS,
            slot_clock::TESTS,
            stop_signals::TESTS,
            task::TESTS,
            thousand::TESTS,
            waiters::TESTS,
            work::TESTS,
        ],
        2,
    );
}
