//! The fault-injection harness of leasehold (docs/RELIABILITY.md), and the suite
//! that uses it (`tests/faults/`, one module per group of cases).
//!
//! # The pieces
//!
//! - [`sink::FencedSink`] — a separate SQLite database standing for "the
//!   resource the lease protects". Every write checks the writer's fencing
//!   token against the highest token accepted so far, writes, and appends
//!   an audit row `(seq, token, writer, verdict, boot-clock ns)` — all in
//!   one `BEGIN IMMEDIATE` transaction, so check and write are atomic.
//!   [`sink::FencedSink::check`] replays the audit in commit order and
//!   reports every accepted token lower than one accepted before it.
//! - [`grants::GrantLog`] — an append-only file where each client writes
//!   `start TOKEN PID NS` (fsync'd) *before* it uses a token and
//!   `end TOKEN PID NS` after it stopped using it (NS: boot clock, which
//!   all processes of the host share). [`grants::check`] reports a token
//!   granted twice and two exclusive holdings that overlap in time.
//! - [`check::Report`] — what both checkers return: a list of
//!   [`check::Violation`]s, each naming the tokens, processes and times
//!   involved, so that a failing test is understood from its output alone.
//! - Failpoints — `leasehold_backend::failpoint`: named crash (or stop) points in
//!   acquire/renew/release/claim/complete/write, armed with
//!   `LEASEHOLD_FAILPOINT=OP/STEP` in a binary built with the `failpoints`
//!   feature (the `cargo test --workspace` build has it).
//! - [`proc`] — where the `leasehold` binary is, a sandbox per trial (its
//!   own store and HOME), and process helpers (alive, root, boot clock).
//! - [`netns`] — a second test host: a network namespace linked by a
//!   veth pair on private addresses, to cut and heal (partition cases).
//! - [`tier`] — counts: the CI tier runs reduced counts; `LEASEHOLD_SOAK=1`
//!   (`scripts/soak`) runs the full counts of docs/RELIABILITY.md.
//! - The `faults-client` binary of this crate: the process a case runs
//!   under `leasehold run` (it logs its grant, writes to the sink, and logs
//!   the end of its holding — also on SIGTERM).
//!
//! # Adding a case
//!
//! 1. Put it in the module of its group under `tests/faults/` (or a new
//!    module listed in `tests/faults/main.rs`), named after the property.
//! 2. Take counts from [`tier::count`]`(ci, soak)`: the soak count is the
//!    docs/RELIABILITY.md figure; keep the whole CI tier well under five minutes on
//!    two cores.
//! 3. Log what happened (grant log, sink) and assert on
//!    [`check::Report::assert_clean`], which prints every violation. Print
//!    the figure the case reports with [`tier::figure`] (`FIGURE case N:
//!    ...`), which `scripts/soak` collects for docs/RELIABILITY.md.
//! 4. List it in its module's `TESTS` (the target runs on leasehold-testkit).
//!    A case that needs root calls `leasehold_testkit::need_root`; one that
//!    needs a server, a tool or a test network ends the same way where it is
//!    missing: reported as ignored with the reason (a failure under
//!    `CI=true`), never as passed.

pub mod check;
pub mod grants;
pub mod netns;
pub mod proc;
pub mod rng;
pub mod sink;
pub mod tier;
