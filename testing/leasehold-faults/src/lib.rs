//! The fault-injection harness of leasehold (docs/RELIABILITY.md), and the suite
//! that uses it (`tests/faults/`, one module per group of cases).
//!
//! # The pieces
//!
//! - [`history::History`] — the recorder: one append-only file per test
//!   where every process (the commands under `leasehold run`, the test's
//!   own threads) writes what happened, one line per event: grants (who:
//!   grant id and token; when: asked for and answered, on the boot clock
//!   that all processes share), the end of each holding, and every attempt
//!   on a resource (before it is made, and its answer after).
//! - [`resource::FencedResource`] — what a lease protects: a state file
//!   written through leasehold's own fence (`FencedFile` with the token and
//!   the grant). It asks leasehold and records the answer; it decides
//!   nothing. The cases record the store's fence gate (`leasehold fence`),
//!   `leasehold write --fence-token` and the queue's completions as
//!   attempts too; a command's own activity is recorded unfenced.
//! - [`checker`] — the one judge: it reads a history with its own parser
//!   and shares no code with what it checks (not leasehold's plans, rules
//!   or fences, not the recorder). Tokens strictly rise in real-time order
//!   and are never reissued; no two exclusive holdings overlap; no write
//!   passes the store's gate after a newer grant was issued, and no fence
//!   record goes back; a holder's own activity ends before the next grant
//!   (and before the store could expire its grant); nothing acknowledged
//!   is lost. Its [`checker::Report`] names the tokens, grants, holders
//!   and times of each violation, so that a failing case is understood
//!   from its output alone; its counts are the figures of
//!   docs/RELIABILITY.md.
//! - Failpoints — `leasehold_backend::failpoint`: named crash (or stop) points in
//!   acquire/renew/release/claim/complete/write, armed with
//!   `LEASEHOLD_FAILPOINT=OP/STEP` in a binary built with the `failpoints`
//!   feature (the `cargo test --workspace` build has it).
//! - [`proc`] — where the `leasehold` binary is, a sandbox per trial (its
//!   own store and HOME), and process helpers (signals, root, boot clock).
//!   The servers, the test network of the partition cases and the other
//!   test support come from `leasehold_testkit`.
//! - [`tier`] — counts: the CI tier runs reduced counts; `LEASEHOLD_SOAK=1`
//!   (`scripts/soak`) runs the full counts of docs/RELIABILITY.md.
//! - The `faults-client` binary of this crate: the process a case runs
//!   under `leasehold run`, `work` or `lock` (it records its grant, writes to a
//!   [`resource::FencedResource`] every 2 ms, and records the end of its
//!   holding — also on SIGTERM; it fails when leasehold refused every write).
//!
//! # Adding a case
//!
//! 1. Put it in the module of its group under `tests/faults/` (or a new
//!    module listed in `tests/faults/main.rs`), named after the property.
//! 2. Take counts from [`tier::count`]`(ci, soak)`: the soak count is the
//!    docs/RELIABILITY.md figure; keep the whole CI tier well under five minutes on
//!    two cores.
//! 3. Record what happened in the sandbox's history (`tests/faults/common.rs`
//!    has the helpers), judge it with [`checker::check_file`] — a history
//!    that cannot be read fails the case — and assert on
//!    [`checker::Report::assert_clean`], which prints every violation. A
//!    case asserts its own premise too (the fault happened, the late write
//!    was attempted): a checker judging an empty history passes. Print
//!    the figure the case reports with [`tier::figure`] (`FIGURE case N:
//!    ...`), which `scripts/soak` collects for docs/RELIABILITY.md.
//! 4. List it in its module's `TESTS` (the target runs on leasehold-testkit).
//!    A case that needs root calls `leasehold_testkit::need_root`; one that
//!    needs a server, a tool or a test network ends the same way where it is
//!    missing: reported as ignored with the reason (a failure under
//!    `CI=true`), never as passed.

pub mod checker;
pub mod history;
pub mod proc;
pub mod resource;
pub mod rng;
pub mod tier;
