//! Why a schedule's text or zone was refused: [`ScheduleError`], one
//! message that quotes the text, says what is wrong and shows the right
//! form.

use leasehold_backend::limits::OutOfRange;
use leasehold_backend::quoted;

/// A schedule's text or time zone that cannot be used; nothing about it is
/// kept. The text is quoted cut to [`leasehold_backend::VALUE_SHOWN_MAX`]
/// characters, so a 10 KB paste does not fill the terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a {}: {problem}; write e.g. {}", quoted(text), problem.what(), problem.example())]
pub struct ScheduleError {
    /// The text as given (the zone's name, for [`Problem::UnknownZone`]).
    pub text: String,
    pub problem: Problem,
}

/// What is wrong with a schedule's text or zone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("it is empty")]
    Empty,
    #[error("it is {bytes} bytes long, more than the {max} a schedule may be")]
    TooLong { bytes: usize, max: usize },
    #[error("a cron pattern has 5 fields (6 with seconds first), not {0}")]
    FieldCount(usize),
    /// croner's reason, as it words it.
    #[error("{0}")]
    Pattern(String),
    /// A field croner refuses on its own: which, as written, croner's
    /// reason, and what the field takes.
    #[error("its {field} field {} is not valid ({reason}): it takes {takes}", quoted(value))]
    Field {
        field: &'static str,
        value: String,
        reason: String,
        takes: &'static str,
    },
    #[error("the pattern never matches a date (such as 30 February)")]
    NeverFires,
    #[error("{} is not one of @hourly, @daily, @weekly, @monthly, @yearly, @annually or @every", quoted(.0))]
    UnknownShorthand(String),
    #[error("{} after @every is not a duration", quoted(.0))]
    NotADuration(String),
    #[error("{0}")]
    EveryOutOfRange(OutOfRange),
    #[error("an @every interval is kept to the millisecond, and {} is not a whole number of milliseconds", quoted(.0))]
    EveryNotWholeMillis(String),
    #[error("there is no time zone of that name in the tz database leasehold is built with")]
    UnknownZone,
}

impl Problem {
    /// What the refused text was meant to be.
    #[must_use]
    pub fn what(&self) -> &'static str {
        match self {
            Problem::UnknownZone => "time zone",
            _ => "schedule",
        }
    }

    /// The right form, shown after the problem.
    #[must_use]
    pub fn example(&self) -> &'static str {
        match self {
            Problem::UnknownShorthand(_)
            | Problem::NotADuration(_)
            | Problem::EveryOutOfRange(_)
            | Problem::EveryNotWholeMillis(_) => "@every 5m, @every 200ms, @hourly",
            Problem::UnknownZone => "Europe/Berlin, America/New_York, UTC",
            Problem::Empty
            | Problem::TooLong { .. }
            | Problem::FieldCount(_)
            | Problem::Pattern(_)
            | Problem::Field { .. }
            | Problem::NeverFires => "30 2 * * * (02:30 daily), */15 * * * *, 0 */5 * * * * (with seconds), @daily",
        }
    }
}
