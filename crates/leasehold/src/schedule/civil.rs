//! croner's search on jiff 1 times. croner 4 walks the wall clock on its
//! own civil types and asks a [`CronDateTime`] for everything a time zone
//! decides (is this wall-clock time skipped, repeated, or once?); it ships
//! that bridge for chrono and jiff 0.2 only. This is the same bridge for
//! jiff 1 (modelled on croner's `time/jiff_impl.rs`), so the build has one
//! date library, and no date arithmetic is written here: each method
//! converts and asks jiff.

use std::cmp::Ordering;

use croner::errors::CronError;
use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};
use jiff::tz::AmbiguousOffset;
use jiff::{SignedDuration, ZonedDateTime, civil::DateTime};

/// An instant in a schedule's time zone, as croner searches it.
#[derive(Debug, Clone)]
pub(super) struct Local(pub(super) ZonedDateTime);

fn to_civil(dt: DateTime) -> CivilDateTime {
    // jiff keeps every part in range, which is what the unchecked
    // constructors ask of their caller.
    CivilDateTime::new(
        CivilDate::from_parts_unchecked(i32::from(dt.year()), dt.month() as u32, dt.day() as u32),
        CivilTime::from_parts_unchecked(dt.hour() as u32, dt.minute() as u32, dt.second() as u32),
    )
}

/// croner's wall-clock time as jiff's; fails outside jiff's years
/// (-9999 to 9999).
fn to_jiff(civil: CivilDateTime) -> Result<DateTime, CronError> {
    let year = i16::try_from(civil.year()).map_err(|_| CronError::InvalidDate)?;
    DateTime::new(
        year,
        civil.month() as i8,
        civil.day() as i8,
        civil.hour() as i8,
        civil.minute() as i8,
        civil.second() as i8,
        0,
    )
    .map_err(|_| CronError::InvalidDate)
}

impl CronDateTime for Local {
    fn to_civil(&self) -> CivilDateTime {
        to_civil(self.0.datetime())
    }

    fn civil_weekday(&self) -> Weekday {
        Weekday::from_days_from_sunday(u32::from(self.0.weekday().to_sunday_zero_offset().unsigned_abs()))
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let ambiguous = self.0.time_zone().to_ambiguous_zoned_datetime(to_jiff(civil)?);
        let resolved = |r: Result<ZonedDateTime, jiff::Error>| r.map(Local).map_err(|_| CronError::InvalidTime);
        Ok(match ambiguous.offset() {
            AmbiguousOffset::Unambiguous { .. } => Resolution::Single(resolved(ambiguous.unambiguous())?),
            AmbiguousOffset::Fold { .. } => {
                Resolution::Ambiguous(resolved(ambiguous.clone().earlier())?, resolved(ambiguous.later())?)
            }
            AmbiguousOffset::Gap { .. } => Resolution::Gap,
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0.checked_add(SignedDuration::from_secs(seconds)).ok().map(Local)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        // The instant, not the wall clock: the two halves of a repeated
        // hour must compare unequal.
        self.0.timestamp().cmp(&other.0.timestamp())
    }
}
