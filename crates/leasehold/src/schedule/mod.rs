//! When a schedule fires: a schedule's specification ([`ScheduleSpec`]:
//! its text and time zone) and the instants it fires at, its *slots*.
//! Pure — no store, no clock of its own: the caller passes the time. The
//! schedules kept in the store and the `leasehold cron` daemon (issue 27)
//! are built on it: a daemon claims a slot in the store under (schedule,
//! slot time), so every daemon must compute the same slots from the same
//! spec, with no state shared but the spec.
//!
//! # The forms
//! - Cron, five fields (`30 2 * * *`) or six with seconds first
//!   (`*/10 * * * * *`), and the shorthands `@hourly`, `@daily`,
//!   `@weekly` (Sunday), `@monthly`, `@yearly` (`@annually`): read by
//!   croner (names of days and months, `L`, `W`, `#` too), matched against
//!   the wall clock of the schedule's zone.
//! - `@every DUR` (`@every 200ms`, `@every 5m`): slot *k* is the Unix
//!   epoch + *k* × DUR, whatever the zone. Anchored to the epoch so that
//!   the slots follow from the spec alone: every daemon on every machine,
//!   restarted or not, started early or late, meets the same instants and
//!   so claims the same keys in the store. Anchored to a daemon's start,
//!   two daemons would fire the same schedule at different instants (each
//!   a slot of its own: twice); anchored to when the schedule was added,
//!   every daemon would need that time read from the store first. DUR lies
//!   within [`leasehold_backend::limits::EVERY`] (100 ms to a year: why
//!   there), to the millisecond (what a store keeps a slot time to). An
//!   interval that divides a day lands on UTC midnight, not local: wall-
//!   clock times are what cron patterns are for.
//! - The zone: an IANA name (`Europe/Berlin`) or `UTC`, the default. Its
//!   rules come from the tz database compiled into leasehold (jiff's
//!   bundled copy), not from the machine's `/usr/share/zoneinfo`: two
//!   machines with different tzdata would otherwise disagree on a slot
//!   near a change of rules — and fire it twice. A newer tzdb comes with a
//!   newer leasehold.
//!
//! No date arithmetic is written here: croner walks the calendar, jiff
//! says what a wall-clock time is in a zone (`civil.rs` connects the two),
//! and `@every` counts elapsed nanoseconds.
//!
//! # Daylight saving
//! croner's rules, which are those of Vixie cron (whose man page: "jobs
//! which would have run in the time that was skipped will be run soon
//! after the change … those jobs that fall into the repeated time will
//! not be re-run"), with croner's reading of which jobs are at a fixed
//! time. docs/SCHEDULES.md ("Daylight saving") has them with examples;
//! each is a test in `daylight_saving.rs`.
//!
//! 1. A schedule at fixed times of day — plain numbers in its second,
//!    minute and hour fields, one value each or lists (`30 2 * * *`,
//!    `0,30 2 * * *`, `@daily`; a list is one pattern per listed time, up
//!    to 64: croner alone would read it as rule 3) — whose time is skipped
//!    when clocks go forward fires once, at the first instant after the
//!    gap (03:00 in Berlin on 2026-03-29; times listed in the gap share
//!    that one slot).
//! 2. Such a schedule whose time happens twice when clocks go back fires
//!    once, the first time round (02:30 CEST, not 02:30 CET, in Berlin on
//!    2026-10-25); a daemon that asks again inside the repeated hour is
//!    told the next day's slot.
//! 3. Every other cron schedule — a wildcard, step or range in the second,
//!    minute or hour field, such as `@hourly`, `30 * * * *`, `*/15 * * * *`
//!    or `0 2-3 * * *` — follows elapsed time: a skipped time does not
//!    happen and is not made up, a repeated time happens twice, an hour
//!    apart. So an hourly schedule fires every hour that passes, 23 on the
//!    short day and 25 on the long one. (Vixie cron treats only `*` in the
//!    minute or hour field this way.)
//! 4. `@every` is elapsed time from the epoch: no zone, no change of clock
//!    moves it.

mod check;
mod civil;
pub mod clock;
pub mod daemon;
mod error;
mod kept;
mod plan;
mod record;
mod spec;

pub use check::{GAP_SEARCH, GAP_SEARCH_SLOTS, JITTER_MAX};
pub use error::{Problem, ScheduleError};
pub use kept::{PRUNE_EVERY, SLOTS_KEPT, Schedules, SlotClaim};
/// What a record write expects to find ([`Schedules::report`]).
pub use leasehold_backend::Expect;
pub use plan::{Decision, ON_TIME, Watch, decide};
pub use record::{
    Action, CatchUp, Kept, Overlap, Schedule, ScheduleState, SlotOutcome, SlotRecord, queue_of, slot_task_id,
};
pub use spec::{DEFAULT_ZONE, SCHEDULE_TEXT_MAX, ScheduleSpec, Slots, SlotsBetween};

#[cfg(test)]
mod daylight_saving;
